//! The runner's plumbing: where the repository is, running a command and failing with
//! its name, cargo without incremental state, the test containerd's script.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where `cargo xtask test` keeps its containerd (override with WASMLET_TEST_CONTAINERD_DIR).
const TEST_CONTAINERD_DIR: &str = "/var/lib/wasmlet/test-containerd";

/// A step's result: the error says what failed.
pub(crate) type Result<T = ()> = std::result::Result<T, String>;

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

pub(crate) fn state_dir() -> String {
    env::var("WASMLET_TEST_CONTAINERD_DIR").unwrap_or_else(|_| TEST_CONTAINERD_DIR.to_owned())
}

pub(crate) fn step(title: &str) {
    eprintln!("\n==> {title}");
}

/// Runs a command in the repo, inheriting stdio; fails naming it.
pub(crate) fn run(cmd: &mut Command) -> Result {
    if cmd.get_current_dir().is_none() {
        cmd.current_dir(repo());
    }
    let shown = format!("{cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed ({status})"))
    }
}

/// Cargo, without incremental compilation unless asked for (`CARGO_INCREMENTAL=1`): the
/// suite builds every crate once, where incremental state only fills the disk (gigabytes
/// on a fresh clone).
pub(crate) fn cargo() -> Command {
    let mut cargo = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()));
    if env::var_os("CARGO_INCREMENTAL").is_none() {
        cargo.env("CARGO_INCREMENTAL", "0");
    }
    cargo
}

pub(crate) fn containerd(action: &str) -> Command {
    let mut c = Command::new(repo().join("scripts/containerd.sh"));
    c.arg(action).arg(state_dir());
    c
}

/// The triple of this machine (plugins build for wasm32-wasip2 unless told otherwise).
pub(crate) fn host_triple() -> std::result::Result<String, String> {
    let out = Command::new("rustc")
        .arg("-vV")
        .output()
        .map_err(|e| format!("rustc -vV: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_owned)
        .ok_or_else(|| "rustc -vV printed no host triple".to_owned())
}

pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}
