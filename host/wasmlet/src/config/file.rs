//! The configuration as written: one typed KubeletConfiguration (v1beta1, the fields
//! wasmlet implements) beside wasmlet's own fields. Value fields keep Go's zero values
//! (`0s`, `0`, `""`) — [`super::defaults`] turns them into the kubelet's defaults —
//! and the kubelet's pointer fields are `Option`s. Fields the kubelet has and wasmlet
//! does not implement are taken out before this struct is read ([`super::fields`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::Taint;
use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};
use wasmlet_plugin_host::config::PluginsConfig;

pub(super) use super::duration::Dur;
use super::server::{AuthnFile, AuthzFile};

/// A file's `kubeReserved`, `systemReserved`, `containerLogMaxSize`: quantities, as a
/// string or a plain number.
pub(super) type Quantities = BTreeMap<String, Value>;

/// The file as written, flags applied over it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub(super) struct File {
    pub api_version: String,
    pub kind: String,
    // wasmlet's own fields.
    pub node_name: Option<String>,
    #[serde(rename = "nodeIP")]
    pub node_ip: Option<String>,
    pub kubeconfig: Option<PathBuf>,
    pub max_parallel_start_calls: Option<i64>,
    pub root_dir: Option<PathBuf>,
    pub device_plugin_dir: Option<PathBuf>,
    pub node_labels: BTreeMap<String, String>,
    pub housekeeping_interval: Option<String>,
    pub plugins: Option<PluginsConfig>,
    pub cluster_plugins: Option<wasmlet_fleet::FleetConfig>,
    // The kubelet's (KubeletConfiguration v1beta1).
    pub enable_server: Option<bool>,
    pub static_pod_path: Option<PathBuf>,
    pub sync_frequency: Dur,
    pub file_check_frequency: Dur,
    pub address: String,
    /// wasmlet keeps `0` as "any free port" (several agents on one machine).
    pub port: Option<i64>,
    pub read_only_port: Option<i64>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    pub tls_cipher_suites: Vec<String>,
    pub tls_min_version: String,
    pub rotate_certificates: bool,
    #[serde(rename = "serverTLSBootstrap")]
    pub server_tls_bootstrap: bool,
    pub authentication: AuthnFile,
    pub authorization: AuthzFile,
    #[serde(rename = "eventRecordQPS")]
    pub event_record_qps: Option<f64>,
    pub event_burst: i64,
    pub healthz_port: Option<i64>,
    pub healthz_bind_address: String,
    pub cluster_domain: String,
    #[serde(rename = "clusterDNS")]
    pub cluster_dns: Vec<String>,
    pub node_status_update_frequency: Dur,
    pub node_status_report_frequency: Dur,
    pub node_lease_duration_seconds: i64,
    #[serde(rename = "imageMinimumGCAge")]
    pub image_minimum_gc_age: Dur,
    #[serde(rename = "imageGCHighThresholdPercent")]
    pub image_gc_high_threshold_percent: Option<i64>,
    #[serde(rename = "imageGCLowThresholdPercent")]
    pub image_gc_low_threshold_percent: Option<i64>,
    pub cgroup_root: String,
    #[serde(rename = "cgroupsPerQOS")]
    pub cgroups_per_qos: Option<bool>,
    pub cgroup_driver: String,
    pub max_pods: i64,
    pub pod_pids_limit: Option<i64>,
    pub resolv_conf: Option<PathBuf>,
    pub node_status_max_images: Option<i64>,
    #[serde(rename = "kubeAPIQPS")]
    pub kube_api_qps: Option<f64>,
    #[serde(rename = "kubeAPIBurst")]
    pub kube_api_burst: i64,
    pub eviction_hard: Option<BTreeMap<String, String>>,
    pub eviction_soft: Option<BTreeMap<String, String>>,
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    pub eviction_pressure_transition_period: Dur,
    pub eviction_max_pod_grace_period: i64,
    pub eviction_minimum_reclaim: Option<BTreeMap<String, String>>,
    pub container_log_max_size: Option<Value>,
    pub container_log_max_files: Option<i64>,
    pub system_reserved: Quantities,
    pub kube_reserved: Quantities,
    /// `None`: not written (the default, `[pods]`); `[]` enforces nothing.
    pub enforce_node_allocatable: Option<Vec<String>>,
    pub system_reserved_cgroup: String,
    pub kube_reserved_cgroup: String,
    pub allowed_unsafe_sysctls: Vec<String>,
    pub register_with_taints: Vec<Taint>,
    pub container_runtime_endpoint: String,
    pub shutdown_grace_period: Dur,
    pub shutdown_grace_period_critical_pods: Dur,
    pub shutdown_grace_period_by_pod_priority: Vec<ShutdownGroup>,
    // Since 1.28.
    pub pod_logs_dir: Option<PathBuf>,
    pub merge_default_eviction_settings: Option<bool>,
    pub container_log_max_workers: Option<i64>,
    pub container_log_monitor_interval: Option<String>,
    #[serde(rename = "failCgroupV1")]
    pub fail_cgroup_v1: Option<bool>,
    pub memory_swap: MemorySwap,
    #[serde(rename = "singleProcessOOMKill")]
    pub single_process_oom_kill: Option<bool>,
}

