//! The agent joined to the API server double that the cluster tests share: an agent on
//! the in-process CRI simulator started through [`wasmlet_cluster::start`], with waits
//! on the double's copy of its pods and on the events it writes.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as k8s;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use wasmlet_agent::agent::{Agent, AgentOptions};
use wasmlet_agent::node::NodeFacts;
use wasmlet_agent::syncloop::SourceSet;
use wasmlet_apiserver_sim::{ApiServerSim, Served};
use wasmlet_cluster::events::ApiRecorder;
use wasmlet_cluster::{Cluster, Limits, connect, node};
use wasmlet_cri::CriRuntime;
use wasmlet_cri_sim::Simulator;
use wasmlet_plugin_host::source::SourcePod;

/// Every probe passes.
pub use wasmlet_agent::testing::NoProbes as Passes;

/// An agent joined to the double.
pub struct Node {
    pub api: ApiServerSim,
    pub served: Option<Served>,
    pub addr: SocketAddr,
    pub client: kube::Client,
    pub cri: Arc<Simulator>,
    pub agent: Arc<Agent<Simulator>>,
    /// Where the agent's volumes read ConfigMaps and Secrets.
    pub volumes: Arc<wasmlet_cluster::volumes::ApiVolumes>,
    /// The agent's root directory.
    pub root: PathBuf,
    pub name: String,
    pub stop: tokio_util::sync::CancellationToken,
}

impl Node {
    /// The test's directory, empty.
    pub fn dir(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "wasmlet-cluster-pods-{test}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    }

    /// The double served on a free port, and a client of it (its kubeconfig in `dir`).
    pub async fn served_double(dir: &std::path::Path) -> (ApiServerSim, Served, kube::Client) {
        let api = ApiServerSim::new();
        let served = api
            .serve("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("serve");
        let kubeconfig = dir.join("kubeconfig");
        wasmlet_apiserver_sim::write_kubeconfig(&kubeconfig, &served.url()).expect("kubeconfig");
        let client = connect::client(&kubeconfig).await.expect("client");
        (api, served, client)
    }

    pub async fn start(test: &str) -> Node {
        let (api, served, client) = Self::served_double(&Self::dir(test)).await;
        let addr = served.addr;
        Self::start_on(test, api, (Some(served), addr), client, Default::default()).await
    }

    /// The node on `api` (served by `served` on `addr`, or not served at all yet)
    /// through `client`, its status and lease kept with `timing`.
    pub async fn start_on(
        test: &str,
        api: ApiServerSim,
        (served, addr): (Option<Served>, SocketAddr),
        client: kube::Client,
        timing: node::Timing,
    ) -> Node {
        // RUST_LOG=wasmlet_cluster=debug shows what the agent and the sync do.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let dir = std::env::temp_dir().join(format!(
            "wasmlet-cluster-pods-{test}-{}",
            std::process::id()
        ));
        let name = format!("node-{test}");
        let facts = NodeFacts {
            name: name.clone(),
            hostname: name.clone(),
            ip: "192.168.60.10".into(),
            cpus: 4,
            memory_bytes: 8 << 30,
            ephemeral_storage_bytes: 100 << 30,
            max_pods: 110,
            labels: BTreeMap::new(),
            reserved: Default::default(),
            hugepages: Vec::new(),
        };
        let (recorder, events) = ApiRecorder::new();
        let cri = Arc::new(Simulator::new());
        let volumes = Arc::new(wasmlet_cluster::volumes::ApiVolumes::new(client.clone()));
        let agent = Arc::new(Agent::start(
            cri.clone(),
            AgentOptions {
                node_cgroups: Default::default(),
                node: facts.clone(),
                pod_logs_dir: dir.join("logs"),
                root_dir: dir.join("root"),
                resolv_conf: PathBuf::from("/etc/resolv.conf"),
                sync_frequency: Duration::from_secs(60),
                relist_period: Duration::from_secs(1),
                sources: vec!["file".into(), "api".into()],
                pod_cgroups: None,
                events: Some(recorder),
                volumes: Some(volumes.clone()),
                services: Some(Arc::new(
                    wasmlet_cluster::services::ServiceWatch::start(client.clone()).0,
                )),
                cluster_dns: Default::default(),
                start_parallelism: 0,
                devices: None,
            },
            Arc::new(Passes),
            None,
            None,
        ));
        let stop = tokio_util::sync::CancellationToken::new();
        let stopped = stop.clone();
        let ready = agent.clone();
        let images = Arc::new(wasmlet_stats::images::NodeImages::default());
        images.refresh(cri.as_ref(), Some(50)).await;
        let state = {
            let agent = agent.clone();
            move || node::NodeState {
                not_ready: agent.readiness().err().map(|e| e.to_string()),
                runtime_version: "sim://1".into(),
                port: 10250,
                pressure: Default::default(),
                images: images.get(),
                devices: Default::default(),
            }
        };
        wasmlet_cluster::start(
            Cluster {
                client: client.clone(),
                facts,
                taints: Vec::new(),
                timing,
                statuses: agent.ctx.statuses.clone(),
                sources: agent.sources(),
                sources_ready: Arc::new(move || ready.sources_ready()),
                events: Some(events),
                limits: Limits::default(),
            },
            state,
            stopped,
        );
        let node = Node {
            api,
            addr,
            served,
            client,
            cri,
            agent,
            volumes,
            root: dir.join("root"),
            name,
            stop,
        };
        node.set_static(Vec::new()).await;
        node
    }

