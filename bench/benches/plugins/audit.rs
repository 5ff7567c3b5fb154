//! What rolling a policy out costs a node: the new version is asked about every pod the
//! node runs, each beside the others ([`AdmissionChain::audit`]), once per version.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as k8s;
use wasmlet_bench::{Budget, row, time_async};
use wasmlet_plugin_host::dev::shipped_plugin;
use wasmlet_plugin_host::*;

/// Pod `i` of a node's 110 as the API server sends it: one container with requests, a
/// host port on every tenth, a privileged one on every twentieth.
fn whole_pod(i: usize) -> k8s::Pod {
    let mut container = serde_json::json!({
        "name": "app", "image": "registry.example/app:1.2.3",
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    });
    if i.is_multiple_of(10) {
        container["ports"] = serde_json::json!([{"containerPort": 8080, "hostPort": 30_000 + i}]);
    }
    if i.is_multiple_of(20) {
        container["securityContext"] = serde_json::json!({"privileged": true});
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("pod-{i}"), "namespace": "team", "uid": format!("uid-{i}")},
        "spec": {"containers": [container]},
    }))
    .expect("pod")
}

/// An audit of 110 running pods by node-ports (typed fields only) and by
/// restricted-pods (each pod's JSON made and read), warm instances.
pub async fn audits(engine: &PluginEngine, node: &Arc<Node>) {
    let admitted = Admitted::default();
    for i in 0..110 {
        let whole = whole_pod(i);
        let pod = convert::pod(&whole, "api").expect("converted");
        admitted.insert(&format!("uid-{i}"), Arc::new(pod), Arc::new(whole));
    }
    for (name, would_reject) in [("node-ports", 0), ("restricted-pods", 6)] {
        let chain = AdmissionChain::new(engine.clone());
        chain
            .push(
                name,
                &shipped_plugin(name),
                BTreeMap::new(),
                Limits::default(),
                FailurePolicy::Fail,
            )
            .expect("load");
        let s = time_async(Budget::from_args(200), || async {
            let asked = admitted.admissions(node);
            let audit = chain.audit(name, &asked).await.expect("a link");
            assert_eq!((audit.pods, audit.would_reject), (110, would_reject));
        })
        .await;
        row(&format!("an audit of the 110 running pods by {name}"), &s);
    }
}
