//! The WebAssembly plugin platform: admission decisions, loading, hot swap, memory.
//!
//! `cargo bench -p wasmlet-bench --bench plugins` (or `cargo xtask bench plugins`).
//!
//! Decisions are made for a pod on a node that already runs 110 pods (the host sums
//! their usage; the sum's cost is its own row). The same resource-fit logic compiled
//! natively into the host gives the baseline: `fit.rs` below is the very file the
//! `resource-fit` plugin is built from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmlet_bench::{Budget, Gap, Samples, fmt, header, row, time_async, time_paced};
use wasmlet_plugin_host::dev::shipped_plugin;
use wasmlet_plugin_host::*;
#[allow(unused_imports)]
use wasmlet_plugin_host::{Rejection, resources};

#[path = "plugins/audit.rs"]
mod audit;

/// The resource-fit plugin's decision, compiled natively.
#[path = "../../plugins/admission/resource-fit/src/fit.rs"]
#[allow(dead_code, missing_docs)]
mod fit;

/// The gap between decisions in the paced rows: about 1,000 decisions a second, more
/// than a node ever admits.
const PACE: Duration = Duration::from_millis(1);

/// The gap between decisions while a swap is awaited.
const SWAP_PACE: Duration = Duration::from_micros(50);

const KUBELET_CHAIN: [&str; 4] = [
    "resource-fit",
    "node-affinity",
    "node-ports",
    "taint-toleration",
];

fn list(milli_cpu: u64, memory: u64) -> ResourceList {
    ResourceList {
        milli_cpu,
        memory,
        ..resources::empty()
    }
}

fn container(name: &str, milli_cpu: u64, memory: u64, host_port: Option<u16>) -> Container {
    Container {
        name: name.into(),
        image: "registry.example/app:1.2.3".into(),
        requests: list(milli_cpu, memory),
        limits: list(milli_cpu * 2, memory),
        ports: vec![ContainerPort {
            name: Some("http".into()),
            container_port: 8080,
            host_port,
            host_ip: String::new(),
            protocol: Protocol::Tcp,
        }],
        privileged: false,
        restartable: false,
    }
}

