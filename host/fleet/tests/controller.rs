//! `wasmlet controller` on the API server double: moving a cluster whose nodes still
//! write entries into the WasmletPlugins (`status.nodes`, the old shape) to WasmletNodes
//! one node at a time, with a rollout in the middle, never shows a wrong count; and of
//! two replicas one leads, the other takes over when it goes.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use support::{Cluster, RESTRICTED, digest_of};
use wasmlet_fleet::controller::lease::{Election, Timing};

/// What nodes before WasmletNode wrote: their entry in the plugin's `status.nodes`,
/// under their own field manager, and the summary kept by the first of them by name.
async fn old_node_reports(c: &Cluster, node: &str, generation: i64) {
    let api: Api<DynamicObject> =
        Api::all_with(c.client.clone(), &wasmlet_fleet::object::api_resource());
    let body = json!({"apiVersion": "wasmlet.dev/v1alpha1", "kind": "WasmletPlugin",
        "metadata": {"name": "policy"},
        "status": {"nodes": [{"nodeName": node, "observedGeneration": generation, "state": "Loaded",
                              "digest": digest_of(RESTRICTED), "lastTransitionTime": "2026-11-26T10:00:00Z"}]}});
    api.patch_status(
        "policy",
        &PatchParams::apply(&format!("wasmlet-node/{node}")).force(),
        &Patch::Apply(&body),
    )
    .await
    .expect("an old node's entry");
    let summary = json!({"apiVersion": "wasmlet.dev/v1alpha1", "kind": "WasmletPlugin",
        "metadata": {"name": "policy"},
        "status": {"summary": {"observedGeneration": generation, "nodes": 3, "serving": 3, "verified": 0, "failed": 0, "pending": 0}}});
    api.patch_status(
        "policy",
        &PatchParams::apply("wasmlet-summary").force(),
        &Patch::Apply(&summary),
    )
    .await
    .expect("the old summary");
}

