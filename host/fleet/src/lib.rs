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

use std::path::PathBuf;

use serde::Deserialize;

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

pub use events::PluginEvents;
pub use node::{AdmittedPods, Targets, start};
pub use object::SpecError;

/// The namespace whose Secrets and ConfigMaps plugins name, by default.
pub const DEFAULT_NAMESPACE: &str = "wasmlet-system";

/// The `clusterPlugins:` section of the node's configuration.
///
/// ```yaml
/// clusterPlugins:
///   enabled: true                   # in cluster mode (default true)
///   namespace: wasmlet-system       # pull secrets and ConfigMaps are read here
///   grants:                         # what cluster plugins may be given (nothing by default)
///     network: [pod, 10.0.0.0/8]    # probe handlers may reach these
///     exec: false                   # probe handlers may run commands in containers
///   verification:                   # cosign signatures, checked before a load
///     publicKeys: [/etc/wasmlet/keys/release.pub]
///     required: true                # refuse what no trusted key signed
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FleetConfig {
    /// Whether the node follows WasmletPlugins at all.
    #[serde(default = "enabled")]
    pub enabled: bool,
    /// Where pull secrets and ConfigMaps are read.
    #[serde(default = "namespace")]
    pub namespace: String,
    /// What cluster plugins may be given.
    #[serde(default)]
    pub grants: Grants,
    /// Which signatures a component must carry.
    #[serde(default)]
    pub verification: wasmlet_signing::Verification,
}

fn enabled() -> bool {
    true
}

fn namespace() -> String {
    DEFAULT_NAMESPACE.to_owned()
}

impl Default for FleetConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            namespace: namespace(),
            grants: Grants::default(),
            verification: wasmlet_signing::Verification::default(),
        }
    }
}

/// The capabilities a node lets cluster plugins have.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grants {
    /// Addresses probe handlers may reach: `pod` (the probed pod), addresses, CIDRs.
    #[serde(default)]
    pub network: Vec<String>,
    /// Probe handlers may run commands in the probed container.
    #[serde(default)]
    pub exec: bool,
    /// Directories pod sources may read (for when the node takes them from the
    /// cluster).
    #[serde(default)]
    pub directories: Vec<PathBuf>,
    /// URL prefixes pod sources may fetch.
    #[serde(default)]
    pub urls: Vec<String>,
}

impl FleetConfig {
    /// Checks the values; the error names the field below `clusterPlugins`.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.namespace.is_empty() {
            return Err(SpecError::new("namespace", "must not be empty"));
        }
        for (i, g) in self.grants.network.iter().enumerate() {
            g.parse::<wasmlet_plugin_host::probe::NetworkGrant>()
                .map_err(|e| SpecError::new(format!("grants.network[{i}]"), e.to_string()))?;
        }
        // The keys are read here too, so that a missing or broken one stops the start.
        wasmlet_signing::Verifier::load(&self.verification)
            .map_err(|e| SpecError::new(format!("verification.{}", e.field), e.message))?;
        Ok(())
    }
}
