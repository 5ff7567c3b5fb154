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
//!     mode: Monitor                         # Enforce (default), or decide but admit
//!     timeout: 500ms                        # per decision; default 1s
//!     memoryLimit: 32Mi                     # guest memory; default 64Mi, at most 256Mi
//!     instances: PerCall                    # Reused (default) or PerCall
//!     config: {allowed-namespaces: "kube-system,ops"}
//!   probes:                                 # probe handlers (probes/ below directory)
//!   - name: probe-http-get                  # probes/probe_http_get.wasm
//!     kinds: [httpGet]                      # httpGet, tcpSocket, exec, grpc, or custom
//!     network: [pod]                        # may reach the probed pod (or CIDRs)
//!     exec: false                           # may run commands in the container
//!     memoryLimit: 16Mi
//!     config: {}
//!   sources:                                # pod sources (sources/ below directory)
//!   - name: source-file
//!     directory: /etc/kubernetes/manifests  # readable at /manifests, read-only
//!     period: 20s                           # poll every (default 20s)
//!     timeout: 10s                          # per poll (default 10s)
//!   - name: source-http
//!     urls: ["http://config.local/pods/"]   # URL prefixes it may fetch
//!     config: {url: "http://config.local/pods/node-a.yaml"}
//!   verification:                           # the directory's components must be signed
//!     publicKeys: [/etc/wasmlet/keys/release.pub]
//!     required: true                        # FILE.wasm loads only with a good FILE.wasm.sig
//! ```
//!
//! Components in `admission/` that the list does not name join the chain after the
//! listed ones, by name, with the defaults. Probe handlers and sources have no such
//! defaults: what they may reach is granted here or not at all.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::chain::{FailurePolicy, LinkSpec, Mode};
use crate::convert;
use crate::limits::{InstanceMode, Limits};

/// The `plugins:` section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginsConfig {
    /// The watched plugin directory (`admission/` below it).
    pub directory: Option<PathBuf>,
    /// The signatures the directory's components must carry (`FILE.wasm.sig` beside
    /// each, from `wasmlet plugin sign FILE.wasm`).
    #[serde(default)]
    pub verification: wasmlet_signing::Verification,
    /// Where compiled components are kept between restarts.
    pub cache_directory: Option<PathBuf>,
    /// The admission chain, in order.
    #[serde(default)]
    pub admission: Vec<AdmissionConfig>,
    /// Probe handlers.
    #[serde(default)]
    pub probes: Vec<ProbeConfig>,
    /// Pod sources.
    #[serde(default)]
    pub sources: Vec<SourceConfig>,
}

impl PluginsConfig {
    /// The directory whose components must be signed and what checks them, as
    /// `verification` asks (`None`: nothing is checked). The error names the field.
    pub fn signed_directory(
        &self,
    ) -> Result<Option<(PathBuf, wasmlet_signing::Verifier)>, ConfigError> {
        let verifier =
            wasmlet_signing::Verifier::load(&self.verification).map_err(|e| ConfigError {
                field: format!("plugins.verification.{}", e.field),
                message: e.message,
            })?;
        let Some(verifier) = verifier else {
            return Ok(None);
        };
        let directory = self.directory.clone().ok_or_else(|| ConfigError {
            field: "plugins.verification".into(),
            message: "needs plugins.directory (its components are what is verified)".into(),
        })?;
        Ok(Some((directory, verifier)))
    }
}

/// One probe handler.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeConfig {
    /// Its name in logs and metrics.
    pub name: String,
    /// Its component: absolute, or relative to `<directory>/probes/`. Default: the name
    /// with `-` as `_`, plus `.wasm`.
    pub file: Option<PathBuf>,
    /// The probe kinds it checks: `httpGet`, `tcpSocket`, `exec`, `grpc`, or a custom
    /// kind's name.
    pub kinds: Vec<String>,
    /// Addresses it may connect to: `pod` (the probed pod's) or CIDRs.
    #[serde(default)]
    pub network: Vec<String>,
    /// Whether it may run commands in the probed container.
    #[serde(default)]
    pub exec: bool,
    /// Largest guest memory (`16Mi`). Default 64Mi.
    pub memory_limit: Option<String>,
    /// Values the plugin reads through `host.config`.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

