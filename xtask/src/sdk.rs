//! `cargo xtask sdk`: the plugin SDKs as the packages an author installs, in `target/sdk`:
//!
//! ```text
//! target/sdk/python/wasmlet_plugin-<v>-py3-none-any.whl   pip install: the SDK, componentize-py
//!                                                         pinned, the `wasmlet-plugin-build` command
//! target/sdk/js/wasmlet-plugin-<v>.tgz                    npm install: the SDK, its toolchain,
//!                                                         `wasmlet-plugin-build`
//! target/sdk/rust/wasmlet-plugin-sdk-<v>/                 the crate as `cargo package` makes it
//!                                                         (the WIT inside), for a dependency by
//!                                                         version and path
//! ```
//!
//! Each carries the WIT and the reproducibility preload (`plugins/reproducible`), so a
//! project built from them reads nothing from this checkout. `wasmlet plugin new --sdk
//! target/sdk` writes projects that use them.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::shell::{Result, cargo, repo, run, step};

/// Builds the three packages; returns `target/sdk`.
pub fn sdk() -> Result<PathBuf> {
    let root = repo();
    let out = root.join("target/sdk");
    let stage = root.join("target/sdk-stage");
    for dir in [&out, &stage] {
        if dir.exists() {
            fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
    }
    python(&root, &stage.join("python"), &out.join("python"))?;
    js(&root, &stage.join("js"), &out.join("js"))?;
    rust(&root, &out.join("rust"))?;
    eprintln!("the SDK packages are in {}", out.display());
    Ok(out)
}

/// The WIT and the preload's source, copied into a package's `data` folder.
fn add_data(root: &Path, data: &Path) -> Result {
    copy_tree(&root.join("wit"), &data.join("wit"))?;
    let reproducible = data.join("reproducible");
    mkdir(&reproducible)?;
    for file in ["deterministic.c", "stable_dev.c", "preload.sh"] {
        copy(
            &root.join("plugins/reproducible").join(file),
            &reproducible.join(file),
        )?;
    }
    Ok(())
}

fn python(root: &Path, stage: &Path, out: &Path) -> Result {
    step("sdk: the Python SDK's wheel (pip wheel)");
    let src = root.join("plugins/python");
    copy(&src.join("pyproject.toml"), &stage.join("pyproject.toml"))?;
    copy_tree(&src.join("wasmlet_plugin"), &stage.join("wasmlet_plugin"))?;
    add_data(root, &stage.join("wasmlet_plugin/_data"))?;
    mkdir(out)?;
    run(Command::new("python3")
        .args(["-m", "pip", "wheel", "--quiet", "--no-deps"])
        .args(["--disable-pip-version-check", "-w"])
        .arg(out)
        .arg(stage))
}

fn js(root: &Path, stage: &Path, out: &Path) -> Result {
    step("sdk: the JavaScript/TypeScript SDK's package (npm pack)");
    let src = root.join("plugins/js");
    for file in ["package.json", "build.mjs"] {
        copy(&src.join(file), &stage.join(file))?;
    }
    copy_tree(&src.join("src"), &stage.join("src"))?;
    add_data(root, stage)?;
    mkdir(out)?;
    run(Command::new("npm")
        .args(["pack", "--silent", "--pack-destination"])
        .arg(out)
        .current_dir(stage))
}

fn rust(root: &Path, out: &Path) -> Result {
    step("sdk: the Rust SDK's crate (cargo package)");
    let plugins = root.join("plugins");
    run(cargo()
        .args([
            "package",
            "-p",
            "wasmlet-plugin-sdk",
            "--no-verify",
            "--allow-dirty",
            "--quiet",
        ])
        .current_dir(&plugins))?;
    let packaged = plugins.join("target/package");
    let krate = fs::read_dir(&packaged)
        .map_err(|e| format!("{}: {e}", packaged.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("wasmlet-plugin-sdk-") && n.ends_with(".crate"))
        })
        .max()
        .ok_or_else(|| {
            format!(
                "cargo package left no wasmlet-plugin-sdk crate in {}",
                packaged.display()
            )
        })?;
    mkdir(out)?;
    run(Command::new("tar")
        .arg("xzf")
        .arg(&krate)
        .arg("-C")
        .arg(out))
}

fn mkdir(dir: &Path) -> Result {
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))
}

fn copy(from: &Path, to: &Path) -> Result {
    if let Some(parent) = to.parent() {
        mkdir(parent)?;
    }
    fs::copy(from, to)
        .map(drop)
        .map_err(|e| format!("copy {} → {}: {e}", from.display(), to.display()))
}

/// A folder's files, recursively, without Python's bytecode caches.
fn copy_tree(from: &Path, to: &Path) -> Result {
    mkdir(to)?;
    let entries = fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))?;
    for entry in entries.filter_map(|e| e.ok()) {
        let path = entry.path();
        let name = entry.file_name();
        if name == "__pycache__" {
            continue;
        }
        if path.is_dir() {
            copy_tree(&path, &to.join(&name))?;
        } else {
            copy(&path, &to.join(&name))?;
        }
    }
    Ok(())
}
