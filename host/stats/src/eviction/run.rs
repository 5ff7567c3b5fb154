//! The housekeeping loop: sample, publish, synchronize the eviction manager, act —
//! reclaim at node level, evict one pod — and publish the node's pressure.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use wasmlet_cri::CriRuntime;

use super::{Decision, Eviction, Manager, PodFacts, Pressure, Signal};
use crate::collect::{Collector, Sample};
use crate::latest::Stats;
use crate::summary::FsStats;

/// Where samples come from: the [`Collector`], or a script in tests.
pub trait Sampler: Send {
    /// One sample now.
    fn sample(&mut self) -> BoxFuture<'_, Sample>;
}

impl<R: CriRuntime + 'static> Sampler for Collector<R> {
    fn sample(&mut self) -> BoxFuture<'_, Sample> {
        Box::pin(self.collect())
    }
}

/// A boxed future (the [`Node`] trait is used as a trait object).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How long the eviction manager waits for an evicted pod's containers to stop before
/// its next round (the kubelet's `podCleanupTimeout`).
pub const POD_CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How often it looks (the kubelet's `podCleanupPollFreq`).
const CLEANUP_POLL: Duration = Duration::from_secs(1);

/// Waits, at most [`POD_CLEANUP_TIMEOUT`], for an evicted pod's containers to be gone
/// before the next round, as the kubelet does: what it frees is only seen then, and a
/// round before it would evict a second pod for the same pressure.
async fn wait_for_cleanup(node: Arc<dyn Node>, uid: &str, pod: &str) {
    let start = tokio::time::Instant::now();
    while !node.stopped(uid) {
        if start.elapsed() >= POD_CLEANUP_TIMEOUT {
            tracing::info!(%pod, "Eviction manager: timed out waiting for the pod to be cleaned up");
            return;
        }
        tokio::time::sleep(CLEANUP_POLL).await;
    }
    tracing::info!(%pod, "Eviction manager: pod is cleaned up");
}

/// What eviction acts on: the agent.
pub trait Node: Send + Sync {
    /// The pods that may be evicted (admitted, not finished).
    fn pods(&self) -> Vec<PodFacts>;
    /// Ends the pod: phase Failed, reason Evicted, the message, an event; its
    /// containers stopped with the grace given. False if it was gone or ended already.
    fn evict(&self, eviction: &Eviction) -> bool;
    /// Whether pod `uid` has no container running any more.
    fn stopped(&self, uid: &str) -> bool;
    /// Frees disk at node level for `signal` (unused images); returns a line for the
    /// log saying what was freed.
    fn reclaim(&self, signal: Signal) -> BoxFuture<'_, String>;
    /// Image garbage collection on the image filesystem as sampled (every period: it
    /// records which images are used, and collects above the high mark).
    fn collect_images<'a>(&'a self, image_fs: Option<&'a FsStats>) -> BoxFuture<'a, ()>;
}

/// The node's pressure conditions as eviction last decided them.
#[derive(Debug)]
pub struct PressureState(watch::Sender<BTreeSet<Pressure>>);

impl Default for PressureState {
    fn default() -> Self {
        PressureState(watch::Sender::new(BTreeSet::new()))
    }
}

impl PressureState {
    /// Whether `p` is true now.
    pub fn has(&self, p: Pressure) -> bool {
        self.0.borrow().contains(&p)
    }

    /// The pressures that are true.
    pub fn current(&self) -> BTreeSet<Pressure> {
        self.0.borrow().clone()
    }

    /// Sets them; returns whether they changed.
    pub fn set(&self, now: BTreeSet<Pressure>) -> bool {
        self.0.send_if_modified(|cur| {
            if *cur == now {
                false
            } else {
                *cur = now;
                true
            }
        })
    }
}

/// Everything the loop works with.
pub struct Housekeeping {
    /// Takes the samples.
    pub sampler: Box<dyn Sampler>,
    /// Where samples are published.
    pub stats: Arc<Stats>,
    /// The eviction manager.
    pub manager: Manager,
    /// The agent.
    pub node: Arc<dyn Node>,
    /// The pressure published.
    pub pressure: Arc<PressureState>,
    /// The housekeeping period.
    pub period: Duration,
}

impl Housekeeping {
    /// One round: sample, decide, act. Returns the decision acted on.
    pub async fn round(&mut self) -> Decision {
        let sample = self.stats.publish(self.sampler.sample().await);
        let image_fs = sample
            .summary
            .node
            .runtime
            .as_ref()
            .and_then(|r| r.image_fs.as_ref());
        self.node.collect_images(image_fs).await;
        let now = tokio::time::Instant::now();
        let mut decision = self
            .manager
            .synchronize(now, &sample.summary, &self.node.pods());
        if let Some(signal) = decision.reclaim {
            tracing::info!(
                signal = %signal,
                "Eviction manager: attempting to reclaim at node level"
            );
            let freed = self.node.reclaim(signal).await;
            tracing::info!(signal = %signal, "Eviction manager: node-level reclaim: {freed}");
            self.manager.reclaimed(signal);
            let sample = self.stats.publish(self.sampler.sample().await);
            decision = self
                .manager
                .synchronize(now, &sample.summary, &self.node.pods());
        }
        let before = self.pressure.current();
        if self.pressure.set(decision.pressure.clone()) {
            tracing::info!(
                was = ?before,
                now = ?decision.pressure,
                "Eviction manager: node pressure changed"
            );
        }
        if let Some(e) = &decision.evict {
            tracing::warn!(
                pod = %e.pod,
                signal = %e.signal,
                grace = ?e.grace,
                "Eviction manager: evicting pod: {}",
                e.message
            );
            if self.node.evict(e) {
                tracing::info!(pod = %e.pod, "Eviction manager: pod is evicted successfully");
                wait_for_cleanup(self.node.clone(), &e.uid, &e.pod).await;
            }
        }
        decision
    }

    /// Runs a round every period, the first at once, for ever.
    pub async fn run(mut self) {
        let mut tick = tokio::time::interval(self.period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.round().await;
        }
    }

    /// [`Housekeeping::run`] as a task of its own.
    pub fn spawn(self) -> JoinHandle<()> {
        tokio::spawn(self.run())
    }
}
