//! The Debian package: the shipped plugins built, then precompiled by the binary the
//! package carries (its engine's settings are what a node looks entries up by), then
//! `cargo deb -p wasmlet` without building again.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::CARGO_DEB_VERSION;
use crate::shell::{Result, cargo, repo, run, step};

/// Where the package's precompiled plugins are written, under the profile's directory
/// (the manifest's asset `target/release/precompiled-plugins/*.cwasm`, which cargo-deb
/// reads from the profile it packages).
const PRECOMPILED: &str = "precompiled-plugins";

/// The Debian package of the debug build (fast compression), for the tests to install
/// into a temporary root (`dpkg -x`): the same assets and control fields as a release
/// `cargo xtask deb`.
pub fn for_tests() -> Result<PathBuf> {
    step(
        "package: the shipped plugins precompiled, then cargo deb -p wasmlet (debug build) for the tests",
    );
    precompiled("target/debug")?;
    let deb = repo().join("target/debian/wasmlet-test.deb");
    cargo_deb("dev", &["--no-strip", "--fast"], &deb)?;
    Ok(deb)
}

/// `cargo xtask deb`: the package, `target/debian/wasmlet_<version>-1_amd64.deb`, of
/// the `dist` profile's binary (whole-program LTO, sized for a node's memory).
pub fn release() -> Result<PathBuf> {
    step("the dist binary (LTO: minutes), then the shipped plugins precompiled by it");
    run(cargo().args(["build", "--profile", "dist", "--locked", "-p", "wasmlet"]))?;
    precompiled("target/dist")?;
    step("cargo deb -p wasmlet --profile dist");
    let out = repo().join("target/debian");
    cargo_deb("dist", &[], &out)?;
    let newest = std::fs::read_dir(&out)
        .map_err(|e| format!("{}: {e}", out.display()))?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with("_amd64.deb"))
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .ok_or("cargo deb wrote no package")?;
    Ok(newest.path())
}

/// The shipped plugins built and precompiled by the binary of the profile in
/// `profile_dir` (`target/<profile>`), into its `precompiled-plugins/`; the SDK packages
/// beside them.
fn precompiled(profile_dir: &str) -> Result {
    build_plugins()?;
    // The package carries the plugin SDKs for `wasmlet plugin new` (target/sdk).
    crate::sdk::sdk()?;
    let dir = repo().join(profile_dir);
    precompile(&dir.join("wasmlet"), &dir.join(PRECOMPILED))
}

/// `cargo deb -p wasmlet --variant precompiled --profile PROFILE --no-build [EXTRA…] -o
/// OUT`: the package with its plugins precompiled (the manifest's variant).
fn cargo_deb(profile: &str, extra: &[&str], out: &Path) -> Result {
    run(cargo_with_deb()?
        .args(["deb", "-p", "wasmlet", "--variant", "precompiled"])
        .args(["--profile", profile, "--no-build"])
        .args(extra)
        .arg("-o")
        .arg(out))
}

fn build_plugins() -> Result {
    run(cargo()
        .args(["build", "--release", "--quiet", "--locked"])
        .current_dir(repo().join("plugins"))
        .env("CARGO_TARGET_DIR", repo().join("plugins/target")))
}

/// Compiles the plugins the package ships into `dir` (emptied first) with `wasmlet`'s
/// engine: `wasmlet plugin precompile --cache-dir DIR FILE…`.
pub fn precompile(wasmlet: &Path, dir: &Path) -> Result {
    let _ = std::fs::remove_dir_all(dir);
    let plugins = shipped_components()?;
    run(Command::new(wasmlet)
        .args(["plugin", "--cache-dir"])
        .arg(dir)
        .arg("precompile")
        .args(&plugins))
}

/// The components the package ships, as its manifest's assets list them.
fn shipped_components() -> Result<Vec<PathBuf>> {
    let crate_dir = repo().join("host/wasmlet");
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml"))
        .map_err(|e| format!("host/wasmlet/Cargo.toml: {e}"))?;
    let files: Vec<PathBuf> = manifest
        .lines()
        .filter_map(|line| line.trim().strip_prefix("[\""))
        .filter_map(|rest| rest.split('"').next())
        .filter(|source| source.ends_with(".wasm"))
        .map(|source| crate_dir.join(source))
        .collect();
    if files.is_empty() {
        return Err("host/wasmlet/Cargo.toml lists no .wasm assets".into());
    }
    Ok(files)
}

/// `cargo` with the pinned cargo-deb first on its PATH, installed into the build
/// directory when missing: packaging a debug build is what this version allows (later
/// ones may refuse it), whatever else the machine has.
fn cargo_with_deb() -> Result<Command> {
    tool("cargo-deb", CARGO_DEB_VERSION, &[])?;
    let tools = repo().join("target/tools");
    let path = format!(
        "{}:{}",
        tools.join("bin").display(),
        env::var("PATH").unwrap_or_default()
    );
    let mut cmd = cargo();
    cmd.env("PATH", path);
    Ok(cmd)
}

/// A tool from crates.io at a pinned version, installed into `target/tools` when the one
/// there is missing or another version (whatever else the machine has): its path.
pub fn tool(name: &str, version: &str, install_args: &[&str]) -> Result<PathBuf> {
    let tools = repo().join("target/tools");
    let bin = tools.join("bin").join(name);
    // cargo-deb answers `cargo deb --version`, mdbook `mdbook --version`.
    let probe: &[&str] = match name.strip_prefix("cargo-") {
        Some(sub) => &[sub, "--version"],
        None => &["--version"],
    };
    let have = Command::new(&bin)
        .args(probe)
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(version));
    if !have {
        run(cargo()
            .args(["install", name, "--locked", "--version", version])
            .args(install_args)
            .arg("--root")
            .arg(&tools))?;
    }
    Ok(bin)
}
