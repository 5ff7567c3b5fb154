//! The kubelet's eviction manager: pressure conditions from real signals, and pods
//! evicted before the node runs out.
//!
//! Every housekeeping period, on a fresh sample, [`Manager::synchronize`]:
//! 1. reads each signal ([`thresholds::observe`]) and finds the thresholds met — a
//!    threshold met before stays met until the signal is back above it plus its
//!    `evictionMinimumReclaim`;
//! 2. raises the node conditions of the met thresholds (MemoryPressure, DiskPressure,
//!    PIDPressure) and keeps each up until `evictionPressureTransitionPeriod` (5 m)
//!    has passed without its signal being met;
//! 3. among thresholds met long enough (hard ones at once, soft ones after their
//!    grace period) takes the first in the kubelet's order (memory first) and, for a
//!    disk signal not yet reclaimed at node level, asks for that first (dead
//!    containers and unused images: [`Decision::reclaim`]);
//! 4. otherwise ranks the pods ([`rank`]) and evicts the first one that is not
//!    critical — one pod per period, with the kubelet's message.
//!
//! [`run`] is the loop around it that samples, acts and publishes.

pub mod rank;
pub mod run;
pub mod thresholds;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::summary::Summary;
pub use rank::PodFacts;
pub use thresholds::{Observed, Pressure, Signal, Threshold, Value};

/// The pod status reason and event reason of an eviction.
pub const REASON: &str = "Evicted";

/// The kubelet's `evictionPressureTransitionPeriod`.
pub const DEFAULT_TRANSITION: Duration = Duration::from_secs(300);

/// How eviction is configured.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `evictionHard` and `evictionSoft` (with their grace periods and minimum
    /// reclaims).
    pub thresholds: Vec<Threshold>,
    /// `evictionPressureTransitionPeriod`.
    pub transition: Duration,
    /// `evictionMaxPodGracePeriod`: the most grace a soft eviction gives a pod (0: the
    /// pod's own).
    pub max_pod_grace: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            thresholds: thresholds::default_hard(),
            transition: DEFAULT_TRANSITION,
            max_pod_grace: Duration::ZERO,
        }
    }
}

/// A pod to evict.
#[derive(Debug, Clone, PartialEq)]
pub struct Eviction {
    /// Its UID.
    pub uid: String,
    /// `namespace/name`, for the log.
    pub pod: String,
    /// The pod status message and event message.
    pub message: String,
    /// How long its containers get to stop.
    pub grace: Duration,
    /// The signal that made it go.
    pub signal: Signal,
}

/// What one synchronization decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decision {
    /// The node conditions that are true.
    pub pressure: BTreeSet<Pressure>,
    /// Reclaim at node level first (dead containers, unused images) for this disk
    /// signal, then synchronize again.
    pub reclaim: Option<Signal>,
    /// The pod to evict.
    pub evict: Option<Eviction>,
}

/// The eviction manager's state between periods.
#[derive(Debug)]
pub struct Manager {
    config: Config,
    /// Thresholds (by index) met at the last synchronization, and since when.
    first_met: BTreeMap<usize, Instant>,
    /// When each pressure's signal was last met.
    last_pressure: BTreeMap<Pressure, Instant>,
    /// Disk signals reclaimed at node level since they were last clear.
    reclaimed: BTreeSet<Signal>,
}

impl Manager {
    /// A manager with `config`.
    pub fn new(config: Config) -> Self {
        Manager {
            config,
            first_met: BTreeMap::new(),
            last_pressure: BTreeMap::new(),
            reclaimed: BTreeSet::new(),
        }
    }

    /// Marks node-level reclaim for `signal` as done (the caller ran it and took a new
    /// sample): the next synchronization evicts if the signal is still met.
    pub fn reclaimed(&mut self, signal: Signal) {
        self.reclaimed.insert(signal);
    }

