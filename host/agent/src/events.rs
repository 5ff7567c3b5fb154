//! Events about pods, in the kubelet's reasons and words (`Pulling`, `Pulled`,
//! `Created`, `Started`, `Killing`, `Unhealthy`, `BackOff`, `Failed`, `FailedMount`,
//! admission rejections), handed to a [`Recorder`].
//!
//! The agent records; where they go is the recorder's business: standalone, the
//! [`LogRecorder`] writes them to the log at debug level; in cluster mode they become
//! Event objects in the API server.

use std::fmt;

use k8s_openapi::api::core::v1 as k8s;

use wasmlet_core::pod::PodKey;

/// Normal or Warning, as the events API has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Something expected happened.
    Normal,
    /// Something went wrong.
    Warning,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Normal => "Normal",
            Kind::Warning => "Warning",
        })
    }
}

/// A cluster-scoped object an event is about instead of a pod (a WasmletPlugin), and
/// the controller that reports it. Its events live in `default`, as a Node's do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Regarding {
    /// `group/version` of the object.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// Who reports (the event's `reportingController` and source component).
    pub controller: String,
}

/// The namespace of events about cluster-scoped objects.
pub const CLUSTER_EVENTS_NAMESPACE: &str = "default";

/// One event about a pod, or one of its containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The pod.
    pub pod: PodKey,
    /// The pod's source (`kubernetes.io/config.source`): static pods' events name the
    /// mirror pod.
    pub source: String,
    /// The container, as a field path (`spec.containers{web}`), if the event is about
    /// one.
    pub field_path: Option<String>,
    /// Normal or Warning.
    pub kind: Kind,
    /// The reason, one CamelCase word.
    pub reason: String,
    /// What happened.
    pub message: String,
    /// When.
    pub time: std::time::SystemTime,
    /// The object the event is about when it is not a pod (`pod` then holds its
    /// name and UID in [`CLUSTER_EVENTS_NAMESPACE`]).
    pub regarding: Option<Regarding>,
}

impl Event {
    fn new(
        pod: &k8s::Pod,
        container: Option<&str>,
        kind: Kind,
        reason: &str,
        message: String,
    ) -> Self {
        let init = container.is_some_and(|name| {
            wasmlet_core::pod::init_containers(pod)
                .iter()
                .any(|c| c.name == name)
        });
        Event {
            pod: PodKey::of(pod),
            source: wasmlet_core::pod::source(pod).to_owned(),
            field_path: container.map(|name| {
                if init {
                    format!("spec.initContainers{{{name}}}")
                } else {
                    format!("spec.containers{{{name}}}")
                }
            }),
            kind,
            reason: reason.to_owned(),
            message,
            time: std::time::SystemTime::now(),
            regarding: None,
        }
    }

    /// An event about `object`, not a pod.
    pub fn regarding(object: Regarding, kind: Kind, reason: &str, message: String) -> Self {
        Event {
            pod: PodKey {
                uid: object.uid.clone(),
                namespace: CLUSTER_EVENTS_NAMESPACE.to_owned(),
                name: object.name.clone(),
            },
            source: String::new(),
            field_path: None,
            kind,
            reason: reason.to_owned(),
            message,
            time: std::time::SystemTime::now(),
            regarding: Some(object),
        }
    }

    /// A Normal event.
    pub fn normal(pod: &k8s::Pod, container: Option<&str>, reason: &str, message: String) -> Self {
        Event::new(pod, container, Kind::Normal, reason, message)
    }

    /// A Warning event.
    pub fn warning(pod: &k8s::Pod, container: Option<&str>, reason: &str, message: String) -> Self {
        Event::new(pod, container, Kind::Warning, reason, message)
    }
}

/// Where events go. Recording never blocks and never fails: a recorder that cannot
/// keep up drops events (the kubelet's do too).
pub trait Recorder: Send + Sync + fmt::Debug {
    /// Records `event`.
    fn record(&self, event: Event);
}

/// Writes events to the log (debug level): standalone mode has no events API.
#[derive(Debug, Default)]
pub struct LogRecorder;

impl Recorder for LogRecorder {
    fn record(&self, e: Event) {
        tracing::debug!(
            pod = %e.pod,
            object = e.field_path.as_deref().unwrap_or(""),
            kind = %e.kind,
            reason = %e.reason,
            "event: {}",
            e.message
        );
    }
}

/// Keeps every event (for tests).
#[derive(Debug, Default)]
pub struct MemoryRecorder {
    events: std::sync::Mutex<Vec<Event>>,
}

impl MemoryRecorder {
    /// The events recorded so far.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The reasons recorded for pod `name`, in order.
    pub fn reasons(&self, name: &str) -> Vec<String> {
        self.events()
            .into_iter()
            .filter(|e| e.pod.name == name)
            .map(|e| e.reason)
            .collect()
    }
}

impl Recorder for MemoryRecorder {
    fn record(&self, event: Event) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event);
    }
}
