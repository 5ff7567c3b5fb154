//! wasmlet's cluster-wide plugins.
//!
//! A cluster admin describes a plugin once, as a cluster-scoped `WasmletPlugin`
//! (`wasmlet.dev/v1alpha1`, its CRD in `deploy/wasmletplugin-crd.yaml`): its kind
//! (admission policy or probe handler), where its component comes from (an OCI artifact
//! or a ConfigMap's `binaryData`), the sha256 it must have, the nodes that run it
//! (`nodeSelector`), its settings and the capabilities it asks for. Every node watches
//! these objects ([`node::start`]) and loads, swaps or removes the plugins that select
//! it through the plugin host's hot-swap path — calls in flight finish on the old
//! version — and reports, in an object of its own (its WasmletNode), which digest
//! serves there or why the current version does not ([`status`]), and for an admission
//! policy what it would reject: of the pods the node runs when a version begins
//! serving (an audit), and in `mode: Monitor` of those it admitted since. `wasmlet
//! controller` counts those into each WasmletPlugin's status ([`controller`]).
//!
//! A node grants a cluster plugin only what its own configuration allows
//! (`clusterPlugins.grants`, nothing by default): whoever can create the object can
//! never give a plugin more than the node's operator permits.

pub mod config;
pub mod controller;
#[cfg(any(test, feature = "testing"))]
pub mod dev;
pub mod events;
pub mod fetch;
pub mod node;
pub mod object;
pub mod plan;
pub mod publish;
pub mod status;

pub use config::{DEFAULT_NAMESPACE, FleetConfig, Grants};
pub use events::PluginEvents;
pub use node::{AdmittedPods, Targets, start};
pub use object::SpecError;
