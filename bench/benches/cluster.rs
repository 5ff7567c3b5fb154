//! Cluster mode: the agent (on the in-process CRI simulator) joined to the API server
//! double over loopback HTTP, with the kubelet's default client limits (kubeAPIQPS 50,
//! kubeAPIBurst 100).
//!
//! - A burst of pods bound to the node, created at once: for each, the time from its
//!   creation (it is in the watch) to the API server storing a status that says
//!   Running. Fresh API server, agent and simulator each round.
//! - The API requests one pod's life costs, from creation to the object gone after a
//!   graceful delete, by kind of request, averaged over a batch.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use wasmlet_agent::agent::{Agent, AgentOptions};
use wasmlet_agent::node::NodeFacts;
use wasmlet_apiserver_sim::{ApiServerSim, Served};
use wasmlet_bench::{NoProbes, Samples};
use wasmlet_cri_sim::Simulator;

/// Where the agents keep pod directories: `$WASMLET_BENCH_DIR`, else /dev/shm (the
/// simulator keeps nothing on disk either; on this machine's ext4 a `mkdir` takes
/// ~0.6 ms after many files were deleted, and four per pod would be most of the
/// measurement).
fn base_dir() -> PathBuf {
    std::env::var_os("WASMLET_BENCH_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            let shm = PathBuf::from("/dev/shm");
            shm.is_dir().then_some(shm)
        })
        .unwrap_or_else(std::env::temp_dir)
}

/// This run's directory.
fn bench_dir() -> PathBuf {
    base_dir().join(format!("wasmlet-bench-cluster-{}", std::process::id()))
}

fn smoke() -> bool {
    std::env::args().any(|a| a == "--smoke")
}

/// An agent joined to a fresh double.
struct Joined {
    api: ApiServerSim,
    served: Served,
    agent: Arc<Agent<Simulator>>,
    stop: tokio::sync::watch::Sender<bool>,
    node: String,
    events: Arc<wasmlet_cluster::events::EventStats>,
}

impl Joined {
    async fn start(round: usize) -> Joined {
        // A directory of its own per run and round, removed at the end of the whole run:
        // ext4 makes directories slowly right after many were deleted, which would
        // measure the benchmark's own clean-up.
        let dir = bench_dir().join(format!("round-{round}"));
        std::fs::create_dir_all(&dir).expect("dir");
        let api = ApiServerSim::new();
        let served = api
            .serve("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("serve");
        let kubeconfig = dir.join("kubeconfig");
        wasmlet_apiserver_sim::write_kubeconfig(&kubeconfig, &served.url()).expect("kubeconfig");
        let client = wasmlet_cluster::connect::client(&kubeconfig)
            .await
            .expect("client");
        let node = "bench-node".to_string();
        let facts = NodeFacts {
            max_pods: 1000,
            ..NodeFacts::read(Some(&node), Some("192.168.70.10"), &dir, 1000)
        };
        let (recorder, events) = wasmlet_cluster::events::ApiRecorder::new();
        let event_stats = recorder.stats();
        let agent = Arc::new(Agent::start(
            Arc::new(Simulator::new()),
            AgentOptions {
                node: facts.clone(),
                pod_logs_dir: dir.join("logs"),
                root_dir: dir.join("root"),
                resolv_conf: PathBuf::from("/etc/resolv.conf"),
                sync_frequency: Duration::from_secs(60),
                relist_period: Duration::from_secs(1),
                sources: vec!["api".into()],
                pod_cgroups: None,
                events: Some(recorder),
                volumes: None,
                services: None,
                cluster_dns: Default::default(),
            },
            Arc::new(NoProbes),
            None,
            None,
        ));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let ready = agent.clone();
        let state = {
            let agent = agent.clone();
            move || wasmlet_cluster::node::NodeState {
                not_ready: agent.readiness().err(),
                runtime_version: "sim://1".into(),
                port: 10250,
            }
        };
        wasmlet_cluster::start(
            wasmlet_cluster::Cluster {
                client,
                facts,
                taints: Vec::new(),
                timing: Default::default(),
                statuses: agent.ctx.statuses.clone(),
                sources: agent.sources(),
                sources_ready: Arc::new(move || ready.sources_ready()),
                events: Some(events),
                limits: wasmlet_cluster::Limits::default(),
            },
            state,
            stopped,
        );
        // Registered and Ready before the burst.
        let started = Instant::now();
        while !api.get("api/v1", "nodes", "", &node).is_some_and(|n| {
            n["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        }) {
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "node not Ready"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Joined {
            api,
            served,
            agent,
            stop,
            node,
            events: event_stats,
        }
    }

    fn pod(&self, name: &str) -> serde_json::Value {
        self.pod_in("default", name)
    }

    fn pod_in(&self, ns: &str, name: &str) -> serde_json::Value {
        json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"nodeName": self.node, "terminationGracePeriodSeconds": 5,
                "containers": [{"name": "c", "image": "localhost/busybox:latest",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]}]}
        })
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        self.agent.shutdown().await;
        self.served.stop();
    }
}

