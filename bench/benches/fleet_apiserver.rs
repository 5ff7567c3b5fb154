//! Cluster plugins at cluster scale on a real kube-apiserver: 100, 300 and 1,000 hollow
//! nodes in this process (one wasmtime engine and compiled-component cache shared, each
//! node its own client certificate `system:node:<name>` signed by the cluster's CA, so
//! that Node authorization, NodeRestriction and the admission policies apply), and
//! `wasmlet controller` beside them. Per rollout (a new digest each, from the test
//! registry when there is one, else a ConfigMap): `kubectl apply` → every node serving;
//! → the controller's counts saying so; what one node's watches receive, against the
//! budget of twice its own WasmletNode plus the spec's event; one WasmletNode write's
//! latency; the API server's and etcd's CPU.
//!
//! Against the testbed (`../shared/k8s-testbed`, started with the admission policy
//! feature gate, `deploy/` applied — bench/README.md has the commands; the registry from
//! `WASMLET_TEST_REGISTRY`, `REGISTRY - -` for one without credentials):
//!
//! ```text
//! K8S_TESTBED=/tmp/k8s-testbed cargo bench -p wasmlet-bench --bench fleet_apiserver -- --nodes 100,300,1000
//! ```
//!
//! Without a testbed (and with `--smoke`), the same rounds run on the API server double
//! with three nodes, so that the harness keeps working where CI runs it.

#[path = "../../host/fleet/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Method, Request, Response};
use http_body::{Body, Frame, SizeHint};
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasmlet_bench::{fmt, pct};
use wasmlet_fleet::FleetConfig;
use wasmlet_plugin_host::PluginEngine;

/// What one node's client saw: bytes its watches of WasmletPlugins and of its Node
/// received, its WasmletNode writes' latencies.
#[derive(Clone, Default)]
struct Meter {
    watch_bytes: Arc<AtomicU64>,
    node_watch_bytes: Arc<AtomicU64>,
    writes: Arc<Mutex<Vec<Duration>>>,
}

impl<S> tower::Layer<S> for Meter {
    type Service = Metered<S>;

    fn layer(&self, inner: S) -> Metered<S> {
        Metered {
            inner,
            meter: self.clone(),
        }
    }
}

/// A client's service, metered.
#[derive(Clone)]
struct Metered<S> {
    inner: S,
    meter: Meter,
}

impl<S, B> tower::Service<Request<kube::client::Body>> for Metered<S>
where
    S: tower::Service<Request<kube::client::Body>, Response = Response<B>>,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
{
    type Response = Response<Counted<B>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let watch = request
            .uri()
            .query()
            .is_some_and(|q| q.contains("watch=true"));
        let path = request.uri().path();
        let counter = match (watch, path.ends_with("/wasmletplugins")) {
            (false, _) => None,
            (true, true) => Some(self.meter.watch_bytes.clone()),
            (true, false) => Some(self.meter.node_watch_bytes.clone()),
        };
        let write = request.method() == Method::PATCH
            && path.contains("/wasmletnodes/")
            && path.ends_with("/status");
        let meter = self.meter.clone();
        let start = Instant::now();
        let future = self.inner.call(request);
        Box::pin(async move {
            let response = future.await?;
            if write {
                meter.writes.lock().expect("writes").push(start.elapsed());
            }
            Ok(response.map(|inner| Counted {
                inner: Box::pin(inner),
                counter,
            }))
        })
    }
}

/// A response body whose bytes are counted (watches only).
struct Counted<B> {
    inner: Pin<Box<B>>,
    counter: Option<Arc<AtomicU64>>,
}

