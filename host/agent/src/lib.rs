//! `wasmlet-agent`: the node agent's core — what turns pod specs into running containers
//! through the CRI and keeps them healthy, as the kubelet does.
//!
//! Start at [`agent::Agent`]: it wires everything below and runs until shut down.
//!
//! # Layout
//! The kubelet's decisions are [`wasmlet_core`]'s (no I/O, no clock; unit-tested there),
//! named by that crate wherever they are used (`wasmlet_core::pod`, `::podconfig`,
//! `::lifecycle`, `::actions`, `::status`, `::runtime`); [`backoff`] and [`time`] put
//! them on the agent's clock.
//!
//! Around them, the kubelet's managers:
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
//! - [`criconfig`] — the core's CRI configurations, with what a container needs on the
//!   node made before it starts (hostPaths, sub paths, `/etc/hosts`, the termination
//!   message file) and the node's resolver and Services.
//! - [`volumes`] — configMap, secret, downwardAPI and projected volumes written before
//!   the containers start.
//! - [`cgroups`] — the pods' cgroup tree made in the cgroup filesystem or through
//!   systemd.
//! - [`termination`] — the termination message read from a container's file or log.
//! - [`resize`] — in-place resize's allocations and actuated resources, checkpointed.
//! - [`agent`] — the wiring; [`node`] — the node's facts; [`metrics`] — kubelet metrics.

pub mod agent;
pub mod backoff;
pub mod cache;
pub mod cgroups;
pub mod criconfig;
pub mod events;
pub mod lookup;
pub mod metrics;
pub mod node;
pub mod pleg;
pub mod prober;
pub mod queue;
pub mod resize;
pub mod sources;
pub mod statuses;
pub mod sync;
pub mod syncloop;
pub mod termination;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod time;
pub mod volumes;
pub mod workers;
