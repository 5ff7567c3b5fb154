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
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

mod docs;
mod package;
mod sdk;

/// The cargo-deb the package is made with (installed from crates.io when missing; also
/// what `../shared/kubeadm/run.sh` reads here).
const CARGO_DEB_VERSION: &str = "3.8.0";

/// Where `cargo xtask test` keeps its containerd (override with WASMLET_TEST_CONTAINERD_DIR).
const TEST_CONTAINERD_DIR: &str = "/var/lib/wasmlet/test-containerd";

type Result<T = ()> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
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

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn state_dir() -> String {
    env::var("WASMLET_TEST_CONTAINERD_DIR").unwrap_or_else(|_| TEST_CONTAINERD_DIR.to_owned())
}

fn step(title: &str) {
    eprintln!("\n==> {title}");
}

/// Runs a command in the repo, inheriting stdio; fails naming it.
fn run(cmd: &mut Command) -> Result {
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
fn cargo() -> Command {
    let mut cargo = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()));
    if env::var_os("CARGO_INCREMENTAL").is_none() {
        cargo.env("CARGO_INCREMENTAL", "0");
    }
    cargo
}

fn containerd(action: &str) -> Command {
    let mut c = Command::new(repo().join("scripts/containerd.sh"));
    c.arg(action).arg(state_dir());
    c
}

