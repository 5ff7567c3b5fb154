//! Plugins written in Python and TypeScript, through `wasmlet plugin` exactly as a Rust
//! one: `restricted-pods` in three languages decides every case alike, word for word;
//! the templates' probe handler and pod source run offline.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use wasmlet_plugin_host::dev::{
    LANG_PLUGINS, lang_cache_dir, lang_plugin, lang_plugin_named, lang_toolchains, shipped_plugin,
};

const BIN: &str = env!("CARGO_BIN_EXE_wasmlet");

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/admission")
}

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `wasmlet` with the compiled-component cache the tests share.
fn wasmlet(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("WASMLET_PLUGIN_CACHE", lang_cache_dir())
        .output()
        .expect("run wasmlet")
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// `component` copied into a directory of its own as `<name>.wasm`, so that the
/// plugin's name — which `wasmlet plugin` prints — is the same whatever its language.
/// The copies live beside the built components (`plugins/target/lang/named/`), replaced
/// on every run rather than left behind in the temporary directory.
fn as_named(component: &Path, lang: &str, name: &str) -> PathBuf {
    let built = component.parent().expect("a component's directory");
    let dir = built.join("named").join(lang);
    std::fs::create_dir_all(&dir).expect("dir");
    let to = dir.join(format!("{name}.wasm"));
    let partial = dir.join(format!("{name}.wasm.{}", std::process::id()));
    std::fs::copy(component, &partial).expect("copy");
    std::fs::rename(&partial, &to).expect("rename");
    to
}

#[test]
fn restricted_pods_decides_alike_in_rust_python_and_typescript() {
    if lang_toolchains().is_none() {
        return;
    }
    let versions = [
        ("rust", shipped_plugin("restricted-pods")),
        ("python", lang_plugin_named("restricted-pods-python")),
        ("typescript", lang_plugin_named("restricted-pods-js")),
    ];
    let (pods, node) = (
        fixtures().join("restricted.yaml"),
        fixtures().join("node.yaml"),
    );
    for config in [None, Some("allowed-namespaces=ops, team-b")] {
        let mut outputs = Vec::new();
        for (lang, component) in &versions {
            let policy = as_named(component, lang, "restricted-pods");
            let mut args = vec!["plugin", "admit", path(&policy), "--pod", path(&pods)];
            args.extend(["--node", path(&node)]);
            if let Some(c) = config {
                args.extend(["--config", c]);
            }
            let out = wasmlet(&args);
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(3), "{lang}: {stdout}\n{stderr}");
            outputs.push((lang, stdout));
        }
        let (_, rust) = &outputs[0];
        // The same in both configurations for the shop namespace.
        let mut expected = vec![
            "shop/plain: admitted",
            "shop/privileged: rejected by restricted-pods: RestrictedPod: container tools is \
             privileged, which namespace shop does not allow",
            "shop/privileged-init: rejected by restricted-pods: RestrictedPod: container \
             setup is privileged, which namespace shop does not allow",
            "shop/pid: rejected by restricted-pods: RestrictedPod: spec.hostPID is set, \
             which namespace shop does not allow",
            "shop/ipc: rejected by restricted-pods: RestrictedPod: spec.hostIPC is set, \
             which namespace shop does not allow",
            "shop/both: rejected by restricted-pods: RestrictedPod: container web is \
             privileged, which namespace shop does not allow",
            "shop/net: admitted",
        ];
        expected.extend(match config {
            None => [
                "kube-system/agent: admitted",
                "ops/debug: rejected by restricted-pods: RestrictedPod: spec.hostIPC is set, \
                 which namespace ops does not allow",
                "team-b/team: rejected by restricted-pods: RestrictedPod: container c is \
                 privileged, which namespace team-b does not allow",
            ],
            // kube-system is no longer allowed; ops and team-b are.
            Some(_) => [
                "kube-system/agent: rejected by restricted-pods: RestrictedPod: container agent \
                 is privileged, which namespace kube-system does not allow",
                "ops/debug: admitted",
                "team-b/team: admitted",
            ],
        });
        assert_eq!(rust.lines().collect::<Vec<_>>(), expected, "{config:?}");
        for (lang, out) in &outputs[1..] {
            assert_eq!(out, rust, "{lang} decided otherwise than Rust ({config:?})");
        }
    }
}

