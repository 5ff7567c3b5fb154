//! For tests, benchmarks and examples in this repository: the shipped plugins, built from
//! the `plugins/` workspace on first use.

use std::path::PathBuf;
use std::sync::OnceLock;

/// The `plugins/` workspace of this source tree.
pub fn plugins_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../plugins")
}

/// Builds `plugins/` (release, wasm32-wasip2) once per process and returns the path of
/// plugin `name`'s component (`node-ports` → `node_ports.wasm`).
///
/// # Panics
/// If cargo cannot build the workspace (e.g. the wasm32-wasip2 target is missing).
pub fn shipped_plugin(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let plugins = plugins_dir();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "--release", "--quiet"])
            .current_dir(&plugins)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET")
            .status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "building plugins/ failed (is the wasm32-wasip2 target installed?)"
        );
        plugins.join("target/wasm32-wasip2/release")
    });
    dir.join(format!("{}.wasm", name.replace('-', "_")))
}

/// Builds `templates/<dir>` (its own workspace, sharing the plugins' build directory)
/// and returns the path of its component, named `<crate>.wasm`.
///
/// # Panics
/// If cargo cannot build it.
pub fn template(dir: &str, crate_name: &str) -> PathBuf {
    let root = plugins_dir().join("..").join("templates").join(dir);
    let target = plugins_dir().join("target");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .args(["build", "--release", "--quiet"])
        .current_dir(&root)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env("CARGO_TARGET_DIR", &target)
        .status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "building templates/{dir} failed"
    );
    target
        .join("wasm32-wasip2/release")
        .join(format!("{}.wasm", crate_name.replace('-', "_")))
}
