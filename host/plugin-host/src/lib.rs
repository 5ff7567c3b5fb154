//! wasmlet's WebAssembly plugin runtime: loads `wasm32-wasip2` components that implement
//! the `wasmlet:plugin@0.1.0` worlds (`wit/plugin.wit`) and calls them with limits.
//!
//! - [`PluginEngine`]: one wasmtime engine for every plugin (component model, cranelift,
//!   pooling allocator, epoch interruption driven by a 10 ms ticker that runs only
//!   while a call is under way), optionally with the on-disk compiled-component cache
//!   ([`ComponentCache`]).
//! - [`PluginEngine::load_admission`] → [`AdmissionPlugin`]: a policy checked against
//!   its world; [`AdmissionPlugin::admit`] decides on one [`Admission`] (a pod, the node,
//!   its usage: lent to the guest as `pod-view` and `node-view`, read field by field,
//!   nothing copied in that the policy does not ask for) on a reused or fresh
//!   instance ([`InstanceMode`]; a fresh one is made ahead, between calls) with a
//!   deadline and a memory cap. A long call yields to tokio every tick; every failure
//!   is a [`PluginError`] naming the plugin and the call, and a guest that traps,
//!   loops or exhausts its memory never takes the host down.
//! - [`AdmissionChain`]: the ordered links, each hot-swappable; [`AdmissionDirectory`]
//!   keeps a chain in step with a plugin directory and the `plugins:` configuration
//!   ([`PluginsConfig`]).
//! - [`Admitted`]: the pods a node admitted, as the policies see them; an [`Audit`]
//!   asks one policy about each of them, beside the others, touching none.
//! - [`convert`]: Kubernetes objects to the plugin types, and the node's load.
//! - [`PluginMetrics`]: calls by result, latency and instantiation histograms, loads,
//!   per plugin.
//!
//! Plugins get no filesystem, network or environment: WASI is linked (Rust's std needs
//! it) with nothing granted, and for an admission policy its context is built only if
//! the guest makes a WASI call.

mod admission;
pub mod audit;
pub mod backend;
#[allow(missing_docs)]
pub(crate) mod bindings;
pub mod cache;
mod call;
pub mod chain;
pub mod config;
pub mod convert;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod dev;
mod engine;
mod error;
pub mod guest;
mod host;
pub mod http;
pub mod inspect;
pub mod kinds;
mod limits;
mod loaded;
pub mod memory;
pub mod metrics;
pub mod network;
pub mod probe;
/// The kubelet's resource arithmetic, compiled from the plugin SDK's own source so that
/// the usage the host sums and the requests a policy computes never disagree.
#[path = "../../../plugins/sdk/src/resources.rs"]
pub mod resources;
pub mod source;
pub mod watch;
mod world;

pub use admission::{Admission, AdmissionPlugin, IDLE_INSTANCE_LIFETIME, NodeLoad};
pub use audit::{Admitted, Audit, AuditedPod};
pub use cache::{CacheOutcome, ComponentCache};
pub use chain::{AdmissionChain, FailurePolicy, LinkSpec, ReplaceError};
pub use config::PluginsConfig;
pub use engine::PluginEngine;
pub use error::{BoxError, EngineError, PluginError};
pub use host::PluginState;
pub use kinds::{NoHandler, PodSources, ProbeHandlers};
pub use limits::{InstanceMode, Limits, MAX_CORE_INSTANCES, MAX_MEMORY_BYTES};
pub use loaded::{Loaded, Plugin};
pub use metrics::PluginMetrics;
pub use watch::{AdmissionDirectory, PluginDirectory, PluginSet};

pub use bindings::exports::wasmlet::plugin::admission::{Rejection, Verdict};
pub use bindings::wasmlet::plugin::types::{
    Container, ContainerPort, HostPortInUse, Node, NodeSelectorRequirement, NodeSelectorTerm,
    NodeUsage, Pod, Protocol, ResourceList, SelectorOperator, Taint, TaintEffect, Toleration,
    TolerationOperator,
};
