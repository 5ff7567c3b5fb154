//! Cluster mode against the API server double: connecting through a kubeconfig, node
//! registration and adoption, node status, the lease and its renewal through conflicts
//! and an outage.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1 as k8s;
use kube::Api;
use kube::api::PostParams;
use wasmlet_agent::node::NodeFacts;
use wasmlet_apiserver_sim::ApiServerSim;
use wasmlet_cluster::{connect, lease, node};

fn facts(name: &str) -> NodeFacts {
    NodeFacts {
        name: name.into(),
        hostname: name.into(),
        ip: "10.0.0.5".into(),
        cpus: 2,
        memory_bytes: 4 << 30,
        ephemeral_storage_bytes: 50 << 30,
        max_pods: 110,
        labels: BTreeMap::from([("pool".to_string(), "wasm".to_string())]),
        reserved: Default::default(),
        hugepages: Vec::new(),
    }
}

/// A kubeconfig naming the double.
fn kubeconfig(dir: &std::path::Path, url: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    wasmlet_apiserver_sim::write_kubeconfig(&path, url).expect("kubeconfig");
    path
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("wasmlet-cluster-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

fn ready_status(f: &NodeFacts, now: &str) -> k8s::NodeStatus {
    let state = node::NodeState {
        not_ready: None,
        runtime_version: "containerd://1.7.24".into(),
        port: 10250,
        pressure: Default::default(),
        images: Default::default(),
        devices: Default::default(),
    };
    node::status(
        f,
        &state,
        &node::node_info(&state.runtime_version),
        now,
        None,
    )
}

#[tokio::test]
async fn a_node_registers_is_adopted_after_a_restart_and_reports_status() {
    let sim = ApiServerSim::new();
    let served = sim
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let dir = tempdir("register");
    let client = connect::client(&kubeconfig(&dir, &served.url()))
        .await
        .expect("client");

    let f = facts("node-a");
    let wanted = node::object(&f, &[], ready_status(&f, "2026-11-22T10:00:00Z"));
    let registered = node::register(&client, &wanted).await.expect("register");
    let uid = registered.metadata.uid.clone().expect("uid");
    let stored = sim.get("api/v1", "nodes", "", "node-a").expect("stored");
    assert_eq!(stored["metadata"]["labels"]["pool"], "wasm");
    assert_eq!(
        stored["metadata"]["labels"]["kubernetes.io/hostname"],
        "node-a"
    );
    // The status went through the status subresource.
    let conditions = stored["status"]["conditions"]
        .as_array()
        .expect("conditions");
    let ready = conditions
        .iter()
        .find(|c| c["type"] == "Ready")
        .expect("Ready");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("True"), Some("KubeletReady"))
    );
    assert_eq!(
        stored["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
        10250
    );
    assert_eq!(
        stored["status"]["nodeInfo"]["containerRuntimeVersion"],
        "containerd://1.7.24"
    );
    // The Kubernetes version it implements, wasmlet's own as semantic-version build
    // metadata: what version-skew checks (kubeadm's upgrade policy) parse and compare.
    let version = stored["status"]["nodeInfo"]["kubeletVersion"]
        .as_str()
        .expect("kubeletVersion");
    let build = version
        .strip_prefix("v1.33.3+")
        .unwrap_or_else(|| panic!("{version} is not v1.33.3+BUILD"));
    assert!(build.starts_with("wasmlet."), "{version}");
    assert!(
        build
            .split('.')
            .all(|id| !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')),
        "{version}: build metadata must be dot-separated [0-9A-Za-z-] identifiers"
    );
    assert_eq!(stored["status"]["nodeInfo"]["kubeProxyVersion"], version);

    // The agent restarts with a new label: the same Node is adopted, not replaced.
    let mut f2 = f.clone();
    f2.labels.insert("rack".into(), "r1".into());
    let again = node::object(&f2, &[], ready_status(&f2, "2026-11-22T10:05:00Z"));
    let adopted = node::register(&client, &again).await.expect("adopt");
    assert_eq!(adopted.metadata.uid.as_deref(), Some(uid.as_str()));
    let stored = sim.get("api/v1", "nodes", "", "node-a").expect("stored");
    assert_eq!(stored["metadata"]["labels"]["rack"], "r1");
    let methods: Vec<String> = sim
        .requests()
        .into_iter()
        .filter(|(_, p)| p.starts_with("/api/v1/nodes"))
        .map(|(m, p)| format!("{m} {p}"))
        .collect();
    assert_eq!(
        methods,
        [
            "POST /api/v1/nodes",
            "PATCH /api/v1/nodes/node-a/status",
            "POST /api/v1/nodes",
            "PATCH /api/v1/nodes/node-a",
            "PATCH /api/v1/nodes/node-a/status",
        ]
    );
    served.stop();
}

#[tokio::test]
async fn a_bad_kubeconfig_is_named() {
    let dir = tempdir("bad");
    let path = dir.join("kubeconfig");
    std::fs::write(&path, "clusters: [oops").expect("write");
    let Err(err) = connect::client(&path).await else {
        panic!("a bad file makes no client")
    };
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    let missing = dir.join("absent");
    let Err(err) = connect::client(&missing).await else {
        panic!("no file makes no client")
    };
    assert!(err.to_string().contains("absent"), "{err}");
}

#[tokio::test]
async fn the_lease_is_created_renewed_through_conflicts_and_outages() {
    let sim = ApiServerSim::new();
    let served = sim
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let addr = served.addr;
    let dir = tempdir("lease");
    let client = connect::client(&kubeconfig(&dir, &served.url()))
        .await
        .expect("client");
    let f = facts("node-b");
    let registered = node::register(
        &client,
        &node::object(&f, &[], ready_status(&f, "2026-11-22T10:00:00Z")),
    )
    .await
    .expect("register");

    let mut heartbeat = lease::Heartbeat::new(client.clone(), "node-b", node::owner(&registered));
    let first = heartbeat.renew().await.expect("create");
    let spec = first.spec.clone().expect("spec");
    assert_eq!(spec.holder_identity.as_deref(), Some("node-b"));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    let owner = &first.metadata.owner_references.clone().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Node", "node-b")
    );

    tokio::time::sleep(Duration::from_millis(5)).await;
    let second = heartbeat.renew().await.expect("renew");
    assert_ne!(
        second.spec.as_ref().and_then(|s| s.renew_time.clone()),
        spec.renew_time
    );
    assert_ne!(
        second.metadata.resource_version,
        first.metadata.resource_version
    );

    // Someone else writes the lease: the next renewal conflicts, reads it again, wins.
    let leases: Api<Lease> = Api::namespaced(client.clone(), lease::NAMESPACE);
    let mut other = second.clone();
    other.spec.as_mut().expect("spec").holder_identity = Some("someone-else".into());
    leases
        .replace("node-b", &PostParams::default(), &other)
        .await
        .expect("other writer");
    let third = heartbeat.renew().await.expect("renew after a conflict");
    assert_eq!(
        third.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("node-b")
    );
    let conflicts = sim
        .requests()
        .iter()
        .filter(|(m, p)| m == "GET" && p.ends_with("/leases/node-b"))
        .count();
    assert_eq!(
        conflicts, 2,
        "one read to create it, one after the conflict"
    );

    // The API server goes away for a while; the heartbeat keeps trying and renews as
    // soon as it is back.
    served.stop();
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let task = tokio::spawn(lease::Heartbeat::new(client.clone(), "node-b", None).run(stopped));
    tokio::time::sleep(Duration::from_millis(700)).await;
    let before = sim.requests().len();
    let served = sim.serve(addr).await.expect("serve again");
    let back = tokio::time::Instant::now();
    loop {
        let renewed = sim.requests()[before..]
            .iter()
            .any(|(m, p)| m == "PUT" && p.ends_with("/leases/node-b"));
        if renewed {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "not renewed after the outage"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    task.await.expect("heartbeat stops");
    served.stop();
}

/// The double's watch as kube's watcher uses it: the initial list, live changes, a
/// broken connection resumed, and a compacted history (410 Gone) answered by a relist.
#[tokio::test]
async fn kubes_watcher_follows_the_doubles_pods_through_breaks_and_410() {
    use kube::runtime::watcher::{self, Event};
    use tokio_stream::StreamExt;

    let sim = ApiServerSim::new();
    let served = sim
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let dir = tempdir("watch");
    let client = connect::client(&kubeconfig(&dir, &served.url()))
        .await
        .expect("client");
    let pod = |name: &str, node: &str| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        })
    };
    sim.create("api/v1", "pods", pod("mine-1", "node-w"))
        .expect("create");
    sim.create("api/v1", "pods", pod("theirs", "node-x"))
        .expect("create");
    let pods: Api<k8s::Pod> = Api::all(client.clone());
    let mut events = Box::pin(watcher::watcher(
        pods,
        watcher::Config::default().fields("spec.nodeName=node-w"),
    ));
    let mut next_raw = async || {
        tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("an event in time")
            .expect("stream goes on")
    };
    let name = |p: &k8s::Pod| p.metadata.name.clone().unwrap_or_default();
    assert!(matches!(next_raw().await.expect("no error"), Event::Init));
    match next_raw().await.expect("no error") {
        Event::InitApply(p) => assert_eq!(name(&p), "mine-1"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        next_raw().await.expect("no error"),
        Event::InitDone
    ));

    // A pod bound to the node appears; one bound elsewhere does not.
    sim.create("api/v1", "pods", pod("elsewhere", "node-x"))
        .expect("create");
    sim.create("api/v1", "pods", pod("mine-2", "node-w"))
        .expect("create");
    match next_raw().await.expect("no error") {
        Event::Apply(p) => assert_eq!(name(&p), "mine-2"),
        other => panic!("{other:?}"),
    }

    // The connection breaks: the watcher resumes from where it was, missing nothing.
    sim.end_watches();
    sim.create("api/v1", "pods", pod("mine-3", "node-w"))
        .expect("create");
    match next_raw().await.expect("no error") {
        Event::Apply(p) => assert_eq!(name(&p), "mine-3"),
        other => panic!("{other:?}"),
    }

    // More changes (none for this node), the history compacted past them and the
    // connection broken again: resuming is 410 Gone, so it lists again.
    sim.create("api/v1", "pods", pod("elsewhere-2", "node-x"))
        .expect("create");
    sim.compact();
    sim.end_watches();
    match next_raw().await {
        Err(watcher::Error::WatchError(status)) => assert_eq!(status.code, 410, "{status:?}"),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
    assert!(matches!(next_raw().await.expect("no error"), Event::Init));
    let mut relisted = Vec::new();
    loop {
        match next_raw().await.expect("no error") {
            Event::InitApply(p) => relisted.push(name(&p)),
            Event::InitDone => break,
            other => panic!("{other:?}"),
        }
    }
    relisted.sort();
    assert_eq!(relisted, ["mine-1", "mine-2", "mine-3"]);
    served.stop();
}
