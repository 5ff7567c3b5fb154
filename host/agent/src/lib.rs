//! `wasmlet-agent`: the node agent's core — what turns pod specs into running containers
//! through the CRI and keeps them healthy, as the kubelet does.
//!
//! Start at [`agent::Agent`]: it wires everything below and runs until shut down.
//!
//! # Layout
//! Pure logic (no I/O, no clock; unit-tested with paused time):
//! - [`pod`] — defaults, static pod names and UIDs, validation.
//! - [`podconfig`] — sources' sets merged into ADD / UPDATE / REMOVE / RECONCILE.
//! - [`lifecycle`] — a pod worker's state machine (SyncPod → TerminatingPod →
//!   TerminatedPod; one work at a time; a kill is never replaced; grace only shortens).
//! - [`actions`] — computePodActions.
//! - [`backoff`] — CrashLoopBackOff and image pull back-off.
//! - [`status`] — phase, conditions, container statuses, QoS.
//! - [`runtime`] — what the runtime has for a pod, read back from labels.
//! - [`criconfig`] — pods and containers as CRI configurations.
//! - [`time`] — the agent's clock and RFC 3339.
//!
//! With the runtime:
//! - [`pleg`] — relist, generateEvents, the coalescing event queue, health.
//! - [`cache`] — the pod cache (newest observation wins).
//! - [`queue`] — per-pod coalescing queues (PLEG events, probe results).
//! - [`sync`] — syncPod, terminate, cleanup, images, hooks, garbage collection.
//! - [`workers`] — one task per pod, and the queue of pods whose sync is due.
//! - [`prober`] — probe workers checking through the probe-handler plugins.
//! - [`statuses`] — the status manager behind `GET /pods` and the API server.
//! - [`events`] — events about pods in the kubelet's reasons, to a recorder.
//! - [`syncloop`] — the loop, one handler per input.
//! - [`sources`] — the pod-source plugins polled, and on directory changes.
//! - [`volumes`] — configMap, secret, downwardAPI and projected volumes written before
//!   the containers start.
//! - [`agent`] — the wiring; [`node`] — the node's facts; [`metrics`] — kubelet metrics.

pub mod actions;
pub mod agent;
pub mod backoff;
pub mod cache;
pub mod cgroups;
pub mod criconfig;
pub mod events;
pub mod lifecycle;
pub mod metrics;
pub mod node;
pub mod pleg;
pub mod pod;
pub mod podconfig;
pub mod prober;
pub mod queue;
pub mod runtime;
pub mod sources;
pub mod status;
pub mod statuses;
pub mod sync;
pub mod syncloop;
pub mod time;
pub mod volumes;
pub mod workers;