/// Every distinct count the plugin's status showed, recorded in the background.
struct Recorder {
    seen: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    fn start(c: &Cluster) -> Recorder {
        let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
        let api = c.api.clone();
        let task = {
            let seen = seen.clone();
            tokio::spawn(async move {
                loop {
                    let status = api
                        .get("apis/wasmlet.dev/v1alpha1", "wasmletplugins", "", "policy")
                        .map(|o| o["status"].clone())
                        .unwrap_or_default();
                    let counts = json!({
                        "observedGeneration": status["observedGeneration"],
                        "selected": status["selected"], "serving": status["serving"],
                        "failed": status["failed"], "pending": status["pending"],
                    });
                    {
                        let mut seen = seen.lock().expect("seen");
                        if seen.last() != Some(&counts) {
                            seen.push(counts);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
        };
        Recorder { seen, task }
    }

    fn stop(self) -> Vec<Value> {
        self.task.abort();
        self.seen.lock().expect("seen").clone()
    }
}

fn all_serving(generation: i64) -> Value {
    json!({"observedGeneration": generation, "selected": 3, "serving": 3, "failed": 0, "pending": 0})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_move_to_wasmletnodes_one_by_one_without_a_wrong_count() {
    let mut c = Cluster::start("upgrade", &[]).await;
    c.config_map("v1", &[("policy.wasm", RESTRICTED)]).await;
    let names = ["node-a", "node-b", "node-c"];
    for name in names {
        c.create_node(name);
    }
    let spec = json!({"kind": "admission", "digest": digest_of(RESTRICTED),
                      "source": {"configMap": {"name": "v1", "key": "policy.wasm"}}});
    let recorder = Recorder::start(&c);
    c.apply(json!({"metadata": {"name": "policy"}, "spec": spec}))
        .await;
    // Before the upgrade: three old nodes, each with its entry in the plugin.
    for name in names {
        old_node_reports(&c, name, 1).await;
    }
    c.wait_summary("policy", all_serving(1)).await;

    // node-a moves: its WasmletNode says what its entry said, and the entry goes.
    c.add_node("node-a").await;
    c.wait_status("policy", 1, &[("node-a", "Loaded")]).await;
    let only_old = |c: &Cluster, want: &[&str]| {
        let object = c.object("policy");
        let left: Vec<String> = object["status"]["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["nodeName"].as_str().map(str::to_owned))
            .collect();
        left == want
    };
    wait(&c, "node-a's old entry taken out", |c| {
        only_old(c, &["node-b", "node-c"])
    })
    .await;

    // A rollout in the middle: the old nodes report in the plugin, node-a in its own.
    c.apply(json!({"metadata": {"name": "policy"},
                   "spec": {"config": {"round": "2"}, "kind": "admission", "digest": digest_of(RESTRICTED),
                            "source": {"configMap": {"name": "v1", "key": "policy.wasm"}}}}))
        .await;
    for name in ["node-b", "node-c"] {
        old_node_reports(&c, name, 2).await;
    }
    c.wait_status("policy", 2, &[("node-a", "Loaded")]).await;
    c.wait_summary("policy", all_serving(2)).await;

    // The others move; the last entry takes the old summary with it.
    c.add_node("node-b").await;
    c.add_node("node-c").await;
    c.wait_status("policy", 2, &names.map(|n| (n, "Loaded")))
        .await;
    wait(&c, "the old entries and summary gone", |c| {
        let status = &c.object("policy")["status"];
        status.get("nodes").is_none() && status.get("summary").is_none()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(c.object("policy")["status"]["serving"], 3);
    let seen = recorder.stop();
    let counted: Vec<&Value> = seen
        .iter()
        .filter(|s| !s["observedGeneration"].is_null())
        .collect();
    assert_eq!(
        counted,
        [&all_serving(1), &all_serving(2)],
        "every count the status showed: {seen:?}"
    );
}

async fn wait(c: &Cluster, what: &str, done: impl Fn(&Cluster) -> bool) {
    let start = Instant::now();
    while !done(c) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what}: not within 20 s: {}",
            c.object("policy")["status"]
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const FAST: Timing = Timing {
    duration: Duration::from_secs(2),
    renew_deadline: Duration::from_millis(1500),
    retry: Duration::from_millis(100),
};

fn holder(c: &Cluster) -> Option<String> {
    c.api
        .get(
            "apis/coordination.k8s.io/v1",
            "leases",
            "wasmlet-system",
            "election",
        )
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_replicas_one_leads_and_the_other_takes_over() {
    let c = Cluster::start("election", &[]).await;
    let elect =
        |who: &str| Election::new(c.client.clone(), "wasmlet-system", "election", who, FAST);
    let mut a = elect("replica-a");
    let mut b = elect("replica-b");
    a.acquire().await;
    assert_eq!(holder(&c).as_deref(), Some("replica-a"));
    // b waits while a renews.
    let waiting = tokio::spawn(async move {
        b.acquire().await;
        b
    });
    let keeping = tokio::spawn(async move {
        let why = a.keep().await;
        (a, why)
    });
    tokio::time::sleep(FAST.duration * 2).await;
    assert!(!waiting.is_finished(), "b does not take a Lease a renews");
    assert_eq!(holder(&c).as_deref(), Some("replica-a"));

    // a stops renewing (its process gone): b takes over once the Lease lapses.
    keeping.abort();
    let stopped = Instant::now();
    let mut b = waiting.await.expect("b leads");
    let took = stopped.elapsed();
    assert_eq!(holder(&c).as_deref(), Some("replica-b"));
    assert!(
        took >= FAST.duration - FAST.retry && took < FAST.duration * 3,
        "b took over after {took:?}"
    );
    let lease = c
        .api
        .get(
            "apis/coordination.k8s.io/v1",
            "leases",
            "wasmlet-system",
            "election",
        )
        .expect("lease");
    assert_eq!(lease["spec"]["leaseTransitions"], 1);

    // b gives the Lease up on its way out: a third replica takes it at once.
    b.release().await;
    let mut third = elect("replica-c");
    let start = Instant::now();
    third.acquire().await;
    assert!(start.elapsed() < FAST.duration, "{:?}", start.elapsed());
    assert_eq!(holder(&c).as_deref(), Some("replica-c"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_controller_waits_and_counts_once_the_first_is_gone() {
    let mut c = Cluster::start("handover", &["node-a"]).await;
    c.config_map("v1", &[("policy.wasm", RESTRICTED)]).await;
    c.apply(json!({"metadata": {"name": "policy"},
                   "spec": {"kind": "admission", "digest": digest_of(RESTRICTED),
                            "source": {"configMap": {"name": "v1", "key": "policy.wasm"}}}}))
        .await;
    c.wait_summary("policy", json!({"observedGeneration": 1, "serving": 1}))
        .await;
    // The first replica stops (and gives the Lease up); a second one counts the next
    // rollout.
    c.stop_controller();
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.start_controller();
    c.apply(json!({"metadata": {"name": "policy"},
                   "spec": {"config": {"v": "2"}, "kind": "admission", "digest": digest_of(RESTRICTED),
                            "source": {"configMap": {"name": "v1", "key": "policy.wasm"}}}}))
        .await;
    c.wait_summary("policy", json!({"observedGeneration": 2, "serving": 1}))
        .await;
}
