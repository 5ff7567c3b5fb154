//! [`Stats`]: the latest sample, which everything that reads usage reads.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use wasmlet_cri::CriRuntime;

use crate::collect::{Collector, Sample};

/// The kubelet's housekeeping period: how often usage is sampled.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(10);

/// The latest sample.
#[derive(Debug)]
pub struct Stats {
    latest: std::sync::RwLock<Option<Arc<Sample>>>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new()
    }
}

impl Stats {
    /// No sample yet.
    pub fn new() -> Self {
        Stats {
            latest: std::sync::RwLock::new(None),
        }
    }

    /// The latest sample, if one was taken.
    pub fn latest(&self) -> Option<Arc<Sample>> {
        self.latest
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stores a sample (the sampler does; tests and fake providers may) and returns it
    /// as stored.
    pub fn publish(&self, sample: Sample) -> Arc<Sample> {
        let sample = Arc::new(sample);
        *self.latest.write().unwrap_or_else(|p| p.into_inner()) = Some(sample.clone());
        sample
    }

    /// Samples with `collector` now and every `period` until the task is aborted.
    pub fn spawn<R: CriRuntime + 'static>(
        self: &Arc<Self>,
        mut collector: Collector<R>,
        period: Duration,
    ) -> JoinHandle<()> {
        let stats = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let sample = collector.collect().await;
                stats.publish(sample);
            }
        })
    }
}