/// The triple of this machine (plugins build for wasm32-wasip2 unless told otherwise).
fn host_triple() -> std::result::Result<String, String> {
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

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// `cargo xtask test`: the whole suite, as CI runs it.
fn test(extra: &[String]) -> Result {
    let started = Instant::now();
    if !is_root() {
        return Err(
            "`cargo xtask test` must run as root: it starts a real containerd for the \
                    end-to-end tests (scripts/containerd.sh)"
                .into(),
        );
    }
    step("containerd: install if needed and start (scripts/containerd.sh up)");
    let out = containerd("up")
        .current_dir(repo())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run scripts/containerd.sh: {e}"))?;
    if !out.status.success() {
        return Err("scripts/containerd.sh up failed (see above)".into());
    }
    let endpoint = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    eprintln!("containerd serves CRI on {endpoint}");

    step("registry: install if needed and start (scripts/registry.sh up)");
    let out = Command::new(repo().join("scripts/registry.sh"))
        .arg("up")
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run scripts/registry.sh: {e}"))?;
    if !out.status.success() {
        return Err("scripts/registry.sh up failed (see above)".into());
    }
    let registry = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    eprintln!(
        "the registry serves on {}",
        registry.split_whitespace().next().unwrap_or_default()
    );

    let result = test_with_containerd(&endpoint, &registry, extra);

    step("registry: stop (scripts/registry.sh down)");
    let registry_down = run(Command::new(repo().join("scripts/registry.sh")).arg("down"));
    step("containerd: remove every pod and stop (scripts/containerd.sh down)");
    let down = run(&mut containerd("down")).and(registry_down);
    let leaks = check_no_leaks();
    eprintln!("\nxtask test: finished in {:.0?}", started.elapsed());
    result.and(down).and(leaks)
}

/// Format and lint of the host, the plugins and the templates (each its own
/// workspace), and the plugins' unit tests on this machine.
fn static_checks() -> Result {
    let plugins = repo().join("plugins");
    let templates = ["admission-policy", "probe-handler", "pod-source"]
        .map(|t| repo().join("templates").join(t));
    let workspaces: Vec<&Path> = std::iter::once(plugins.as_path())
        .chain(templates.iter().map(PathBuf::as_path))
        .collect();
    docs::check_links()?;
    step("format (cargo fmt --check): host, plugins, templates");
    run(cargo().args(["fmt", "--all", "--check"]))?;
    for dir in &workspaces {
        run(cargo().args(["fmt", "--all", "--check"]).current_dir(dir))?;
    }
    step("lint (cargo clippy -D warnings): host, plugins, templates");
    let deny = ["--", "-D", "warnings"];
    run(cargo()
        .args(["clippy", "--workspace", "--all-targets", "--locked"])
        .args(deny))?;
    for dir in &workspaces {
        // A template is its own workspace; it shares the plugins' build directory.
        run(cargo()
            .args(["clippy", "--release", "--locked"])
            .args(deny)
            .env("CARGO_TARGET_DIR", plugins.join("target"))
            .current_dir(dir))?;
    }
    step("plugin unit tests (the plugins' pure logic, built for this machine)");
    run(cargo()
        .args([
            "test",
            "--workspace",
            "--locked",
            "--target",
            &host_triple()?,
        ])
        .current_dir(&plugins))
}

/// Everything CI runs once containerd and the registry are up.
fn test_with_containerd(endpoint: &str, registry: &str, extra: &[String]) -> Result {
    step("toolchain: the wasm32-wasip2 target plugins are built for");
    run(Command::new("rustup").args(["target", "add", "wasm32-wasip2"]))?;
    static_checks()?;
    // `cargo test --no-run` builds the binaries with the tests' feature set, so the test
    // step reuses them instead of building every crate a second time.
    step("build (tests and binaries, including the wasmlet CLI used by containerd.sh down)");
    run(cargo().args(["test", "--workspace", "--no-run", "--locked"]))?;
    let deb = package::for_tests()?;
    step("plugin toolchains for Python and JavaScript (scripts/plugin-toolchains.sh)");
    run(&mut Command::new(
        repo().join("scripts/plugin-toolchains.sh"),
    ))?;
    // The pages' commands need the binaries just built (and the toolchains above); run
    // before the tests, so the suite's own summary is the run's last word.
    docs::build_book()?;
    docs::run_commands()?;
    step("tests: unit, simulator, and the CRI contract against the simulator AND containerd");
    run(cargo()
        .args(["test", "--workspace", "--locked"])
        .args(extra)
        .env("WASMLET_DEB", &deb)
        .env("WASMLET_REQUIRE_PACKAGE", "1")
        .env("WASMLET_CRI_ENDPOINT", endpoint)
        .env("WASMLET_REQUIRE_CONTAINERD", "1")
        .env("WASMLET_TEST_REGISTRY", registry)
        .env("WASMLET_REQUIRE_REGISTRY", "1")
        .env("WASMLET_REQUIRE_PLUGIN_LANGS", "1"))?;
    independent_client(endpoint)?;
    // In the dev profile: the smoke checks that each benchmark builds and runs, which the
    // tests' build already holds the crates for; a release build would be a second copy
    // of every dependency (minutes, and gigabytes of disk).
    step("benchmarks compile and run once (smoke, dev profile)");
    run(cargo()
        .args([
            "bench",
            "-p",
            "wasmlet-bench",
            "--profile",
            "dev",
            "--locked",
            "--",
            "--smoke",
        ])
        .env("WASMLET_TEST_REGISTRY", registry))?;
    Ok(())
}

/// A CRI client not written here (Python grpcio) drives a full pod life cycle against
/// the `wasmlet-cri-sim` binary and against containerd; the two transcripts must match.
fn independent_client(containerd_endpoint: &str) -> Result {
    step(
        "independent CRI client (Python grpcio): wasmlet-cri-sim and containerd must answer alike",
    );
    let have = Command::new("python3")
        .args(["-c", "import grpc, grpc_tools"])
        .output();
    if !have.is_ok_and(|o| o.status.success()) {
        run(Command::new("python3").args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "grpcio",
            "grpcio-tools",
        ]))?;
    }
    let script = repo().join("tests/independent_client.py");
    let transcript = |endpoint: &str| -> Result<String> {
        let out = Command::new("python3")
            .arg(&script)
            .arg(endpoint)
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!("the independent client failed against {endpoint}"));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };

    let dir = env::temp_dir().join(format!("wasmlet-xtask-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let sock = dir.join("cri.sock");
    let mut sim = Command::new(repo().join("target/debug/wasmlet-cri-sim"))
        .arg("--socket")
        .arg(&sock)
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start wasmlet-cri-sim: {e}"))?;
    for _ in 0..100 {
        if sock.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let sim_endpoint = format!("unix://{}", sock.display());
    let from_sim = transcript(&sim_endpoint);
    let _ = sim.kill();
    let _ = sim.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let from_sim = from_sim?;
    let from_containerd = transcript(containerd_endpoint)?;
    eprint!("{from_containerd}");
    if from_sim != from_containerd {
        let diff: Vec<String> = from_sim
            .lines()
            .zip(from_containerd.lines())
            .filter(|(a, b)| a != b)
            .map(|(a, b)| format!("  simulator:  {a}\n  containerd: {b}"))
            .collect();
        return Err(format!(
            "the simulator answered differently from containerd:\n{}",
            diff.join("\n")
        ));
    }
    eprintln!(
        "same transcript from wasmlet-cri-sim and containerd ({} steps)",
        from_sim.lines().count()
    );
    Ok(())
}

/// After `down`: no shim of our containerd and no mount under its state dir remain.
fn check_no_leaks() -> Result {
    let state = state_dir();
    let sock = format!("{state}/containerd.sock");
    let mut leaks = Vec::new();
    let shims = Command::new("pgrep")
        .args(["-f", &format!("containerd-shim.*-address {sock}")])
        .output();
    if let Ok(out) = shims {
        let pids = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !pids.is_empty() {
            leaks.push(format!("shim processes still running: {pids}"));
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let ours: Vec<&str> = mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .filter(|m| m.starts_with(&format!("{state}/")))
        .collect();
    if !ours.is_empty() {
        leaks.push(format!("mounts left under {state}: {}", ours.join(", ")));
    }
    if leaks.is_empty() {
        eprintln!("containerd down left nothing behind (no shims, no mounts)");
        Ok(())
    } else {
        Err(format!(
            "containerd down left things behind: {}",
            leaks.join("; ")
        ))
    }
}

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
