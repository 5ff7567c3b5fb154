//! wasmlet's cluster mode: what joins a node agent to a Kubernetes API server.
//!
//! - [`connect`]: a client from a kubeconfig (token or client certificate, TLS verified
//!   against the cluster's CA), errors naming the file.
//! - [`node`]: registration (create the Node, or adopt one of the same name) and the
//!   node's status in the kubelet's words, sent as a merge PATCH to `nodes/NAME/status`.
//! - [`lease`]: the node's Lease in `kube-node-lease`, 40 s, renewed every 10 s, with
//!   back-off on conflicts and outages.
//! - [`pods`]: the pods bound to the node, listed and watched, as the agent's `api`
//!   pod source.
//! - [`status`]: pod statuses patched to the API server, mirror pods for static pods,
//!   and the final delete of pods the API server deletes.
//! - [`mirror`]: mirror pods; [`events`]: events through the events API;
//!   [`ratelimit`]: the client's token bucket; [`volumes`]: ConfigMaps, Secrets and
//!   service account tokens for the agent's volumes; [`services`]: the cluster's
//!   Services, watched once for the node, for the containers' Service variables.
//!
//! [`start`] runs them all for an agent. Standalone mode (no kubeconfig) uses none of
//! this.

use std::sync::Arc;

use k8s_openapi::api::core::v1 as k8s;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use wasmlet_agent::node::NodeFacts;
use wasmlet_agent::statuses::StatusManager;
use wasmlet_agent::syncloop::SourceSet;

pub mod certificates;
pub mod connect;
mod error;
pub mod events;
pub mod lease;
pub mod mirror;
pub mod node;
pub mod objects;
pub mod pods;
pub mod ratelimit;
pub mod services;
pub mod status;
pub mod volumes;

pub use error::ClusterError;
pub use lease::now_micro;

/// Client limits, the kubelet's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// kubeAPIQPS (50): requests a second to the API server, on average.
    pub api_qps: f64,
    /// kubeAPIBurst (100).
    pub api_burst: u32,
    /// eventRecordQPS (50): events a second.
    pub event_qps: f64,
    /// eventBurst (100).
    pub event_burst: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            api_qps: 50.0,
            api_burst: 100,
            event_qps: 50.0,
            event_burst: 100,
        }
    }
}

/// An agent joining a cluster.
pub struct Cluster {
    /// The API server.
    pub client: kube::Client,
    /// The node.
    pub facts: NodeFacts,
    /// Taints to register with (registerWithTaints).
    pub taints: Vec<k8s::Taint>,
    /// Node status and lease timing.
    pub timing: node::Timing,
    /// The agent's statuses.
    pub statuses: Arc<StatusManager>,
    /// Where the `api` source's sets go (the agent's pod config).
    pub sources: mpsc::Sender<SourceSet>,
    /// Whether the agent's pod sources have all reported.
    pub sources_ready: status::SourcesReady,
    /// The events the agent records (from [`events::ApiRecorder::new`]); `None` sends
    /// none.
    pub events: Option<events::EventQueue>,
    /// Client limits.
    pub limits: Limits,
}

/// Starts everything cluster mode runs for an agent — registration, node status and
/// lease, the API pod source, the status sync with mirror pods, events — until
/// `shutdown` turns true. `state` says, each time, whether the node is ready.
pub fn start(
    cluster: Cluster,
    state: impl Fn() -> node::NodeState + Send + Sync + 'static,
    shutdown: CancellationToken,
) -> Vec<JoinHandle<()>> {
    let Cluster {
        client,
        facts,
        taints,
        timing,
        statuses,
        sources,
        sources_ready,
        events,
        limits,
    } = cluster;
    let (owner_tx, owner_rx) = watch::channel(None);
    let mirrors = Arc::new(mirror::MirrorPods::default());
    let mut tasks = vec![
        tokio::spawn(node::run(
            client.clone(),
            facts.clone(),
            taints,
            timing,
            state,
            owner_tx,
            shutdown.clone(),
        )),
        tokio::spawn(pods::run(
            client.clone(),
            facts.name.clone(),
            sources,
            mirrors.clone(),
            shutdown.clone(),
        )),
        tokio::spawn(status::run(
            status::StatusSync {
                client: client.clone(),
                statuses,
                mirrors,
                owner: owner_rx,
                sources_ready,
                limiter: Arc::new(ratelimit::RateLimiter::new(
                    limits.api_qps,
                    limits.api_burst,
                )),
            },
            shutdown.clone(),
        )),
    ];
    if let Some(queue) = events {
        tasks.push(tokio::spawn(events::run(
            client,
            facts.name,
            queue,
            ratelimit::RateLimiter::new(limits.event_qps, limits.event_burst),
            shutdown,
        )));
    }
    tasks
}
