//! `cargo xtask test`: the whole suite, as CI runs it — static checks, the tests against
//! the simulator and real containerd, an independent CRI client, and the leak check.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::shell::{Result, cargo, containerd, host_triple, is_root, repo, run, state_dir, step};
use crate::{docs, package};

/// `cargo xtask test`: the whole suite, as CI runs it.
pub(crate) fn test(extra: &[String]) -> Result {
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
pub(crate) fn static_checks() -> Result {
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
pub(crate) fn test_with_containerd(endpoint: &str, registry: &str, extra: &[String]) -> Result {
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
pub(crate) fn independent_client(containerd_endpoint: &str) -> Result {
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
pub(crate) fn check_no_leaks() -> Result {
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
