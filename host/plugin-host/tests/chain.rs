//! The admission chain: hot swap under load, refused replacements, failure policies.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::{node, plugin};
use wasmlet_plugin_host::*;

/// Runs the chain on pod `web` with nothing else on the node.
async fn admit_web(chain: &AdmissionChain) -> (Verdict, Option<String>) {
    chain
        .admit(&common::admission(
            &common::pod(Vec::new()),
            &node(),
            &common::usage(&[]),
        ))
        .await
}

fn reason(v: &Verdict) -> &str {
    match v {
        Verdict::Admit => "Admit",
        Verdict::Reject(r) => &r.reason,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_swap_under_load_fails_no_call_and_takes_effect_at_once() {
    let chain = Arc::new(AdmissionChain::new(PluginEngine::new().expect("engine")));
    chain
        .push(
            "policy",
            &plugin("node-ports"),
            BTreeMap::new(),
            Limits::default(),
            FailurePolicy::Fail,
        )
        .expect("load");
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..2 {
        let (chain, stop) = (chain.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let (verdict, _) = admit_web(&chain).await;
                seen.push(reason(&verdict).to_owned());
                // A guest call completes without yielding to the runtime; let the test's
                // own task run between calls.
                tokio::task::yield_now().await;
            }
            seen
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let new = chain
        .replace("policy", Some(&plugin("fixture-deny-all")))
        .await
        .expect("swap");
    let (verdict, by) = admit_web(&chain).await;
    assert_eq!(
        reason(&verdict),
        "DeniedByPolicy",
        "the new decision right after the swap"
    );
    assert_eq!(by.as_deref(), Some("policy"));
    assert_eq!(
        chain.current("policy").map(|p| p.digest().to_owned()),
        Some(new.digest().to_owned())
    );

    // A broken replacement is refused; deny-all keeps serving.
    let bogus = std::env::temp_dir().join(format!("wasmlet-bogus-{}.wasm", std::process::id()));
    std::fs::write(&bogus, b"not a component").expect("write");
    let err = chain
        .replace("policy", Some(&bogus))
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("cannot load"), "{err}");
    assert!(matches!(
        chain.replace("nope", None).await,
        Err(ReplaceError::Unknown(_))
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let _ = std::fs::remove_file(&bogus);

    for worker in workers {
        let seen = worker.await.expect("worker");
        assert!(seen.len() > 10, "only {} calls", seen.len());
        assert!(
            !seen.iter().any(|r| r == chain::PLUGIN_ERROR_REASON),
            "a call failed during the swap"
        );
        // Admit until the swap, DeniedByPolicy after it, never back.
        let flip = seen
            .iter()
            .position(|r| r == "DeniedByPolicy")
            .expect("the swap took effect");
        assert!(seen[..flip].iter().all(|r| r == "Admit"), "{seen:?}");
        assert!(
            seen[flip..].iter().all(|r| r == "DeniedByPolicy"),
            "{seen:?}"
        );
    }
}

#[tokio::test]
async fn failure_policy_decides_what_a_failing_plugin_means() {
    let limits = Limits {
        deadline: Duration::from_millis(100),
        memory_bytes: 16 << 20,
        ..Limits::default()
    };
    let chain = AdmissionChain::new(PluginEngine::new().expect("engine"));
    chain
        .push(
            "spin",
            &plugin("fixture-spin"),
            BTreeMap::new(),
            limits.clone(),
            FailurePolicy::Ignore,
        )
        .expect("load");
    chain
        .push(
            "ports",
            &plugin("node-ports"),
            BTreeMap::new(),
            limits.clone(),
            FailurePolicy::Fail,
        )
        .expect("load");
    assert_eq!(chain.names(), ["spin", "ports"]);
    let (verdict, _) = admit_web(&chain).await;
    assert!(
        matches!(verdict, Verdict::Admit),
        "an ignored failure does not decide"
    );

    chain
        .push(
            "spin",
            &plugin("fixture-spin"),
            BTreeMap::new(),
            limits,
            FailurePolicy::Fail,
        )
        .expect("reload");
    assert_eq!(chain.names(), ["ports", "spin"]);
    let (verdict, by) = admit_web(&chain).await;
    let Verdict::Reject(r) = verdict else {
        panic!("a failing plugin with policy Fail must reject")
    };
    assert_eq!(r.reason, chain::PLUGIN_ERROR_REASON);
    assert_eq!(
        r.message,
        "plugin spin: admit exceeded its deadline of 100ms"
    );
    assert_eq!(by.as_deref(), Some("spin"));
    assert!(chain.remove("spin"));
    assert!(!chain.remove("spin"));
    assert!(matches!(admit_web(&chain).await.0, Verdict::Admit));
}

/// Runs `chain` on pod `web`, counting in `made` how often its JSON is made.
async fn admit_counting_json(chain: &AdmissionChain, made: &Arc<AtomicUsize>) -> Verdict {
    let made = made.clone();
    let admission = Admission::new(
        common::pod(Vec::new()),
        node(),
        common::usage(&[]),
        move || {
            made.fetch_add(1, Ordering::Relaxed);
            r#"{"spec":{"containers":[{"name":"app"}]}}"#.to_owned()
        },
    );
    chain.admit(&admission).await.0
}

#[tokio::test]
async fn the_pods_json_is_made_once_for_a_chain_and_only_if_a_policy_asks() {
    let chain = AdmissionChain::new(PluginEngine::new().expect("engine"));
    let push = |name: &str, file: &str| {
        chain
            .push(
                name,
                &plugin(file),
                BTreeMap::new(),
                Limits::default(),
                FailurePolicy::Fail,
            )
            .expect("load");
    };
    let made = Arc::new(AtomicUsize::new(0));
    // No link reads the JSON: it is never made.
    push("affinity", "node-affinity");
    push("taints", "taint-toleration");
    push("ports", "node-ports");
    let verdict = admit_counting_json(&chain, &made).await;
    assert!(matches!(verdict, Verdict::Admit), "{verdict:?}");
    assert_eq!(made.load(Ordering::Relaxed), 0);
    // Two links read it (restricted-pods, under two names; namespace default is not
    // exempt, so both look for hostPID): made once, for the first.
    push("restricted", "restricted-pods");
    push("restricted-again", "restricted-pods");
    let verdict = admit_counting_json(&chain, &made).await;
    assert!(matches!(verdict, Verdict::Admit), "{verdict:?}");
    assert_eq!(made.load(Ordering::Relaxed), 1);
}

/// A link in `mode` serving `file`, with the defaults otherwise.
fn link(file: &str, mode: chain::Mode) -> chain::LinkSpec {
    chain::LinkSpec {
        path: plugin(file),
        config: BTreeMap::new(),
        limits: Limits {
            deadline: Duration::from_millis(100),
            ..Limits::default()
        },
        failure_policy: FailurePolicy::Fail,
        mode,
    }
}

#[tokio::test]
async fn a_policy_in_monitor_mode_decides_but_admits_and_says_what_it_would_reject() {
    let engine = PluginEngine::new().expect("engine");
    let chain = AdmissionChain::new(engine.clone());
    for (name, file) in [("deny", "fixture-deny-all"), ("spin", "fixture-spin")] {
        chain
            .install(name, link(file, chain::Mode::Monitor))
            .await
            .expect("load");
    }
    let admission = common::admission(&common::pod(Vec::new()), &node(), &common::usage(&[]));
    let decision = chain.decide(&admission).await;
    assert!(matches!(decision.verdict, Verdict::Admit), "{decision:?}");
    assert_eq!(decision.by, None);
    let would: Vec<(&str, &str)> = decision
        .monitored
        .iter()
        .map(|w| (w.plugin.as_str(), w.rejection.reason.as_str()))
        .collect();
    // Both would have rejected: deny-all by its verdict, spin by running out of time
    // (its failure policy is Fail).
    assert_eq!(
        would,
        [
            ("deny", "DeniedByPolicy"),
            ("spin", chain::PLUGIN_ERROR_REASON)
        ]
    );
    let mut registry = prometheus_client::registry::Registry::default();
    engine.metrics().register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    assert!(
        text.contains(
            "wasmlet_plugin_monitored_rejections_total{plugin=\"deny\",reason=\"DeniedByPolicy\"} 1"
        ),
        "{text}"
    );

    // Enforced, the same policy rejects; a monitored one before it is still reported.
    chain
        .install("deny", link("fixture-deny-all", chain::Mode::Enforce))
        .await
        .expect("switch to Enforce");
    chain.remove("spin");
    chain
        .install("watch", link("fixture-deny-all", chain::Mode::Monitor))
        .await
        .expect("load");
    chain.set_order(vec!["watch".into(), "deny".into()]);
    let decision = chain.decide(&admission).await;
    assert_eq!(reason(&decision.verdict), "DeniedByPolicy");
    assert_eq!(decision.by.as_deref(), Some("deny"));
    assert_eq!(decision.monitored.len(), 1);
    assert_eq!(decision.monitored[0].plugin, "watch");
}

/// Pod `name` in `team` (UID `uid-NAME`), with a container on host port `port`, if any.
fn admitted_pod(name: &str, port: Option<i32>) -> (Arc<Pod>, Arc<k8s_openapi::api::core::v1::Pod>) {
    let mut container = serde_json::json!({"name": "app", "image": "busybox"});
    if let Some(port) = port {
        container["ports"] = serde_json::json!([{"containerPort": 80, "hostPort": port}]);
    }
    let whole: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "team", "uid": format!("uid-{name}")},
        "spec": {"containers": [container]},
    }))
    .expect("pod");
    let pod = convert::pod(&whole, "api").expect("converted");
    (Arc::new(pod), Arc::new(whole))
}

