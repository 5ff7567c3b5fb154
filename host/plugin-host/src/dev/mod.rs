//! For tests, benchmarks and examples in this repository: the shipped plugins and the
//! templates, built on first use.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::config::default_file_name;

/// The `plugins/` workspace of this source tree.
pub fn plugins_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../plugins")
}

/// Builds the workspace in `dir` (release, wasm32-wasip2) into the plugins' build
/// directory and returns where its components land.
fn build(dir: &Path, what: &str) -> PathBuf {
    let target = plugins_dir().join("target");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .args(["build", "--release", "--quiet"])
        .current_dir(dir)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env("CARGO_TARGET_DIR", &target)
        .status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "building {what} failed (is the wasm32-wasip2 target installed?)"
    );
    target.join("wasm32-wasip2/release")
}

/// Builds `plugins/` once per process and returns the path of plugin `name`'s component
/// (`node-ports` → `node_ports.wasm`).
///
/// # Panics
/// If cargo cannot build the workspace.
pub fn shipped_plugin(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| build(&plugins_dir(), "plugins/"))
        .join(default_file_name(name))
}

/// Builds `templates/<dir>` (its own workspace) and returns the path of its component,
/// named after `crate_name`.
///
/// # Panics
/// If cargo cannot build it.
pub fn template(dir: &str, crate_name: &str) -> PathBuf {
    let root = plugins_dir().join("../templates").join(dir);
    build(&root, &format!("templates/{dir}")).join(default_file_name(crate_name))
}

mod languages;

pub use languages::{
    LANG_PLUGINS, Lang, LangPlugin, lang_cache_dir, lang_plugin, lang_plugin_named, lang_toolchains,
};