/// One pod source.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SourceConfig {
    /// Its name: the pods' `kubernetes.io/config.source`, logs, metrics.
    pub name: String,
    /// Its component: absolute, or relative to `<directory>/sources/`. Default: the name
    /// with `-` as `_`, plus `.wasm`.
    pub file: Option<PathBuf>,
    /// A directory it may read (at `/manifests`, read-only).
    pub directory: Option<PathBuf>,
    /// URL prefixes it may fetch.
    #[serde(default)]
    pub urls: Vec<String>,
    /// How often it is polled (`20s`, the kubelet's fileCheckFrequency). Default 20s.
    pub period: Option<String>,
    /// Deadline of one poll. Default 10s.
    pub timeout: Option<String>,
    /// Largest guest memory (`32Mi`). Default 64Mi.
    pub memory_limit: Option<String>,
    /// Values the plugin reads through `host.config`.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

/// The probe kinds the kubelet knows; any other name is a custom kind.
pub const BUILTIN_PROBE_KINDS: [&str; 4] = ["httpGet", "tcpSocket", "exec", "grpc"];

/// A probe handler, ready to load.
#[derive(Debug, Clone)]
pub struct ProbeSpec {
    /// Its component.
    pub path: PathBuf,
    /// The kinds it checks.
    pub kinds: Vec<String>,
    /// What it may use.
    pub grants: crate::probe::Grants,
    /// Its limits (the deadline of a check is the probe's timeout).
    pub limits: Limits,
    /// Its configuration values.
    pub config: BTreeMap<String, String>,
}

/// A pod source, ready to load.
#[derive(Debug, Clone)]
pub struct SourceSpec {
    /// Its component.
    pub path: PathBuf,
    /// What it may read.
    pub grants: crate::source::SourceGrants,
    /// How often it is polled.
    pub period: std::time::Duration,
    /// Its limits (`deadline` bounds one poll).
    pub limits: Limits,
    /// Its configuration values.
    pub config: BTreeMap<String, String>,
}

/// How often a source is polled by default (the kubelet's file and HTTP check
/// frequency).
pub const DEFAULT_SOURCE_PERIOD: std::time::Duration = std::time::Duration::from_secs(20);

/// How long a poll may take by default.
pub const DEFAULT_SOURCE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

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
    /// `Enforce` (default), or `Monitor`: decide on every pod but admit it, reporting
    /// what would have been rejected.
    #[serde(default)]
    pub mode: ModeConfig,
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

/// `mode` as written in the file.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
pub enum ModeConfig {
    /// Its rejections reject the pod.
    #[default]
    Enforce,
    /// Its rejections are reported, the pod admitted.
    Monitor,
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

/// Checks a name and parses a memory limit, for entries of any kind; `field` names a
/// value in errors.
fn common(
    name: &str,
    memory_limit: Option<&str>,
    field: &dyn Fn(&str) -> String,
) -> Result<Limits, ConfigError> {
    if name.is_empty() {
        return Err(ConfigError {
            field: field("name"),
            message: "must not be empty".into(),
        });
    }
    let mut limits = Limits::default();
    if let Some(m) = memory_limit {
        let bytes = convert::parse_quantity(m, 0).map_err(|e| ConfigError {
            field: field("memoryLimit"),
            message: e.to_string(),
        })?;
        if bytes > crate::limits::MAX_MEMORY_BYTES as u64 {
            return Err(ConfigError {
                field: field("memoryLimit"),
                message: format!("{m} is more than the largest allowed, 256Mi"),
            });
        }
        limits.memory_bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
    }
    Ok(limits)
}

fn duration(
    text: Option<&str>,
    default: std::time::Duration,
    field: String,
) -> Result<std::time::Duration, ConfigError> {
    match text {
        None => Ok(default),
        Some(t) => match convert::parse_duration(t) {
            Ok(d) if d.is_zero() => Err(ConfigError {
                field,
                message: "must be more than 0".into(),
            }),
            Ok(d) => Ok(d),
            Err(e) => Err(ConfigError {
                field,
                message: e.to_string(),
            }),
        },
    }
}

impl ProbeConfig {
    /// The handler this entry describes; `index` is its place in the list, for errors.
    pub fn spec(&self, probes_dir: &Path, index: usize) -> Result<ProbeSpec, ConfigError> {
        self.spec_at(probes_dir, &|f| format!("plugins.probes[{index}].{f}"))
    }