/// One burst of `n` pods: each pod's time from creation to Running stored, and the
/// time until all are.
async fn burst(round: usize, n: usize) -> (Vec<Duration>, Duration) {
    let j = Joined::start(round).await;
    let mut changes = j.api.subscribe();
    let mut created: HashMap<String, Instant> = HashMap::new();
    let begun = Instant::now();
    for i in 0..n {
        let name = format!("burst-{i}");
        created.insert(name.clone(), Instant::now());
        j.api
            .create("api/v1", "pods", j.pod(&name))
            .expect("create");
    }
    let mut took = Vec::new();
    let mut done = std::collections::HashSet::new();
    let mut all = Duration::ZERO;
    while done.len() < n {
        let change = tokio::time::timeout(Duration::from_secs(30), changes.recv())
            .await
            .expect("every pod Running within 30 s")
            .expect("changes");
        if change.resource != "pods"
            || change.object["status"]["phase"] != "Running"
            || done.contains(&change.name)
        {
            continue;
        }
        if let Some(at) = created.get(&change.name) {
            took.push(at.elapsed());
            done.insert(change.name.clone());
            all = begun.elapsed();
        }
    }
    j.stop().await;
    (took, all)
}

/// `n` pods in `default` and `n` in a namespace deleted right after they were made:
/// for each pod in `default`, the time from its status saying Running being stored to
/// its `Started` event being stored; and what happened to the other namespace's events.
async fn started_events(round: usize, n: usize) -> (Vec<Duration>, u64, u64) {
    let j = Joined::start(200 + round).await;
    let mut changes = j.api.subscribe();
    for i in 0..n {
        j.api
            .create("api/v1", "pods", j.pod_in("doomed", &format!("doomed-{i}")))
            .expect("create");
        j.api
            .create("api/v1", "pods", j.pod(&format!("live-{i}")))
            .expect("create");
    }
    j.api.delete_namespace("doomed");
    let mut running: HashMap<String, Instant> = HashMap::new();
    let mut started: HashMap<String, Instant> = HashMap::new();
    while started.len() < n || running.len() < n {
        let change = tokio::time::timeout(Duration::from_secs(30), changes.recv())
            .await
            .expect("every Started event within 30 s")
            .expect("changes");
        if change.namespace != "default" {
            continue;
        }
        match change.resource.as_str() {
            "pods" if change.object["status"]["phase"] == "Running" => {
                running.entry(change.name).or_insert_with(Instant::now);
            }
            "events" if change.object["reason"] == "Started" => {
                if let Some(pod) = change.object["involvedObject"]["name"].as_str() {
                    started.entry(pod.to_owned()).or_insert_with(Instant::now);
                }
            }
            _ => {}
        }
    }
    let took = started
        .iter()
        .filter_map(|(pod, at)| running.get(pod).map(|r| at.saturating_duration_since(*r)))
        .collect();
    let (written, rejected) = (j.events.written(), j.events.dropped("rejected"));
    j.stop().await;
    (took, written, rejected)
}

