//! The agent's metrics, under the kubelet's names where the kubelet has one.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Label: a pod worker's operation.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Operation {
    /// `sync`, `terminate`, `cleanup`.
    pub operation: String,
}

/// Label: a container state.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ContainerState {
    /// `running`, `exited`, `created`, `unknown`.
    pub container_state: String,
}

/// Label: an operation's name in the syncLoop.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Source {
    /// What woke the loop: `config`, `pleg`, `sync`, `housekeeping`, `probe`.
    pub source: String,
}

/// Labels of `prober_probe_total`, the kubelet's.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeResult {
    /// `Liveness`, `Readiness`, `Startup`.
    pub probe_type: String,
    /// `successful` or `failed`.
    pub result: String,
    /// The container's name.
    pub container: String,
    /// The pod's name.
    pub pod: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's UID.
    pub pod_uid: String,
}

fn seconds_buckets() -> impl Iterator<Item = f64> {
    [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        60.0,
    ]
    .into_iter()
}

/// Every metric the agent keeps.
#[derive(Debug)]
pub struct Metrics {
    /// `kubelet_pleg_relist_duration_seconds`
    pub relist_duration: Histogram,
    /// `kubelet_pleg_discard_events` (events coalesced away; the pods were synced).
    pub pleg_coalesced: Counter,
    /// `kubelet_pod_start_duration_seconds`: first seen → Running.
    pub pod_start_duration: Histogram,
    /// `kubelet_pod_worker_duration_seconds{operation}`
    pub worker_duration: Family<Operation, Histogram>,
    /// `kubelet_running_pods`
    pub running_pods: Gauge,
    /// `kubelet_running_containers{container_state}`
    pub running_containers: Family<ContainerState, Gauge>,
    /// `wasmlet_sync_loop_iteration_duration_seconds{source}`
    pub loop_iteration: Family<Source, Histogram>,
    /// `wasmlet_admission_rejections_total`
    pub admission_rejections: Counter,
    /// `kubelet_started_containers_total`
    pub started_containers: Counter,
    /// `kubelet_started_containers_errors_total`
    pub start_errors: Counter,
    /// `prober_probe_total{probe_type, result, container, pod, namespace, pod_uid}`
    /// (served on `/metrics/probes`).
    pub probes: Family<ProbeResult, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            relist_duration: Histogram::new(seconds_buckets()),
            pleg_coalesced: Counter::default(),
            pod_start_duration: Histogram::new(seconds_buckets()),
            worker_duration: Family::new_with_constructor(|| Histogram::new(seconds_buckets())),
            running_pods: Gauge::default(),
            running_containers: Family::default(),
            loop_iteration: Family::new_with_constructor(|| Histogram::new(seconds_buckets())),
            admission_rejections: Counter::default(),
            started_containers: Counter::default(),
            start_errors: Counter::default(),
            probes: Family::default(),
        }
    }
}

impl Metrics {
    /// Registers the probe counts (`prober_probe_total`), which the kubelet serves on
    /// `/metrics/probes` apart from the rest.
    pub fn register_probes(&self, registry: &mut Registry) {
        registry.register(
            "prober_probe",
            "Cumulative number of a liveness, readiness or startup probe for a container by result",
            self.probes.clone(),
        );
    }

    /// Registers every metric in `registry` (kubelet names under `kubelet_`, the
    /// agent's own under `wasmlet_`).
    pub fn register(&self, registry: &mut Registry) {
        let kubelet = registry.sub_registry_with_prefix("kubelet");
        kubelet.register(
            "pleg_relist_duration_seconds",
            "Duration in seconds for relisting pods in PLEG",
            self.relist_duration.clone(),
        );
        kubelet.register(
            "pleg_discard_events",
            "The number of PLEG events coalesced into an already queued pod",
            self.pleg_coalesced.clone(),
        );
        kubelet.register(
            "pod_start_duration_seconds",
            "Duration in seconds from the agent seeing a pod for the first time to the pod running",
            self.pod_start_duration.clone(),
        );
        kubelet.register(
            "pod_worker_duration_seconds",
            "Duration in seconds to sync a single pod, by operation",
            self.worker_duration.clone(),
        );
        kubelet.register(
            "running_pods",
            "Number of pods that have a running pod sandbox",
            self.running_pods.clone(),
        );
        kubelet.register(
            "running_containers",
            "Number of containers currently running, by state",
            self.running_containers.clone(),
        );
        kubelet.register(
            "started_containers",
            "Cumulative number of containers started",
            self.started_containers.clone(),
        );
        kubelet.register(
            "started_containers_errors",
            "Cumulative number of errors when starting containers",
            self.start_errors.clone(),
        );
        let own = registry.sub_registry_with_prefix("wasmlet");
        own.register(
            "sync_loop_iteration_duration_seconds",
            "Duration in seconds of one syncLoop iteration, by what woke it",
            self.loop_iteration.clone(),
        );
        own.register(
            "admission_rejections",
            "Pods refused by the admission chain",
            self.admission_rejections.clone(),
        );
    }
}
