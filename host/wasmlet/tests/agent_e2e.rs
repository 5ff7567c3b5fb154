//! The agent end to end on a real containerd: `wasmlet run --config` with a static pod
//! directory, read back through `GET /pods` and the CRI, as a user would.
//!
//! One agent runs every scenario at once: a web server with a readiness httpGet probe
//! becomes Ready and answers on its pod IP; an exec liveness probe that starts failing
//! restarts its container; a crash-looping container backs off 10 s, 20 s, 40 s; an init
//! container runs first; a malformed manifest is reported by name and stops nothing;
//! the agent killed with SIGKILL and started again restarts no container; deleting a
//! manifest stops its pod within the grace period; resource limits are the container's
//! cgroup limits and the pod runs in its cgroup of the kubelet's QoS tree, limited as a
//! whole and with podPidsLimit (removed with the pod); a hostNetwork pod answers on the node's address.
//!
//! containerd comes from `WASMLET_CRI_ENDPOINT` (`cargo xtask test` starts it); without
//! it the test is skipped, unless `WASMLET_REQUIRE_CONTAINERD=1`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmlet_cri::proto::ContainerFilter;
use wasmlet_cri::{CriClient, CriRuntime};

#[path = "support/agent.rs"]
#[allow(dead_code)]
mod agent;
#[path = "support/containerd.rs"]
mod containerd;
#[path = "support/static_node.rs"]
#[allow(dead_code)]
mod static_node;
use containerd::endpoint;
use static_node::*;

/// Records, every 200 ms, when each container of pods named `crash-*` started and
/// finished (the runtime's nanosecond timestamps), before garbage collection removes
/// the old ones.
fn watch_restarts(
    endpoint: String,
    node: String,
    stop: Arc<Mutex<bool>>,
) -> std::thread::JoinHandle<BTreeMap<String, (i64, i64)>> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let client = CriClient::connect(&endpoint).await.expect("connect");
            let mut seen: BTreeMap<String, (i64, i64)> = BTreeMap::new();
            while !*stop.lock().expect("lock") {
                let filter = ContainerFilter {
                    label_selector: [
                        ("wasmlet.io/node".to_string(), node.clone()),
                        (
                            "io.kubernetes.container.name".to_string(),
                            "crash".to_string(),
                        ),
                    ]
                    .into_iter()
                    .collect(),
                    ..Default::default()
                };
                if let Ok(list) = client.list_containers(Some(filter)).await {
                    for c in list {
                        if let Ok(s) = client.container_status(&c.id, false).await
                            && let Some(s) = s.status
                        {
                            seen.insert(c.id.clone(), (s.started_at, s.finished_at));
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            seen
        })
    })
}

