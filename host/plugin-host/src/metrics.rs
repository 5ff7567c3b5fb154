//! Metrics per plugin, in Prometheus form (`prometheus-client`):
//!
//! | metric | labels |
//! |---|---|
//! | `wasmlet_plugin_calls_total` | `plugin`, `kind`, `result`: admission `admit` / `reject` / `error`, probe `success` / `failure` / `error`, source `ok` / `partial` (manifests skipped) / `error` |
//! | `wasmlet_plugin_call_duration_seconds` (histogram) | `plugin`, `kind` |
//! | `wasmlet_plugin_instantiation_duration_seconds` (histogram) | `plugin`, `kind` |
//! | `wasmlet_plugin_loads_total` | `plugin`, `kind`, `result` = `loaded` / `refused` |
//! | `wasmlet_plugin_monitored_rejections_total` | `plugin`, `reason`: what a policy in `mode: Monitor` would have rejected |
//!
//! A plugin resolves its label sets once, when it is loaded, so that a call only bumps
//! atomics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    plugin: String,
    kind: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    plugin: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
    kind: String,
}

type Histograms = Family<PluginLabels, Histogram, fn() -> Histogram>;

/// 1 µs to ~8 s, doubling: plugin calls range from microseconds (admission) to seconds
/// (a probe's timeout).
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-6, 2.0, 24))
}

/// The metrics of every plugin on an engine. Clones share the same series.
#[derive(Clone, Debug)]
pub struct PluginMetrics {
    calls: Family<ResultLabels, Counter>,
    loads: Family<ResultLabels, Counter>,
    monitored: Family<ReasonLabels, Counter>,
    duration: Histograms,
    instantiation: Histograms,
}

impl Default for PluginMetrics {
    fn default() -> Self {
        Self {
            calls: Family::default(),
            loads: Family::default(),
            monitored: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
            instantiation: Family::new_with_constructor(latency_histogram),
        }
    }
}

/// One plugin's series, resolved at load.
#[derive(Clone, Debug)]
pub(crate) struct CallMetrics {
    /// Admitted, succeeded, read whole.
    pub passed: Counter,
    /// Rejected, failed, read with manifests skipped.
    pub failed: Counter,
    /// The call erred.
    pub errors: Counter,
    pub duration: Histogram,
    pub instantiation: Histogram,
}

impl PluginMetrics {
    /// Adds the plugin metrics to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "wasmlet_plugin_calls",
            "Plugin calls by result (admit/reject, success/failure, ok/partial; error)",
            self.calls.clone(),
        );
        registry.register(
            "wasmlet_plugin_call_duration_seconds",
            "Duration of plugin calls, instantiation included",
            self.duration.clone(),
        );
        registry.register(
            "wasmlet_plugin_instantiation_duration_seconds",
            "Time to create a plugin instance (fresh instances only)",
            self.instantiation.clone(),
        );
        registry.register(
            "wasmlet_plugin_loads",
            "Plugin versions loaded or refused",
            self.loads.clone(),
        );
        registry.register(
            "wasmlet_plugin_monitored_rejections",
            "Rejections an admission policy in Monitor mode would have made, by reason",
            self.monitored.clone(),
        );
    }

    /// Counts a rejection `plugin`, in Monitor mode, would have made for `reason`.
    pub fn would_reject(&self, plugin: &str, reason: &str) {
        let labels = ReasonLabels {
            plugin: plugin.to_owned(),
            reason: reason.to_owned(),
        };
        self.monitored.get_or_create(&labels).inc();
    }

    fn result(plugin: &str, kind: &str, result: &str) -> ResultLabels {
        ResultLabels {
            plugin: plugin.to_owned(),
            kind: kind.to_owned(),
            result: result.to_owned(),
        }
    }

    /// Counts a load of `plugin`: `loaded` or `refused`.
    pub(crate) fn loaded(&self, plugin: &str, kind: &str, ok: bool) {
        let result = if ok { "loaded" } else { "refused" };
        self.loads
            .get_or_create(&Self::result(plugin, kind, result))
            .inc();
    }

    pub(crate) fn for_plugin(&self, plugin: &str, kind: &str) -> CallMetrics {
        let counter = |result| {
            self.calls
                .get_or_create(&Self::result(plugin, kind, result))
                .clone()
        };
        let labels = PluginLabels {
            plugin: plugin.to_owned(),
            kind: kind.to_owned(),
        };
        let (passed, failed) = match kind {
            "probe" => ("success", "failure"),
            "source" => ("ok", "partial"),
            _ => ("admit", "reject"),
        };
        CallMetrics {
            passed: counter(passed),
            failed: counter(failed),
            errors: counter("error"),
            duration: self.duration.get_or_create(&labels).clone(),
            instantiation: self.instantiation.get_or_create(&labels).clone(),
        }
    }
}
