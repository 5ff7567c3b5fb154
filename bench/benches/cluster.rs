//! Cluster mode: the agent (on the in-process CRI simulator) joined to the API server
//! double over loopback HTTP, with the kubelet's default client limits (kubeAPIQPS 50,
//! kubeAPIBurst 100).
//!
//! - A burst of pods bound to the node, created at once: for each, the time from its
//!   creation (it is in the watch) to the API server storing a status that says
//!   Running. Fresh API server, agent and simulator each round.
//! - The API requests one pod's life costs, from creation to the object gone after a
//!   graceful delete, by kind of request, averaged over a batch.
//! - With `WASMLET_CRI_ENDPOINT`: the burst on the real runtime (100 pods), each round
//!   beside the runtime's floor measured just before, and how long after each container
//!   started its Running status was stored.
//! - The event writer alone: living events queued with as many of a deleted namespace
//!   between them, against the same living events queued alone.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use wasmlet_agent::agent::{Agent, AgentOptions};
use wasmlet_agent::node::NodeFacts;
use wasmlet_apiserver_sim::{ApiServerSim, Served};
use wasmlet_bench::floor::{floor, remove_all};
use wasmlet_bench::{NoProbes, Samples};
use wasmlet_cri::proto::ContainerFilter;
use wasmlet_cri::{CriClient, CriRuntime};
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
struct Joined<R: CriRuntime + 'static> {
    api: ApiServerSim,
    served: Served,
    agent: Arc<Agent<R>>,
    stop: tokio_util::sync::CancellationToken,
    node: String,
    events: Arc<wasmlet_cluster::events::EventStats>,
}

/// The agent of a joined node: its files under `dir`, pods from the API server, events
/// recorded there, the default start pacing.
fn agent_options(
    dir: &std::path::Path,
    facts: NodeFacts,
    pod_cgroups: Option<Arc<wasmlet_agent::cgroups::PodCgroups>>,
    recorder: Arc<wasmlet_cluster::events::ApiRecorder>,
) -> AgentOptions {
    AgentOptions {
        node_cgroups: Default::default(),
        node: facts,
        pod_logs_dir: dir.join("logs"),
        root_dir: dir.join("root"),
        resolv_conf: PathBuf::from("/etc/resolv.conf"),
        sync_frequency: Duration::from_secs(60),
        relist_period: Duration::from_secs(1),
        sources: vec!["api".into()],
        pod_cgroups,
        events: Some(recorder),
        volumes: None,
        services: None,
        cluster_dns: Default::default(),
        start_parallelism: wasmlet_agent::sync::pacing::default_limit(
            std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
        ),
        devices: None,
    }
}

