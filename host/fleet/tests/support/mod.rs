//! Nodes following WasmletPlugins on the API server double, as the agent runs them: a
//! controller per node with its own admission chain and probe handlers (one wasmtime
//! engine and compiled-component cache shared, as hollow nodes in one process would),
//! and what a test or benchmark asks of them — decisions, status entries, labels.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::core::v1 as k8s;
use serde_json::{Value, json};
use wasmlet_agent::events::MemoryRecorder;
use wasmlet_apiserver_sim::{ApiServerSim, Served};
use wasmlet_fleet::{FleetConfig, Targets};
use wasmlet_plugin_host::chain::AdmissionChain;
use wasmlet_plugin_host::config::PluginsConfig;
use wasmlet_plugin_host::kinds::{PodSources, ProbeHandlers};
use wasmlet_plugin_host::{Admission, NodeLoad, NodeUsage, PluginEngine, convert};

/// The shipped policy that admits plain pods.
pub const RESTRICTED: &str = "restricted_pods";
/// The fixture that refuses every pod (`DeniedByPolicy`).
pub const DENY_ALL: &str = "fixture_deny_all";

const CRDS: &str = "apis/apiextensions.k8s.io/v1";
const PLUGINS: &str = "apis/wasmlet.dev/v1alpha1";
/// How long a test waits for the nodes.
const WAIT: Duration = Duration::from_secs(20);

/// A shipped plugin's component, built on first use.
pub fn plugin(name: &str) -> PathBuf {
    wasmlet_plugin_host::dev::shipped_plugin(name)
}

/// The bytes of shipped plugin `name`.
pub fn bytes(name: &str) -> Vec<u8> {
    std::fs::read(plugin(name)).expect("component")
}

/// `sha256:…` of shipped plugin `name`.
pub fn digest_of(name: &str) -> String {
    format!("sha256:{}", wasmlet_fleet::fetch::sha256_hex(&bytes(name)))
}

/// What a node decided about the test pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Admitted,
    /// With the reason.
    Rejected(String),
}

/// One node.
pub struct Node {
    pub name: String,
    /// The plugin events the node recorded.
    pub events: Arc<MemoryRecorder>,
    pub chain: Arc<AdmissionChain>,
    pub probes: Arc<ProbeHandlers>,
    pub sources: Arc<PodSources>,
    /// The pods the node runs, as its policies see them.
    pub admitted: Arc<wasmlet_plugin_host::Admitted>,
    pub dir: PathBuf,
    stop: tokio_util::sync::CancellationToken,
}

impl Node {
    /// The node's chain on pod `default/web` (plain, not privileged).
    pub async fn decide(&self) -> Verdict {
        decide(&self.chain, &self.name).await
    }

    /// The node's chain on `pod` (a v1 Pod), the whole verdict.
    pub async fn verdict(&self, pod: Value) -> wasmlet_plugin_host::Verdict {
        verdict(&self.chain, &self.name, pod).await
    }

    /// The node's chain on `pod` (a v1 Pod) beside the pods it runs, as the sync loop
    /// asks it: the decision, with what policies in Monitor mode would have rejected.
    pub async fn admit(&self, pod: Value) -> wasmlet_plugin_host::chain::Decision {
        let json = pod.to_string();
        let pod: k8s::Pod = serde_json::from_value(pod).expect("pod");
        let admission = Admission::new(
            convert::pod(&pod, "api").expect("pod"),
            convert::node(&k8s_node(&self.name)).expect("node"),
            self.admitted.load(),
            move || json.clone(),
        );
        self.chain.decide(&admission).await
    }

    /// Runs `pod` (a v1 Pod) on the node, as if admitted: what an audit asks about.
    pub fn run(&self, pod: Value) {
        let pod: k8s::Pod = serde_json::from_value(pod).expect("pod");
        let converted = convert::pod(&pod, "api").expect("pod");
        let uid = pod.metadata.uid.clone().expect("uid");
        self.admitted
            .insert(&uid, Arc::new(converted), Arc::new(pod));
    }