    /// The handler this entry describes, its values named by `field` in errors (a
    /// WasmletPlugin's come from its spec).
    pub fn spec_at(
        &self,
        probes_dir: &Path,
        field: &dyn Fn(&str) -> String,
    ) -> Result<ProbeSpec, ConfigError> {
        let limits = common(&self.name, self.memory_limit.as_deref(), &field)?;
        if self.kinds.is_empty() {
            return Err(ConfigError {
                field: field("kinds"),
                message: "name at least one probe kind (httpGet, tcpSocket, exec, grpc, or a custom kind)".into(),
            });
        }
        if let Some(k) = self.kinds.iter().find(|k| k.is_empty()) {
            return Err(ConfigError {
                field: field("kinds"),
                message: format!("{k:?} is not a probe kind"),
            });
        }
        let network = self
            .network
            .iter()
            .enumerate()
            .map(|(i, g)| {
                g.parse().map_err(|message| ConfigError {
                    field: field(&format!("network[{i}]")),
                    message,
                })
            })
            .collect::<Result<_, _>>()?;
        let file = self
            .file
            .clone()
            .unwrap_or_else(|| default_file_name(&self.name).into());
        Ok(ProbeSpec {
            path: probes_dir.join(file),
            kinds: self.kinds.clone(),
            grants: crate::probe::Grants {
                exec: self.exec,
                network,
            },
            limits,
            config: self.config.clone(),
        })
    }
}

impl SourceConfig {
    /// The source this entry describes; `index` is its place in the list, for errors.
    pub fn spec(&self, sources_dir: &Path, index: usize) -> Result<SourceSpec, ConfigError> {
        self.spec_at(sources_dir, &|f| format!("plugins.sources[{index}].{f}"))
    }

    /// The source this entry describes, its values named by `field` in errors.
    pub fn spec_at(
        &self,
        sources_dir: &Path,
        field: &dyn Fn(&str) -> String,
    ) -> Result<SourceSpec, ConfigError> {
        let mut limits = common(&self.name, self.memory_limit.as_deref(), &field)?;
        limits.instances = InstanceMode::PerCall;
        limits.deadline = duration(
            self.timeout.as_deref(),
            DEFAULT_SOURCE_TIMEOUT,
            field("timeout"),
        )?;
        let period = duration(
            self.period.as_deref(),
            DEFAULT_SOURCE_PERIOD,
            field("period"),
        )?;
        if let Some(dir) = &self.directory
            && !dir.is_absolute()
        {
            return Err(ConfigError {
                field: field("directory"),
                message: format!("{} is not an absolute path", dir.display()),
            });
        }
        for (i, url) in self.urls.iter().enumerate() {
            let scheme = url.split_once("://").map(|(s, _)| s);
            if !matches!(scheme, Some("http" | "https")) || url.len() <= "https://".len() {
                return Err(ConfigError {
                    field: field(&format!("urls[{i}]")),
                    message: format!("{url:?} is not an http:// or https:// URL"),
                });
            }
        }
        let file = self
            .file
            .clone()
            .unwrap_or_else(|| default_file_name(&self.name).into());
        Ok(SourceSpec {
            path: sources_dir.join(file),
            grants: crate::source::SourceGrants {
                directory: self.directory.clone(),
                urls: self.urls.clone(),
            },
            period,
            limits,
            config: self.config.clone(),
        })
    }
}

impl AdmissionConfig {
    /// The link this entry describes; `index` is its place in the list, for errors.
    pub fn link_spec(&self, admission_dir: &Path, index: usize) -> Result<LinkSpec, ConfigError> {
        self.link_spec_at(admission_dir, &|f| {
            format!("plugins.admission[{index}].{f}")
        })
    }