/// Waits (at most 15 s) until node `node` is Ready on `api`.
async fn ready_on(api: &ApiServerSim, node: &str) {
    let started = Instant::now();
    while !api.get("api/v1", "nodes", "", node).is_some_and(|n| {
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
}

impl Joined<Simulator> {
    /// On a fresh in-process simulator.
    async fn start(round: usize) -> Self {
        Self::start_on(Arc::new(Simulator::new()), round, None, "bench-node").await
    }
}

impl<R: CriRuntime + 'static> Joined<R> {
    /// On `runtime`, as node `node`, with pod-level cgroups if given.
    async fn start_on(
        runtime: Arc<R>,
        round: usize,
        pod_cgroups: Option<Arc<wasmlet_agent::cgroups::PodCgroups>>,
        node: &str,
    ) -> Self {
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
        let node = node.to_string();
        let facts = NodeFacts {
            max_pods: 1000,
            ..NodeFacts::read(Some(&node), Some("192.168.70.10"), &dir, 1000)
        };
        let (recorder, events) = wasmlet_cluster::events::ApiRecorder::new();
        let event_stats = recorder.stats();
        let options = agent_options(&dir, facts.clone(), pod_cgroups, recorder);
        let agent = Arc::new(Agent::start(
            runtime,
            options,
            Arc::new(NoProbes),
            None,
            None,
        ));
        let stop = tokio_util::sync::CancellationToken::new();
        let stopped = stop.clone();
        let ready = agent.clone();
        let state = {
            let agent = agent.clone();
            move || wasmlet_cluster::node::NodeState {
                not_ready: agent.readiness().err().map(|e| e.to_string()),
                runtime_version: "sim://1".into(),
                port: 10250,
                pressure: Default::default(),
                images: Default::default(),
                devices: Default::default(),
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
        ready_on(&api, &node).await;
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
        self.stop.cancel();
        self.agent.shutdown().await;
        self.served.stop();
    }
}

/// One burst of `n` pods: each pod's time from creation to Running stored, and the
/// time until all are.
async fn burst(round: usize, n: usize) -> (Vec<Duration>, Duration) {
    let j = Joined::start(round).await;
    let (took, all, _) = burst_on(&j, n).await;
    j.stop().await;
    (took, all)
}

/// `n` pods created at once on `j`'s node: each one's time from creation to a status
/// saying Running stored, the time until all are, and when (Unix nanoseconds) each
/// pod's Running was stored.
async fn burst_on<R: CriRuntime + 'static>(
    j: &Joined<R>,
    n: usize,
) -> (Vec<Duration>, Duration, HashMap<String, i64>) {
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
    let mut stored = HashMap::new();
    let mut all = Duration::ZERO;
    while stored.len() < n {
        let change = tokio::time::timeout(Duration::from_secs(120), changes.recv())
            .await
            .expect("every pod Running within 120 s")
            .expect("changes");
        if change.resource != "pods"
            || change.object["status"]["phase"] != "Running"
            || stored.contains_key(&change.name)
        {
            continue;
        }
        if let Some(at) = created.get(&change.name) {
            took.push(at.elapsed());
            stored.insert(change.name.clone(), wasmlet_cri::labels::unix_nanos());
            all = begun.elapsed();
        }
    }
    (took, all, stored)
}

/// One round on containerd: the runtime's floor for `n` pods, then `n` pods bound at
/// once to an agent on the same runtime. Returns (floor, all Running stored, each pod's
/// creation → Running stored, each pod's container start → Running stored, and for the
/// floor how long after each container started its StartContainer returned).
async fn containerd_round(
    endpoint: &str,
    n: usize,
    round: usize,
) -> (
    Duration,
    Duration,
    Vec<Duration>,
    Vec<Duration>,
    Vec<Duration>,
) {
    let client = CriClient::connect(endpoint).await.expect("containerd");
    let node = "bench-cluster-containerd";
    remove_all(&client, node).await;
    let (floor_took, floor_tails) = floor(&client, n).await;
    let facts = NodeFacts::read(Some(node), None, std::path::Path::new("/"), 110);
    let cgroups = wasmlet_agent::cgroups::PodCgroups::node_default(facts.cpus, facts.memory_bytes)
        .await
        .ok()
        .map(Arc::new);
    let j = Joined::start_on(Arc::new(client.clone()), 300 + round, cgroups, node).await;
    let (took, all, stored) = burst_on(&j, n).await;
    // When each container started, on containerd's clock.
    let filter = ContainerFilter {
        label_selector: [("wasmlet.io/node".to_string(), node.to_string())].into(),
        ..Default::default()
    };
    let mut lags = Vec::new();
    for c in client.list_containers(Some(filter)).await.expect("list") {
        let Ok(status) = client.container_status(&c.id, false).await else {
            continue;
        };
        let Some(s) = status.status else { continue };
        let pod = c
            .labels
            .get(wasmlet_core::runtime::POD_NAME_LABEL)
            .cloned()
            .unwrap_or_default();
        if let Some(at) = stored.get(&pod) {
            lags.push(Duration::from_nanos(
                u64::try_from((at - s.started_at).max(0)).unwrap_or(0),
            ));
        }
    }
    j.stop().await;
    remove_all(&client, node).await;
    (floor_took, all, took, lags, floor_tails)
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

/// The event writer alone: `n` events queued at once for pods in `live`, and — with
/// `doomed` — as many again interleaved with them for pods in a namespace deleted just
/// before. For each living event, the time from being queued to being stored.
async fn queued_events(n: usize, doomed: bool) -> (HashMap<String, Duration>, u64) {
    use wasmlet_agent::events::{Event, Kind, Recorder};
    let api = ApiServerSim::new();
    let served = api
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let dir = bench_dir().join(format!("events-{doomed}"));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("kubeconfig");
    wasmlet_apiserver_sim::write_kubeconfig(&kubeconfig, &served.url()).expect("kubeconfig");
    let client = wasmlet_cluster::connect::client(&kubeconfig)
        .await
        .expect("client");
    if doomed {
        api.create(
            "api/v1",
            "configmaps",
            json!({"metadata": {"name": "left", "namespace": "doomed"}}),
        )
        .expect("configmap");
        api.delete_namespace("doomed");
    }
    let (recorder, queue) = wasmlet_cluster::events::ApiRecorder::new();
    let stats = recorder.stats();
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let writer = tokio::spawn(wasmlet_cluster::events::run(
        client,
        "bench-node".into(),
        queue,
        wasmlet_cluster::ratelimit::RateLimiter::new(50.0, 100),
        stopped,
    ));
    let mut changes = api.subscribe();
    let event = |ns: &str, pod: String| Event {
        pod: wasmlet_core::pod::PodKey {
            uid: format!("uid-{ns}-{pod}"),
            namespace: ns.into(),
            name: pod.clone(),
        },
        source: "api".into(),
        field_path: Some("spec.containers{c}".into()),
        kind: Kind::Normal,
        reason: "Started".into(),
        message: format!("Started container c of {pod}"),
        time: std::time::SystemTime::now(),
        regarding: None,
    };
    let queued = Instant::now();
    for i in 0..n {
        if doomed {
            recorder.record(event("doomed", format!("doomed-{i}")));
        }
        recorder.record(event("live", format!("live-{i}")));
    }
    let mut stored = HashMap::new();
    while stored.len() < n {
        let change = tokio::time::timeout(Duration::from_secs(60), changes.recv())
            .await
            .expect("every living event within 60 s")
            .expect("changes");
        if change.resource == "events" && change.namespace == "live" {
            let pod = change.object["involvedObject"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            stored.entry(pod).or_insert_with(|| queued.elapsed());
        }
    }
    let rejected = stats.dropped("rejected");
    stop.cancel();
    let _ = writer.await;
    served.stop();
    (stored, rejected)
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
    // `-- containerd`: the containerd part alone.
    let only_containerd = std::env::args().any(|a| a == "containerd");
    let (n, rounds) = if smoke() { (10, 1) } else { (100, 5) };
    if !only_containerd {
        simulated(n, rounds).await;
    }
    if let Ok(endpoint) = std::env::var("WASMLET_CRI_ENDPOINT") {
        on_containerd(&endpoint).await;
    }
    if !only_containerd {
        events_and_requests().await;
    }
    let _ = std::fs::remove_dir_all(bench_dir());
}

/// The burst and the Started events on the simulator.
async fn simulated(n: usize, rounds: usize) {
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
}

/// The burst on containerd beside its floor.
async fn on_containerd(endpoint: &str) {
    {
        let (n, rounds) = if smoke() { (5, 1) } else { (100, 3) };
        println!(
            "\n## On containerd: {n} pods bound at once, creation → status Running stored, beside the runtime's floor ({rounds} rounds; {endpoint})\n"
        );
        println!(
            "| round | floor (bare CRI, {n} pods) | all Running stored | / floor | creation → Running stored p50 / p99 | container started → Running stored p50 / p99 / max | floor: StartContainer returned after the start p50 / p99 |"
        );
        println!("|---|---|---|---|---|---|---|");
        let (mut ratios, mut lags_all) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let (floor_took, all, took, lags, tails) = containerd_round(endpoint, n, round).await;
            let (s, l) = (Samples::new(took), Samples::new(lags.clone()));
            let t = Samples::new(tails);
            let ratio = all.as_secs_f64() / floor_took.as_secs_f64();
            ratios.push(ratio);
            lags_all.extend(lags);
            println!(
                "| {} | {:.2} s | {:.2} s | {ratio:.2} | {} / {} | {} / {} / {} | {} / {} |",
                round + 1,
                floor_took.as_secs_f64(),
                all.as_secs_f64(),
                ms(s.percentile(50.0)),
                ms(s.percentile(99.0)),
                ms(l.percentile(50.0)),
                ms(l.percentile(99.0)),
                ms(l.percentile(100.0)),
                ms(t.percentile(50.0)),
                ms(t.percentile(99.0)),
            );
        }
        ratios.sort_by(f64::total_cmp);
        let l = Samples::new(lags_all);
        println!(
            "\nMedian ratio {:.2}; container started → Running stored over all rounds p50 {} / p99 {}",
            ratios[ratios.len() / 2],
            ms(l.percentile(50.0)),
            ms(l.percentile(99.0)),
        );
    }
}

/// The event writer with a deleted namespace, and the requests of a pod's life.
async fn events_and_requests() {
    let queued = if smoke() { 50 } else { 500 };
    println!(
        "\n## The event writer: {queued} events of a living namespace queued at once, alone and interleaved with {queued} of a deleted one (eventRecordQPS 50, eventBurst 100)\n"
    );
    println!("| queue | living events: queued → stored p50 | p99 | max | doomed events dropped |");
    println!("|---|---|---|---|---|");
    let (alone, _) = queued_events(queued, false).await;
    let (mixed, dropped) = queued_events(queued, true).await;
    for (name, took, dropped) in [
        (format!("{queued} living"), &alone, 0),
        (
            format!("{queued} living + {queued} deleted"),
            &mixed,
            dropped,
        ),
    ] {
        let s = Samples::new(took.values().copied().collect());
        println!(
            "| {name} | {} | {} | {} | {dropped} |",
            ms(s.percentile(50.0)),
            ms(s.percentile(99.0)),
            ms(s.percentile(100.0)),
        );
    }
    let delay = alone
        .iter()
        .filter_map(|(pod, a)| mixed.get(pod).map(|m| m.saturating_sub(*a)))
        .max()
        .unwrap_or_default();
    println!(
        "\nThe most any living event was delayed by the deleted namespace's: {}",
        ms(delay)
    );

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
}
