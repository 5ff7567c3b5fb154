//! wasmlet's task runner: the commands the README and CI use, in one place.
//!
//! ```text
//! cargo xtask test                 # everything CI runs (as root): containerd and a registry up, the
//!                                  # wasm32-wasip2 target, fmt and clippy (host and
//!                                  # plugins), all tests incl. the contract suite against
//!                                  # real containerd, containerd down + leak check
//! cargo xtask up                   # build and run the agent with its defaults
//! cargo xtask deb                  # the Debian package, the shipped plugins precompiled
//! cargo xtask containerd up|down|status   # the test containerd, by hand
//! cargo xtask bench                # the benchmarks (results go in bench/README.md)
//! cargo xtask sdk                  # the plugin SDKs as packages (target/sdk): wheel, npm, crate
//! cargo xtask docs [--run]         # the book (mdBook) into target/book, its links checked;
//!                                  # --run: the pages' `sh ci` commands run as written
//! ```
//!
//! Only std here: the runner must build in seconds on a fresh clone.

use std::env;
use std::process::{Command, ExitCode};

mod docs;
mod package;
mod sdk;
mod shell;
mod suite;

use shell::{Result, cargo, containerd, is_root, repo, run, step};

/// The cargo-deb the package is made with (installed from crates.io when missing; also
/// what `../shared/kubeadm/run.sh` reads here).
const CARGO_DEB_VERSION: &str = "3.8.0";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => suite::test(&args[1..]),
        Some("up") => up(&args[1..]),
        Some("containerd") => containerd_cmd(&args[1..]),
        Some("bench") => bench(&args[1..]),
        Some("deb") => package::release().map(|deb| println!("{}", deb.display())),
        Some("docs") => docs::docs(&args[1..]),
        Some("sdk") => sdk::sdk().map(|dir| println!("{}", dir.display())),
        _ => Err(USAGE.to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: cargo xtask <command>
  test                      run the whole test suite (as root: it starts containerd)
  up [ARGS...]              build and run `wasmlet up` (the agent with its defaults)
  deb                       the Debian package, its plugins precompiled (target/debian/)
  containerd up|down|status the test containerd, by hand
  bench [NAME]              run the benchmarks
  sdk                       the plugin SDKs as packages: a wheel, an npm package, a crate
                            (target/sdk)
  docs [--run]              build the book (target/book) and check its links; --run also
                            runs the commands its pages mark `sh ci`";

/// `cargo xtask up`: builds the shipped plugins and the agent, and runs the agent with its
/// embedded defaults (its own containerd, static pods from examples/static-pods).
fn up(extra: &[String]) -> Result {
    if !is_root() {
        return Err(
            "`cargo xtask up` must run as root: the agent starts its own containerd".into(),
        );
    }
    step("the shipped plugins (wasm32-wasip2)");
    run(Command::new("rustup").args(["target", "add", "wasm32-wasip2"]))?;
    run(cargo()
        .args(["build", "--release", "--locked"])
        .current_dir(repo().join("plugins")))?;
    step("the agent");
    run(cargo().args(["build", "--release", "--locked", "-p", "wasmlet"]))?;
    // Where `wasmlet up` looks for them beside the shipped plugins: a new node starts
    // without compiling.
    package::precompile(
        &repo().join("target/release/wasmlet"),
        &repo().join("plugins/target/wasm32-wasip2/release/compiled"),
    )?;
    step("wasmlet up (Ctrl-C stops the agent; its pods keep running)");
    run(Command::new(repo().join("target/release/wasmlet"))
        .arg("up")
        .args(extra))
}

fn containerd_cmd(args: &[String]) -> Result {
    match args.first().map(String::as_str) {
        Some(action @ ("up" | "down" | "status" | "purge")) => run(&mut containerd(action)),
        _ => Err("usage: cargo xtask containerd up|down|status|purge".into()),
    }
}

/// `cargo xtask bench [NAME]`: the benchmarks, each printing a table.
fn bench(args: &[String]) -> Result {
    let mut cmd = cargo();
    cmd.args(["bench", "-p", "wasmlet-bench", "--locked"]);
    if let Some(name) = args.first() {
        cmd.args(["--bench", name]);
    }
    run(&mut cmd)
}
