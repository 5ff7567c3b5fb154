//! The `clusterPlugins:` section of a node's configuration ([`FleetConfig`]) and what it
//! grants cluster plugins ([`Grants`]).

use std::path::PathBuf;

use serde::Deserialize;

use crate::object::SpecError;

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
