//! Watching a policy before enforcing it, across nodes on the API server double: a
//! WasmletPlugin in `mode: Monitor` admits every pod; each node asks the new version
//! about the pods it already runs (an audit, touching none), counts what it would have
//! rejected since, and says both in its WasmletNode; the controller sums them into the
//! plugin's status, which `kubectl get wasmletplugins` shows. Switched to Enforce, the
//! same policy rejects, and the nodes audit the new generation again.

mod support;

use serde_json::{Value, json};
use support::{Cluster, digest_of};

/// The kubelet's NodePorts check, shipped as a policy.
const NODE_PORTS: &str = "node-ports";

/// Pod `name` in `team`, on host port `port` if any.
fn pod(name: &str, port: Option<i32>) -> Value {
    let mut container = json!({"name": "app", "image": "busybox"});
    if let Some(port) = port {
        container["ports"] = json!([{"containerPort": 80, "hostPort": port}]);
    }
    json!({
        "metadata": {"name": name, "namespace": "team", "uid": format!("uid-{name}")},
        "spec": {"containers": [container]},
    })
}

/// The ports policy in `mode`.
fn ports_policy(mode: &str) -> Value {
    json!({
        "metadata": {"name": "ports"},
        "spec": {"kind": "admission", "digest": digest_of(NODE_PORTS),
                 "source": {"configMap": {"name": "policies", "key": "ports.wasm"}},
                 "admission": {"mode": mode}},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_in_monitor_mode_rejects_nothing_and_its_counts_match_the_pods() {
    let mut c = Cluster::start("monitor", &["node-a", "node-b"]).await;
    c.start_controller();
    c.config_map("policies", &[("ports.wasm", NODE_PORTS)])
        .await;
    // node-a runs two pods on the same host port (each would be refused beside the
    // other) and one on another; node-b one pod without host ports.
    for (name, port) in [
        ("web-1", Some(8080)),
        ("web-2", Some(8080)),
        ("api", Some(9090)),
    ] {
        c.nodes[0].run(pod(name, port));
    }
    c.nodes[1].run(pod("batch", None));

    c.apply(ports_policy("Monitor")).await;
    c.wait_status("ports", 1, &[("node-a", "Loaded"), ("node-b", "Loaded")])
        .await;
    let refused = |pod: &str| {
        json!({"nodeName": "node-a", "pod": pod, "reason": "NodePorts",
               "message": "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"})
    };
    let audit = json!({"nodes": 2, "pods": 4, "wouldReject": 2,
                       "rejected": [refused("team/web-1"), refused("team/web-2")]});
    c.wait_summary(
        "ports",
        json!({"serving": 2, "wouldReject": 0, "audit": audit}),
    )
    .await;
    let entries = c.entries("ports");
    let (a, b) = (&entries[0], &entries[1]);
    assert_eq!(a["audit"]["digest"], digest_of(NODE_PORTS));
    assert_eq!(
        (&a["audit"]["pods"], &a["audit"]["wouldReject"]),
        (&json!(3), &json!(2))
    );
    assert_eq!(
        (&b["audit"]["pods"], &b["audit"]["wouldReject"]),
        (&json!(1), &json!(0))
    );
    assert_eq!(
        (&a["wouldReject"], &b["wouldReject"]),
        (&json!(0), &json!(0))
    );
    let node_a = c
        .api
        .get("apis/wasmlet.dev/v1alpha1", "wasmletnodes", "", "node-a")
        .expect("node-a's WasmletNode");
    assert_eq!(
        node_a["status"]["wouldReject"], 2,
        "the WasmletNode's column"
    );
    // The audit touched nothing, and said so once, on node-a only.
    assert_eq!(c.nodes[0].admitted.len(), 3);
    let told: Vec<(String, String)> = c.nodes[0]
        .events
        .events()
        .into_iter()
        .filter(|e| e.reason == "PodsWouldBeRejected")
        .map(|e| (e.reason, e.message))
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0].1.starts_with(&format!(
            "{} would reject 2 of the 3 pods running on node-a: team/web-1 (NodePorts: ",
            digest_of(NODE_PORTS)
        )),
        "{told:?}"
    );
    assert!(
        c.nodes[1]
            .events
            .events()
            .iter()
            .all(|e| e.reason != "PodsWouldBeRejected")
    );

    // New pods on the taken port are admitted, and counted.
    for name in ["web-3", "web-4"] {
        let decision = c.nodes[0].admit(pod(name, Some(8080))).await;
        assert!(matches!(
            decision.verdict,
            wasmlet_plugin_host::Verdict::Admit
        ));
        assert_eq!(decision.monitored.len(), 1);
        assert_eq!(decision.monitored[0].rejection.reason, "NodePorts");
    }
    assert!(matches!(
        c.nodes[0].admit(pod("free", Some(7070))).await.verdict,
        wasmlet_plugin_host::Verdict::Admit
    ));
    c.wait_summary("ports", json!({"wouldReject": 2})).await;
    assert_eq!(c.entries("ports")[0]["wouldReject"], 2);

    // Enforced: the same check rejects, the count goes, the new generation is audited.
    c.apply(ports_policy("Enforce")).await;
    c.wait_status("ports", 2, &[("node-a", "Loaded"), ("node-b", "Loaded")])
        .await;
    c.wait_summary(
        "ports",
        json!({"observedGeneration": 2, "serving": 2, "audit": audit}),
    )
    .await;
    let status = c.object("ports")["status"].clone();
    assert!(status.get("wouldReject").is_none(), "{status}");
    assert!(
        c.entries("ports")
            .iter()
            .all(|e| e.get("wouldReject").is_none())
    );
    let decision = c.nodes[0].admit(pod("web-5", Some(8080))).await;
    match decision.verdict {
        wasmlet_plugin_host::Verdict::Reject(r) => assert_eq!(r.reason, "NodePorts"),
        wasmlet_plugin_host::Verdict::Admit => panic!("admitted under Enforce"),
    }
    assert_eq!(decision.by.as_deref(), Some("ports"));
}
