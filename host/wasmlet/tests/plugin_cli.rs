//! `wasmlet plugin`: the shipped policies run offline on YAML a plugin author would write.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use wasmlet_plugin_host::dev::shipped_plugin;

const BIN: &str = env!("CARGO_BIN_EXE_wasmlet");

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/admission")
}

fn wasmlet(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run wasmlet")
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn admit_runs_the_kubelets_checks_in_its_order() {
    let plugins: Vec<PathBuf> = [
        "resource-fit",
        "node-affinity",
        "node-ports",
        "taint-toleration",
        "sysctls",
    ]
    .iter()
    .map(|p| shipped_plugin(p))
    .collect();
    let dir = fixtures();
    let (pods, node, active) = (
        dir.join("pods.yaml"),
        dir.join("node.yaml"),
        dir.join("active"),
    );
    let mut args = vec!["plugin", "admit"];
    args.extend(plugins.iter().map(|p| path(p)));
    args.extend([
        "--pod",
        path(&pods),
        "--node",
        path(&node),
        "--active-pods",
        path(&active),
    ]);
    let out = wasmlet(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(3),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "shop/web: admitted",
            // db 2000m + web 1200m = 3200m of 3800m.
            "shop/batch: rejected by resource_fit: OutOfcpu: Node didn't have enough resource: \
             cpu, requested: 800, used: 3200, capacity: 3800",
            "shop/zone-b: rejected by node_affinity: NodeAffinity: Predicate NodeAffinity \
             failed: node(s) didn't match Pod's node affinity/selector",
            "data/second-db: rejected by node_ports: NodePorts: Predicate NodePorts failed: \
             node(s) didn't have free ports for the requested pod ports",
            "shop/intolerant: rejected by taint_toleration: TaintToleration: Predicate \
             TaintToleration failed: node(s) had taints that the pod didn't tolerate",
            "shop/tuned: admitted",
            "shop/unsafe-sysctl: rejected by sysctls: SysctlForbidden: forbidden sysctl: \
             \"kernel.msgmax\" not allowlisted",
        ]
    );
    // The broken active pod is reported by file and field, and skipped.
    assert!(
        stderr.contains("broken.yaml")
            && stderr.contains("spec.containers[0].resources.requests.cpu"),
        "{stderr}"
    );
}