#[test]
fn inspect_shows_each_world_of_a_python_or_javascript_plugin() {
    if lang_toolchains().is_none() {
        return;
    }
    for plugin in LANG_PLUGINS {
        let component = lang_plugin(plugin);
        let out = wasmlet(&["plugin", "inspect", path(&component)]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}: {stdout}", plugin.name);
        assert!(
            stdout.contains(&format!(
                "world:        wasmlet:plugin/{}@0.1.0",
                plugin.world
            )),
            "{}: {stdout}",
            plugin.name
        );
        // An interpreter's megabytes go to the baseline compiler (seconds less to load).
        if cfg!(target_arch = "x86_64") {
            assert!(
                stdout.contains("compiler:     winch\n"),
                "{}: {stdout}",
                plugin.name
            );
        }
    }
    let rust = wasmlet(&[
        "plugin",
        "inspect",
        path(&shipped_plugin("restricted-pods")),
    ]);
    let stdout = String::from_utf8_lossy(&rust.stdout);
    assert!(stdout.contains("compiler:     cranelift\n"), "{stdout}");
}

#[test]
fn the_templates_pod_sources_list_their_pods_or_say_what_is_missing() {
    if lang_toolchains().is_none() {
        return;
    }
    for name in ["python-pod-source", "js-pod-source"] {
        let source = lang_plugin_named(name);
        let out = wasmlet(&[
            "plugin",
            "source",
            path(&source),
            "--config",
            "image=registry.local/web:1",
            "--config",
            "replicas=2",
            "--config",
            "namespace=shop",
            "--output",
            "json",
        ]);
        assert!(out.status.success(), "{name}: {out:?}");
        let pods: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let names: Vec<_> = pods["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|p| {
                let m = &p["metadata"];
                format!(
                    "{}/{} {}",
                    m["namespace"], m["name"], p["spec"]["containers"][0]["image"]
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                r#""shop"/"replica-0" "registry.local/web:1""#,
                r#""shop"/"replica-1" "registry.local/web:1""#
            ],
            "{name}"
        );
        // Without its image the source cannot be read: the poll fails, naming why.
        let out = wasmlet(&["plugin", "source", path(&source)]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(
            stderr.contains("no `image` in the source's configuration"),
            "{name}: {stderr}"
        );
    }
}

#[test]
fn the_templates_probe_handlers_need_the_exec_grant() {
    if lang_toolchains().is_none() {
        return;
    }
    for name in ["python-probe-handler", "js-probe-handler"] {
        let handler = as_named(&lang_plugin_named(name), name, "command-output");
        let out = wasmlet(&[
            "plugin",
            "probe",
            path(&handler),
            "--custom",
            "command=redis-cli,ping",
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(3), "{name}: {out:?}");
        assert_eq!(
            stdout.trim(),
            "failure: redis-cli: exec is not granted to plugin command-output (grant it in its \
             configuration)",
            "{name}"
        );
        // A kind it does not handle is the probe's error, not a trap.
        let out = wasmlet(&[
            "plugin",
            "probe",
            path(&handler),
            "--tcp-socket",
            "127.0.0.1:9",
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{name}: {out:?}");
        assert_eq!(
            stdout.trim(),
            "error: command-output handles custom probes with a `command` argument",
            "{name}"
        );
    }
}

/// `plugin admit` with `policy` (named `name`) on the fixtures' pods: its exit code,
/// stdout and stderr.
fn admit_with(policy: &Path, name: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let policy = as_named(policy, "bugs", name);
    let (pods, node) = (fixtures().join("pods.yaml"), fixtures().join("node.yaml"));
    let mut args = vec!["plugin", "admit", path(&policy), "--pod", path(&pods)];
    args.extend(["--node", path(&node)]);
    args.extend(extra);
    let out = wasmlet(&args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_exception_reads_as_its_type_message_and_the_authors_line() {
    if lang_toolchains().is_none() {
        return;
    }
    let cases = [
        (
            "python-raises",
            "KeyError: 'team' at app.py:8 in team_of",
            "app.py\", line 14, in decide",
        ),
        (
            "js-throws",
            "TypeError: can't access property \"owner\", annotations['example.com/meta'] is \
             undefined at app.ts:7 in ownerOf",
            "ownerOf@app.ts:7:",
        ),
    ];
    for (name, summary, stack_line) in cases {
        let (code, stdout, stderr) = admit_with(&lang_plugin_named(name), "buggy", &[]);
        // An error of the policy, not a verdict: exit 1, each pod's line says why.
        assert_eq!(code, Some(1), "{name}: {stdout}\n{stderr}");
        let first = stdout.lines().next().unwrap_or_default();
        assert_eq!(
            first,
            format!("shop/web: error: plugin buggy: admit failed: {summary}"),
            "{name}: {stderr}"
        );
        // The log has the author's whole stack, mapped to their files, and what the
        // policy printed before it failed, under its name.
        assert!(stderr.contains(stack_line), "{name}: {stderr}");
        assert!(
            stderr.contains("looking at web plugin=\"buggy\" stream=\"stdout\""),
            "{name}: {stderr}"
        );
        assert!(!stdout.contains("wasm backtrace"), "{name}: {stdout}");
    }
}

#[test]
fn a_policy_past_its_memory_limit_is_said_so() {
    if lang_toolchains().is_none() {
        return;
    }
    let hog = lang_plugin_named("python-memory-hog");
    let (code, stdout, stderr) = admit_with(&hog, "hog", &["--memory-limit", "32Mi"]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    let first = stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("shop/web: error: plugin hog: admit failed: MemoryError at app.py:9 in decide; memory limit of 32 MiB reached: the guest, at "),
        "{first}\n{stderr}"
    );
    assert!(first.contains(" MiB, asked for 10"), "{first}");
}

#[test]
fn the_templates_pass_their_cases_in_rust_python_and_typescript() {
    let cases = repo().join("templates/cases/admission-policy.yaml");
    let mut policies = vec![(
        "rust",
        wasmlet_plugin_host::dev::template("admission-policy", "my-policy"),
    )];
    if lang_toolchains().is_some() {
        policies.push(("python", lang_plugin_named("python-admission-policy")));
        policies.push(("typescript", lang_plugin_named("js-admission-policy")));
    }
    for (lang, policy) in policies {
        let out = wasmlet(&["plugin", "test", path(&policy), path(&cases)]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{lang}: {stdout}\n{stderr}");
        assert!(
            stdout.ends_with("\n5 passed, 0 failed\n"),
            "{lang}: {stdout}"
        );
        assert_eq!(stdout.lines().filter(|l| l.starts_with("ok ")).count(), 5);
    }
}

/// The admission-policy template in Rust built from scratch into `target` (a build
/// directory of its own under `plugins/target/`): the component's bytes.
fn rust_template_built_in(target: &str) -> Vec<u8> {
    let dir = repo().join("templates/admission-policy");
    let target = repo().join("plugins/target").join(target);
    let _ = std::fs::remove_dir_all(&target);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--quiet", "--locked"])
        .current_dir(&dir)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .expect("run cargo");
    assert!(
        status.success(),
        "building templates/admission-policy failed"
    );
    let bytes = std::fs::read(target.join("wasm32-wasip2/release/my_policy.wasm"))
        .expect("the built component");
    let _ = std::fs::remove_dir_all(&target);
    bytes
}

/// The admission-policy template at `source` (under the repository) built by an SDK's
/// build script `build` into `out` (under plugins/target/lang): the component's bytes.
fn template_built(build: &mut Command, source: &str, out: &str) -> Vec<u8> {
    let repo = repo();
    let out = repo.join("plugins/target/lang").join(out);
    let built = build
        .args(["admission-policy", path(&repo.join(source))])
        .arg(&out)
        .output()
        .expect("run the SDK's build");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    std::fs::read(&out).expect("the built component")
}

/// The Python admission-policy template built by the SDK's build script, with the
/// toolchain in `bin`: its bytes.
fn python_template_built(bin: &Path, out: &str) -> Vec<u8> {
    let search = std::env::var("PATH").unwrap_or_default();
    let mut build = Command::new(repo().join("plugins/python/build.sh"));
    build.env("PATH", format!("{}:{search}", bin.display()));
    template_built(&mut build, "templates/python/admission-policy", out)
}

/// `sh -c` this with a directory and a command: a tmpfs mounted on the directory, then
/// the command run beside it.
const HOLD_A_TMPFS_THEN_RUN: &str = r#"mount -t tmpfs wasmlet-hold "$1" && shift && exec "$@""#;

/// The Python template built as `python_template_built` builds it, while one more tmpfs
/// is mounted (in a mount namespace of its own, so nothing outside sees it): the build's
/// own tmpfs then has another device number than the last build's, as when other builds
/// or containers mount theirs meanwhile. Where no mount namespace can be had, built as
/// it is.
fn python_template_built_beside_another_mount(bin: &Path, out: &str) -> Vec<u8> {
    let hold = repo().join("plugins/target/lang/hold");
    std::fs::create_dir_all(&hold).expect("a directory to hold a tmpfs on");
    let Some(unshare) = [&["--mount"][..], &["--map-root-user", "--mount"]]
        .into_iter()
        .find(|args| {
            Command::new("unshare")
                .args(*args)
                .arg("true")
                .status()
                .is_ok_and(|s| s.success())
        })
    else {
        eprintln!("no mount namespace (unshare): the second build beside the first's mounts");
        return python_template_built(bin, out);
    };
    let search = std::env::var("PATH").unwrap_or_default();
    let mut build = Command::new("unshare");
    build
        .args(unshare)
        .args(["sh", "-c", HOLD_A_TMPFS_THEN_RUN, "sh"])
        .arg(&hold)
        .arg(repo().join("plugins/python/build.sh"))
        .env("PATH", format!("{}:{search}", bin.display()));
    template_built(&mut build, "templates/python/admission-policy", out)
}

/// The TypeScript admission-policy template built by the SDK's build script: its bytes.
fn js_template_built(out: &str) -> Vec<u8> {
    let mut build = Command::new("node");
    build.arg(repo().join("plugins/js/build.mjs"));
    template_built(&mut build, "templates/js/admission-policy/app.ts", out)
}

#[test]
fn every_template_builds_to_the_same_bytes_twice() {
    let (a, b) = (
        rust_template_built_in("repro-a"),
        rust_template_built_in("repro-b"),
    );
    assert!(a == b, "two builds of the Rust template differ");
    let Some(bin) = lang_toolchains() else {
        return;
    };
    // Python: the build's files on a fresh tmpfs of its own, so the inode numbers the
    // guest reads are the same each time, and its device number read as 0:0 whatever
    // else is mounted (wasmlet_plugin/_build.py).
    let (a, b) = (
        python_template_built(bin, "repro-a-py.wasm"),
        python_template_built_beside_another_mount(bin, "repro-b-py.wasm"),
    );
    let differing = a.iter().zip(&b).filter(|(x, y)| x != y).count();
    assert!(
        a == b,
        "two builds of the Python template differ ({} and {} bytes, {differing} bytes differ)",
        a.len(),
        b.len()
    );
    let (a, b) = (
        js_template_built("repro-a.wasm"),
        js_template_built("repro-b.wasm"),
    );
    assert_eq!(
        a.len(),
        b.len(),
        "two builds of the TypeScript template differ in size"
    );
    assert!(a == b, "two builds of the TypeScript template differ");
}

#[test]
fn a_python_probe_connects_by_host_name_within_its_network_grant() {
    if lang_toolchains().is_none() {
        return;
    }
    let handler = as_named(&lang_plugin_named("python-connect"), "python", "connect");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = format!("port={}", listener.local_addr().expect("addr").port());
    let probe = |grant: &[&str]| {
        let mut args = vec!["plugin", "probe", path(&handler)];
        args.extend(["--custom", "host=localhost", "--custom", &port]);
        for g in grant {
            args.extend(["--allow-network", g]);
        }
        let out = wasmlet(&args);
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), stdout, stderr)
    };
    // The name is looked up and the connection made, as in any Python program.
    let (code, stdout, stderr) = probe(&["127.0.0.0/8"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert_eq!(
        stdout,
        format!("success: connected to localhost:{}", &port[5..])
    );
    // An address outside the grant: refused, with the error's name as on Linux, and the
    // log says which address and why.
    let (code, stdout, stderr) = probe(&["10.0.0.0/8"]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("error: PermissionError: [EACCES] Permission denied (at app.py:"),
        "{stdout}"
    );
    assert!(
        stderr.contains("outside its network grant") && stderr.contains("127.0.0.1:"),
        "{stderr}"
    );
    // No network at all: the name lookup itself is what is not allowed, and said so.
    let (code, stdout, stderr) = probe(&[]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("error: gaierror: "), "{stdout}");
    assert!(
        stdout.contains("looking up a host name failed (a probe handler looks names up only when its configuration grants it network)"),
        "{stdout}"
    );
}
