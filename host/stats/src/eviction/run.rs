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
use crate::summary::FsStats;
use crate::{Collector, Sample, Stats};

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

/// What eviction acts on: the agent.
pub trait Node: Send + Sync {
    /// The pods that may be evicted (admitted, not finished).
    fn pods(&self) -> Vec<PodFacts>;
    /// Ends the pod: phase Failed, reason Evicted, the message, an event; its
    /// containers stopped with the grace given. False if it was gone or ended already.
    fn evict(&self, eviction: &Eviction) -> bool;
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
