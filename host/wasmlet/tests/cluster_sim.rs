//! `wasmlet run --kubeconfig` against the API server double, each agent on a simulator
//! of its own: the node registers and reports Ready, its lease is kept, several agents
//! with their own names share one API server (hollow nodes), and an unusable kubeconfig
//! stops the start with the file named.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmlet_apiserver_sim::ApiServerSim;
use wasmlet_cri_sim::{SimServer, Simulator};

const BIN: &str = env!("CARGO_BIN_EXE_wasmlet");

#[path = "support/agent.rs"]
mod agent;
use agent::Agent;

fn tempdir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("wasmlet-cluster-sim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

/// A kubeconfig naming the double.
fn kubeconfig(dir: &std::path::Path, url: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    wasmlet_apiserver_sim::write_kubeconfig(&path, url).expect("kubeconfig");
    path
}

/// Starts `wasmlet run` as node `name` on the runtime at `endpoint`.
fn start(dir: &Path, name: &str, endpoint: &str, kubeconfig: &Path) -> Agent {
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).expect("manifests");
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "nodeName: {name}\ncontainerRuntimeEndpoint: {endpoint}\nstaticPodPath: {}\n\
             healthzPort: 0\nreadOnlyPort: 0\nport: 0\nrootDir: {}\ncgroupsPerQOS: false\n\
             fileCheckFrequency: 1s\nnodeLabels: {{pool: hollow}}\n\
             registerWithTaints: [{{key: hollow, value: 'yes', effect: NoSchedule}}]\n\
             kubeReserved: {{cpu: 500m}}\n{}",
            manifests.display(),
            dir.join("root").display(),
            agent::TEST_RESOURCES,
        ),
    )
    .expect("config");
    let plugins = wasmlet_plugin_host::dev::shipped_plugin("source-file");
    let log = dir.join("agent.log");
    let child = Command::new(BIN)
        .args(["run", "--config"])
        .arg(&config)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--node-labels", "rack=r1"])
        .env("WASMLET_PLUGIN_DIR", plugins.parent().expect("plugin dir"))
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start wasmlet run");
    Agent { child, log }
}

fn ready(node: &Value) -> bool {
    node["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hollow_nodes_register_ready_and_keep_their_leases() {
    let api = ApiServerSim::new();
    let served = api
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let top = tempdir("hollow");
    let config = kubeconfig(&top, &served.url());
    let mut runtimes = Vec::new();
    let mut agents = Vec::new();
    for i in 1..=3 {
        let dir = top.join(format!("node-{i}"));
        std::fs::create_dir_all(&dir).expect("dir");
        let runtime = SimServer::serve(Simulator::new(), &dir.join("cri.sock"))
            .await
            .expect("simulator");
        agents.push(start(
            &dir,
            &format!("hollow-{i}"),
            &runtime.endpoint(),
            &config,
        ));
        runtimes.push(runtime);
    }
    // Every node shows Ready within 15 s, with a lease held by itself.
    let started = Instant::now();
    for i in 1..=3 {
        let name = format!("hollow-{i}");
        loop {
            let node = api.get("api/v1", "nodes", "", &name);
            let lease = api.get(
                "apis/coordination.k8s.io/v1",
                "leases",
                "kube-node-lease",
                &name,
            );
            if let (Some(node), Some(lease)) = (node, lease)
                && ready(&node)
            {
                assert_eq!(lease["spec"]["holderIdentity"], name.as_str());
                assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
                assert!(node["metadata"]["labels"]["kubernetes.io/hostname"].is_string());
                assert!(
                    node["status"]["nodeInfo"]["containerRuntimeVersion"]
                        .as_str()
                        .is_some_and(|v| v.contains("://")),
                    "{node}"
                );
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "{name} not Ready with a lease after 15 s\n{}",
                agents[i - 1].log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    eprintln!("3 hollow nodes Ready after {:?}", started.elapsed());
    let node = api.get("api/v1", "nodes", "", "hollow-2").expect("node");
    assert_eq!(node["metadata"]["labels"]["pool"], "hollow");
    assert_eq!(node["metadata"]["labels"]["rack"], "r1");
    assert_eq!(node["spec"]["taints"][0]["key"], "hollow");
    let cpus: f64 = node["status"]["capacity"]["cpu"]
        .as_str()
        .and_then(|c| c.parse().ok())
        .expect("cpu capacity");
    assert_eq!(
        node["status"]["allocatable"]["cpu"],
        format!("{}m", cpus as u64 * 1000 - 500),
        "kubeReserved comes off allocatable"
    );

    // A pod bound to each node runs there and reports Running with its IP.
    for i in 1..=3 {
        api.create(
            "api/v1",
            "pods",
            serde_json::json!({
                "metadata": {"name": format!("work-{i}"), "namespace": "default"},
                "spec": {"nodeName": format!("hollow-{i}"), "terminationGracePeriodSeconds": 5,
                    "containers": [{"name": "c", "image": "localhost/busybox:latest",
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]}]}
            }),
        )
        .expect("create");
    }
    // A static pod on node 1 shows up as its mirror pod.
    std::fs::write(
        top.join("node-1/manifests/static.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: static}\nspec:\n  containers:\n  - {name: c, image: localhost/busybox:latest, imagePullPolicy: IfNotPresent, command: [sleep, '3600']}\n",
    )
    .expect("manifest");
    let pod = |name: &str| api.get("api/v1", "pods", "default", name);
    let running = |p: &Value| {
        p["status"]["phase"] == "Running"
            && p["status"]["podIP"]
                .as_str()
                .is_some_and(|ip| !ip.is_empty())
    };
    let started = Instant::now();
    for name in ["work-1", "work-2", "work-3", "static-hollow-1"] {
        while !pod(name).is_some_and(|p| running(&p)) {
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "{name} not Running: {:?}\n{}",
                pod(name),
                agents[0].log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let mirror = pod("static-hollow-1").expect("mirror");
    assert!(mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string());
    assert_eq!(mirror["metadata"]["ownerReferences"][0]["name"], "hollow-1");
    // kubectl delete pod: stopped, then gone.
    api.delete("api/v1", "pods", "default", "work-2", serde_json::json!({}))
        .expect("delete");
    let deleting = Instant::now();
    while pod("work-2").is_some() {
        assert!(
            deleting.elapsed() < Duration::from_secs(10),
            "work-2 still there: {:?}",
            pod("work-2")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The leases are renewed (every 10 s).
    let renew_time = |name: &str| {
        api.get(
            "apis/coordination.k8s.io/v1",
            "leases",
            "kube-node-lease",
            name,
        )
        .map(|l| l["spec"]["renewTime"].clone())
    };
    let before = renew_time("hollow-1");
    let waited = Instant::now();
    while renew_time("hollow-1") == before {
        assert!(
            waited.elapsed() < Duration::from_secs(15),
            "lease not renewed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(agents);
    for r in runtimes {
        r.stop().await;
    }
    served.stop();
}

#[test]
fn an_unusable_kubeconfig_stops_the_start_naming_the_file() {
    let dir = tempdir("badkube");
    let bad = dir.join("kubeconfig");
    std::fs::write(&bad, "clusters: [unclosed").expect("write");
    let mut agent = start(&dir, "bad", "unix:///nonexistent.sock", &bad);
    let status = agent.child.wait().expect("exits");
    assert!(!status.success());
    let log = agent.log();
    assert!(log.contains(&bad.display().to_string()), "{log}");
}