#[test]
fn admit_and_inspect_name_what_is_wrong() {
    let dir = fixtures();
    let node = dir.join("node.yaml");
    // A pod file that is not a pod manifest.
    let out = wasmlet(&[
        "plugin",
        "admit",
        path(&shipped_plugin("resource-fit")),
        "--pod",
        path(&dir.join("active/broken.yaml")),
        "--node",
        path(&node),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("broken.yaml"), "{stderr}");

    // A policy file that is not a component.
    let out = wasmlet(&[
        "plugin",
        "admit",
        path(&node),
        "--pod",
        path(&dir.join("pods.yaml")),
        "--node",
        path(&node),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("node.yaml: not a WebAssembly file"),
        "{stderr}"
    );

    let out = wasmlet(&[
        "plugin",
        "inspect",
        path(&shipped_plugin("restricted-pods")),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("world:        wasmlet:plugin/admission-policy@0.1.0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("wasmlet:plugin/admission-input@0.1.0"),
        "{stdout}"
    );
    // Every kind is recognised by its export.
    for (plugin, world) in [
        ("probe-exec", "wasmlet:plugin/probe-handler@0.1.0"),
        ("source-file", "wasmlet:plugin/pod-source@0.1.0"),
    ] {
        let out = wasmlet(&["plugin", "inspect", path(&shipped_plugin(plugin))]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{plugin}: {stdout}");
        assert!(
            stdout.contains(&format!("world:        {world}")),
            "{plugin}: {stdout}"
        );
    }
}

#[test]
fn admit_refuses_what_is_not_a_pod_and_defaults_the_pod_count() {
    let dir = std::env::temp_dir().join(format!("wasmlet-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (pod, deploy, node) = (
        dir.join("pod.yaml"),
        dir.join("deploy.yaml"),
        dir.join("node.yaml"),
    );
    std::fs::write(&pod, "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: {requests: {cpu: 3}}}]}\n").expect("write");
    std::fs::write(&deploy, "kind: Deployment\nmetadata: {name: d}\nspec: {}\n").expect("write");
    // A node as an operator might jot it down: capacity only, no pod count.
    std::fs::write(
        &node,
        "kind: Node\nmetadata: {name: n}\nstatus: {capacity: {cpu: '2'}}\n",
    )
    .expect("write");
    let fit = shipped_plugin("resource-fit");
    let out = wasmlet(&[
        "plugin",
        "admit",
        path(&fit),
        "--pod",
        path(&pod),
        "--node",
        path(&node),
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "default/p: rejected by resource_fit: OutOfcpu: Node didn't have enough resource: cpu, \
         requested: 3000, used: 0, capacity: 2000"
    );
    let out = wasmlet(&[
        "plugin",
        "admit",
        path(&fit),
        "--pod",
        path(&deploy),
        "--node",
        path(&node),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("deploy.yaml (object 1): a Deployment, not a Pod"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn admit_judges_a_static_pod_by_its_own_config_source_annotation() {
    let dir = std::env::temp_dir().join(format!("wasmlet-cli-static-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (pod, node) = (dir.join("pod.yaml"), dir.join("node.yaml"));
    // A static pod's manifest (its source annotated, as the agent annotates it) on a
    // node with a NoExecute taint it does not tolerate: the kubelet skips NoExecute
    // taints for static pods.
    std::fs::write(
        &pod,
        "kind: Pod\nmetadata: {name: s, namespace: kube-system, annotations: {kubernetes.io/config.source: file}}\nspec: {containers: [{name: c}]}\n",
    )
    .expect("write");
    std::fs::write(
        &node,
        "kind: Node\nmetadata: {name: n}\nspec: {taints: [{key: drain, effect: NoExecute}]}\nstatus: {capacity: {pods: '10'}}\n",
    )
    .expect("write");
    let taints = shipped_plugin("taint-toleration");
    let admit = |extra: &[&str]| {
        let mut args = vec![
            "plugin",
            "admit",
            path(&taints),
            "--pod",
            path(&pod),
            "--node",
            path(&node),
        ];
        args.extend_from_slice(extra);
        wasmlet(&args)
    };
    let out = admit(&[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "judged as static without --source: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // --source still decides when given.
    let out = admit(&["--source", "api"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn probe_runs_a_handler_with_only_the_network_granted() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let addr = listener.local_addr().expect("addr").to_string();
    let tcp = shipped_plugin("probe-tcp-socket");
    let run = |extra: &[&str]| {
        let mut args = vec!["plugin", "probe", path(&tcp), "--tcp-socket", &addr];
        args.extend(extra);
        let out = wasmlet(&args);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        )
    };
    assert_eq!(
        run(&["--allow-network", "pod"]),
        (Some(0), "success".to_owned())
    );
    assert_eq!(
        run(&["--allow-network", "10.0.0.0/8"]),
        (
            Some(3),
            format!("failure: dial tcp {addr}: connect: not permitted for this plugin")
        )
    );
    drop(listener);
}

#[test]
fn probe_http_get_reports_the_status_as_the_kubelet_does() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(2) {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 2048];
            let n = conn.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
            let reply: &[u8] = if head.contains("x-ready: yes") {
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
            } else {
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            };
            let _ = conn.write_all(reply);
        }
    });
    let handler = shipped_plugin("probe-http-get");
    let url = format!("http://127.0.0.1:{port}/healthz");
    let run = |extra: &[&str]| {
        let mut args = vec!["plugin", "probe", path(&handler), "--http-get", &url];
        args.extend(extra);
        args.extend(["--allow-network", "pod"]);
        let out = wasmlet(&args);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        )
    };
    assert_eq!(
        run(&["--header", "X-Ready: yes"]),
        (Some(0), "success: ok".to_owned())
    );
    assert_eq!(
        run(&[]),
        (
            Some(3),
            "failure: HTTP probe failed with statuscode: 500".to_owned()
        )
    );
}

#[test]
fn source_lists_the_pods_of_a_directory_and_names_what_it_skipped() {
    let dir = std::env::temp_dir().join(format!("wasmlet-cli-source-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("web.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: shop}\nspec: {containers: [{name: app, image: nginx}]}\n",
    )
    .expect("write");
    std::fs::write(dir.join("bad.yaml"), "kind: Pod\nmetadata: [oops\n").expect("write");
    let source = shipped_plugin("source-file");
    let out = wasmlet(&["plugin", "source", path(&source), "--dir", path(&dir)]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert_eq!(stdout.trim(), "shop/web\tweb.yaml");
    assert!(stderr.contains("skipped bad.yaml: "), "{stderr}");

    std::fs::remove_file(dir.join("bad.yaml")).expect("rm");
    let out = wasmlet(&[
        "plugin",
        "source",
        path(&source),
        "--dir",
        path(&dir),
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(list["items"][0]["metadata"]["name"], "web");

    // Without the directory granted the source cannot read anything: exit 1, named.
    let out = wasmlet(&["plugin", "source", path(&source)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("pod source source_file: cannot read the manifest directory"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn precompile_fills_a_cache_or_says_why_not() {
    use std::io::Write as _;
    let dir = std::env::temp_dir().join(format!("wasmlet-cli-precompile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let run = |input: &[u8]| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_wasmlet"))
            .args(["plugin", "precompile", "--cache-dir"])
            .arg(&dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("wasmlet plugin precompile");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input)
            .expect("write");
        child.wait_with_output().expect("output")
    };
    let wasm = std::fs::read(shipped_plugin("restricted-pods")).expect("wasm");
    let out = run(&wasm);
    assert!(out.status.success(), "{out:?}");
    let entries: Vec<_> = std::fs::read_dir(&dir)
        .expect("cache")
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        .collect();
    assert_eq!(entries.len(), 1);
    // It names the entry it wrote, for the agent that runs it.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        entries[0].path().display().to_string()
    );
    // The agent's engine takes the entry as its own.
    let loaded = wasmlet_plugin_host::PluginEngine::with_cache(&dir)
        .expect("engine")
        .load_admission(
            "restricted-pods",
            &shipped_plugin("restricted-pods"),
            Default::default(),
            Default::default(),
        )
        .expect("loads");
    assert_eq!(
        *wasmlet_plugin_host::Plugin::load_outcome(&loaded),
        wasmlet_plugin_host::cache::CacheOutcome::Hit
    );

    let out = run(b"not a component");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(!out.stderr.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_policy_that_fails_is_an_error_not_a_rejection() {
    let dir = fixtures();
    let (pods, node) = (dir.join("pods.yaml"), dir.join("node.yaml"));
    let cases = [
        (
            "fixture-panic",
            vec![],
            "shop/web: error: plugin fixture_panic: admit failed: panicked at \
             fixtures/panic/src/lib.rs:9:9: policy bug while looking at pod web (wasm trap: \
             wasm `unreachable` instruction executed)",
        ),
        (
            "fixture-memory-bomb",
            vec!["--memory-limit", "8Mi"],
            "shop/web: error: plugin fixture_memory_bomb: admit failed: memory limit of 8 MiB \
             reached: the guest, at ",
        ),
        (
            "fixture-spin",
            vec!["--timeout-ms", "100", "--instances", "PerCall"],
            "shop/web: error: plugin fixture_spin: admit exceeded its deadline of 100ms",
        ),
    ];
    for (fixture, extra, first) in cases {
        let policy = shipped_plugin(fixture);
        let mut args = vec!["plugin", "admit", path(&policy), "--pod", path(&pods)];
        args.extend(["--node", path(&node)]);
        args.extend(extra);
        let out = wasmlet(&args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{fixture}: {stdout}\n{stderr}");
        let line = stdout.lines().next().unwrap_or_default();
        assert!(line.starts_with(first), "{fixture}: {line}");
        assert!(!stdout.contains("backtrace"), "{fixture}: {stdout}");
    }
}

#[test]
fn admit_refuses_a_memory_limit_past_the_largest() {
    let dir = fixtures();
    let policy = shipped_plugin("node-ports");
    let out = wasmlet(&[
        "plugin",
        "admit",
        path(&policy),
        "--pod",
        path(&dir.join("pods.yaml")),
        "--node",
        path(&dir.join("node.yaml")),
        "--memory-limit",
        "1Gi",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("1Gi is more than the largest allowed, 256Mi"),
        "{stderr}"
    );
}

fn plugin_test_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/plugin-test")
        .join(name)
}

/// `wasmlet plugin test` with the Rust admission-policy template on the cases `file`.
fn plugin_test(file: &Path) -> (Option<i32>, String, String) {
    let policy = wasmlet_plugin_host::dev::template("admission-policy", "my-policy");
    let out = wasmlet(&["plugin", "test", path(&policy), path(file)]);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn test_reports_each_case_and_what_differs() {
    let file = plugin_test_fixture("failing.yaml");
    let (code, stdout, stderr) = plugin_test(&file);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    let file = file.display();
    let expected = [
        "ok    a pod with limits is admitted".to_owned(),
        format!("FAIL  expects an admission the policy refuses   ({file})"),
        "        - verdict: Admit".into(),
        "        + verdict: Reject".into(),
        "        + reason: MissingMemoryLimit".into(),
        "        + message: container worker has no memory limit".into(),
        format!("FAIL  expects another reason   ({file})"),
        "          verdict: Reject".into(),
        "        - reason: NoTeam".into(),
        "        + reason: MissingMemoryLimit".into(),
        "          message: container worker has no memory limit".into(),
        String::new(),
        "1 passed, 2 failed".into(),
    ];
    assert_eq!(stdout.lines().collect::<Vec<_>>(), expected, "{stderr}");
}

#[test]
fn test_names_the_file_and_field_it_cannot_read() {
    let file = plugin_test_fixture("misspelt.yaml");
    let (code, stdout, stderr) = plugin_test(&file);
    assert_eq!(code, Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains(&file.display().to_string()), "{stderr}");
    assert!(stderr.contains("unknown field `reasn`"), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
}