fn pod(i: usize, host_port: Option<u16>) -> Pod {
    Pod {
        uid: format!("uid-{i:04}"),
        name: format!("app-{i}"),
        namespace: "default".into(),
        labels: vec![("app".into(), format!("app-{}", i % 7))],
        annotations: Vec::new(),
        containers: vec![
            container("app", 100, 128 << 20, host_port),
            container("sidecar", 10, 16 << 20, None),
        ],
        init_containers: Vec::new(),
        overhead: resources::empty(),
        node_selector: vec![("kubernetes.io/os".into(), "linux".into())],
        required_node_affinity: Vec::new(),
        tolerations: vec![Toleration {
            key: "node.kubernetes.io/not-ready".into(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect: Some(TaintEffect::NoExecute),
            toleration_seconds: Some(300),
        }],
        host_network: false,
        priority: 0,
        static_pod: false,
        source: "api".into(),
    }
}

fn node() -> Node {
    Node {
        name: "node-1".into(),
        labels: vec![("kubernetes.io/os".into(), "linux".into())],
        taints: vec![Taint {
            key: "dedicated".into(),
            value: "batch".into(),
            effect: TaintEffect::NoSchedule,
        }],
        allocatable: ResourceList {
            milli_cpu: 64_000,
            memory: 256 << 30,
            ephemeral_storage: 100 << 30,
            pods: 250,
            scalar: Vec::new(),
        },
    }
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp(tag: &str) -> Dir {
    let dir = std::env::temp_dir().join(format!("wasmlet-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    Dir(dir)
}

/// Copies a component with a custom section appended: a new digest, the same code.
fn variant(from: &Path, to: &Path, n: u64) {
    let mut bytes = std::fs::read(from).expect("read");
    let name = b"wasmlet-bench";
    let payload = n.to_le_bytes();
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name);
    section.extend_from_slice(&payload);
    bytes.push(0);
    bytes.push(section.len() as u8);
    bytes.extend_from_slice(&section);
    let tmp = to.with_extension("tmp");
    std::fs::write(&tmp, bytes).expect("write");
    std::fs::rename(&tmp, to).expect("rename");
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn load(engine: &PluginEngine, name: &str, instances: InstanceMode) -> AdmissionPlugin {
    let limits = Limits {
        instances,
        ..Limits::default()
    };
    engine
        .load_admission(name, &shipped_plugin(name), BTreeMap::new(), limits)
        .expect("load")
}

/// The admission of `pod` to `node`, as the agent makes one per pod (the pod's JSON
/// left empty: only restricted-pods reads it).
fn admission(pod: &Arc<Pod>, node: &Arc<Node>, load: &NodeLoad) -> Arc<Admission> {
    Admission::new(pod.clone(), node.clone(), load.clone(), String::new)
}

/// One decision by `plugin` on a new admission, which it must admit.
async fn admits(plugin: &AdmissionPlugin, pod: &Arc<Pod>, node: &Arc<Node>, load: &NodeLoad) {
    let v = plugin
        .admit(&admission(pod, node, load))
        .await
        .expect("admit");
    assert_eq!(reason(&v), "Admit");
}

fn reason(v: &Verdict) -> &str {
    match v {
        Verdict::Admit => "Admit",
        Verdict::Reject(r) => &r.reason,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // On a worker, as the agent's sync loop is: tasks it spawns start there.
    tokio::spawn(run()).await.expect("benchmark");
}

/// A node that already runs 110 pods, a pod to admit there, and the engine deciding.
struct Scene {
    engine: PluginEngine,
    budget: Budget,
    active: Vec<Pod>,
    candidate: Arc<Pod>,
    node: Arc<Node>,
    usage: NodeLoad,
}

impl Scene {
    /// One decision by `plugin` on this scene's candidate, on `node`.
    async fn admits_on(&self, plugin: &AdmissionPlugin, node: &Arc<Node>) {
        admits(plugin, &self.candidate, node, &self.usage).await;
    }
}

async fn run() {
    let cache = temp("cache");
    let active: Vec<Pod> = (0..110)
        .map(|i| pod(i, (i % 10 == 0).then_some(30_000 + i as u16)))
        .collect();
    let scene = Scene {
        engine: PluginEngine::with_cache(&cache.0).expect("engine"),
        budget: Budget::from_args(20_000),
        candidate: Arc::new(pod(999, Some(31_999))),
        node: Arc::new(node()),
        usage: convert::load(&active),
        active,
    };

    header("Admission of one pod beside 110 active pods (sequential decisions)");
    let native = native_decisions(&scene).await;
    let wasm_p50 = component_decisions(&scene).await;
    chains(&scene).await;
    cloud_node_and_sum(&scene).await;

    header("What a policy asks for on demand (warm instances)");
    on_demand(&scene).await;

    header("A policy's first look at what a node runs (one audit per version)");
    audit::audits(&scene.engine, &scene.node).await;
    let native_p50 = native.percentile(50.0).as_secs_f64();
    for (what, p50) in wasm_p50 {
        println!(
            "\n{what}: {:.0}× the native decision at p50",
            p50.as_secs_f64() / native_p50.max(1e-9)
        );
    }

    let fresh_dir = temp("fresh");
    loading(&scene.engine, &fresh_dir).await;
    hot_swap(&scene).await;
    probes_and_sources(&scene.engine).await;
    memory(&scene, &fresh_dir).await;
    let _ = fmt;
}

/// The baseline: resource-fit's decision compiled into the host.
async fn native_decisions(scene: &Scene) -> Samples {
    let native = time_async(scene.budget, || async {
        let wanted = resources::pod_requests(&scene.candidate);
        assert!(matches!(
            fit::admit(&wanted, &scene.node.allocatable, &scene.usage.usage),
            Verdict::Admit
        ));
    })
    .await;
    row("resource-fit compiled natively into the host", &native);
    native
}

/// resource-fit as a component: warm and fresh instances, back to back, yielding and
/// paced; the back-to-back rows' p50, by row.
async fn component_decisions(scene: &Scene) -> Vec<(String, Duration)> {
    let mut wasm_p50 = Vec::new();
    for (gap, iterations, between) in [
        (Gap::None, scene.budget, "back to back"),
        (
            Gap::Yield,
            scene.budget,
            "the caller yielding between decisions",
        ),
        (
            Gap::Sleep(PACE),
            Budget::from_args(5_000),
            "a decision every ~1 ms",
        ),
    ] {
        for (mode, label) in [
            (InstanceMode::Reused, "warm instance"),
            (InstanceMode::PerCall, "fresh instance"),
        ] {
            let plugin = load(&scene.engine, "resource-fit", mode);
            let s = time_paced(iterations, gap, || scene.admits_on(&plugin, &scene.node)).await;
            let what = format!("resource-fit as a component, {label}, {between}");
            row(&what, &s);
            if matches!(gap, Gap::None) {
                wasm_p50.push((what, s.percentile(50.0)));
            }
        }
    }
    wasm_p50
}

/// The kubelet's four checks as one chain, on warm and on fresh instances.
async fn chains(scene: &Scene) {
    for (mode, label) in [
        (InstanceMode::Reused, "warm instances"),
        (InstanceMode::PerCall, "fresh instances"),
    ] {
        let chain = AdmissionChain::new(scene.engine.clone());
        for name in KUBELET_CHAIN {
            let limits = Limits {
                instances: mode,
                ..Limits::default()
            };
            chain
                .push(
                    name,
                    &shipped_plugin(name),
                    BTreeMap::new(),
                    limits,
                    FailurePolicy::Fail,
                )
                .expect("load");
        }
        let s = time_async(scene.budget, || async {
            let admission = admission(&scene.candidate, &scene.node, &scene.usage);
            let (v, _) = chain.admit(&admission).await;
            assert_eq!(reason(&v), "Admit");
        })
        .await;
        row(
            &format!("the kubelet's four checks as a chain, {label}"),
            &s,
        );
    }
}

/// A node as a cloud provider labels it: the well-known labels, a few of the
/// provider's, a role, and two taints. resource-fit never reads them; while policies
/// were handed the whole node on every call, this node made its decision 2× slower.
fn cloud_node(node: &Node) -> Node {
    Node {
        labels: [
            ("kubernetes.io/os", "linux"),
            ("kubernetes.io/arch", "amd64"),
            (
                "kubernetes.io/hostname",
                "ip-10-0-12-34.eu-west-1.compute.internal",
            ),
            ("beta.kubernetes.io/os", "linux"),
            ("beta.kubernetes.io/arch", "amd64"),
            ("beta.kubernetes.io/instance-type", "m6i.2xlarge"),
            ("node.kubernetes.io/instance-type", "m6i.2xlarge"),
            ("topology.kubernetes.io/region", "eu-west-1"),
            ("topology.kubernetes.io/zone", "eu-west-1b"),
            ("failure-domain.beta.kubernetes.io/region", "eu-west-1"),
            ("failure-domain.beta.kubernetes.io/zone", "eu-west-1b"),
            ("node-role.kubernetes.io/worker", ""),
            ("eks.amazonaws.com/nodegroup", "general-purpose"),
            ("eks.amazonaws.com/capacityType", "ON_DEMAND"),
            ("k8s.io/cloud-provider-aws", "0123456789abcdef"),
            ("team", "platform"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect(),
        taints: vec![
            node.taints[0].clone(),
            Taint {
                key: "node.kubernetes.io/unschedulable".into(),
                value: String::new(),
                effect: TaintEffect::NoSchedule,
            },
        ],
        ..node.clone()
    }
}

/// A warm decision on [`cloud_node`], and the host's sum of the active pods' usage.
async fn cloud_node_and_sum(scene: &Scene) {
    let cloud_node = Arc::new(cloud_node(&scene.node));
    let plugin = load(&scene.engine, "resource-fit", InstanceMode::Reused);
    let s = time_async(scene.budget, || scene.admits_on(&plugin, &cloud_node)).await;
    row(
        "resource-fit, warm instance, back to back, a node with 16 labels and 2 taints",
        &s,
    );
    let sum = time_async(scene.budget, || async {
        assert_eq!(convert::load(&scene.active).usage.pod_count, 110);
    })
    .await;
    row("host: node usage summed over the 110 active pods", &sum);
}

/// What a policy asks the host for only when it needs it: node-ports the ports in use,
/// restricted-pods the pod's JSON.
async fn on_demand(scene: &Scene) {
    let (candidate, node, usage) = (&scene.candidate, &scene.node, &scene.usage);
    let ports = load(&scene.engine, "node-ports", InstanceMode::Reused);
    let no_port = Arc::new(Pod {
        containers: candidate
            .containers
            .iter()
            .map(|c| Container {
                ports: Vec::new(),
                ..c.clone()
            })
            .collect(),
        ..(**candidate).clone()
    });
    for (label, p) in [
        (
            "node-ports, pod without host ports (host ports never fetched)",
            &no_port,
        ),
        (
            "node-ports, pod with a host port (fetches the 11 ports in use)",
            candidate,
        ),
    ] {
        let s = time_async(scene.budget, || async {
            admits(&ports, p, node, usage).await;
        })
        .await;
        row(label, &s);
    }
    let restricted = load(&scene.engine, "restricted-pods", InstanceMode::Reused);
    let json = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "app-999", "namespace": "default"},
        "spec": {"containers": [
            {"name": "app", "image": "registry.example/app:1.2.3",
             "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}},
            {"name": "sidecar", "image": "registry.example/app:1.2.3"}]}
    })
    .to_string();
    let json: Arc<str> = json.into();
    let s = time_async(scene.budget, || async {
        // Made once per admission, as the agent serializes the pod: one copy here.
        let json = json.clone();
        let admission = Admission::new(candidate.clone(), node.clone(), usage.clone(), move || {
            json.to_string()
        });
        let v = restricted.admit(&admission).await.expect("admit");
        assert_eq!(reason(&v), "Admit");
    })
    .await;
    row("restricted-pods, reads the pod's JSON (≈ 300 bytes)", &s);
}

/// Compiling a component the cache has never seen, and loading one it has.
async fn loading(engine: &PluginEngine, fresh_dir: &Dir) {
    header("Loading a plugin");
    let mut n = 0;
    let compile = time_async(Budget::from_args(100), || {
        n += 1;
        let path = fresh_dir.0.join(format!("v{n}.wasm"));
        variant(&shipped_plugin("resource-fit"), &path, n);
        async move {
            let p = engine
                .load_admission("fit", &path, BTreeMap::new(), Limits::default())
                .expect("compile");
            assert_eq!(*p.load_outcome(), CacheOutcome::Miss);
        }
    })
    .await;
    row(
        "compile a new component (resource-fit, cache miss)",
        &compile,
    );
    let cached = time_async(Budget::from_args(500), || async {
        let p = load(engine, "resource-fit", InstanceMode::PerCall);
        assert_eq!(*p.load_outcome(), CacheOutcome::Hit);
    })
    .await;
    row("load from the compiled-component cache", &cached);
}

/// A plugin file renamed into the admission directory, until the chain's decisions
/// change: from a cached artifact, and with compilation.
async fn hot_swap(scene: &Scene) {
    header("Hot swap: file renamed into place → new decisions served");
    let swaps = temp("swap");
    let dir = swaps.0.join("admission");
    std::fs::create_dir_all(&dir).expect("dir");
    let live = dir.join("policy.wasm");
    variant(&shipped_plugin("node-ports"), &live, 0);
    let chain = Arc::new(AdmissionChain::new(scene.engine.clone()));
    let config: PluginsConfig =
        serde_yaml_ng::from_str("admission: [{name: policy}]").expect("config");
    let config = PluginsConfig {
        directory: Some(swaps.0.clone()),
        ..config
    };
    let _watching = AdmissionDirectory::start(chain.clone(), &config, false)
        .await
        .expect("watch");
    let (mut calls, mut failed) = (0usize, 0usize);
    let decide = || {
        let chain = chain.clone();
        async move {
            let admission = admission(&scene.candidate, &scene.node, &scene.usage);
            reason(&chain.admit(&admission).await.0).to_owned()
        }
    };
    for (label, fresh) in [
        ("from a cached artifact", false),
        ("with compilation (a new digest each time)", true),
    ] {
        let mut samples = Vec::new();
        for i in 0..Budget::from_args(40).iterations as u64 {
            // Always to the other decision, so that the swap is visible.
            let from = if decide().await == "Admit" {
                "fixture-deny-all"
            } else {
                "node-ports"
            };
            // Cached: one digest per decision (both compiled in the first round).
            let digest = if fresh {
                1_000 + i
            } else {
                u64::from(from == "node-ports")
            };
            let (took, c, f) = swap_to(&live, from, digest, &decide).await;
            if !fresh && i < 2 {
                continue;
            }
            samples.push(took);
            calls += c;
            failed += f;
        }
        row(label, &Samples::new(samples));
    }
    println!("\n{calls} decisions made during the swaps, {failed} failed.");
}

/// Puts plugin `from` (as digest `digest`) at `live` and decides until the decision
/// changes: how long that took, the decisions made meanwhile, and how many failed.
async fn swap_to<F, Fut>(
    live: &Path,
    from: &str,
    digest: u64,
    decide: &F,
) -> (Duration, usize, usize)
where
    F: Fn() -> Fut,
    Fut: Future<Output = String>,
{
    let before = decide().await;
    let started = Instant::now();
    variant(&shipped_plugin(from), live, digest);
    let (mut calls, mut failed) = (0, 0);
    loop {
        let got = decide().await;
        calls += 1;
        if got == chain::PLUGIN_ERROR_REASON {
            failed += 1;
        }
        if got != before {
            return (started.elapsed(), calls, failed);
        }
        assert!(started.elapsed() < Duration::from_secs(5), "swap not seen");
        // ~10,000 decisions a second: far more than a node makes, and the
        // compiler still gets the CPU a spinning loop would take from it.
        std::thread::sleep(SWAP_PACE);
        // A decision never waits, so without this the loop would never give its
        // worker back: the directory's follower, spawned from this task, waits in
        // the worker's LIFO slot (which no other worker steals) until it does.
        tokio::task::yield_now().await;
    }
}

/// The host's memory for 20 loaded plugins with a warm instance each.
async fn memory(scene: &Scene, fresh_dir: &Dir) {
    header_memory();
    let before = rss_bytes();
    let mut kept = Vec::new();
    let plugins = 20;
    for i in 0..plugins {
        let path = fresh_dir.0.join(format!("mem{i}.wasm"));
        variant(&shipped_plugin("resource-fit"), &path, 10_000 + i);
        let limits = Limits {
            instances: InstanceMode::Reused,
            ..Limits::default()
        };
        let p = scene
            .engine
            .load_admission(&format!("p{i}"), &path, BTreeMap::new(), limits)
            .expect("load");
        // One decision each, so that each keeps a warm instance.
        scene.admits_on(&p, &scene.node).await;
        kept.push(p);
    }
    let after = rss_bytes();
    println!(
        "| {plugins} resource-fit plugins loaded, one warm instance each | {:.1} MiB | {:.2} MiB | {:.1} MiB |",
        (after.saturating_sub(before)) as f64 / (1 << 20) as f64,
        (after.saturating_sub(before)) as f64 / plugins as f64 / (1 << 20) as f64,
        after as f64 / (1 << 20) as f64,
    );
    drop(kept);
}

/// A container whose every command exits 0 at once: the exec probe's own cost.
struct InstantExec;

impl probe::ContainerExec for InstantExec {
    fn exec_sync(
        &self,
        _command: Vec<String>,
        _timeout: Duration,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<probe::ExecOutput, String>> + Send + '_>>
    {
        Box::pin(async {
            Ok(probe::ExecOutput {
                exit_code: 0,
                stdout: Vec::new(),
                stderr: Vec::new(),
            })
        })
    }
}

/// A keep-nothing HTTP/1.1 server answering every request `200 ok`.
async fn ok_server() -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listen");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 2048];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = conn
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    port
}

/// Probe checks and source polls, each in a fresh instance, against local peers.
/// A readiness check of container `app` of pod `web`, at 127.0.0.1.
fn probe_target(action: probe::Action) -> probe::Target {
    probe::Target {
        pod_namespace: "default".into(),
        pod_name: "web".into(),
        pod_uid: "uid".into(),
        container_name: "app".into(),
        pod_ip: "127.0.0.1".into(),
        kind: probe::ProbeKind::Readiness,
        action,
        timeout_ms: 1000,
    }
}

fn probe_grants(exec: bool, network: &[&str]) -> probe::Grants {
    probe::Grants {
        exec,
        network: network.iter().map(|g| g.parse().expect("grant")).collect(),
    }
}

async fn probes_and_sources(engine: &PluginEngine) {
    let budget = Budget::from_args(2_000);
    header("Probe checks and pod-source polls (a fresh instance each, local peers)");
    let (target, grants) = (probe_target, probe_grants);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listen");
    let tcp_port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move { while listener.accept().await.is_ok() {} });
    let http_port = ok_server().await;
    let exec: Arc<dyn probe::ContainerExec> = Arc::new(InstantExec);
    let cases = [
        (
            "probe-exec",
            "exec (the runtime's exec answered at once)",
            grants(true, &[]),
            probe::Action::Exec(vec!["true".into()]),
        ),
        (
            "probe-tcp-socket",
            "tcpSocket, connect to a local listener",
            grants(false, &["pod"]),
            probe::Action::TcpSocket(probe::TcpSocketAction {
                host: String::new(),
                port: tcp_port,
            }),
        ),
        (
            "probe-http-get",
            "httpGet, a new connection and GET to a local server",
            grants(false, &["pod"]),
            probe::Action::HttpGet(probe::HttpGetAction {
                scheme: "HTTP".into(),
                host: String::new(),
                port: http_port,
                path: "/healthz".into(),
                headers: Vec::new(),
            }),
        ),
    ];
    for (name, label, grants, action) in cases {
        let handler = engine
            .load_probe(
                name,
                &shipped_plugin(name),
                BTreeMap::new(),
                Limits::default(),
                grants,
            )
            .expect("load");
        let target = target(action);
        let s = time_async(budget, || async {
            let out = handler
                .check(&target, Some(exec.clone()))
                .await
                .expect("check");
            assert!(matches!(out, probe::Outcome::Success(_)), "{out:?}");
        })
        .await;
        row(label, &s);
    }
    file_source_poll(engine).await;
}

/// A poll of the shipped file source over a directory of 30 manifests.
async fn file_source_poll(engine: &PluginEngine) {
    let dir = temp("manifests");
    for i in 0..30 {
        std::fs::write(
            dir.0.join(format!("pod-{i}.yaml")),
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: pod-{i}\n  labels: {{app: web}}\nspec:\n  containers:\n  - name: app\n    image: nginx:1.27\n    resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}\n    ports: [{{containerPort: 80}}]\n"
            ),
        )
        .expect("write");
    }
    let source = engine
        .load_source(
            "source-file",
            &shipped_plugin("source-file"),
            BTreeMap::new(),
            Limits {
                deadline: Duration::from_secs(10),
                ..Limits::default()
            },
            source::SourceGrants {
                directory: Some(dir.0.clone()),
                urls: Vec::new(),
            },
        )
        .expect("load");
    let s = time_async(Budget::from_args(300), || async {
        let snapshot = source.poll().await.expect("poll");
        assert_eq!(snapshot.pods.len(), 30);
    })
    .await;
    row(
        "file source: a directory of 30 manifests, read, parsed, decoded",
        &s,
    );
}

fn header_memory() {
    println!("\n### Host memory per loaded plugin (RSS)\n");
    println!("| case | added | per plugin | process total |");
    println!("|---|---|---|---|");
}