impl<B: Body<Data = Bytes>> Body for Counted<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let polled = this.inner.as_mut().poll_frame(cx);
        if let (Poll::Ready(Some(Ok(frame))), Some(counter)) = (&polled, &this.counter)
            && let Some(data) = frame.data_ref()
        {
            counter.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A client from `config`, metered by `meter`.
fn metered(config: kube::Config, meter: &Meter) -> kube::Client {
    kube::client::ClientBuilder::try_from(config)
        .expect("client")
        .with_layer(meter)
        .build()
}

/// A node's client configuration, by node name.
type NodeConfig = Box<dyn Fn(&str) -> BoxFuture<'static, kube::Config>>;

/// Where the nodes and the controller talk to.
struct Target {
    admin: kube::Client,
    /// A node's client configuration, by node name.
    node_config: NodeConfig,
    /// The API server's and etcd's processes, for their CPU.
    processes: Vec<(&'static str, u32)>,
    /// Keeps the double (and its controller) running.
    _double: Option<support::Cluster>,
    dir: PathBuf,
}

/// The testbed's directory, when it is there and asked for.
fn testbed() -> Option<PathBuf> {
    if std::env::args().any(|a| a == "--smoke") {
        return None;
    }
    let dir = PathBuf::from(std::env::var_os("K8S_TESTBED")?);
    (dir.join("kubeconfig").is_file() && dir.join("pki/ca.key").is_file()).then_some(dir)
}

/// The testbed's API server, nodes with certificates its CA signs.
async fn real(testbed: &Path, dir: PathBuf) -> Target {
    let kubeconfig =
        kube::config::Kubeconfig::read_from(testbed.join("kubeconfig")).expect("kubeconfig");
    let admin_config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("admin config");
    let ca_pem = std::fs::read_to_string(testbed.join("pki/ca.crt")).expect("ca.crt");
    let ca_key = std::fs::read_to_string(testbed.join("pki/ca.key")).expect("ca.key");
    let key = rcgen::KeyPair::from_pem(&ca_key).expect("the CA's key");
    let issuer = Arc::new(rcgen::Issuer::from_ca_cert_pem(&ca_pem, key).expect("the CA"));
    let base = admin_config.clone();
    let node_config = Box::new(move |name: &str| {
        let (cert, key) = node_certificate(&issuer, name);
        let mut config = base.clone();
        config.auth_info = kube::config::AuthInfo {
            client_certificate_data: Some(base64(&cert)),
            client_key_data: Some(base64(&key).into()),
            ..Default::default()
        };
        Box::pin(async move { config }) as BoxFuture<'static, kube::Config>
    });
    let mut processes: Vec<(&'static str, u32)> = ["kube-apiserver", "etcd", "docker-registry"]
        .into_iter()
        .filter_map(|name| Some((name, pid_of(name)?)))
        .collect();
    processes.push(("the nodes and the controller", std::process::id()));
    Target {
        admin: kube::Client::try_from(admin_config).expect("admin"),
        node_config,
        processes,
        _double: None,
        dir,
    }
}

fn base64(pem: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(pem)
}

/// A client certificate and key (PEM) for node `name`, as the kubelet's.
fn node_certificate(
    issuer: &rcgen::Issuer<'static, rcgen::KeyPair>,
    name: &str,
) -> (String, String) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{name}"));
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, issuer).expect("signed");
    (cert.pem(), key.serialize_pem())
}

/// The first process whose command is `name`.
fn pid_of(name: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim() == name).then_some(pid)
    })
}

/// CPU seconds process `pid` has used.
fn cpu_seconds(pid: u32) -> f64 {
    wasmlet_bench::cpu_time_of(&pid.to_string()).as_secs_f64()
}

/// The API server double, nodes with tokens.
async fn double(dir: PathBuf) -> Target {
    let c = support::Cluster::start("fleet-apiserver-smoke", &[]).await;
    let (api, url, client_dir) = (c.api.clone(), c.url.clone(), dir.join("clients"));
    let node_config = Box::new(move |name: &str| {
        let token = format!("token-{name}");
        api.add_token(&token, &format!("system:node:{name}"), &["system:nodes"]);
        let (url, path) = (url.clone(), client_dir.join(name));
        Box::pin(async move {
            std::fs::create_dir_all(&path).expect("dir");
            let file = path.join("kubeconfig");
            wasmlet_apiserver_sim::write_kubeconfig_as(&file, &url, &token).expect("kubeconfig");
            let kubeconfig = kube::config::Kubeconfig::read_from(&file).expect("kubeconfig");
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .expect("config")
        }) as BoxFuture<'static, kube::Config>
    });
    Target {
        admin: c.client.clone(),
        node_config,
        processes: Vec::new(),
        _double: Some(c),
        dir,
    }
}

/// Hollow nodes following the target, each with its meter.
struct Fleet {
    nodes: Vec<support::Node>,
    meters: Vec<Meter>,
    names: Vec<String>,
}

