//! One policy, three languages: `restricted-pods` in Rust, then in Python, then in
//! TypeScript, pushed to a real registry as `wasmlet plugin push` pushes it and rolled out
//! with one apply each. Every node swaps while decisions keep coming, and decides alike
//! after each swap, word for word.
//!
//! Needs the registry (`registry.rs` says how) and the Python and JavaScript toolchains
//! (`scripts/plugin-toolchains.sh`); without them the test says so and passes, unless CI
//! requires them.

mod support;

use serde_json::{Value, json};
use support::{Cluster, RESTRICTED, Verdict, bytes};
use wasmlet_plugin_host::dev::{lang_plugin_named, lang_toolchains};

fn privileged() -> Value {
    json!({
        "metadata": {"name": "tools", "namespace": "shop", "uid": "u2"},
        "spec": {
            "hostPID": true,
            "containers": [{"name": "sh", "image": "busybox", "securityContext": {"privileged": true}}],
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_moves_from_rust_to_python_to_typescript_with_one_apply_each() {
    let Some((addr, user, password)) = wasmlet_fleet::dev::registry() else {
        return;
    };
    if lang_toolchains().is_none() {
        return;
    }
    let lang = |name: &str| std::fs::read(lang_plugin_named(name)).expect("component");
    let versions = [
        ("rust", bytes(RESTRICTED)),
        ("python", lang("restricted-pods-python")),
        ("typescript", lang("restricted-pods-js")),
    ];
    let c = Cluster::start("languages", &["node-a", "node-b"]).await;
    let nodes: Vec<(&str, &str)> = c
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), "Loaded"))
        .collect();
    support::pull_secret(&c, &addr, &user, &password);
    let run = std::process::id();
    let mut deciding = None;
    for (generation, (lang, wasm)) in (1..).zip(&versions) {
        c.precompile(wasm);
        let reference = format!("oci://{addr}/wasmlet-test/restricted-{run}:{lang}");
        let pushed = wasmlet_fleet::publish::push(
            wasm,
            &reference,
            true,
            Some((user.clone(), password.clone())),
            Some("wasmlet:plugin/admission-policy@0.1.0"),
        )
        .await
        .expect("push");
        c.apply(json!({"metadata": {"name": "restricted"}, "spec": {
            "kind": "admission", "digest": pushed.digest,
            "source": {"oci": {"reference": reference, "insecure": true, "pullSecret": "registry"}}}}))
            .await;
        c.wait_status("restricted", generation, &nodes).await;
        for n in &c.nodes {
            assert_eq!(n.decide().await, Verdict::Admitted, "{lang} on {}", n.name);
            let wasmlet_plugin_host::Verdict::Reject(r) = n.verdict(privileged()).await else {
                panic!("{lang} on {}: the privileged pod was admitted", n.name);
            };
            assert_eq!(
                (r.reason.as_str(), r.message.as_str()),
                (
                    "RestrictedPod",
                    "container sh is privileged, which namespace shop does not allow"
                ),
                "{lang} on {}",
                n.name
            );
        }
        // From the first swap on, decisions run through every later one.
        deciding.get_or_insert_with(|| c.decide_continuously());
    }
    let counts = deciding.expect("deciding").stop().await;
    assert!(counts.decided > 0);
    assert_eq!(
        counts.failed, 0,
        "no decision failed during the swaps: {counts:?}"
    );
}
