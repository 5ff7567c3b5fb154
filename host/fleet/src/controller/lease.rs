//! Leader election through a `coordination.k8s.io/v1` Lease, as the controller manager
//! does: a replica takes the Lease when nobody holds it or its holder has not renewed it
//! for `leaseDurationSeconds` (measured by this replica's own clock, from when it saw
//! the record change, so clocks need not agree), renews it every retry period, and
//! gives up leading when it could not renew within the renew deadline. Every write
//! carries the resourceVersion it read, so of two replicas racing one wins.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// The timings, as the controller manager's defaults.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// How long a Lease not renewed stays its holder's.
    pub duration: Duration,
    /// How long the leader keeps trying to renew before it gives up.
    pub renew_deadline: Duration,
    /// Between attempts to take or renew.
    pub retry: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }
}

/// One replica's side of the election.
pub struct Election {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    /// The holder and renew time last seen, and when this replica saw them first.
    observed: Option<(Option<String>, Option<MicroTime>, Instant)>,
}

impl Election {
    /// The election over Lease `namespace/name`, as `identity`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: Timing,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity: identity.to_owned(),
            timing,
            observed: None,
        }
    }

    /// Waits until this replica leads.
    pub async fn acquire(&mut self) {
        let mut said = false;
        loop {
            match self.try_acquire().await {
                Ok(true) => {
                    info!(lease = %self.name, identity = %self.identity, "leading");
                    return;
                }
                Ok(false) if !said => {
                    info!(lease = %self.name, holder = ?self.holder(), "another replica leads; waiting for its Lease to lapse");
                    said = true;
                }
                Ok(false) => {}
                Err(e) => {
                    warn!(lease = %self.name, error = %e, "reading or taking the Lease failed")
                }
            }
            tokio::time::sleep(self.timing.retry).await;
        }
    }

    /// Renews the Lease until renewing fails for longer than the renew deadline or
    /// another replica holds it: then this replica no longer leads, and says why.
    pub async fn keep(&mut self) -> String {
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(self.timing.retry).await;
            match self.try_acquire().await {
                Ok(true) => renewed = Instant::now(),
                Ok(false) => {
                    return format!("Lease {} is held by {:?} now", self.name, self.holder());
                }
                Err(e) => debug!(lease = %self.name, error = %e, "renewing the Lease failed"),
            }
            if renewed.elapsed() > self.timing.renew_deadline {
                return format!(
                    "Lease {} not renewed within {:?}",
                    self.name, self.timing.renew_deadline
                );
            }
        }
    }

    /// Gives the Lease up (a replica waiting takes it at its next attempt).
    pub async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(&self.identity) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        let _ = self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await;
    }

    fn holder(&self) -> Option<String> {
        self.observed.as_ref().and_then(|o| o.0.clone())
    }

    /// Takes or renews the Lease if it is free, lapsed or this replica's: whether this
    /// replica holds it now.
    async fn try_acquire(&mut self) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(None, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let record = (spec.holder_identity.clone(), spec.renew_time.clone());
        let now_seen = Instant::now();
        let seen_at = match &self.observed {
            Some((h, r, at)) if (h, r) == (&record.0, &record.1) => *at,
            _ => now_seen,
        };
        self.observed = Some((record.0.clone(), record.1.clone(), seen_at));
        let mine = spec.holder_identity.as_deref() == Some(&self.identity);
        let lasts = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
        let free = spec.holder_identity.as_deref().is_none_or(str::is_empty)
            || seen_at + lasts <= now_seen;
        if !mine && !free {
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!mine);
        let acquired = if mine { spec.acquire_time } else { None };
        lease.spec = Some(self.spec(acquired, transitions));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The Lease's spec with this replica holding it, renewed now.
    fn spec(&self, acquired: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.timing.duration.as_secs().max(1) as i32),
            acquire_time: Some(acquired.unwrap_or_else(now)),
            renew_time: Some(now()),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}