/// `memorySwap`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub(super) struct MemorySwap {
    pub swap_behavior: String,
}

/// One `shutdownGracePeriodByPodPriority` entry.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub(super) struct ShutdownGroup {
    pub priority: i32,
    pub shutdown_grace_period_seconds: i64,
}

/// Reads configuration text into a mapping of fields (an empty file is no fields).
pub(super) fn mapping(text: &str) -> Result<Mapping> {
    let value: Value =
        serde_yaml_ng::from_str(text).map_err(|e| anyhow::anyhow!("not valid YAML: {e}"))?;
    match value {
        Value::Null => Ok(Mapping::new()),
        Value::Mapping(m) => Ok(m),
        _ => bail!("the configuration must be a mapping of fields"),
    }
}

/// The typed file from its fields. An error names the field (or the flag `origins`
/// says set it) — serde's own message names only the first problem, without the field
/// when a value does not parse.
pub(super) fn typed(mut map: Mapping, origins: &BTreeMap<String, String>) -> Result<File> {
    // `field:` (null) is Go's zero value: as if not written.
    map.retain(|_, v| !v.is_null());
    let value = Value::Mapping(map);
    match serde_yaml_ng::from_value::<File>(value.clone()) {
        Ok(f) => Ok(f),
        Err(e) => bail!(
            "{}",
            field_error(&value, origins).unwrap_or_else(|| e.to_string())
        ),
    }
}

/// The first field of `value` that does not read on its own, with serde's message and
/// the field's path.
fn field_error(value: &Value, origins: &BTreeMap<String, String>) -> Option<String> {
    for (k, v) in value.as_mapping()? {
        let mut one = Mapping::new();
        one.insert(k.clone(), v.clone());
        // Read from text, where the deserializer tracks the path
        // (`authentication.webhook.cacheTTL: …`).
        let text = serde_yaml_ng::to_string(&one).ok()?;
        let Err(e) = serde_yaml_ng::from_str::<File>(&text) else {
            continue;
        };
        let message = e.to_string();
        // Lines and columns would point into the re-serialized value, not the file.
        let message = match message.rfind(" at line ") {
            Some(i) => message[..i].to_owned(),
            None => message,
        };
        let key = k.as_str().unwrap_or("?");
        let message = if message.starts_with(key) {
            message
        } else {
            format!("{key}: {message}")
        };
        return Some(match origins.get(key) {
            Some(flag) => format!("{flag}: {message}"),
            None => message,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn go_zero_durations_read_as_zero() {
        for text in [
            "syncFrequency: 0s",
            "syncFrequency: 0",
            "syncFrequency: ''",
            "syncFrequency:",
        ] {
            let f = typed(mapping(text).expect("yaml"), &BTreeMap::new()).expect(text);
            assert!(f.sync_frequency.is_zero(), "{text}");
        }
        let f = typed(
            mapping("syncFrequency: 1m30s").expect("yaml"),
            &BTreeMap::new(),
        )
        .expect("valid");
        assert_eq!(f.sync_frequency, Dur(Duration::from_secs(90)));
        let e = typed(
            mapping("syncFrequency: soon").expect("yaml"),
            &BTreeMap::new(),
        )
        .expect_err("soon");
        assert!(e.to_string().starts_with("syncFrequency: "), "{e}");
        let origins = BTreeMap::from([("syncFrequency".to_owned(), "--sync-frequency".to_owned())]);
        let e = typed(mapping("syncFrequency: soon").expect("yaml"), &origins).expect_err("soon");
        assert!(
            e.to_string()
                .starts_with("--sync-frequency: syncFrequency: "),
            "{e}"
        );
    }
}
