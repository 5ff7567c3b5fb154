//! The `plugins:` section of wasmlet's configuration file.
//!
//! ```yaml
//! plugins:
//!   directory: /etc/wasmlet/plugins         # admission/*.wasm is watched
//!   cacheDirectory: /var/lib/wasmlet/plugin-cache
//!   admission:                              # the chain, in this order
//!   - name: resource-fit                    # admission/resource_fit.wasm
//!   - name: restricted-pods
//!     file: /opt/policies/restricted.wasm   # absolute, or relative to admission/
//!     failurePolicy: Ignore                 # Fail (default) or Ignore
//!     timeout: 500ms                        # per decision; default 1s
//!     memoryLimit: 32Mi                     # guest memory; default 64Mi, at most 256Mi
//!     instances: PerCall                    # Reused (default) or PerCall
//!     config: {allowed-namespaces: "kube-system,ops"}
//! ```
//!
//! Components in `admission/` that the list does not name join the chain after the
//! listed ones, by name, with the defaults.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::chain::{FailurePolicy, LinkSpec};
use crate::{InstanceMode, Limits, convert};

/// The `plugins:` section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginsConfig {
    /// The watched plugin directory (`admission/` below it).
    pub directory: Option<PathBuf>,
    /// Where compiled components are kept between restarts.
    pub cache_directory: Option<PathBuf>,
    /// The admission chain, in order.
    #[serde(default)]
    pub admission: Vec<AdmissionConfig>,
}

/// One admission plugin.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdmissionConfig {
    /// Its name in the chain, logs, metrics and rejections.
    pub name: String,
    /// Its component: absolute, or relative to `<directory>/admission/`. Default: the
    /// name with `-` as `_`, plus `.wasm`.
    pub file: Option<PathBuf>,
    /// What a failing plugin means for the pod. Default `Fail`.
    #[serde(default)]
    pub failure_policy: FailurePolicyConfig,
    /// Deadline of one decision (`500ms`, `1s`). Default `1s`.
    pub timeout: Option<String>,
    /// Largest guest memory (`64Mi`). Default 64Mi.
    pub memory_limit: Option<String>,
    /// `Reused` (default) or `PerCall`: whether decisions share instances.
    #[serde(default)]
    pub instances: InstancesConfig,
    /// Values the plugin reads through `host.config`.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

/// `instances` as written in the file.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
pub enum InstancesConfig {
    /// Instances are kept between decisions.
    #[default]
    Reused,
    /// A fresh instance for every decision.
    PerCall,
}

/// `failurePolicy` as written in the file.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
pub enum FailurePolicyConfig {
    /// An erroring plugin rejects the pod.
    #[default]
    Fail,
    /// An erroring plugin is skipped.
    Ignore,
}

/// A configuration value that is not valid, named by its path in the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// E.g. `plugins.admission[1].timeout`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// The file a component called `name` has by default: `node-ports` → `node_ports.wasm`.
pub fn default_file_name(name: &str) -> String {
    format!("{}.wasm", name.replace('-', "_"))
}

impl AdmissionConfig {
    /// The link this entry describes; `index` is its place in the list, for errors.
    pub fn link_spec(&self, admission_dir: &Path, index: usize) -> Result<LinkSpec, ConfigError> {
        let field = |f: &str| format!("plugins.admission[{index}].{f}");
        if self.name.is_empty() {
            return Err(ConfigError {
                field: field("name"),
                message: "must not be empty".into(),
            });
        }
        let mut limits = Limits {
            instances: match self.instances {
                InstancesConfig::Reused => InstanceMode::Reused,
                InstancesConfig::PerCall => InstanceMode::PerCall,
            },
            ..Limits::default()
        };
        if let Some(t) = &self.timeout {
            limits.deadline = convert::parse_duration(t).map_err(|message| ConfigError {
                field: field("timeout"),
                message,
            })?;
        }
        if let Some(m) = &self.memory_limit {
            let bytes = convert::parse_quantity(m, 0).map_err(|message| ConfigError {
                field: field("memoryLimit"),
                message,
            })?;
            if bytes > crate::MAX_MEMORY_BYTES as u64 {
                return Err(ConfigError {
                    field: field("memoryLimit"),
                    message: format!("{m} is more than the largest allowed, 256Mi"),
                });
            }
            limits.memory_bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        }
        let file = self
            .file
            .clone()
            .unwrap_or_else(|| default_file_name(&self.name).into());
        Ok(LinkSpec {
            path: admission_dir.join(file),
            config: self.config.clone(),
            limits,
            failure_policy: match self.failure_policy {
                FailurePolicyConfig::Fail => FailurePolicy::Fail,
                FailurePolicyConfig::Ignore => FailurePolicy::Ignore,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_become_links_and_bad_values_are_named() {
        let config: PluginsConfig = serde_yaml_ng::from_str(
            "directory: /p\nadmission:\n- name: resource-fit\n- name: x\n  file: /abs/x.wasm\n  failurePolicy: Ignore\n  timeout: 250ms\n  memoryLimit: 8Mi\n  instances: PerCall\n  config: {a: b}\n",
        )
        .expect("config");
        let dir = Path::new("/p/admission");
        let first = config.admission[0].link_spec(dir, 0).expect("spec");
        assert_eq!(first.path, Path::new("/p/admission/resource_fit.wasm"));
        assert_eq!(first.failure_policy, FailurePolicy::Fail);
        assert_eq!(first.limits.deadline, std::time::Duration::from_secs(1));
        let second = config.admission[1].link_spec(dir, 1).expect("spec");
        assert_eq!(second.path, Path::new("/abs/x.wasm"));
        assert_eq!(second.failure_policy, FailurePolicy::Ignore);
        assert_eq!(
            second.limits.deadline,
            std::time::Duration::from_millis(250)
        );
        assert_eq!(second.limits.memory_bytes, 8 << 20);
        assert_eq!(second.limits.instances, InstanceMode::PerCall);
        assert_eq!(first.limits.instances, InstanceMode::Reused);

        let bad: PluginsConfig =
            serde_yaml_ng::from_str("admission:\n- name: a\n- name: b\n  timeout: soon\n")
                .expect("config");
        let e = bad.admission[1].link_spec(dir, 1).expect_err("bad timeout");
        assert_eq!(e.field, "plugins.admission[1].timeout");

        let unknown = serde_yaml_ng::from_str::<PluginsConfig>(
            "admission:\n- name: a\n  failurPolicy: Fail\n",
        );
        let text = unknown.expect_err("unknown field").to_string();
        assert!(text.contains("failurPolicy"), "{text}");
    }
}
