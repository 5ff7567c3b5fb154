//! The node the kubelet server tests run: an agent on the in-process CRI simulator,
//! its kubelet server trusting the API server double's client CA and asking the
//! double's TokenReview and SubjectAccessReview, and its usage sampled for
//! `/stats/summary`.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use wasmlet_agent::agent::{Agent, AgentOptions};
use wasmlet_agent::node::NodeFacts;
use wasmlet_agent::syncloop::SourceSet;
use wasmlet_apiserver_sim::ApiServerSim;
use wasmlet_cri_sim::Simulator;
use wasmlet_plugin_host::source::SourcePod;
use wasmlet_server::authn::AuthnSettings;
use wasmlet_server::authz::AuthzSettings;
use wasmlet_server::review::ApiReviews;

pub use wasmlet_agent::testing::NoProbes;

pub struct Node {
    pub api: ApiServerSim,
    pub client: kube::Client,
    pub agent: Arc<Agent<Simulator>>,
    pub served: wasmlet_server::Served,
    pub apiserver: Option<wasmlet_apiserver_sim::Served>,
    pub dir: std::path::PathBuf,
    /// The node's usage samples, taken every 300 ms.
    pub stats: Arc<wasmlet_stats::Stats>,
}

pub const NODE: &str = "node-k";

pub async fn node(test: &str) -> Node {
    let dir =
        std::env::temp_dir().join(format!("wasmlet-kubelet-api-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let api = ApiServerSim::new();
    api.set_address_types(&["InternalIP", "Hostname"]);
    let apiserver = api
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let kubeconfig = dir.join("kubeconfig");
    wasmlet_apiserver_sim::write_kubeconfig(&kubeconfig, &apiserver.url()).expect("kubeconfig");
    let client = wasmlet_cluster_client(&kubeconfig).await;
    let ca = dir.join("client-ca.crt");
    std::fs::write(&ca, api.kubelet_client_ca_pem().expect("ca")).expect("write ca");

    let sim = Arc::new(Simulator::new());
    let agent = Arc::new(Agent::start(
        sim,
        AgentOptions {
            pod_logs_dir: dir.join("logs"),
            relist_period: Duration::from_millis(200),
            ..wasmlet_agent::testing::options(
                NodeFacts {
                    ip: "127.0.0.1".into(),
                    cpus: 2,
                    memory_bytes: 4 << 30,
                    ephemeral_storage_bytes: 10 << 30,
                    ..wasmlet_agent::testing::node_facts(NODE)
                },
                &dir.join("root"),
            )
        },
        Arc::new(NoProbes),
        None,
        None,
    ));
    let (stats, _sampler) =
        wasmlet_stats::agent::sample(&agent, &dir.join("root"), Duration::from_millis(300));
    let reviews = Arc::new(ApiReviews::new(client.clone()));
    let served = wasmlet_server::start(
        wasmlet_server::Settings {
            addr: "127.0.0.1:0".parse().expect("addr"),
            node_name: NODE.into(),
            tls: wasmlet_server::tls::TlsSettings {
                client_ca_file: Some(ca),
                ..Default::default()
            },
            self_signed: wasmlet_server::tls::SelfSigned {
                dir: dir.join("pki"),
                names: vec![NODE.into()],
                ips: vec!["127.0.0.1".parse().expect("ip")],
            },
            authn: AuthnSettings::default(),
            authz: AuthzSettings::default(),
            node_log_dir: dir.join("var-log"),
        },
        wasmlet_server::Parts {
            agent: agent.clone(),
            metrics: Arc::new(|| "kubelet_running_pods 1\n".into()),
            probe_metrics: Arc::new(String::new),
            configz: serde_json::json!({"nodeName": NODE}),
            tokens: Some(reviews.clone()),
            access: Some(reviews),
            stats: Some(stats.clone()),
        },
    )
    .await
    .expect("server");
    // The node as the agent registers it: addresses and its kubelet port.
    api.create(
        "api/v1",
        "nodes",
        serde_json::json!({
            "metadata": {"name": NODE},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": NODE}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": served.addr.port()}},
            },
        }),
    )
    .expect("node");
    // The API server's client certificate may do anything on nodes (system:masters).
    api.allow("group:system:masters", "*", "*");
    Node {
        api,
        client,
        agent,
        served,
        apiserver: Some(apiserver),
        dir,
        stats,
    }
}

pub async fn wasmlet_cluster_client(path: &std::path::Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    let _ = rustls::crypto::ring::default_provider().install_default();
    kube::Client::try_from(config).expect("client")
}

/// Runs `name` (a static pod of `containers`) on the node, and makes the API server's
/// copy (bound to the node) that requests are routed by.
pub async fn run_pod(n: &Node, name: &str, containers: serde_json::Value) -> String {
    let manifest = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": containers},
    });
    n.agent
        .sources()
        .send(SourceSet::whole(
            "file",
            vec![SourcePod {
                origin: format!("{name}.yaml"),
                pod: serde_json::from_value(manifest.clone()).expect("pod"),
            }],
        ))
        .await
        .expect("sources");
    let full = format!("{name}-{NODE}");
    let mut bound = manifest;
    bound["metadata"]["name"] = full.clone().into();
    bound["spec"]["nodeName"] = NODE.into();
    n.api.create("api/v1", "pods", bound).expect("bound pod");
    for _ in 0..200 {
        let running = n
            .agent
            .ctx
            .statuses
            .find("default", &full)
            .is_some_and(|e| {
                e.status
                    .container_statuses
                    .iter()
                    .flatten()
                    .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
                    && e.status
                        .container_statuses
                        .as_ref()
                        .is_some_and(|c| !c.is_empty())
            });
        if running {
            // The relist that saw it running also fed the pod cache.
            tokio::time::sleep(Duration::from_millis(300)).await;
            return full;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{full} did not run");
}

/// A raw request to the kubelet server: kube's client as an HTTPS client, with
/// `token` as its bearer token (or none).
pub async fn raw(n: &Node, path: &str, token: Option<&str>) -> (u16, String) {
    wasmlet_server::dev::get(n.served.addr.port(), path, token).await
}