#[tokio::test]
async fn an_audit_asks_one_policy_about_each_running_pod_beside_the_others() {
    let engine = PluginEngine::new().expect("engine");
    let chain = AdmissionChain::new(engine.clone());
    chain
        .install("ports", link("node-ports", chain::Mode::Monitor))
        .await
        .expect("load");
    chain
        .install("deny", link("fixture-deny-all", chain::Mode::Enforce))
        .await
        .expect("load");
    // a and b hold the same host port: each would be refused beside the other; c holds
    // another, d none.
    let admitted = Admitted::default();
    for (name, port) in [
        ("a", Some(8080)),
        ("b", Some(8080)),
        ("c", Some(9090)),
        ("d", None),
    ] {
        let (pod, whole) = admitted_pod(name, port);
        admitted.insert(&format!("uid-{name}"), pod, whole);
    }
    let pods = admitted.admissions(&Arc::new(node()));
    let audit = chain.audit("ports", &pods).await.expect("a link");
    assert_eq!((audit.pods, audit.would_reject), (4, 2), "{audit:?}");
    let named: Vec<(&str, &str)> = audit
        .rejected
        .iter()
        .map(|p| (p.pod.as_str(), p.reason.as_str()))
        .collect();
    assert_eq!(named, [("team/a", "NodePorts"), ("team/b", "NodePorts")]);
    // Only the link asked answers: deny-all (enforcing, later in the chain) had no say
    // in the ports audit; asked itself, it would reject all four.
    assert_eq!(
        chain.audit("deny", &pods).await.map(|a| a.would_reject),
        Some(4)
    );
    assert!(chain.audit("absent", &pods).await.is_none());
    // An audit is no admission: nothing counted as monitored.
    assert_eq!(chain.would_reject("ports"), Some(0));

    // Admissions in Monitor mode are counted per serving version.
    let (e, _) = admitted_pod("e", Some(8080));
    let beside_a = common::admission(&e, &node(), &admitted.load());
    chain.remove("deny");
    for _ in 0..3 {
        assert!(matches!(
            chain.decide(&beside_a).await.verdict,
            Verdict::Admit
        ));
    }
    assert_eq!(chain.would_reject("ports"), Some(3));
    chain.replace("ports", None).await.expect("a new version");
    assert_eq!(
        chain.would_reject("ports"),
        Some(0),
        "counted from when it serves"
    );
    assert_eq!(chain.would_reject("absent"), None);
}