    /// One synchronization on `summary` at `now`, over the pods `pods`.
    pub fn synchronize(&mut self, now: Instant, summary: &Summary, pods: &[PodFacts]) -> Decision {
        let observed = thresholds::observe(summary);
        let mut met_now = BTreeMap::new();
        for (i, t) in self.config.thresholds.iter().enumerate() {
            let Some(o) = observed.get(&t.signal) else {
                continue;
            };
            let was_met = self.first_met.contains_key(&i);
            if t.met(o, was_met) {
                met_now.insert(i, self.first_met.get(&i).copied().unwrap_or(now));
            }
        }
        self.first_met = met_now;
        for i in self.first_met.keys() {
            let p = self.config.thresholds[*i].signal.pressure();
            self.last_pressure.insert(p, now);
        }
        let transition = self.config.transition;
        self.last_pressure
            .retain(|_, at| now.saturating_duration_since(*at) < transition);
        let pressure: BTreeSet<Pressure> = self.last_pressure.keys().copied().collect();
        // A disk signal that is clear again may be reclaimed again next time.
        let met_signals: BTreeSet<Signal> = self
            .first_met
            .keys()
            .map(|i| self.config.thresholds[*i].signal)
            .collect();
        self.reclaimed.retain(|s| met_signals.contains(s));

        let mut due: Vec<&Threshold> = self
            .first_met
            .iter()
            .map(|(i, since)| (&self.config.thresholds[*i], since))
            .filter(|(t, since)| {
                now.saturating_duration_since(**since) >= t.grace.unwrap_or_default()
            })
            .map(|(t, _)| t)
            .collect();
        // Memory first, then the others in signal order; hard before soft.
        due.sort_by_key(|t| (t.signal, !t.hard()));
        let mut decision = Decision {
            pressure,
            reclaim: None,
            evict: None,
        };
        let Some(t) = due.first() else {
            return decision;
        };
        if t.signal.pressure() == Pressure::Disk && !self.reclaimed.contains(&t.signal) {
            decision.reclaim = Some(t.signal);
            return decision;
        }
        let o = observed[&t.signal];
        decision.evict = rank::rank(t.signal, pods, summary)
            .into_iter()
            .find(|p| !p.critical)
            .map(|p| {
                let grace = if t.hard() {
                    Duration::ZERO
                } else if self.config.max_pod_grace.is_zero() {
                    p.grace
                } else {
                    p.grace.min(self.config.max_pod_grace)
                };
                Eviction {
                    uid: p.uid.clone(),
                    pod: format!("{}/{}", p.namespace, p.name),
                    message: rank::message(t, &o, p, summary),
                    grace,
                    signal: t.signal,
                }
            });
        decision
    }
}

#[cfg(test)]
mod tests;

/// The eviction manager's admission check, the kubelet's: under disk or PID pressure
/// no new pod is admitted, under memory pressure no BestEffort pod that does not
/// tolerate the `node.kubernetes.io/memory-pressure` taint; critical pods always are.
/// `Some((reason, message))` rejects: reason `Evicted`, message `The node had
/// condition: [MemoryPressure]. `.
pub fn admit(
    pressure: &std::collections::BTreeSet<Pressure>,
    pod: &k8s_openapi::api::core::v1::Pod,
) -> Option<(String, String)> {
    if pressure.is_empty() || rank::critical(pod) {
        return None;
    }
    let only_memory = pressure.iter().all(|p| *p == Pressure::Memory);
    if only_memory {
        let best_effort = wasmlet_core::status::qos_class(pod) == "BestEffort";
        let tolerates = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_ref())
            .is_some_and(|ts| {
                ts.iter().any(|t| {
                    let key_ok = match t.key.as_deref() {
                        None | Some("") => t.operator.as_deref() == Some("Exists"),
                        Some(k) => k == "node.kubernetes.io/memory-pressure",
                    };
                    let effect_ok =
                        matches!(t.effect.as_deref(), None | Some("") | Some("NoSchedule"));
                    key_ok && effect_ok
                })
            });
        if !best_effort || tolerates {
            return None;
        }
    }
    let names: Vec<&str> = pressure
        .iter()
        .map(|p| match p {
            Pressure::Memory => "MemoryPressure",
            Pressure::Disk => "DiskPressure",
            Pressure::Pid => "PIDPressure",
        })
        .collect();
    Some((
        REASON.to_owned(),
        format!("The node had condition: [{}]. ", names.join(" ")),
    ))
}
