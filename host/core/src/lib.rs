//! `wasmlet-core`: the node agent's pure logic — what the kubelet decides, without doing
//! it. Every function here takes what it decides on and returns the decision: no I/O,
//! no clock, no async runtime, which this crate's dependencies keep true (data,
//! serialization and hashing only). `wasmlet-agent` is the kubelet's managers around it:
//! the syncLoop, pod workers, PLEG, probes and the runtime calls.
//!
//! # Layout
//! - [`pod`] — defaults, static pod names and UIDs (the kubelet's hash), validation.
//! - [`podconfig`] — sources' sets merged into ADD / UPDATE / REMOVE / RECONCILE.
//! - [`lifecycle`] — a pod worker's state machine (SyncPod → TerminatingPod →
//!   TerminatedPod; one work at a time; a kill is never replaced; grace only shortens).
//! - [`actions`] — computePodActions.
//! - [`backoff`] — CrashLoopBackOff and image pull back-off, over any monotonic instant.
//! - [`status`] — phase, conditions, container statuses, QoS.
//! - [`runtime`] — what the runtime has for a pod, read back from CRI labels.
//! - [`criconfig`] — a pod and its containers as CRI configurations, and what the node
//!   must hold before a container starts ([`criconfig::NodeFile`]: the agent makes them).
//! - [`time`] — RFC 3339 as the API prints it.
//! - [`cgroups`] — the kubelet's cgroup tree by name and each cgroup's values.
//! - [`resize`] — in-place pod resize: allocations, whether a resize fits, its plan.
//! - [`quantity`] and [`expand`] — quantities, durations and `$(VAR)` references, as
//!   Kubernetes reads them.

pub mod actions;
pub mod backoff;
pub mod cgroups;
pub mod criconfig;
pub mod expand;
pub mod lifecycle;
pub mod pod;
pub mod podconfig;
pub mod quantity;
pub mod resize;
pub mod runtime;
pub mod status;
pub mod time;