    /// Waits until `ready` holds for the node.
    pub async fn wait(&self, ready: impl Fn(&Node) -> bool, what: &str) {
        let start = Instant::now();
        while !ready(self) {
            assert!(
                start.elapsed() < WAIT,
                "{}: {what}: not within {WAIT:?}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn decide(chain: &AdmissionChain, node: &str) -> Verdict {
    let pod = json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    });
    match verdict(chain, node, pod).await {
        wasmlet_plugin_host::Verdict::Admit => Verdict::Admitted,
        wasmlet_plugin_host::Verdict::Reject(r) => Verdict::Rejected(r.reason),
    }
}

/// Node `name`, with nothing but its name.
fn k8s_node(name: &str) -> k8s::Node {
    serde_json::from_value(json!({"metadata": {"name": name}})).expect("node")
}

async fn verdict(chain: &AdmissionChain, node: &str, pod: Value) -> wasmlet_plugin_host::Verdict {
    let json = pod.to_string();
    let pod: k8s::Pod = serde_json::from_value(pod).expect("pod");
    let node = k8s_node(node);
    let load = NodeLoad {
        usage: NodeUsage {
            requested: wasmlet_plugin_host::resources::empty(),
            pod_count: 0,
        },
        host_ports: Arc::from(Vec::new()),
    };
    let admission = Admission::new(
        convert::pod(&pod, "api").expect("pod"),
        convert::node(&node).expect("node"),
        load,
        move || json.clone(),
    );
    chain.admit(&admission).await.0
}

/// A hollow node called `name` following the cluster plugins of whatever `client` talks
/// to, keeping its files under `dir`: its own admission chain, probe handlers and pod
/// sources on the shared `engine`.
pub async fn hollow_node(
    engine: &PluginEngine,
    client: kube::Client,
    name: &str,
    config: &FleetConfig,
    dir: PathBuf,
) -> Node {
    let chain = Arc::new(AdmissionChain::new(engine.clone()));
    let probes = Arc::new(
        ProbeHandlers::start(engine, &PluginsConfig::default(), false)
            .await
            .expect("probes"),
    );
    let sources = Arc::new(
        PodSources::start(engine, &PluginsConfig::default(), false)
            .await
            .expect("sources"),
    );
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let events = Arc::new(MemoryRecorder::default());
    let admitted = Arc::new(wasmlet_plugin_host::Admitted::default());
    let labels = BTreeMap::from([("kubernetes.io/hostname".to_owned(), name.to_owned())]);
    wasmlet_fleet::start(
        client,
        name,
        labels,
        config,
        &dir,
        Targets {
            chain: chain.clone(),
            probes: probes.clone(),
            sources: sources.clone(),
            events: wasmlet_fleet::PluginEvents::new(events.clone(), name),
            admitted: Some(wasmlet_fleet::AdmittedPods {
                node: Arc::new(convert::node(&k8s_node(name)).expect("node")),
                pods: admitted.clone(),
            }),
        },
        stopped,
    )
    .await
    .expect("start");
    Node {
        name: name.to_owned(),
        events,
        chain,
        probes,
        sources,
        admitted,
        dir,
        stop,
    }
}

/// Waits until each of `nodes` serves digest `sha` (hex) as admission plugin `plugin`:
/// when each did, from `start`; fails after `within`.
pub async fn serving(
    nodes: &[Node],
    plugin: &str,
    sha: &str,
    start: Instant,
    within: Duration,
) -> Vec<Duration> {
    let mut at: Vec<Option<Duration>> = vec![None; nodes.len()];
    while at.iter().any(Option::is_none) {
        for (n, t) in nodes.iter().zip(at.iter_mut()) {
            if t.is_none()
                && n.chain
                    .current(plugin)
                    .is_some_and(|p| wasmlet_plugin_host::Plugin::digest(&*p) == sha)
            {
                *t = Some(start.elapsed());
            }
        }
        assert!(
            start.elapsed() < within,
            "not every node serves {plugin} sha256:{sha} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    at.into_iter().flatten().collect()
}

/// The double, and nodes following it.
pub struct Cluster {
    pub api: ApiServerSim,
    served: Option<Served>,
    pub client: kube::Client,
    /// The double's URL.
    pub url: String,
    pub nodes: Vec<Node>,
    pub dir: PathBuf,
    pub config: FleetConfig,
    engine: PluginEngine,
    /// Stops the controller when dropped.
    controller: Option<tokio_util::sync::DropGuard>,
}

/// A file of deploy/.
pub fn deploy_file(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|d| d.join("deploy").join(file))
        .find(|f| f.is_file())
        .unwrap_or_else(|| panic!("deploy/{file} above this crate"))
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_controller();
        // The nodes' compiled components: a hundred megabytes for an interpreter's.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A client of the double at `url`.
pub async fn client(dir: &Path, url: &str) -> kube::Client {
    client_as(dir, url, "node-token").await
}

/// A client of the double at `url` whose requests carry `token`.
pub async fn client_as(dir: &Path, url: &str, token: &str) -> kube::Client {
    std::fs::create_dir_all(dir).expect("dir");
    let path = dir.join("kubeconfig");
    wasmlet_apiserver_sim::write_kubeconfig_as(&path, url, token).expect("kubeconfig");
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    wasmlet_fleet::fetch::install_crypto_provider();
    kube::Client::try_from(config).expect("client")
}

impl Cluster {
    /// The double with the CRD and namespace installed, and nodes `names` following it.
    pub async fn start(test: &str, names: &[&str]) -> Cluster {
        Self::start_with(test, names, FleetConfig::default()).await
    }

    /// As [`Self::start`], the nodes configured with `config`.
    pub async fn start_with(test: &str, names: &[&str], config: FleetConfig) -> Cluster {
        // RUST_LOG=wasmlet_fleet=debug shows what the nodes do.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let dir = std::env::temp_dir().join(format!("wasmlet-fleet-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let api = ApiServerSim::new();
        let served = api
            .serve("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("serve");
        let client = client(&dir, &served.url()).await;
        for file in ["wasmletplugin-crd.yaml", "wasmletnode-crd.yaml"] {
            let crd: Value =
                serde_yaml_ng::from_str(&std::fs::read_to_string(deploy_file(file)).expect(file))
                    .expect("crd yaml");
            api.create(CRDS, "customresourcedefinitions", crd)
                .expect("crd");
        }
        api.create(
            "api/v1",
            "namespaces",
            json!({"metadata": {"name": "wasmlet-system"}}),
        )
        .expect("namespace");
        let mut c = Cluster {
            api,
            url: served.url(),
            served: Some(served),
            client,
            nodes: Vec::new(),
            engine: PluginEngine::with_cache(&dir.join("compiled")).expect("engine"),
            controller: None,
            dir,
            config,
        };
        c.start_controller();
        for name in names {
            c.create_node(name);
            let node = c.start_node(name).await;
            c.nodes.push(node);
        }
        for name in names {
            c.wait_node_object(name).await;
        }
        c
    }

    /// Compiles `wasm` into the nodes' shared cache ahead of a rollout, as a node that
    /// had it would load it: for the megabytes of an interpreter a debug build takes
    /// seconds to compile, which is not what a test of the rollout is about.
    pub fn precompile(&self, wasm: &[u8]) {
        self.engine.precompile_into_cache(wasm).expect("precompile");
    }

    /// Makes Node `name` (labelled with its host name), as the node registers itself.
    pub fn create_node(&self, name: &str) {
        self.api
            .create(
                "api/v1",
                "nodes",
                json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}),
            )
            .expect("node");
    }

    /// Starts `wasmlet controller` (one replica) against the double, as an admin.
    pub fn start_controller(&mut self) {
        let stop = tokio_util::sync::CancellationToken::new();
        let stopped = stop.clone();
        let options = wasmlet_fleet::controller::Options {
            namespace: "wasmlet-system".into(),
            lease: "wasmlet-controller".into(),
            identity: "test-controller".into(),
            timing: wasmlet_fleet::controller::lease::Timing {
                duration: Duration::from_secs(3),
                renew_deadline: Duration::from_secs(2),
                retry: Duration::from_millis(200),
            },
            count_period: Duration::from_secs(1),
        };
        let client = self.client.clone();
        tokio::spawn(async move {
            if let Err(e) = wasmlet_fleet::controller::run(client, &options, stopped).await {
                eprintln!("the controller stopped: {e}");
            }
        });
        self.controller = Some(stop.drop_guard());
    }

    /// Stops the controller.
    pub fn stop_controller(&mut self) {
        self.controller = None;
    }

    /// Waits until node `name` has its WasmletNode.
    pub async fn wait_node_object(&self, name: &str) {
        let start = Instant::now();
        while self.api.get(PLUGINS, "wasmletnodes", "", name).is_none() {
            assert!(
                start.elapsed() < WAIT,
                "{name}: no WasmletNode within {WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn start_node(&self, name: &str) -> Node {
        let dir = self.dir.join(name);
        // Each node under its own identity, as real nodes are (system:node:NAME).
        let token = format!("token-{name}");
        self.api
            .add_token(&token, &format!("system:node:{name}"), &["system:nodes"]);
        let client = client_as(&dir, &self.url, &token).await;
        hollow_node(&self.engine, client, name, &self.config, dir).await
    }

    /// Starts another node following the double (its Node object made by the caller).
    pub async fn add_node(&mut self, name: &str) -> &Node {
        let node = self.start_node(name).await;
        self.nodes.push(node);
        self.nodes.last().expect("the node")
    }

    /// Stops node `i` and starts it again (same directory).
    pub async fn restart_node(&mut self, i: usize) -> &Node {
        let name = self.nodes[i].name.clone();
        self.nodes[i].stop.cancel();
        self.nodes[i] = self.start_node(&name).await;
        &self.nodes[i]
    }

    /// The API server goes away (connections refused from now on).
    pub fn stop_api_server(&mut self) {
        if let Some(s) = self.served.take() {
            s.stop();
        }
    }

    /// ConfigMap `name` in wasmlet-system with these (key, shipped plugin) components.
    pub async fn config_map(&self, name: &str, keys: &[(&str, &str)]) {
        let keys: Vec<(&str, Vec<u8>)> = keys.iter().map(|(k, p)| (*k, bytes(p))).collect();
        self.config_map_bytes(name, &keys).await;
    }

    /// ConfigMap `name` in wasmlet-system with these (key, component bytes).
    pub async fn config_map_bytes(&self, name: &str, keys: &[(&str, Vec<u8>)]) {
        let data: serde_json::Map<String, Value> = keys
            .iter()
            .map(|(k, b)| {
                (
                    (*k).to_owned(),
                    base64::engine::general_purpose::STANDARD.encode(b).into(),
                )
            })
            .collect();
        self.api
            .create(
                "api/v1",
                "configmaps",
                json!({"metadata": {"name": name, "namespace": "wasmlet-system"}, "binaryData": data}),
            )
            .expect("configmap");
    }

    /// Creates or updates WasmletPlugin `object` (its spec replaced), as `kubectl apply`.
    pub async fn apply(&self, object: Value) {
        let name = object["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_owned();
        let mut body = json!({"apiVersion": "wasmlet.dev/v1alpha1", "kind": "WasmletPlugin"});
        body["metadata"] = object["metadata"].clone();
        body["spec"] = object["spec"].clone();
        let api: kube::Api<kube::api::DynamicObject> =
            kube::Api::all_with(self.client.clone(), &wasmlet_fleet::object::api_resource());
        api.patch(
            &name,
            &kube::api::PatchParams::apply("kubectl").force(),
            &kube::api::Patch::Apply(&body),
        )
        .await
        .expect("apply");
    }

    /// Deletes WasmletPlugin `name`.
    pub async fn delete(&self, name: &str) {
        let api: kube::Api<kube::api::DynamicObject> =
            kube::Api::all_with(self.client.clone(), &wasmlet_fleet::object::api_resource());
        api.delete(name, &Default::default()).await.expect("delete");
    }

    /// WasmletPlugin `name` as stored.
    pub fn object(&self, name: &str) -> Value {
        self.api
            .get(PLUGINS, "wasmletplugins", "", name)
            .unwrap_or(Value::Null)
    }

    /// Sets label `key=value` on node `node` (`kubectl label node`).
    pub async fn label(&self, node: &str, key: &str, value: &str) {
        self.patch_node(node, json!({"metadata": {"labels": {key: value}}}))
            .await;
    }

    /// Removes label `key` from node `node`.
    pub async fn unlabel(&self, node: &str, key: &str) {
        self.patch_node(node, json!({"metadata": {"labels": {key: null}}}))
            .await;
    }

    async fn patch_node(&self, node: &str, patch: Value) {
        let api: kube::Api<k8s::Node> = kube::Api::all(self.client.clone());
        api.patch(node, &Default::default(), &kube::api::Patch::Merge(&patch))
            .await
            .expect("node patch");
    }

    /// Each node's entry for plugin `name` (its WasmletNode's), with `nodeName` added, by
    /// node name.
    pub fn entries(&self, name: &str) -> Vec<Value> {
        let mut out: Vec<Value> = self
            .api
            .list(PLUGINS, "wasmletnodes")
            .into_iter()
            .filter_map(|o| {
                let node = o["metadata"]["name"].as_str()?.to_owned();
                let mut e = o["status"]["plugins"]
                    .as_array()?
                    .iter()
                    .find(|e| e["name"] == name)?
                    .clone();
                e["nodeName"] = json!(node);
                Some(e)
            })
            .collect();
        out.sort_by(|a, b| a["nodeName"].as_str().cmp(&b["nodeName"].as_str()));
        out
    }

    /// Waits until the nodes' entries for plugin `name` are exactly `want` (node,
    /// state) at `generation`.
    pub async fn wait_status(&self, name: &str, generation: i64, want: &[(&str, &str)]) {
        let start = Instant::now();
        loop {
            let got: Vec<(String, String, i64)> = self
                .entries(name)
                .iter()
                .map(|e| {
                    (
                        e["nodeName"].as_str().unwrap_or_default().to_owned(),
                        e["state"].as_str().unwrap_or_default().to_owned(),
                        e["observedGeneration"].as_i64().unwrap_or(0),
                    )
                })
                .collect();
            let matches = got.len() == want.len()
                && want.iter().all(|(n, s)| {
                    got.iter()
                        .any(|(gn, gs, gg)| gn == n && gs == s && *gg == generation)
                });
            if matches && self.object(name)["metadata"]["generation"] == generation {
                return;
            }
            assert!(
                start.elapsed() < WAIT,
                "{name}: entries {got:?}, not {want:?} at generation {generation} within {WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the controller's counts in the object's status say `want` (the
    /// fields given).
    pub async fn wait_summary(&self, name: &str, want: Value) {
        let start = Instant::now();
        let says = |status: &Value| {
            want.as_object()
                .expect("fields")
                .iter()
                .all(|(k, v)| &status[k] == v)
        };
        while !says(&self.object(name)["status"]) {
            assert!(
                start.elapsed() < WAIT,
                "{name}: status {}, not {want}",
                self.object(name)["status"]
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// How many writes of the nodes' WasmletNode statuses the double answered.
    pub fn node_writes(&self) -> usize {
        let path = format!("/{PLUGINS}/wasmletnodes/");
        self.api
            .requests()
            .iter()
            .filter(|(m, p)| {
                m == "PATCH"
                    && p.starts_with(&path)
                    && p.contains("/status?fieldManager=wasmlet-node")
            })
            .count()
    }

    /// Decides on every node, over and over, until stopped: a pass over the nodes every
    /// millisecond at most (hollow nodes share this machine's cores; a decision loop
    /// that never waits would take one of them from the nodes it is watching).
    pub fn decide_continuously(&self) -> Deciding {
        let stop = Arc::new(AtomicBool::new(false));
        let decided = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let chains: Vec<(String, Arc<AdmissionChain>)> = self
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.chain.clone()))
            .collect();
        let task = {
            let (stop, decided, failed) = (stop.clone(), decided.clone(), failed.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    for (name, chain) in &chains {
                        match decide(chain, name).await {
                            Verdict::Rejected(r) if r != "DeniedByPolicy" => {
                                failed.fetch_add(1, Ordering::Relaxed);
                            }
                            _ => {}
                        }
                        decided.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            })
        };
        Deciding {
            stop,
            decided,
            failed,
            task,
        }
    }
}

/// Decisions made in the background.
pub struct Deciding {
    stop: Arc<AtomicBool>,
    decided: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

/// What [`Deciding`] counted.
#[derive(Debug)]
pub struct Counts {
    pub decided: u64,
    /// Decisions that were neither an admission nor a policy's rejection.
    pub failed: u64,
}

impl Deciding {
    pub async fn stop(self) -> Counts {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        Counts {
            decided: self.decided.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

/// Secret `registry` in wasmlet-system: the credentials for `addr`.
pub fn pull_secret(c: &Cluster, addr: &str, user: &str, password: &str) {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let config = json!({"auths": {addr: {"auth": auth}}}).to_string();
    c.api
        .create(
            "api/v1",
            "secrets",
            json!({"metadata": {"name": "registry", "namespace": "wasmlet-system"},
                   "type": "kubernetes.io/dockerconfigjson",
                   "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD.encode(config)}}),
        )
        .expect("secret");
}