/// The requests a batch of `n` pods costs from creation to gone, per pod, by kind.
async fn lifecycle(n: usize) -> BTreeMap<String, f64> {
    let j = Joined::start(100).await;
    // Let registration settle, then count only what the pods cost.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = j.api.requests().len();
    for i in 0..n {
        j.api
            .create("api/v1", "pods", j.pod(&format!("life-{i}")))
            .expect("create");
    }
    let running = |name: &str| {
        j.api
            .get("api/v1", "pods", "default", name)
            .is_some_and(|p| p["status"]["phase"] == "Running")
    };
    let started = Instant::now();
    while !(0..n).all(|i| running(&format!("life-{i}"))) {
        assert!(started.elapsed() < Duration::from_secs(30), "not Running");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Events are written after the fact: let them land before deleting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..n {
        j.api
            .delete("api/v1", "pods", "default", &format!("life-{i}"), json!({}))
            .expect("delete");
    }
    let started = Instant::now();
    while (0..n).any(|i| {
        j.api
            .get("api/v1", "pods", "default", &format!("life-{i}"))
            .is_some()
    }) {
        assert!(started.elapsed() < Duration::from_secs(30), "not deleted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut counts: BTreeMap<String, f64> = BTreeMap::new();
    for (method, path) in &j.api.requests()[before..] {
        let kind = if path.contains("/leases/") || path.contains("/nodes/") {
            continue;
        } else if path.ends_with("/status") {
            format!("{method} pods/status")
        } else if path.contains("/events") {
            format!("{method} events")
        } else if path.contains("/pods/") {
            format!("{method} pods/NAME")
        } else {
            format!("{method} {path}")
        };
        *counts.entry(kind).or_default() += 1.0 / n as f64;
    }
    j.stop().await;
    counts
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    let (n, rounds) = if smoke() { (10, 1) } else { (100, 5) };
    println!(
        "## Cluster mode: a burst of {n} bound pods, creation → status Running stored ({rounds} rounds; pod directories in {})\n",
        base_dir().display()
    );
    println!("| round | p50 | p99 | max | all {n} Running stored |");
    println!("|---|---|---|---|---|");
    let mut every = Vec::new();
    for round in 0..rounds {
        let (took, all) = burst(round, n).await;
        let s = Samples::new(took.clone());
        println!(
            "| {} | {} | {} | {} | {} |",
            round + 1,
            ms(s.percentile(50.0)),
            ms(s.percentile(99.0)),
            ms(s.percentile(100.0)),
            ms(all)
        );
        every.extend(took);
    }
    let s = Samples::new(every);
    println!(
        "| all | {} | {} | {} | |",
        ms(s.percentile(50.0)),
        ms(s.percentile(99.0)),
        ms(s.percentile(100.0))
    );

    println!(
        "\n## Started events with a namespace deleted under {n} of {} pods (status Running stored → Started event stored, pods in the living namespace)\n",
        2 * n
    );
    println!("| round | p50 | p99 | max | events stored | events rejected (not retried) |");
    println!("|---|---|---|---|---|---|");
    for round in 0..rounds.min(3) {
        let (took, written, rejected) = started_events(round, n).await;
        let s = Samples::new(took);
        println!(
            "| {} | {} | {} | {} | {written} | {rejected} |",
            round + 1,
            ms(s.percentile(50.0)),
            ms(s.percentile(99.0)),
            ms(s.percentile(100.0)),
        );
    }

    let batch = if smoke() { 2 } else { 20 };
    println!(
        "\n## API requests per pod lifecycle (create → Running → graceful delete → gone; {batch} pods, per pod)\n"
    );
    println!("| request | per pod |");
    println!("|---|---|");
    let counts = lifecycle(batch).await;
    let mut total = 0.0;
    for (kind, c) in &counts {
        println!("| {kind} | {c:.2} |");
        total += c;
    }
    println!("| total | {total:.2} |");
    let _ = std::fs::remove_dir_all(bench_dir());
}
