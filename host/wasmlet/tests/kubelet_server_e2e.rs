//! The kubelet server end to end: `wasmlet run --kubeconfig` on a real containerd, its
//! kubelet server trusting the API server double's client CA and asking the double's
//! SubjectAccessReview, and kube's client going through the double the way `kubectl`
//! does — `logs` (every parameter, `--previous` after a restart, `-f` across log
//! rotations), `exec` (output, stderr, exit status, binary stdin, `-it` with a terminal
//! size), `kubectl cp` both ways with tar, `attach` and `port-forward` to busybox pods,
//! and the conformance tests' WebSocket log and exec readers. The
//! runtime's streaming server is containerd's own. Also the conformance behaviours that
//! read a container's output through the API: a busybox command's output, environment
//! variables from a ConfigMap and the downward API. And port 10250 itself: 401 without
//! credentials, 403 for a token without `nodes/proxy`.
//!
//! containerd comes from `WASMLET_CRI_ENDPOINT` (`cargo xtask test` starts it); without
//! it the test is skipped, unless `WASMLET_REQUIRE_CONTAINERD=1`.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, LogParams, TerminalSize};
use serde_json::{Value, json};
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/containerd.rs"]
mod containerd;

use cluster::{busybox, client_from, phase, remove_pods, running, wait_pod};
use containerd::endpoint;

const NODE: &str = "kubelet-server-e2e";

#[path = "support/spdy.rs"]
mod spdy;
#[path = "support/streams.rs"]
mod streams;
#[path = "support/websocket.rs"]
mod websocket;

