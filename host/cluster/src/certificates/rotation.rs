//! Certificates renewed before they expire, as the kubelet's certificate manager does:
//! at a jittered 70–90 % of the current certificate's lifetime a new CSR is posted
//! (with the current identity, so that the controller manager's `selfnodeclient` rule
//! approves a client certificate), the new pair stored and handed to whoever presents
//! it — new connections from then on use it; nothing restarts.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::csr::{Request, obtain};
use super::store::{Pair, Store};

/// Where a new pair goes (the client's identity, the server's certificate).
pub type Publish = Arc<dyn Fn(&Pair) + Send + Sync>;

/// How long one CSR is waited for before another is posted.
const WAIT: Duration = Duration::from_secs(15 * 60);

/// A fraction in [0.7, 0.9): when in a certificate's life it is renewed.
pub fn jittered_fraction() -> f64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    0.7 + 0.2 * (h.finish() % 10_000) as f64 / 10_000.0
}

/// A certificate kept current.
pub struct Rotation {
    /// Where it is stored.
    pub store: Store,
    /// What is asked for.
    pub request: Request,
    /// Where each new pair goes.
    pub publish: Publish,
    /// The pair in use while the store has none (a kubeconfig's own certificate).
    pub fallback: Option<Pair>,
    /// Renew at once rather than at the current pair's deadline (a pair just adopted
    /// from a kubeconfig, as the kubelet's certificate manager forces).
    pub renew_now: bool,
}

impl Rotation {
    /// Runs with `client` until `stop`: the stored pair is published first (when
    /// valid), then renewed at each deadline; without a valid pair one is requested
    /// now.
    pub fn spawn(
        self,
        client: kube::Client,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            tokio::select! {
                () = self.run(&client) => {}
                () = stop.cancelled() => {}
            }
        })
    }

    /// The pair in use: the stored one, else the fallback.
    fn current(&self) -> Option<Pair> {
        self.store.current().or_else(|| self.fallback.clone())
    }

    async fn run(&self, client: &kube::Client) {
        if let Some(pair) = self.current().filter(|p| p.valid_at(SystemTime::now())) {
            (self.publish)(&pair);
        }
        let mut renew_now = self.renew_now;
        loop {
            let due = match self.current() {
                Some(p) if p.valid_at(SystemTime::now()) && !renew_now => {
                    p.deadline(jittered_fraction())
                }
                _ => SystemTime::now(),
            };
            renew_now = false;
            let wait = due.duration_since(SystemTime::now()).unwrap_or_default();
            tracing::info!(
                signer = self.request.signer,
                at = %super::store::rfc3339(due),
                "certificate rotation scheduled"
            );
            tokio::time::sleep(wait).await;
            self.renew(client).await;
        }
    }

    /// One new pair, retried with back-off until issued.
    async fn renew(&self, client: &kube::Client) {
        let mut delay = Duration::from_secs(2);
        loop {
            let stored = match obtain(client, &self.request, WAIT).await {
                Ok((cert, key)) => self.store.save(&cert, &key),
                Err(e) => Err(e),
            };
            match stored {
                Ok(pair) => {
                    tracing::info!(
                        signer = self.request.signer,
                        expires = %super::store::rfc3339(pair.not_after),
                        "certificate rotated"
                    );
                    (self.publish)(&pair);
                    return;
                }
                Err(e) => {
                    tracing::warn!(
                        signer = self.request.signer,
                        "certificate rotation: {e}; trying again in {delay:?}"
                    );
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(300));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_fall_between_70_and_90_percent() {
        for _ in 0..100 {
            let f = jittered_fraction();
            assert!((0.7..0.9).contains(&f), "{f}");
        }
    }
}