/// Starts `n` hollow nodes (their Node objects made as an admin: here only the object
/// matters) and waits until each has its WasmletNode.
async fn start_fleet(t: &Target, n: usize, engine: &PluginEngine) -> Fleet {
    let names: Vec<String> = (0..n).map(|i| format!("hollow-{n}-{i:04}")).collect();
    let nodes_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(t.admin.clone());
    // Hollow nodes an interrupted run left: selected by every plugin, they would never
    // report, and no count would settle.
    for old in nodes_api.list(&Default::default()).await.expect("nodes") {
        if let Some(name) = old.metadata.name.filter(|n| n.starts_with("hollow-")) {
            let _ = nodes_api.delete(&name, &Default::default()).await;
        }
    }
    for name in &names {
        let node = serde_json::from_value(json!({"metadata": {"name": name,
            "labels": {"kubernetes.io/hostname": name}}}))
        .expect("node");
        match nodes_api.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("node {name}: {e}"),
        }
    }
    let mut fleet = Fleet {
        nodes: Vec::new(),
        meters: Vec::new(),
        names: names.clone(),
    };
    for name in &names {
        let meter = Meter::default();
        let client = metered((t.node_config)(name).await, &meter);
        let node = support::hollow_node(
            engine,
            client,
            name,
            &FleetConfig::default(),
            t.dir.join(name),
        )
        .await;
        fleet.nodes.push(node);
        fleet.meters.push(meter);
    }
    let objects: Api<DynamicObject> =
        Api::all_with(t.admin.clone(), &wasmlet_fleet::object::node_api_resource());
    let start = Instant::now();
    loop {
        let list = objects.list(&Default::default()).await.expect("list");
        let have = list
            .items
            .iter()
            .filter(|o| o.metadata.name.as_ref().is_some_and(|n| names.contains(n)))
            .count();
        if have == n {
            return fleet;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{have} of {n} WasmletNodes within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Stops the nodes and deletes their Node objects (their WasmletNodes go with them).
async fn stop_fleet(t: &Target, fleet: Fleet) {
    let nodes_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(t.admin.clone());
    drop(fleet.nodes);
    for name in &fleet.names {
        let _ = nodes_api.delete(name, &Default::default()).await;
    }
}

/// One rollout.
struct Round {
    /// Apply → each node serving.
    nodes: Vec<Duration>,
    /// Apply → the counts say every node serves.
    counted: Duration,
    /// Bytes each node's watch of WasmletPlugins received, apply → a second after the
    /// counts; and its watch of its Node (the Node's own changes: the node lifecycle
    /// controller marks these hollow nodes, which send no heartbeat, unreachable).
    watched: Vec<u64>,
    node_watched: Vec<u64>,
    /// The applied object's size (the spec's event, about) and one WasmletNode's.
    spec_event: usize,
    own: usize,
    /// CPU seconds per process.
    cpu: Vec<f64>,
    /// The nodes' WasmletNode writes.
    writes: Vec<Duration>,
}

/// Where round `i`'s component comes from, published before the clock starts.
async fn publish(
    t: &Target,
    i: usize,
    registry: Option<&(String, String, String)>,
) -> (String, Value) {
    let base = support::bytes(if i.is_multiple_of(2) {
        support::DENY_ALL
    } else {
        support::RESTRICTED
    });
    let wasm = wasmlet_bench::variant(&base, &format!("round {i} of {}", std::process::id()));
    let sha = wasmlet_fleet::fetch::sha256_hex(&wasm);
    let source = match registry {
        Some((addr, user, password)) => {
            let reference = format!("oci://{addr}/wasmlet-bench/scale:{sha}");
            let anonymous = user == "-";
            let credentials = (!anonymous).then(|| (user.clone(), password.clone()));
            wasmlet_fleet::publish::push(&wasm, &reference, true, credentials, None)
                .await
                .expect("push");
            if anonymous {
                json!({"oci": {"reference": reference, "insecure": true}})
            } else {
                json!({"oci": {"reference": reference, "pullSecret": "registry", "insecure": true}})
            }
        }
        None => {
            use base64::Engine as _;
            let name = format!("scale-{}", &sha[..12]);
            let maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
                Api::namespaced(t.admin.clone(), "wasmlet-system");
            let map = serde_json::from_value(json!({"metadata": {"name": name},
                "binaryData": {"policy.wasm": base64::engine::general_purpose::STANDARD.encode(&wasm)}}))
            .expect("configmap");
            let _ = maps.create(&PostParams::default(), &map).await;
            json!({"configMap": {"name": name, "key": "policy.wasm"}})
        }
    };
    (sha, source)
}

async fn round(
    t: &Target,
    fleet: &Fleet,
    i: usize,
    registry: Option<&(String, String, String)>,
) -> Round {
    let (sha, source) = publish(t, i, registry).await;
    let plugins: Api<DynamicObject> =
        Api::all_with(t.admin.clone(), &wasmlet_fleet::object::api_resource());
    let node_before: Vec<u64> = fleet
        .meters
        .iter()
        .map(|m| m.node_watch_bytes.load(Ordering::Relaxed))
        .collect();
    let watched_before: Vec<u64> = fleet
        .meters
        .iter()
        .map(|m| m.watch_bytes.load(Ordering::Relaxed))
        .collect();
    let cpu_before: Vec<f64> = t.processes.iter().map(|(_, p)| cpu_seconds(*p)).collect();
    let body = json!({"apiVersion": "wasmlet.dev/v1alpha1", "kind": "WasmletPlugin",
        "metadata": {"name": "scale"},
        "spec": {"kind": "admission", "digest": format!("sha256:{sha}"), "source": source}});
    let start = Instant::now();
    let applied = plugins
        .patch(
            "scale",
            &PatchParams::apply("kubectl").force(),
            &Patch::Apply(&body),
        )
        .await
        .expect("apply");
    let spec_event = serde_json::to_vec(&applied).expect("json").len();
    let generation = applied.metadata.generation.unwrap_or(0);
    let nodes =
        support::serving(&fleet.nodes, "scale", &sha, start, Duration::from_secs(120)).await;
    let counted = counts_settle(&plugins, generation, fleet.nodes.len(), start).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let objects: Api<DynamicObject> =
        Api::all_with(t.admin.clone(), &wasmlet_fleet::object::node_api_resource());
    let own = objects.get(&fleet.names[0]).await.expect("a WasmletNode");
    Round {
        nodes,
        counted,
        watched: fleet
            .meters
            .iter()
            .zip(watched_before)
            .map(|(m, b)| m.watch_bytes.load(Ordering::Relaxed) - b)
            .collect(),
        node_watched: fleet
            .meters
            .iter()
            .zip(node_before)
            .map(|(m, b)| m.node_watch_bytes.load(Ordering::Relaxed) - b)
            .collect(),
        spec_event,
        own: serde_json::to_vec(&own).expect("json").len(),
        cpu: t
            .processes
            .iter()
            .zip(cpu_before)
            .map(|((_, p), b)| cpu_seconds(*p) - b)
            .collect(),
        writes: fleet
            .meters
            .iter()
            .flat_map(|m| std::mem::take(&mut *m.writes.lock().expect("writes")))
            .collect(),
    }
}

/// Waits until the counts say all `n` nodes serve `generation`: when, from `start`
/// (watching the object: polling it would add its own load to what is measured).
async fn counts_settle(
    plugins: &Api<DynamicObject>,
    generation: i64,
    n: usize,
    start: Instant,
) -> Duration {
    let settled = move |o: Option<&DynamicObject>| {
        o.is_some_and(|o| {
            let status = &o.data["status"];
            status["observedGeneration"] == generation
                && status["serving"] == n
                && status["pending"] == 0
        })
    };
    let wait = kube::runtime::wait::await_condition(plugins.clone(), "scale", settled);
    tokio::time::timeout(Duration::from_secs(120), wait)
        .await
        .expect("the counts settle within 120 s")
        .expect("watching the plugin");
    start.elapsed()
}

/// The rounds on `n` nodes, as one row.
async fn measure(
    t: &Target,
    n: usize,
    rounds: usize,
    engine: &PluginEngine,
    registry: Option<&(String, String, String)>,
) {
    let fleet = start_fleet(t, n, engine).await;
    let mut all = Vec::new();
    let mut per_node = Vec::new();
    let mut counted = Vec::new();
    let mut watched = Vec::new();
    let mut node_watched = Vec::new();
    let mut budget = Vec::new();
    let mut writes = Vec::new();
    let mut cpu = vec![0.0; t.processes.len()];
    for i in 0..rounds {
        let r = round(t, &fleet, i, registry).await;
        all.push(r.nodes.iter().copied().max().unwrap_or_default());
        per_node.extend(r.nodes);
        counted.push(r.counted);
        watched.extend(r.watched);
        node_watched.extend(r.node_watched);
        budget.push(2 * r.own + r.spec_event);
        writes.extend(r.writes);
        for (total, c) in cpu.iter_mut().zip(r.cpu) {
            *total += c / rounds as f64;
        }
    }
    let cpu: Vec<String> = t
        .processes
        .iter()
        .zip(cpu)
        .map(|((name, _), c)| format!("{name} {c:.2} s"))
        .collect();
    let (p50_watch, max_watch) = (pct(watched.clone(), 50.0), pct(watched, 100.0));
    println!(
        "| {n} | {} | {} | {} | {} | {} | {p50_watch} / {max_watch} B | {} B | {} / {} B | {} / {} | {} |",
        fmt(pct(all.clone(), 50.0)),
        fmt(pct(all, 100.0)),
        fmt(pct(per_node.clone(), 50.0)),
        fmt(pct(per_node, 99.0)),
        fmt(pct(counted, 50.0)),
        pct(budget.clone(), 50.0),
        pct(node_watched.clone(), 50.0),
        pct(node_watched, 100.0),
        fmt(pct(writes.clone(), 50.0)),
        fmt(pct(writes, 99.0)),
        if cpu.is_empty() {
            "-".to_owned()
        } else {
            cpu.join(", ")
        },
    );
    let plugins: Api<DynamicObject> =
        Api::all_with(t.admin.clone(), &wasmlet_fleet::object::api_resource());
    let _ = plugins.delete("scale", &Default::default()).await;
    stop_fleet(t, fleet).await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    wasmlet_fleet::fetch::install_crypto_provider();
    let dir = std::env::temp_dir().join(format!("wasmlet-bench-scale-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let sizes: Vec<usize> = std::env::args()
        .skip_while(|a| a != "--nodes")
        .nth(1)
        .map(|s| s.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| vec![100, 300, 1000]);
    let (t, sizes, rounds, what) = match testbed() {
        Some(testbed) => (
            real(&testbed, dir.clone()).await,
            sizes,
            5,
            "kube-apiserver v1.28.7 of the testbed",
        ),
        None => (
            double(dir.clone()).await,
            vec![3],
            2,
            "the API server double (no testbed)",
        ),
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    if t._double.is_none() {
        let options = wasmlet_fleet::controller::Options {
            namespace: wasmlet_fleet::DEFAULT_NAMESPACE.into(),
            lease: "wasmlet-controller".into(),
            identity: format!("bench-{}", std::process::id()),
            timing: Default::default(),
            count_period: wasmlet_fleet::controller::COUNT_PERIOD,
        };
        let admin = t.admin.clone();
        tokio::spawn(async move {
            if let Err(e) = wasmlet_fleet::controller::run(admin, &options, stopped).await {
                eprintln!("the controller stopped: {e}");
            }
        });
    }
    let registry = wasmlet_fleet::dev::registry();
    if let Some((addr, user, password)) = registry.as_ref().filter(|r| r.1 != "-") {
        pull_secret(&t, addr, user, password).await;
    }
    let engine = PluginEngine::with_cache(&dir.join("compiled")).expect("engine");
    println!(
        "\n### a rollout on N hollow nodes, {what}; {rounds} rounds, a new digest each ({})\n",
        match &registry {
            Some((_, user, _)) if user == "-" => "OCI registry, anonymous",
            Some(_) => "OCI registry, htpasswd and a pull secret",
            None => "ConfigMap",
        }
    );
    println!(
        "| nodes | apply → all serving p50 | max | apply → a node serving p50 | p99 | apply → counts say all serve p50 | one node's WasmletPlugin watch per rollout p50 / max | budget: 2 × own WasmletNode + spec event | its Node watch meanwhile p50 / max | WasmletNode write p50 / p99 | CPU per rollout |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for n in sizes {
        measure(&t, n, rounds, &engine, registry.as_ref()).await;
    }
    stop.cancel();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Secret `registry` in wasmlet-system: the credentials for `addr`.
async fn pull_secret(t: &Target, addr: &str, user: &str, password: &str) {
    let auth = base64(&format!("{user}:{password}"));
    let config = json!({"auths": {addr: {"auth": auth}}}).to_string();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(t.admin.clone(), "wasmlet-system");
    let secret = serde_json::from_value(json!({"metadata": {"name": "registry"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64(&config)}}))
    .expect("secret");
    let _ = secrets.delete("registry", &Default::default()).await;
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
}