#[test]
fn static_pods_on_containerd_behave_like_the_kubelets() {
    let Some(endpoint) = endpoint() else { return };
    let mut h = Harness::new(&endpoint);
    h.write(
        "web.yaml",
        &manifest(
            "web",
            5,
            &format!(
                "  containers:\n  - name: web\n    {IMAGE}\n    command: [sh, -c, 'echo hello from $(NAME) > /tmp/index.html && exec httpd -f -p 8080 -h /tmp']\n    \
                 env: [{{name: NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}]\n    \
                 ports: [{{name: http, containerPort: 8080}}]\n    \
                 readinessProbe: {{httpGet: {{path: /, port: http}}, periodSeconds: 1}}\n    \
                 resources: {{limits: {{cpu: 200m, memory: 32Mi}}}}\n"
            ),
        ),
    );
    h.write(
        "init.yaml",
        &manifest(
            "init",
            1,
            &format!(
                "  volumes: [{{name: work, emptyDir: {{}}}}]\n  initContainers:\n  - name: setup\n    {IMAGE}\n    \
                 command: [sh, -c, 'sleep 1; echo done > /work/ready']\n    volumeMounts: [{{name: work, mountPath: /work}}]\n  \
                 containers:\n  - name: app\n    {IMAGE}\n    command: [sh, -c, 'cat /work/ready && exec sleep 3600']\n    \
                 volumeMounts: [{{name: work, mountPath: /work}}]\n"
            ),
        ),
    );
    h.write(
        "live.yaml",
        &manifest(
            "live",
            1,
            &format!(
                "  containers:\n  - name: live\n    {IMAGE}\n    \
                 command: [sh, -c, 'touch /tmp/healthy; sleep 8; rm /tmp/healthy; exec sleep 3600']\n    \
                 livenessProbe: {{exec: {{command: [cat, /tmp/healthy]}}, periodSeconds: 2, failureThreshold: 1}}\n"
            ),
        ),
    );
    h.write(
        "crash.yaml",
        &manifest(
            "crash",
            1,
            &format!("  containers:\n  - name: crash\n    {IMAGE}\n    command: [sh, -c, 'sleep 1; exit 1']\n"),
        ),
    );
    let host_port = free_port();
    h.write(
        "host.yaml",
        &manifest(
            "host",
            1,
            &format!(
                "  hostNetwork: true\n  containers:\n  - name: web\n    {IMAGE}\n    \
                 command: [sh, -c, 'echo on the node > /tmp/index.html && exec httpd -f -p {host_port} -h /tmp']\n    \
                 readinessProbe: {{tcpSocket: {{port: {host_port}}}, periodSeconds: 1}}\n"
            ),
        ),
    );
    h.write(
        "broken.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: [oops\n",
    );
    let stop = Arc::new(Mutex::new(false));
    let restarts = watch_restarts(endpoint.clone(), h.node.clone(), stop.clone());
    let started = Instant::now();
    h.start();

    // The web server becomes Ready and answers on its pod IP.
    let web = h.wait_pod("web", "Ready", Duration::from_secs(30), |p| {
        condition(p, "Ready")
    });
    let ip = web["status"]["podIP"].as_str().expect("pod IP").to_owned();
    let (code, body) = get(&format!("{ip}:8080"), "/").expect("the web server answers");
    assert_eq!(
        (code, body.trim()),
        (200, format!("hello from web-{}", h.node).as_str())
    );
    assert_eq!(web["status"]["qosClass"], "Guaranteed");
    eprintln!("web Ready after {:?}", started.elapsed());
    // Its log is linked where the kubelet links logs for shippers (`containers/` beside
    // the pod log directory), to the log containerd writes.
    let web_id = container(&web, "web")["containerID"]
        .as_str()
        .and_then(|id| id.split("://").nth(1))
        .expect("container id")
        .to_owned();
    let link = h.dir.join(format!(
        "root/containers/web-{}_default_web-{web_id}.log",
        h.node
    ));
    let logged = std::fs::read_to_string(&link).expect("the log through its link");
    assert!(
        std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()),
        "{}",
        link.display()
    );
    assert!(logged.is_empty() || logged.contains(" stdout ") || logged.contains(" stderr "));
    // The read-only port serves the stats Summary, as the kubelet's does.
    let summary = (0..300)
        .find_map(|_| {
            let got = get(&h.read_only, "/stats/summary").filter(|(code, _)| *code == 200);
            if got.is_none() {
                std::thread::sleep(Duration::from_millis(100));
            }
            got
        })
        .expect("/stats/summary on the read-only port");
    let summary: serde_json::Value = serde_json::from_str(&summary.1).expect("json");
    assert_eq!(summary["node"]["nodeName"], h.node.as_str());

    // Its limits are the container's cgroup limits (cgroup v1 here).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = rt.block_on(CriClient::connect(&endpoint)).expect("connect");
    let web_cid = container(&web, "web")["containerID"]
        .as_str()
        .and_then(|id| id.split("://").nth(1))
        .expect("container id")
        .to_owned();
    let read = |path: &str| {
        let out = rt
            .block_on(client.exec_sync(
                &web_cid,
                vec!["cat".into(), path.into()],
                Duration::from_secs(5),
            ))
            .expect("exec");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(
        read("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
        (32u64 << 20).to_string()
    );
    assert_eq!(
        read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
        "20000",
        "200m of a 100 ms period"
    );

    // The pod runs in its cgroup in the QoS tree (Guaranteed: directly in kubepods),
    // limited as a whole, with podPidsLimit.
    let web_uid = web["metadata"]["uid"].as_str().expect("uid").to_owned();
    let pod_pids = format!("/sys/fs/cgroup/pids/kubepods/pod{web_uid}");
    assert!(
        read("/proc/self/cgroup").contains(&format!("pids:/kubepods/pod{web_uid}/")),
        "{}",
        read("/proc/self/cgroup")
    );
    let pod_file = |controller: &str, file: &str| {
        std::fs::read_to_string(format!(
            "/sys/fs/cgroup/{controller}/kubepods/pod{web_uid}/{file}"
        ))
        .unwrap_or_default()
        .trim()
        .to_owned()
    };
    assert_eq!(
        pod_file("memory", "memory.limit_in_bytes"),
        (32u64 << 20).to_string()
    );
    assert_eq!(pod_file("cpu", "cpu.cfs_quota_us"), "20000");
    assert_eq!(pod_file("cpu", "cpu.shares"), "204", "200m");
    assert_eq!(
        std::fs::read_to_string(format!("{pod_pids}/pids.max"))
            .expect("the pod's pids cgroup")
            .trim(),
        "64"
    );

    // A pod on the node's network answers on the node's address.
    let host = h.wait_pod("host", "Ready", Duration::from_secs(30), |p| {
        condition(p, "Ready")
    });
    let node_ip = host["status"]["hostIP"]
        .as_str()
        .expect("hostIP")
        .to_owned();
    assert_eq!(host["status"]["podIP"].as_str(), Some(node_ip.as_str()));
    let (code, body) =
        get(&format!("127.0.0.1:{host_port}"), "/").expect("the host-network server answers");
    assert_eq!((code, body.trim()), (200, "on the node"));

    // The init container ran first, to completion.
    let init = h.wait_pod("init", "Running", Duration::from_secs(30), |p| {
        p["status"]["phase"] == "Running" && condition(p, "Initialized")
    });
    let setup = &init["status"]["initContainerStatuses"][0];
    assert_eq!(setup["state"]["terminated"]["exitCode"], 0, "{setup}");
    assert_eq!(
        setup["ready"], true,
        "a finished init container is ready: {setup}"
    );
    assert_eq!(container(&init, "app")["restartCount"], 0);

    // The malformed manifest is reported by name; everything else runs.
    assert!(
        h.logs().contains("broken.yaml"),
        "broken.yaml not reported:\n{}",
        tail(&h.logs(), 40)
    );

    // SIGKILL and start again: everything is adopted, nothing restarts.
    let id = |p: &Value, c: &str| {
        container(p, c)["containerID"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let (web_id, app_id) = (id(&web, "web"), id(&init, "app"));
    h.kill();
    h.start();
    // When the new agent was started (the runtime's clock: Unix nanoseconds).
    let back = wasmlet_cri::labels::unix_nanos();
    let web2 = h.wait_pod("web", "Ready again", Duration::from_secs(30), |p| {
        condition(p, "Ready")
    });
    let init2 = h.wait_pod("init", "Running", Duration::from_secs(30), |p| {
        p["status"]["phase"] == "Running"
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(id(&web2, "web"), web_id, "web was restarted");
    assert_eq!(id(&init2, "app"), app_id, "app was restarted");
    assert_eq!(container(&web2, "web")["restartCount"], 0);
    assert_eq!(container(&init2, "app")["restartCount"], 0);

    // The exec liveness probe starts failing after 8 s: the container is restarted.
    let live = h.wait_pod("live", "restarted", Duration::from_secs(40), |p| {
        container(p, "live")["restartCount"].as_i64().unwrap_or(0) >= 1
    });
    assert!(
        container(&live, "live")["state"]["running"].is_object(),
        "{live}"
    );

    // The crash loop: restarts at once, then after 10 s, 20 s, 40 s.
    let crash = h.wait_pod(
        "crash",
        "restarted 4 times",
        Duration::from_secs(120),
        |p| container(p, "crash")["restartCount"].as_i64().unwrap_or(0) >= 4,
    );
    // Let the watcher see the instance that just started.
    std::thread::sleep(Duration::from_millis(600));
    *stop.lock().expect("lock") = true;
    let seen = restarts.join().expect("restart watcher");
    let mut runs: Vec<(i64, i64)> = seen.into_values().filter(|(s, _)| *s > 0).collect();
    runs.sort();
    let gaps: Vec<f64> = runs
        .windows(2)
        .map(|w| (w[1].0 - w[0].1) as f64 / 1e9)
        .collect();
    eprintln!("crash loop: waits between an exit and the next start {gaps:.2?}");
    assert!(
        gaps.len() >= 4,
        "waits {gaps:.2?}: fewer than 4 restarts seen"
    );
    // The first restart is immediate once an agent sees the exit: a relist (≤ 1 s)
    // after the exit — or, when the exit fell while the agent was being killed and
    // started again, after the new agent came up. Later ones wait out the back-off,
    // which the agent times itself.
    let first = (runs[1].0 - runs[0].1.max(back)) as f64 / 1e9;
    let log = || {
        format!(
            "runs {runs:?}, agent started again at {back}\n--- the agent's log ---\n{}",
            h.logs()
        )
    };
    assert!(
        first <= 3.0,
        "first restart {first:.2} s after the exit or the agent's return; waits {gaps:.2?}; {}",
        log()
    );
    for (gap, want) in gaps.iter().skip(1).zip([10.0, 20.0, 40.0]) {
        assert!(
            *gap >= want - 0.1 && *gap <= want + 1.0,
            "waits {gaps:.2?}, want 10, 20, 40 s (+1) after the first; {}",
            log()
        );
    }
    let waiting = &container(&crash, "crash")["state"]["waiting"];
    let terminated = &container(&crash, "crash")["lastState"]["terminated"];
    assert!(
        waiting["reason"] == "CrashLoopBackOff"
            || container(&crash, "crash")["state"]["running"].is_object(),
        "{crash}"
    );
    assert_eq!(terminated["exitCode"], 1, "{crash}");

    // Deleting a manifest stops its pod within its grace period (5 s).
    std::fs::remove_file(h.manifests.join("web.yaml")).expect("delete");
    let deleted = Instant::now();
    let web_sandboxes = || {
        rt.block_on(client.list_pod_sandbox(None))
            .expect("list")
            .into_iter()
            .filter(|s| {
                s.labels.get("io.kubernetes.pod.name").map(String::as_str)
                    == Some(&format!("web-{}", h.node))
            })
            .count()
    };
    while web_sandboxes() > 0 {
        assert!(
            deleted.elapsed() < Duration::from_secs(8),
            "web's sandbox still there {:?} after its manifest went\n{}",
            deleted.elapsed(),
            tail(&h.logs(), 30)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("web removed {:?} after its manifest", deleted.elapsed());
    // Its pod cgroups go with it, in every hierarchy.
    while std::path::Path::new(&pod_pids).exists()
        || std::path::Path::new(&format!("/sys/fs/cgroup/memory/kubepods/pod{web_uid}")).exists()
    {
        assert!(
            deleted.elapsed() < Duration::from_secs(12),
            "web's pod cgroup still there\n{}",
            tail(&h.logs(), 30)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(h.pod("web").is_none());

    // Clean up: every manifest goes; every pod goes.
    for f in [
        "init.yaml",
        "live.yaml",
        "crash.yaml",
        "host.yaml",
        "broken.yaml",
    ] {
        let _ = std::fs::remove_file(h.manifests.join(f));
    }
    let ours = || {
        rt.block_on(client.list_pod_sandbox(None))
            .expect("list")
            .into_iter()
            .filter(|s| s.labels.get("wasmlet.io/node") == Some(&h.node))
            .count()
    };
    let cleaning = Instant::now();
    while ours() > 0 {
        assert!(
            cleaning.elapsed() < Duration::from_secs(30),
            "pods left behind"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let logs = h.logs();
    assert!(
        logs.contains("SyncLoop (ADD, \"file\")"),
        "kubelet-shaped log lines"
    );
    assert!(logs.contains("SyncLoop (PLEG)"));
    let _ = Path::new(&h.dir);
}