    /// The file source's whole set.
    pub async fn set_static(&self, pods: Vec<Value>) {
        let pods = pods
            .into_iter()
            .enumerate()
            .map(|(i, p)| SourcePod {
                origin: format!("pod{i}.yaml"),
                pod: serde_json::from_value(p).expect("pod"),
            })
            .collect();
        self.agent
            .sources()
            .send(SourceSet::whole("file", pods))
            .await
            .expect("agent runs");
    }

    pub fn pods(&self) -> Api<k8s::Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    /// Creates a pod bound to this node through the API.
    pub async fn create(&self, name: &str, grace: i64, command: &str) -> k8s::Pod {
        let pod: k8s::Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": self.name,
                "terminationGracePeriodSeconds": grace,
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "localhost/busybox:latest",
                    "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", command]}]
            }
        }))
        .expect("pod");
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .expect("create")
    }

    /// The pod as the API server has it.
    pub fn stored(&self, name: &str) -> Option<Value> {
        self.api.get("api/v1", "pods", "default", name)
    }

    /// Waits until the stored pod `name` satisfies `check` (`None`: it is gone).
    pub async fn wait(&self, what: &str, limit: Duration, check: impl Fn(Option<&Value>) -> bool) {
        let started = Instant::now();
        loop {
            let stored = self.stored_any(what);
            if check(stored.as_ref()) {
                return;
            }
            assert!(
                started.elapsed() < limit,
                "{what}: not within {limit:?}; the API server has {stored:#?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `what` starts with the pod's name.
    pub fn stored_any(&self, what: &str) -> Option<Value> {
        let name = what.split_whitespace().next().unwrap_or(what);
        self.stored(name)
    }

    pub fn requests(&self, method: &str, path_end: &str) -> usize {
        self.api
            .requests()
            .iter()
            .filter(|(m, p)| m == method && p.ends_with(path_end))
            .count()
    }

    pub async fn running_containers(&self) -> Vec<(String, String)> {
        self.cri
            .list_containers(None)
            .await
            .expect("list")
            .into_iter()
            .filter(|c| c.state == wasmlet_cri::proto::ContainerState::ContainerRunning as i32)
            .map(|c| {
                (
                    c.labels
                        .get("io.kubernetes.pod.name")
                        .cloned()
                        .unwrap_or_default(),
                    c.id,
                )
            })
            .collect()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(s) = self.served.take() {
            s.stop();
        }
    }
}

/// A static pod named `etcd` running `sleep 3600` from the test image at `image_tag`
/// (PID 1 ignores SIGTERM: stopping it takes its grace period, 2 s).
pub fn static_pod(image_tag: &str) -> Value {
    json!({
        "metadata": {"name": "etcd", "namespace": "default", "labels": {"tier": "control"}},
        "spec": {"terminationGracePeriodSeconds": 2,
            "containers": [{"name": "c", "image": format!("localhost/busybox:{image_tag}"),
            "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"]}]}
    })
}

pub fn phase(p: Option<&Value>) -> &str {
    p.and_then(|p| p["status"]["phase"].as_str()).unwrap_or("")
}

pub fn condition(p: &Value, kind: &str) -> String {
    p["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
        .to_owned()
}

pub async fn event_reasons(client: &kube::Client, pod: &str) -> Vec<String> {
    let events: Api<k8s::Event> = Api::namespaced(client.clone(), "default");
    let mut list: Vec<k8s::Event> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(pod))
        .collect();
    list.sort_by_key(|e| {
        e.metadata
            .resource_version
            .clone()
            .map(|v| v.parse::<u64>().unwrap_or(0))
    });
    list.into_iter().filter_map(|e| e.reason).collect()
}

/// Waits until events with `reasons` are written for `pod`.
pub async fn wait_events(client: &kube::Client, pod: &str, reasons: &[&str]) {
    let started = Instant::now();
    loop {
        let written = event_reasons(client, pod).await;
        if reasons.iter().all(|r| written.iter().any(|x| x == r)) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "events for {pod}: {written:?}, want {reasons:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
