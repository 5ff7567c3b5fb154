//! Cluster plugins from a real OCI registry (Debian's `docker-registry`, htpasswd auth on
//! loopback, started by `scripts/registry.sh`): pushed as `wasmlet plugin push` does,
//! pulled by three nodes with the pull secret the object names, swapped everywhere; a
//! missing secret, a tag that is not there and a registry that does not answer are
//! Failed entries naming the cause while the old version keeps deciding; a registry that
//! hangs never holds up a decision.
//!
//! The registry: `WASMLET_TEST_REGISTRY` (`ADDR USER PASSWORD`, as `cargo xtask test`
//! sets it), else `scripts/registry.sh up` here. Without one the tests say so and pass,
//! unless `WASMLET_REQUIRE_REGISTRY=1` (CI).

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Cluster, DENY_ALL, RESTRICTED, Verdict, bytes, digest_of};

/// A component no node fetches before the faults.
const COUNTER: &str = "fixture_counter";

async fn push(addr: &str, user: &str, password: &str, repo: &str, plugin: &str) -> String {
    let reference = format!("oci://{addr}/{repo}");
    let pushed = wasmlet_fleet::publish::push(
        &bytes(plugin),
        &reference,
        true,
        Some((user.to_owned(), password.to_owned())),
        Some("wasmlet:plugin/admission-policy@0.1.0"),
    )
    .await
    .expect("push");
    assert_eq!(
        pushed.digest,
        digest_of(plugin),
        "the pin is the component's sha256"
    );
    reference
}

fn oci(reference: &str, plugin: &str, secret: Option<&str>) -> Value {
    let mut source = json!({"reference": reference, "insecure": true});
    if let Some(s) = secret {
        source["pullSecret"] = s.into();
    }
    json!({"kind": "admission", "digest": digest_of(plugin), "source": {"oci": source}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_pushed_to_a_registry_roll_out_to_every_node() {
    let Some((addr, user, password)) = wasmlet_fleet::dev::registry() else {
        return;
    };
    let c = Cluster::start("registry", &["node-a", "node-b", "node-c"]).await;
    let run = std::process::id();
    let v1 = push(
        &addr,
        &user,
        &password,
        &format!("wasmlet-test/policy-{run}:v1"),
        RESTRICTED,
    )
    .await;
    let v2 = push(
        &addr,
        &user,
        &password,
        &format!("wasmlet-test/policy-{run}:v2"),
        DENY_ALL,
    )
    .await;
    // What the faults below pin: a component no node has (nodes keep what they fetched
    // by digest, and would serve it from there without asking the registry).
    let v3 = push(
        &addr,
        &user,
        &password,
        &format!("wasmlet-test/policy-{run}:v3"),
        COUNTER,
    )
    .await;
    support::pull_secret(&c, &addr, &user, &password);
    let all = |state| [("node-a", state), ("node-b", state), ("node-c", state)];

    c.apply(
        json!({"metadata": {"name": "policy"}, "spec": oci(&v1, RESTRICTED, Some("registry"))}),
    )
    .await;
    c.wait_status("policy", 1, &all("Loaded")).await;
    for n in &c.nodes {
        assert_eq!(n.decide().await, Verdict::Admitted);
    }
    c.apply(json!({"metadata": {"name": "policy"}, "spec": oci(&v2, DENY_ALL, Some("registry"))}))
        .await;
    c.wait_status("policy", 2, &all("Loaded")).await;
    for n in &c.nodes {
        assert_eq!(n.decide().await, Verdict::Rejected("DeniedByPolicy".into()));
    }

    // Each fault: every node Failed with the cause, deny-all still deciding.
    let _ = v1;
    let missing = format!("oci://{addr}/wasmlet-test/policy-{run}:nope");
    let faults = [
        (oci(&v3, COUNTER, None), "Not authorized"),
        (oci(&missing, COUNTER, Some("registry")), "manifest unknown"),
        (
            oci("oci://127.0.0.1:1/wasmlet-test/policy:v1", COUNTER, None),
            "oci://127.0.0.1:1/wasmlet-test/policy:v1: ",
        ),
        (
            oci(&v3, COUNTER, Some("absent")),
            "pull secret wasmlet-system/absent: the Secret does not exist",
        ),
    ];
    for (generation, (spec, cause)) in (3..).zip(faults) {
        c.apply(json!({"metadata": {"name": "policy"}, "spec": spec}))
            .await;
        c.wait_status("policy", generation, &all("Failed")).await;
        for entry in c.entries("policy") {
            let message = entry["message"].as_str().unwrap_or_default();
            assert!(
                message.contains(cause),
                "generation {generation}: {message}"
            );
            assert_eq!(entry["digest"], digest_of(DENY_ALL));
        }
        for n in &c.nodes {
            assert_eq!(n.decide().await, Verdict::Rejected("DeniedByPolicy".into()));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_hangs_never_holds_up_a_decision() {
    // A "registry" that accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let _hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let c = Cluster::start("hang", &["node-a"]).await;
    c.config_map("policies", &[("deny.wasm", DENY_ALL)]).await;
    c.apply(json!({"metadata": {"name": "policy"}, "spec": {
        "kind": "admission", "digest": digest_of(DENY_ALL),
        "source": {"configMap": {"name": "policies", "key": "deny.wasm"}}}}))
        .await;
    c.wait_status("policy", 1, &[("node-a", "Loaded")]).await;
    c.apply(json!({"metadata": {"name": "policy"},
                   "spec": oci(&format!("oci://{addr}/p:v1"), RESTRICTED, None)}))
        .await;
    // Pending once the load has taken a while; decisions come from deny-all meanwhile.
    c.wait_status("policy", 2, &[("node-a", "Pending")]).await;
    let start = Instant::now();
    for _ in 0..20 {
        assert_eq!(
            c.nodes[0].decide().await,
            Verdict::Rejected("DeniedByPolicy".into())
        );
    }
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "decisions wait for nothing: {:?}",
        start.elapsed()
    );
    // Back to the ConfigMap version: the hanging load is dropped, Loaded again.
    c.apply(json!({"metadata": {"name": "policy"}, "spec": {
        "kind": "admission", "digest": digest_of(DENY_ALL),
        "source": {"configMap": {"name": "policies", "key": "deny.wasm"}}}}))
        .await;
    c.wait_status("policy", 3, &[("node-a", "Loaded")]).await;
}
