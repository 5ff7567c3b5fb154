//! The node's Lease (`kube-node-lease/<node>`): the heartbeat the node lifecycle
//! controller watches. Duration 40 s, renewed every 10 s (a quarter of it); a failed
//! renewal is retried after 200 ms, doubling up to 7 s, as the kubelet's lease
//! controller does; a conflict (someone else wrote it) re-reads it first.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::PostParams;
use tokio_util::sync::CancellationToken;

use crate::error::ClusterError;

/// The namespace of node leases.
pub const NAMESPACE: &str = "kube-node-lease";
/// How long a lease lasts (`nodeLeaseDurationSeconds`).
pub const DURATION_SECONDS: i32 = 40;
/// How often it is renewed, by default (a quarter of the duration).
pub const RENEW_INTERVAL: Duration = Duration::from_secs(10);
/// First retry after a failed renewal; doubles up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// Longest wait between retries.
pub const MAX_BACKOFF: Duration = Duration::from_secs(7);

/// Keeps one node's lease.
pub struct Heartbeat {
    api: Api<Lease>,
    node: String,
    owner: Option<OwnerReference>,
    /// The lease as last written (saves a GET per renewal).
    last: Option<Lease>,
    /// leaseDurationSeconds (nodeLeaseDurationSeconds).
    duration_seconds: i32,
}

impl Heartbeat {
    /// The lease of `node`; `owner` (the Node) makes it go when the Node goes.
    pub fn new(client: kube::Client, node: &str, owner: Option<OwnerReference>) -> Self {
        Heartbeat {
            api: Api::namespaced(client, NAMESPACE),
            node: node.to_owned(),
            owner,
            last: None,
            duration_seconds: DURATION_SECONDS,
        }
    }

    /// A lease of `seconds` (nodeLeaseDurationSeconds), renewed every quarter of it as
    /// the kubelet does.
    pub fn duration(mut self, seconds: i32) -> Self {
        self.duration_seconds = seconds.max(1);
        self
    }

    /// How often the lease is renewed: a quarter of its duration (10 s for 40 s).
    pub fn renew_interval(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.duration_seconds).unwrap_or(40) * 250)
    }

    fn fill(&self, lease: &mut Lease) {
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.node.clone());
        spec.lease_duration_seconds = Some(self.duration_seconds);
        spec.renew_time =
            serde_json::from_value::<MicroTime>(serde_json::Value::String(now_micro())).ok();
        if lease.metadata.owner_references.is_none()
            && let Some(owner) = &self.owner
        {
            lease.metadata.owner_references = Some(vec![owner.clone()]);
        }
    }

    /// Renews the lease once (creating it if there is none); returns it as written.
    pub async fn renew(&mut self) -> Result<Lease, ClusterError> {
        let what = || format!("renewing the lease {NAMESPACE}/{}", self.node);
        if let Some(mut lease) = self.last.take() {
            self.fill(&mut lease);
            match self
                .api
                .replace(&self.node, &PostParams::default(), &lease)
                .await
            {
                Ok(written) => {
                    self.last = Some(written.clone());
                    return Ok(written);
                }
                // Written by someone else since: read it again below.
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
                Err(e) => return Err(ClusterError::api(what())(e)),
            }
        }
        let written = match self
            .api
            .get_opt(&self.node)
            .await
            .map_err(ClusterError::api(what()))?
        {
            Some(mut lease) => {
                self.fill(&mut lease);
                self.api
                    .replace(&self.node, &PostParams::default(), &lease)
                    .await
                    .map_err(ClusterError::api(what()))?
            }
            None => {
                let mut lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.node.clone()),
                        namespace: Some(NAMESPACE.into()),
                        ..Default::default()
                    },
                    spec: None,
                };
                self.fill(&mut lease);
                self.api
                    .create(&PostParams::default(), &lease)
                    .await
                    .map_err(ClusterError::api(what()))?
            }
        };
        self.last = Some(written.clone());
        Ok(written)
    }

    /// Renews every [`Heartbeat::renew_interval`] until `shutdown` turns true, retrying failures
    /// with back-off; never gives up.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut backoff = FIRST_BACKOFF;
        loop {
            let wait = match self.renew().await {
                Ok(_) => {
                    backoff = FIRST_BACKOFF;
                    self.renew_interval()
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "failed to update lease");
                    let wait = backoff;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    wait
                }
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = shutdown.cancelled() => return,
            }
        }
    }
}

/// RFC 3339 with microseconds, the API server's `MicroTime` form.
pub fn now_micro() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let seconds = i64::try_from(nanos / 1_000_000_000).unwrap_or(0);
    let micros = (nanos % 1_000_000_000) / 1_000;
    let text = wasmlet_agent::time::rfc3339(seconds);
    format!("{}.{micros:06}Z", text.trim_end_matches('Z'))
}