use streams::{kubectl_cp_both_ways, raw, read_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_exec_attach_and_port_forward_reach_pods_on_containerd() {
    let Some(endpoint) = endpoint() else { return };
    let cluster::Double {
        dir,
        api,
        served,
        kubeconfig,
        client_ca,
    } = cluster::Double::start("wasmlet-kubelet-server-e2e", &endpoint, NODE).await;
    // A user's token may read pods, another may not.
    api.add_token("ops-token", "ops", &[]);
    api.allow("ops", "get", "proxy");
    api.add_token("viewer-token", "viewer", &[]);

    api.create(
        "api/v1",
        "configmaps",
        json!({"metadata": {"name": "ks-config", "namespace": "default"},
               "data": {"data-1": "value-1"}}),
    )
    .expect("configmap");
    let mut env = busybox("env", "env");
    env["env"] = json!([
        {"name": "CONFIG_DATA_1", "valueFrom": {"configMapKeyRef": {"name": "ks-config", "key": "data-1"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
        {"name": "MEMORY_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}},
        {"name": "MEMORY_REQUEST", "valueFrom": {"resourceFieldRef": {"resource": "requests.memory"}}},
        {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
        {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "SECRET_DATA", "valueFrom": {"secretKeyRef": {"name": "ks-secret", "key": "data-1"}}},
    ]);
    env["resources"] = json!({"limits": {"memory": "64Mi"}, "requests": {"memory": "32Mi"}});
    api.create(
        "api/v1",
        "secrets",
        json!({"metadata": {"name": "ks-secret", "namespace": "default"},
               "data": {"data-1": "dmFsdWUtMQ=="}}),
    )
    .expect("secret");
    // The Security Context conformance tests, each a pod that prints what it found.
    let secured = |name: &str, pod_context: Value, context: Value, script: &str| {
        let mut c = busybox("c", script);
        c["securityContext"] = context;
        let mut p = cluster::pod(NODE, name, "Never", c);
        p["spec"]["securityContext"] = pod_context;
        p
    };
    // The Container Runtime conformance tests' termination messages.
    let message = |name: &str, policy: &str, path: &str, user: Option<i64>, script: &str| {
        let mut c = busybox("c", script);
        c["terminationMessagePolicy"] = policy.into();
        c["terminationMessagePath"] = path.into();
        if let Some(u) = user {
            c["securityContext"] = json!({"runAsUser": u});
        }
        cluster::pod(NODE, name, "Never", c)
    };
    let termination = [
        message(
            "ks-msg-file",
            "FallbackToLogsOnError",
            "/dev/termination-log",
            None,
            "echo -n OK > /dev/termination-log",
        ),
        message(
            "ks-msg-logs",
            "FallbackToLogsOnError",
            "/dev/termination-log",
            None,
            "echo -n DONE; false",
        ),
        message(
            "ks-msg-user",
            "File",
            "/dev/termination-custom-log",
            Some(1000),
            "echo -n DONE > /dev/termination-custom-log",
        ),
    ];
    let security = [
        secured(
            "ks-runas",
            json!({"runAsUser": 1001, "runAsGroup": 2002}),
            json!({}),
            "id -u; id -g",
        ),
        secured(
            "ks-runas-container",
            json!({"runAsUser": 1001}),
            json!({"runAsUser": 1002, "runAsGroup": 2003}),
            "id -u; id -g",
        ),
        secured(
            "ks-readonly",
            json!({}),
            json!({"readOnlyRootFilesystem": true}),
            "touch /written 2>&1; echo exit=$?",
        ),
        secured(
            "ks-nonewprivs",
            json!({}),
            json!({"runAsUser": 1000, "allowPrivilegeEscalation": false}),
            "grep NoNewPrivs /proc/self/status",
        ),
        secured(
            "ks-unprivileged",
            json!({}),
            json!({"privileged": false}),
            "grep CapEff /proc/self/status",
        ),
    ];
    let mut attachee = busybox(
        "attachee",
        "echo ready; while read line; do echo \"got $line\"; done",
    );
    attachee["stdin"] = true.into();
    for p in [
        cluster::pod(
            NODE,
            "ks-hello",
            "Never",
            busybox("hello", "echo 'Hello World'"),
        ),
        cluster::pod(NODE, "ks-env", "Never", env),
        cluster::pod(
            NODE,
            "ks-web",
            "Always",
            busybox(
                "web",
                "mkdir -p /www && echo hello-pf > /www/index.html && echo serving && sleep 0.2 && \
                 echo warming >&2 && exec httpd -f -p 8080 -h /www",
            ),
        ),
        cluster::pod(NODE, "ks-attach", "Always", attachee),
        cluster::pod(
            NODE,
            "ks-chatty",
            "Always",
            busybox(
                "chatty",
                "i=0; while true; do echo \"line $i\"; i=$((i+1)); usleep 2000; done",
            ),
        ),
        cluster::pod(
            NODE,
            "ks-restarts",
            "Always",
            busybox("once", "echo instance; sleep 1; exit 1"),
        ),
    ]
    .into_iter()
    .chain(security)
    .chain(termination)
    {
        api.create("api/v1", "pods", p).expect("pod");
    }

    let agent = cluster::start_agent(
        &dir,
        &endpoint,
        &kubeconfig,
        &client_ca,
        NODE,
        "containerLogMaxSize: 8Ki\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\n",
    );
    let client = client_from(&kubeconfig).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let long = Duration::from_secs(60);

    // A busybox command's output is its log ([Conformance] Kubelet … busybox command).
    wait_pod(&api, &agent, "ks-hello", long, |p| phase(p) == "Succeeded").await;
    let hello = pods
        .logs("ks-hello", &LogParams::default())
        .await
        .expect("logs");
    assert_eq!(hello, "Hello World\n");

    // Environment from a ConfigMap and the downward API, read through the logs.
    wait_pod(&api, &agent, "ks-env", long, |p| phase(p) == "Succeeded").await;
    let env = pods
        .logs("ks-env", &LogParams::default())
        .await
        .expect("env");
    for line in [
        "CONFIG_DATA_1=value-1",
        "POD_NAME=ks-env",
        "POD_NAMESPACE=default",
        "HOST_IP=127.0.0.1",
        "MEMORY_LIMIT=67108864",
        "MEMORY_REQUEST=33554432",
        "SECRET_DATA=value-1",
    ] {
        assert!(env.lines().any(|l| l == line), "{line} in {env}");
    }
    // Facts only the API server's copy of the pod and node can tell.
    let env_pod = api.get("api/v1", "pods", "default", "ks-env").expect("pod");
    let node = api.get("api/v1", "nodes", "", NODE).expect("node");
    for (name, want) in [
        ("POD_UID", env_pod["metadata"]["uid"].as_str()),
        // No CPU limit: the node's allocatable CPU.
        ("CPU_LIMIT", node["status"]["allocatable"]["cpu"].as_str()),
    ] {
        let want = format!("{name}={}", want.expect(name));
        assert!(env.lines().any(|l| l == want), "{want} in {env}");
    }

    // Termination messages: from the file (also one at another path, written by a
    // non-root user), or from the log's end when the container failed.
    for (name, phase_want, text) in [
        ("ks-msg-file", "Succeeded", "OK"),
        ("ks-msg-logs", "Failed", "DONE"),
        ("ks-msg-user", "Succeeded", "DONE"),
    ] {
        let p = wait_pod(&api, &agent, name, long, |p| {
            matches!(phase(p), "Succeeded" | "Failed")
        })
        .await;
        let c = &p["status"]["containerStatuses"][0];
        assert_eq!(phase(&p), phase_want, "{name}: {c}");
        assert_eq!(c["state"]["terminated"]["message"], text, "{name}: {c}");
    }

    // The pod's IP on the CNI network (the finished pod's status may no longer carry it).
    let pod_ip = env
        .lines()
        .find_map(|l| l.strip_prefix("POD_IP="))
        .and_then(|ip| ip.parse::<std::net::Ipv4Addr>().ok())
        .unwrap_or_else(|| panic!("POD_IP in {env}"));
    assert_eq!(pod_ip.octets()[..2], [10, 88], "{pod_ip}");

    // Security contexts, as the conformance tests read them back.
    let output = |name: &'static str| {
        let pods = pods.clone();
        let (api, agent) = (&api, &agent);
        async move {
            wait_pod(api, agent, name, long, |p| phase(p) == "Succeeded").await;
            pods.logs(name, &LogParams::default()).await.expect("logs")
        }
    };
    assert_eq!(output("ks-runas").await, "1001\n2002\n");
    assert_eq!(
        output("ks-runas-container").await,
        "1002\n2003\n",
        "the container's context wins over the pod's"
    );
    let readonly = output("ks-readonly").await;
    assert!(
        readonly.contains("Read-only file system") && readonly.contains("exit=1"),
        "{readonly}"
    );
    assert_eq!(output("ks-nonewprivs").await, "NoNewPrivs:\t1\n");
    let caps = output("ks-unprivileged").await;
    let effective = caps
        .trim()
        .strip_prefix("CapEff:")
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or_else(|| panic!("{caps:?}"));
    assert_eq!(
        effective & (1 << 12 | 1 << 21),
        0,
        "no CAP_NET_ADMIN, no CAP_SYS_ADMIN: {caps}"
    );

    // Logs' parameters on the runtime's own log file.
    wait_pod(&api, &agent, "ks-web", long, running).await;
    let mut all = String::new();
    for _ in 0..50 {
        all = pods
            .logs("ks-web", &LogParams::default())
            .await
            .expect("logs");
        if all.contains("warming") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(all, "serving\nwarming\n");
    let params = |f: fn(&mut LogParams)| {
        let mut p = LogParams::default();
        f(&mut p);
        p
    };
    assert_eq!(
        pods.logs("ks-web", &params(|p| p.tail_lines = Some(1)))
            .await
            .expect("tail"),
        "warming\n"
    );
    assert_eq!(
        pods.logs("ks-web", &params(|p| p.limit_bytes = Some(3)))
            .await
            .expect("limit"),
        "ser"
    );
    let stamped = pods
        .logs("ks-web", &params(|p| p.timestamps = true))
        .await
        .expect("timestamps");
    let first = stamped.lines().next().unwrap_or_default();
    assert!(
        first.ends_with("Z serving") && first.len() > "2026-01-01T00:00:00Z serving".len(),
        "{stamped:?}"
    );
    assert_eq!(
        pods.logs("ks-web", &params(|p| p.since_seconds = Some(600)))
            .await
            .expect("since"),
        all
    );

    // Exec: output, stderr and the exit status.
    let mut p = pods
        .exec(
            "ks-web",
            ["sh", "-c", "echo out; echo err >&2; exit 3"],
            &AttachParams::default().stdout(true).stderr(true),
        )
        .await
        .expect("exec");
    let (mut out, mut err) = (String::new(), String::new());
    let mut stdout = p.stdout().expect("stdout");
    let mut stderr = p.stderr().expect("stderr");
    let status = p.take_status().expect("status");
    let (o, e) = tokio::join!(
        stdout.read_to_string(&mut out),
        stderr.read_to_string(&mut err)
    );
    o.expect("stdout");
    e.expect("stderr");
    let status = status.await.expect("a status");
    assert_eq!((out.as_str(), err.as_str()), ("out\n", "err\n"));
    assert_eq!(
        status.reason.as_deref(),
        Some("NonZeroExitCode"),
        "{status:?}"
    );
    let code = status
        .details
        .and_then(|d| d.causes)
        .into_iter()
        .flatten()
        .find(|c| c.reason.as_deref() == Some("ExitCode"))
        .and_then(|c| c.message);
    assert_eq!(code.as_deref(), Some("3"));
    p.join().await.expect("join");

    // What `kubectl cp` does: binary stdin into a command in the container.
    let blob: Vec<u8> = (0..1_048_576u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut cp = pods
        .exec(
            "ks-web",
            [
                "sh",
                "-c",
                "head -c 1048576 > /tmp/blob && wc -c < /tmp/blob && sha256sum < /tmp/blob",
            ],
            &AttachParams::default()
                .stdin(true)
                .stdout(true)
                .stderr(false),
        )
        .await
        .expect("exec cp");
    let mut stdin = cp.stdin().expect("stdin");
    let mut stdout = cp.stdout().expect("stdout");
    let blob_copy = blob.clone();
    let writer = tokio::spawn(async move {
        stdin.write_all(&blob).await.expect("write blob");
        stdin
    });
    let got = read_until(&mut stdout, "  -").await;
    let _ = writer.await;
    let sum: String = sha2::Sha256::digest(&blob_copy)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        got.trim_end(),
        format!("1048576\n{sum}  -"),
        "every byte arrived"
    );
    cp.abort();
    kubectl_cp_both_ways(&served.url(), &pods, &dir).await;

    // The conformance tests' own WebSocket readers, through the API server: the log (which
    // the API server wraps; the kubelet answers a plain GET) and a command's output over
    // the original `channel.k8s.io`.
    assert_eq!(websocket::logs(&served.url(), "ks-web", "web").await, all);
    assert_eq!(
        websocket::exec_stdout(
            &served.url(),
            "ks-web",
            "web",
            &["echo", "remote execution test"]
        )
        .await,
        "remote execution test\n"
    );

    // The same through SPDY, as kubectl 1.28 sends it.
    let (head, out, status) = spdy::exec(&served.url(), "ks-web", &["echo", "spdy"]).await;
    let head = head.to_ascii_lowercase();
    assert!(head.contains("upgrade: spdy/3.1"), "{head}");
    assert!(
        head.contains("x-stream-protocol-version: v4.channel.k8s.io"),
        "{head}"
    );
    assert_eq!(out, "spdy\n");
    assert!(status.contains("\"Success\""), "{status}");

    // `kubectl exec -it`: a terminal, its size, stdin.
    let mut tty = pods
        .exec(
            "ks-web",
            ["sh", "-c", "read line; stty size; echo \"line=$line\""],
            &AttachParams::interactive_tty(),
        )
        .await
        .expect("exec -it");
    let mut size = tty.terminal_size().expect("terminal size");
    futures::SinkExt::send(
        &mut size,
        TerminalSize {
            height: 40,
            width: 100,
        },
    )
    .await
    .expect("resize");
    let mut stdin = tty.stdin().expect("stdin");
    let mut stdout = tty.stdout().expect("stdout");
    // The size travels on its own channel: give it a moment before the command asks.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stdin.write_all(b"go\n").await.expect("write");
    let screen = read_until(&mut stdout, "line=go").await;
    assert!(screen.contains("40 100"), "{screen:?}");
    assert!(
        screen.contains("\r\n"),
        "a terminal answers in CRLF: {screen:?}"
    );
    tty.abort();

    // Attach to a container's stdin and stdout.
    wait_pod(&api, &agent, "ks-attach", long, running).await;
    let mut at = pods
        .attach(
            "ks-attach",
            &AttachParams::default()
                .stdin(true)
                .stdout(true)
                .stderr(false),
        )
        .await
        .expect("attach");
    let mut stdin = at.stdin().expect("stdin");
    let mut stdout = at.stdout().expect("stdout");
    stdin.write_all(b"knock\n").await.expect("write");
    read_until(&mut stdout, "got knock").await;
    at.abort();

    // Port-forward to busybox httpd inside the pod's network.
    let mut pf = pods
        .portforward("ks-web", &[8080])
        .await
        .expect("portforward");
    let mut stream = pf.take_stream(8080).expect("stream");
    stream
        .write_all(b"GET /index.html HTTP/1.0\r\nHost: pod\r\n\r\n")
        .await
        .expect("request");
    let answer = read_until(&mut stream, "hello-pf").await;
    assert!(
        answer.starts_with("HTTP/1.") && answer.contains(" 200 "),
        "{answer:?}"
    );
    drop(stream);
    pf.abort();
    let answer = spdy::port_forward(
        &served.url(),
        "ks-web",
        8080,
        b"GET /index.html HTTP/1.0\r\nHost: pod\r\n\r\n",
        "hello-pf",
    )
    .await;
    assert!(answer.starts_with("HTTP/1."), "over SPDY too: {answer:?}");

    // `kubectl logs -f` across rotations: every line once, in order.
    wait_pod(&api, &agent, "ks-chatty", long, running).await;
    let mut follow = pods
        .log_stream(
            "ks-chatty",
            &LogParams {
                follow: true,
                ..Default::default()
            },
        )
        .await
        .expect("follow")
        .lines();
    let log_dir = std::fs::read_dir(dir.join("logs"))
        .expect("pod logs")
        .flatten()
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("default_ks-chatty_")
        })
        .expect("ks-chatty's log directory")
        .path()
        .join("chatty");
    let rotated = |d: &Path| {
        std::fs::read_dir(d)
            .map(|r| {
                r.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("0.log."))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    // Rotations made while following, by name (a compressed one counts as itself).
    let names = |d: &Path| -> std::collections::BTreeSet<String> {
        rotated(d)
            .into_iter()
            .map(|n| n.trim_end_matches(".gz").to_owned())
            .collect()
    };
    let before = names(&log_dir);
    let mut expected: Option<u64> = None;
    let mut after_second = 0;
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let line = tokio::time::timeout(Duration::from_secs(10), follow.try_next())
            .await
            .expect("a followed line in time")
            .expect("read")
            .expect("the stream goes on");
        let n: u64 = line
            .strip_prefix("line ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("not a line of the writer: {line:?}"));
        // The first line is wherever the live file starts (it may have been rotated
        // before the follower came); from there on, every line once, in order.
        if let Some(e) = expected {
            assert_eq!(n, e, "lines in order, none lost or repeated");
        }
        expected = Some(n + 1);
        let made = names(&log_dir).difference(&before).count();
        if made >= 2 {
            after_second += 1;
            if after_second == 200 {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "not rotated twice within 40 s; files {:?}\n{}",
            rotated(&log_dir),
            agent.log()
        );
    }
    drop(follow);
    let files = rotated(&log_dir);
    assert!(
        files.len() <= 2 && files.iter().any(|f| f.ends_with(".gz")),
        "at most containerLogMaxFiles (3) files, the older rotations compressed: {files:?}"
    );
    let reopened = async {
        while std::fs::metadata(log_dir.join("0.log")).is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), reopened)
        .await
        .expect("containerd reopened the live file");

    // The last instance's log after a restart (`kubectl logs --previous`).
    wait_pod(&api, &agent, "ks-restarts", long, |p| {
        p["status"]["containerStatuses"][0]["restartCount"].as_i64() >= Some(1)
    })
    .await;
    let previous = pods
        .logs(
            "ks-restarts",
            &LogParams {
                previous: true,
                ..Default::default()
            },
        )
        .await
        .expect("previous");
    assert_eq!(
        previous,
        "instance\n",
        "status {}; log files {:?}",
        api.get("api/v1", "pods", "default", "ks-restarts")
            .map(|p| p["status"].to_string())
            .unwrap_or_default(),
        std::fs::read_dir(dir.join("logs"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains("ks-restarts"))
            .flat_map(|e| std::fs::read_dir(e.path().join("once"))
                .into_iter()
                .flatten()
                .flatten())
            .map(|e| (e.file_name(), e.metadata().map(|m| m.len()).unwrap_or(0)))
            .collect::<Vec<_>>()
    );

    // Port 10250 itself, as a client that is not the API server.
    let node = api.get("api/v1", "nodes", "", NODE).expect("node");
    // As the kubelet reports them: the Hostname address is the node's name, and the
    // runtime's version is a plain version (Debian's containerd says 1.6.20~ds1).
    let runtime = node["status"]["nodeInfo"]["containerRuntimeVersion"]
        .as_str()
        .unwrap_or_default();
    assert!(
        runtime
            .strip_prefix("containerd://")
            .is_some_and(|v| !v.is_empty() && v.split('.').all(|n| n.parse::<u32>().is_ok())),
        "{runtime}"
    );
    assert!(
        node["status"]["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a["type"] == "Hostname" && a["address"] == NODE),
        "{}",
        node["status"]["addresses"]
    );
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .expect("the node's kubelet port");
    assert_eq!(raw(port, "/pods", None).await.0, 401, "no credentials");
    let (code, body) = raw(port, "/pods", Some("viewer-token")).await;
    assert_eq!(
        (code, body.trim()),
        (
            403,
            "Forbidden (user=viewer, verb=get, resource=nodes, subresource=proxy)"
        )
    );
    let (code, body) = raw(port, "/pods", Some("ops-token")).await;
    assert_eq!(code, 200);
    assert!(body.contains("ks-web"), "{body}");

    drop(agent);
    remove_pods(&endpoint, NODE).await;
    let _ = std::fs::remove_dir_all(&dir);
}
