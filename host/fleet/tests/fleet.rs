//! Cluster plugins on three nodes sharing the API server double: each node a controller
//! with an admission chain and probe handlers of its own, as the agent runs it. A
//! WasmletPlugin applied swaps on every selected node, each node's WasmletNode says so
//! and the controller's counts in the plugin's status sum them up,
//! a broken version is refused everywhere while the old one keeps deciding, a
//! nodeSelector limits the rollout, delete unloads everywhere, and a node restarted
//! without the API server serves what it had. Components come from a ConfigMap here and
//! from a real registry in `registry.rs`.

mod support;

use std::time::Duration;

use serde_json::json;
use support::{Cluster, DENY_ALL, RESTRICTED, Verdict, digest_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applied_plugin_swaps_on_every_node_and_each_says_so() {
    let c = Cluster::start("swap", &["node-a", "node-b", "node-c"]).await;
    c.config_map(
        "policies",
        &[("restricted.wasm", RESTRICTED), ("deny.wasm", DENY_ALL)],
    )
    .await;
    let writes_before = c.node_writes();
    // v1: restricted-pods (a plain pod is admitted).
    c.apply(json!({
        "metadata": {"name": "policy"},
        "spec": {"kind": "admission", "digest": digest_of(RESTRICTED),
                 "source": {"configMap": {"name": "policies", "key": "restricted.wasm"}}},
    }))
    .await;
    c.wait_status(
        "policy",
        1,
        &[
            ("node-a", "Loaded"),
            ("node-b", "Loaded"),
            ("node-c", "Loaded"),
        ],
    )
    .await;
    for n in &c.nodes {
        assert_eq!(n.decide().await, Verdict::Admitted, "{}", n.name);
    }
    let digest = c.entries("policy")[0]["digest"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(digest, digest_of(RESTRICTED));
    c.wait_summary(
        "policy",
        json!({"observedGeneration": 1, "selected": 3, "serving": 3, "verified": 0, "failed": 0, "pending": 0, "failures": []}),
    )
    .await;

    // v2: deny-all, on every node, while decisions keep coming.
    let deciding = c.decide_continuously();
    c.apply(json!({
        "metadata": {"name": "policy"},
        "spec": {"kind": "admission", "digest": digest_of(DENY_ALL),
                 "source": {"configMap": {"name": "policies", "key": "deny.wasm"}}},
    }))
    .await;
    c.wait_status(
        "policy",
        2,
        &[
            ("node-a", "Loaded"),
            ("node-b", "Loaded"),
            ("node-c", "Loaded"),
        ],
    )
    .await;
    for n in &c.nodes {
        assert_eq!(
            n.decide().await,
            Verdict::Rejected("DeniedByPolicy".into()),
            "{}",
            n.name
        );
    }
    let counts = deciding.stop().await;
    assert!(counts.decided > 0, "decisions were made during the swap");
    assert_eq!(
        counts.failed, 0,
        "no decision failed during the swap: {counts:?}"
    );

    // One write per node and rollout, each to the node's own object.
    assert_eq!(
        c.node_writes() - writes_before,
        6,
        "one write per node and version"
    );

    a_broken_version_is_refused_everywhere(&c).await;

    // Deleted: unloaded everywhere.
    c.delete("policy").await;
    for n in &c.nodes {
        n.wait(|n| n.chain.names().is_empty(), "the chain is empty")
            .await;
        assert_eq!(n.decide().await, Verdict::Admitted);
    }
}

/// Generation 3 of `policy`: its digest pins a component the ConfigMap does not hold
/// (and the nodes never had: what they keep is found by digest). Every node refuses it
/// and says why, deny-all keeps deciding, and the counts name the nodes that refused.
async fn a_broken_version_is_refused_everywhere(c: &Cluster) {
    c.apply(json!({
        "metadata": {"name": "policy"},
        "spec": {"kind": "admission", "digest": digest_of("probe_exec"),
                 "source": {"configMap": {"name": "policies", "key": "deny.wasm"}}},
    }))
    .await;
    c.wait_status(
        "policy",
        3,
        &[
            ("node-a", "Failed"),
            ("node-b", "Failed"),
            ("node-c", "Failed"),
        ],
    )
    .await;
    for entry in c.entries("policy") {
        let message = entry["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(
                "digest mismatch: ConfigMap wasmlet-system/policies key deny.wasm is sha256:"
            ),
            "{message}"
        );
        assert_eq!(
            entry["digest"],
            digest_of(DENY_ALL),
            "the old version serves"
        );
    }
    for n in &c.nodes {
        assert_eq!(n.decide().await, Verdict::Rejected("DeniedByPolicy".into()));
    }
    // The counts say so, naming the nodes that refused it.
    c.wait_summary(
        "policy",
        json!({"observedGeneration": 3, "selected": 3, "serving": 0, "failed": 3, "pending": 0}),
    )
    .await;
    let failures = c.object("policy")["status"]["failures"].clone();
    let names: Vec<&str> = failures
        .as_array()
        .expect("failures")
        .iter()
        .map(|f| f["nodeName"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(names, ["node-a", "node-b", "node-c"]);
    assert!(
        failures[0]["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("digest mismatch"),
        "{failures}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_selector_limits_the_rollout_and_labels_move_it() {
    let c = Cluster::start("canary", &["node-a", "node-b", "node-c"]).await;
    c.config_map("policies", &[("deny.wasm", DENY_ALL)]).await;
    c.label("node-a", "wasmlet.dev/canary", "true").await;
    c.apply(json!({
        "metadata": {"name": "canary-deny"},
        "spec": {"kind": "admission", "digest": digest_of(DENY_ALL),
                 "source": {"configMap": {"name": "policies", "key": "deny.wasm"}},
                 "nodeSelector": {"matchLabels": {"wasmlet.dev/canary": "true"}}},
    }))
    .await;
    c.wait_status("canary-deny", 1, &[("node-a", "Loaded")])
        .await;
    c.wait_summary(
        "canary-deny",
        json!({"selected": 1, "serving": 1, "pending": 0}),
    )
    .await;
    assert!(matches!(c.nodes[0].decide().await, Verdict::Rejected(_)));
    for n in &c.nodes[1..] {
        assert_eq!(
            n.decide().await,
            Verdict::Admitted,
            "{} is not a canary",
            n.name
        );
    }
    // node-b joins the canaries (`kubectl label node`); node-a leaves them.
    c.label("node-b", "wasmlet.dev/canary", "true").await;
    c.wait_status(
        "canary-deny",
        1,
        &[("node-a", "Loaded"), ("node-b", "Loaded")],
    )
    .await;
    c.wait_summary(
        "canary-deny",
        json!({"selected": 2, "serving": 2, "pending": 0}),
    )
    .await;
    c.unlabel("node-a", "wasmlet.dev/canary").await;
    c.wait_status("canary-deny", 1, &[("node-b", "Loaded")])
        .await;
    c.nodes[0]
        .wait(|n| n.chain.names().is_empty(), "node-a unloads it")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_node_cannot_run_is_a_failed_entry_naming_the_cause() {
    let c = Cluster::start("refused", &["node-a"]).await;
    let probe = "probe_exec";
    c.config_map(
        "policies",
        &[("probe.wasm", probe), ("deny.wasm", DENY_ALL)],
    )
    .await;
    let cases = [
        // A component for another world.
        (
            json!({"kind": "admission", "digest": digest_of(probe),
                "source": {"configMap": {"name": "policies", "key": "probe.wasm"}}}),
            "admission-policy",
        ),
        // An unknown kind.
        (
            json!({"kind": "scheduler", "digest": digest_of(DENY_ALL),
                "source": {"configMap": {"name": "policies", "key": "deny.wasm"}}}),
            "spec.kind: unknown plugin kind \"scheduler\"",
        ),
        // A capability the node does not grant.
        (
            json!({"kind": "probe-handler", "digest": digest_of(probe),
                "probeHandler": {"kinds": ["custom-exec"]}, "capabilities": {"exec": true},
                "source": {"configMap": {"name": "policies", "key": "probe.wasm"}}}),
            "spec.capabilities.exec: not granted by this node (clusterPlugins.grants.exec)",
        ),
        // A ConfigMap that is not there.
        (
            json!({"kind": "admission", "digest": digest_of(DENY_ALL),
                "source": {"configMap": {"name": "missing", "key": "deny.wasm"}}}),
            "ConfigMap wasmlet-system/missing key deny.wasm: the ConfigMap does not exist",
        ),
    ];
    for (i, (spec, want)) in cases.into_iter().enumerate() {
        let name = format!("refused-{i}");
        c.apply(json!({"metadata": {"name": name}, "spec": spec}))
            .await;
        c.wait_status(&name, 1, &[("node-a", "Failed")]).await;
        let message = c.entries(&name)[0]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.contains(want), "{name}: {message}");
    }
    assert!(c.nodes[0].chain.names().is_empty(), "nothing loaded");
    assert_eq!(c.nodes[0].decide().await, Verdict::Admitted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_without_the_api_server_serves_what_it_had() {
    let mut c = Cluster::start("restart", &["node-a"]).await;
    c.config_map("policies", &[("deny.wasm", DENY_ALL)]).await;
    c.apply(json!({
        "metadata": {"name": "policy"},
        "spec": {"kind": "admission", "digest": digest_of(DENY_ALL),
                 "source": {"configMap": {"name": "policies", "key": "deny.wasm"}}},
    }))
    .await;
    c.wait_status("policy", 1, &[("node-a", "Loaded")]).await;
    // The API server goes away; the node restarts.
    c.stop_api_server();
    let restarted = c.restart_node(0).await;
    assert_eq!(restarted.chain.names(), ["policy"]);
    assert!(matches!(restarted.decide().await, Verdict::Rejected(_)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(restarted.chain.names(), ["policy"], "still serving");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_source_from_the_cluster_is_polled_and_kept_across_a_restart() {
    let manifests =
        std::env::temp_dir().join(format!("wasmlet-fleet-manifests-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&manifests);
    std::fs::create_dir_all(&manifests).expect("manifests");
    std::fs::write(
        manifests.join("web.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers: [{name: c, image: busybox}]\n",
    )
    .expect("manifest");
    let config = wasmlet_fleet::FleetConfig {
        grants: wasmlet_fleet::Grants {
            directories: vec![manifests.clone()],
            ..Default::default()
        },
        ..wasmlet_fleet::FleetConfig::default()
    };
    let mut c = Cluster::start_with("pod-source", &["node-a"], config).await;
    let source = "source_file";
    c.config_map("sources", &[("file.wasm", source)]).await;
    c.apply(json!({
        "metadata": {"name": "team-pods"},
        "spec": {"kind": "pod-source", "digest": digest_of(source),
                 "podSource": {"period": "1s"},
                 "capabilities": {"directory": manifests.to_string_lossy()},
                 "source": {"configMap": {"name": "sources", "key": "file.wasm"}}},
    }))
    .await;
    c.wait_status("team-pods", 1, &[("node-a", "Loaded")]).await;
    let served = c.nodes[0]
        .sources
        .cluster_source("team-pods")
        .expect("served as a pod source");
    assert_eq!(served.period, Duration::from_secs(1));
    assert_eq!(served.directory.as_deref(), Some(manifests.as_path()));
    let snapshot = served.source.poll().await.expect("poll");
    let names: Vec<_> = snapshot
        .pods
        .iter()
        .filter_map(|p| p.pod.metadata.name.clone())
        .collect();
    assert_eq!(names, ["web"]);
    assert_eq!(c.nodes[0].sources.loaded().len(), 1);

    // A node restarted without the API server polls it again from its store.
    c.stop_api_server();
    let restarted = c.restart_node(0).await;
    assert!(restarted.sources.cluster_source("team-pods").is_some());
    let _ = std::fs::remove_dir_all(&manifests);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_pod_source_stops_being_served() {
    let c = Cluster::start("pod-source-delete", &["node-a"]).await;
    let source = "source_file";
    c.config_map("sources", &[("file.wasm", source)]).await;
    c.apply(json!({
        "metadata": {"name": "team-pods"},
        "spec": {"kind": "pod-source", "digest": digest_of(source),
                 "source": {"configMap": {"name": "sources", "key": "file.wasm"}}},
    }))
    .await;
    c.wait_status("team-pods", 1, &[("node-a", "Loaded")]).await;
    let changes = c.nodes[0].sources.cluster_changes();
    assert!(c.nodes[0].sources.cluster_source("team-pods").is_some());
    c.delete("team-pods").await;
    c.nodes[0]
        .wait(
            |n| n.sources.cluster_source("team-pods").is_none(),
            "the pod source removed",
        )
        .await;
    assert!(changes.has_changed().unwrap_or(false), "pollers are told");
}