    /// The link this entry describes, its values named by `field` in errors.
    pub fn link_spec_at(
        &self,
        admission_dir: &Path,
        field: &dyn Fn(&str) -> String,
    ) -> Result<LinkSpec, ConfigError> {
        let mut limits = common(&self.name, self.memory_limit.as_deref(), &field)?;
        limits.instances = match self.instances {
            InstancesConfig::Reused => InstanceMode::Reused,
            InstancesConfig::PerCall => InstanceMode::PerCall,
        };
        limits.deadline = duration(self.timeout.as_deref(), limits.deadline, field("timeout"))?;
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
            mode: match self.mode {
                ModeConfig::Enforce => Mode::Enforce,
                ModeConfig::Monitor => Mode::Monitor,
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
            "directory: /p\nadmission:\n- name: resource-fit\n- name: x\n  file: /abs/x.wasm\n  failurePolicy: Ignore\n  mode: Monitor\n  timeout: 250ms\n  memoryLimit: 8Mi\n  instances: PerCall\n  config: {a: b}\n",
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
        assert_eq!((first.mode, second.mode), (Mode::Enforce, Mode::Monitor));
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

        let zero: PluginsConfig =
            serde_yaml_ng::from_str("admission:\n- name: a\n  timeout: 0s\n").expect("config");
        let e = zero.admission[0]
            .link_spec(dir, 0)
            .expect_err("zero timeout");
        assert_eq!(
            e.to_string(),
            "plugins.admission[0].timeout: must be more than 0"
        );

        let unknown = serde_yaml_ng::from_str::<PluginsConfig>(
            "admission:\n- name: a\n  failurPolicy: Fail\n",
        );
        let text = unknown.expect_err("unknown field").to_string();
        assert!(text.contains("failurPolicy"), "{text}");
    }

    #[test]
    fn probe_and_source_entries_carry_their_grants() {
        let config: PluginsConfig = serde_yaml_ng::from_str(
            "directory: /p\nprobes:\n- name: probe-http-get\n  kinds: [httpGet]\n  network: [pod, 10.0.0.0/8]\n- name: redis\n  file: /opt/redis.wasm\n  kinds: [redis-ping]\n  exec: true\n  memoryLimit: 8Mi\nsources:\n- name: source-file\n  directory: /etc/kubernetes/manifests\n- name: source-http\n  urls: [\"http://cfg/pods/\"]\n  period: 1m\n  timeout: 2s\n  config: {url: \"http://cfg/pods/a.yaml\"}\n",
        )
        .expect("config");
        let probes = Path::new("/p/probes");
        let http = config.probes[0].spec(probes, 0).expect("spec");
        assert_eq!(http.path, Path::new("/p/probes/probe_http_get.wasm"));
        assert_eq!(http.kinds, ["httpGet"]);
        assert_eq!(http.grants.network.len(), 2);
        assert!(!http.grants.exec);
        let redis = config.probes[1].spec(probes, 1).expect("spec");
        assert_eq!(redis.path, Path::new("/opt/redis.wasm"));
        assert!(redis.grants.exec && redis.grants.network.is_empty());
        assert_eq!(redis.limits.memory_bytes, 8 << 20);

        let sources = Path::new("/p/sources");
        let file = config.sources[0].spec(sources, 0).expect("spec");
        assert_eq!(file.path, Path::new("/p/sources/source_file.wasm"));
        assert_eq!(
            file.grants.directory.as_deref(),
            Some(Path::new("/etc/kubernetes/manifests"))
        );
        assert_eq!(file.period, DEFAULT_SOURCE_PERIOD);
        assert_eq!(file.limits.deadline, DEFAULT_SOURCE_TIMEOUT);
        let http = config.sources[1].spec(sources, 1).expect("spec");
        assert_eq!(http.grants.urls, ["http://cfg/pods/"]);
        assert_eq!(http.period, std::time::Duration::from_secs(60));
        assert_eq!(http.limits.deadline, std::time::Duration::from_secs(2));

        for (yaml, field) in [
            (
                "probes:\n- name: p\n  kinds: []\n",
                "plugins.probes[0].kinds",
            ),
            (
                "probes:\n- name: p\n  kinds: [exec]\n  network: [everywhere]\n",
                "plugins.probes[0].network[0]",
            ),
            (
                "sources:\n- name: s\n  directory: manifests\n",
                "plugins.sources[0].directory",
            ),
            (
                "sources:\n- name: s\n  urls: [ftp://x/]\n",
                "plugins.sources[0].urls[0]",
            ),
            (
                "sources:\n- name: s\n  period: often\n",
                "plugins.sources[0].period",
            ),
        ] {
            let config: PluginsConfig = serde_yaml_ng::from_str(yaml).expect("config");
            let error = match (config.probes.first(), config.sources.first()) {
                (Some(p), _) => p.spec(probes, 0).expect_err(yaml),
                (_, Some(s)) => s.spec(sources, 0).expect_err(yaml),
                _ => unreachable!(),
            };
            assert_eq!(error.field, field, "{yaml}");
        }
    }
}
