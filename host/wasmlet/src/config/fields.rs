//! What wasmlet does with each field of a KubeletConfiguration (v1beta1, Kubernetes
//! 1.33): the one table. A field is implemented (read into [`super::file::File`]) or
//! ignored: taken out before the file is read, with a warning naming it when it asks
//! for something other than the kubelet's default (kubeadm writes `0s`, `0` and `""`
//! for what it leaves to the defaults; those pass quietly).

use serde_yaml_ng::{Mapping, Value};
use wasmlet_plugin_host::convert::parse_duration;

/// What wasmlet does with a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Read and acted on.
    Implemented,
    /// Accepted and ignored; the kubelet's default (as YAML text) does not warn.
    Ignored(Option<&'static str>),
}

use Support::{Ignored, Implemented};

/// Every KubeletConfiguration v1beta1 field of Kubernetes 1.33 (1.28's, then those added
/// since, in the order of upstream's `types.go`).
pub const KUBELET_FIELDS: &[(&str, Support)] = &[
    ("apiVersion", Implemented),
    ("kind", Implemented),
    ("enableServer", Implemented),
    ("staticPodPath", Implemented),
    ("syncFrequency", Implemented),
    ("fileCheckFrequency", Implemented),
    ("httpCheckFrequency", Ignored(Some("20s"))),
    ("staticPodURL", Ignored(None)),
    ("staticPodURLHeader", Ignored(None)),
    ("address", Implemented),
    ("port", Implemented),
    ("readOnlyPort", Implemented),
    ("tlsCertFile", Implemented),
    ("tlsPrivateKeyFile", Implemented),
    ("tlsCipherSuites", Implemented),
    ("tlsMinVersion", Implemented),
    ("rotateCertificates", Implemented),
    ("serverTLSBootstrap", Implemented),
    ("authentication", Implemented),
    ("authorization", Implemented),
    ("registryPullQPS", Ignored(Some("5"))),
    ("registryBurst", Ignored(Some("10"))),
    ("eventRecordQPS", Implemented),
    ("eventBurst", Implemented),
    ("enableDebuggingHandlers", Ignored(Some("true"))),
    ("enableContentionProfiling", Ignored(None)),
    ("healthzPort", Implemented),
    ("healthzBindAddress", Implemented),
    ("oomScoreAdj", Ignored(Some("-999"))),
    ("clusterDomain", Implemented),
    ("clusterDNS", Implemented),
    ("streamingConnectionIdleTimeout", Ignored(Some("4h"))),
    ("nodeStatusUpdateFrequency", Implemented),
    ("nodeStatusReportFrequency", Implemented),
    ("nodeLeaseDurationSeconds", Implemented),
    ("imageMinimumGCAge", Implemented),
    ("imageGCHighThresholdPercent", Implemented),
    ("imageGCLowThresholdPercent", Implemented),
    ("volumeStatsAggPeriod", Ignored(Some("1m"))),
    ("kubeletCgroups", Ignored(None)),
    ("systemCgroups", Ignored(None)),
    ("cgroupRoot", Implemented),
    ("cgroupsPerQOS", Implemented),
    ("cgroupDriver", Implemented),
    ("cpuManagerPolicy", Ignored(Some("none"))),
    ("cpuManagerPolicyOptions", Ignored(None)),
    ("cpuManagerReconcilePeriod", Ignored(Some("10s"))),
    ("memoryManagerPolicy", Ignored(Some("None"))),
    ("topologyManagerPolicy", Ignored(Some("none"))),
    ("topologyManagerScope", Ignored(Some("container"))),
    ("topologyManagerPolicyOptions", Ignored(None)),
    ("qosReserved", Ignored(None)),
    ("runtimeRequestTimeout", Ignored(Some("2m"))),
    ("hairpinMode", Ignored(Some("promiscuous-bridge"))),
    ("maxPods", Implemented),
    ("podCIDR", Ignored(None)),
    ("podPidsLimit", Implemented),
    ("resolvConf", Implemented),
    ("runOnce", Ignored(None)),
    ("cpuCFSQuota", Ignored(Some("true"))),
    ("cpuCFSQuotaPeriod", Ignored(Some("100ms"))),
    ("nodeStatusMaxImages", Implemented),
    ("maxOpenFiles", Ignored(Some("1000000"))),
    (
        "contentType",
        Ignored(Some("application/vnd.kubernetes.protobuf")),
    ),
    ("kubeAPIQPS", Implemented),
    ("kubeAPIBurst", Implemented),
    ("serializeImagePulls", Ignored(Some("true"))),
    ("maxParallelImagePulls", Ignored(None)),
    ("evictionHard", Implemented),
    ("evictionSoft", Implemented),
    ("evictionSoftGracePeriod", Implemented),
    ("evictionPressureTransitionPeriod", Implemented),
    ("evictionMaxPodGracePeriod", Implemented),
    ("evictionMinimumReclaim", Implemented),
    ("podsPerCore", Ignored(None)),
    ("enableControllerAttachDetach", Ignored(Some("true"))),
    ("protectKernelDefaults", Ignored(None)),
    ("makeIPTablesUtilChains", Ignored(Some("true"))),
    ("iptablesMasqueradeBit", Ignored(Some("14"))),
    ("iptablesDropBit", Ignored(Some("15"))),
    ("featureGates", Ignored(None)),
    ("failSwapOn", Ignored(Some("true"))),
    ("memorySwap", Implemented),
    ("containerLogMaxSize", Implemented),
    ("containerLogMaxFiles", Implemented),
    (
        "configMapAndSecretChangeDetectionStrategy",
        Ignored(Some("Watch")),
    ),
    ("systemReserved", Implemented),
    ("kubeReserved", Implemented),
    ("reservedSystemCPUs", Ignored(None)),
    ("showHiddenMetricsForVersion", Ignored(None)),
    ("systemReservedCgroup", Implemented),
    ("kubeReservedCgroup", Implemented),
    ("enforceNodeAllocatable", Implemented),
    ("allowedUnsafeSysctls", Implemented),
    (
        "volumePluginDir",
        Ignored(Some("/usr/libexec/kubernetes/kubelet-plugins/volume/exec/")),
    ),
    ("providerID", Ignored(None)),
    ("kernelMemcgNotification", Ignored(None)),
    ("logging", Ignored(None)),
    ("enableSystemLogHandler", Ignored(Some("true"))),
    ("enableSystemLogQuery", Ignored(None)),
    ("shutdownGracePeriod", Implemented),
    ("shutdownGracePeriodCriticalPods", Implemented),
    ("shutdownGracePeriodByPodPriority", Implemented),
    ("reservedMemory", Ignored(None)),
    ("enableProfilingHandler", Ignored(Some("true"))),
    ("enableDebugFlagsHandler", Ignored(Some("true"))),
    ("seccompDefault", Ignored(None)),
    ("memoryThrottlingFactor", Ignored(Some("0.9"))),
    ("registerWithTaints", Implemented),
    ("registerNode", Ignored(Some("true"))),
    ("tracing", Ignored(None)),
    ("localStorageCapacityIsolation", Ignored(Some("true"))),
    ("containerRuntimeEndpoint", Implemented),
    ("imageServiceEndpoint", Ignored(None)),
    // Since 1.28.
    ("podLogsDir", Implemented),
    (
        "imagePullCredentialsVerificationPolicy",
        Ignored(Some("NeverVerifyPreloadedImages")),
    ),
    ("preloadedImagesVerificationAllowlist", Ignored(None)),
    ("imageMaximumGCAge", Ignored(None)),
    ("singleProcessOOMKill", Implemented),
    ("mergeDefaultEvictionSettings", Implemented),
    ("containerLogMaxWorkers", Implemented),
    ("containerLogMonitorInterval", Implemented),
    ("crashLoopBackOff", Ignored(None)),
    ("failCgroupV1", Implemented),
    ("userNamespaces", Ignored(None)),
];

/// wasmlet's own fields, beside the kubelet's (kubelet flags as fields, and wasmlet's
/// own settings).
pub const WASMLET_FIELDS: &[&str] = &[
    "nodeName",
    "nodeIP",
    "kubeconfig",
    "maxParallelStartCalls",
    "rootDir",
    "devicePluginDir",
    "nodeLabels",
    "housekeepingInterval",
    "plugins",
    "clusterPlugins",
];

/// What wasmlet does with `field` (the kubelet's or wasmlet's own), or `None` when
/// there is no such field.
pub fn support(field: &str) -> Option<Support> {
    KUBELET_FIELDS
        .iter()
        .find(|(name, _)| *name == field)
        .map(|(_, s)| *s)
        .or_else(|| WASMLET_FIELDS.contains(&field).then_some(Implemented))
}

/// Go's zero value: `null`, `0`, `0s`, `""`, `false`, an empty list or map, or a map of
/// zero values (kubeadm's `logging: {flushFrequency: 0, verbosity: 0, …}`).
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty() || s == "0" || parse_duration(s) == Ok(Default::default()),
        Value::Sequence(s) => s.is_empty(),
        Value::Mapping(m) => m.values().all(is_zero),
        Value::Tagged(t) => is_zero(&t.value),
    }
}

/// `v` written as the kubelet's default `text` (durations compared as durations).
fn is_default(v: &Value, text: &str) -> bool {
    let written = match v {
        Value::String(s) => s.clone(),
        other => serde_yaml_ng::to_string(other)
            .map(|s| s.trim().replace(['\n', ' '], "").replace("-", ""))
            .unwrap_or_default(),
    };
    if written == text {
        return true;
    }
    matches!((parse_duration(&written), parse_duration(text)), (Ok(a), Ok(b)) if a == b)
        || (text.starts_with('[') && written == text.trim_matches(['[', ']']))
}

/// Takes the ignored fields out of `map`; returns a warning for each that asks for
/// something other than the kubelet's default.
pub fn take_ignored(map: &mut Mapping) -> Vec<String> {
    let ignored: Vec<(String, Option<&str>)> = map
        .keys()
        .filter_map(Value::as_str)
        .filter_map(|k| match support(k) {
            Some(Ignored(default)) => Some((k.to_owned(), default)),
            _ => None,
        })
        .collect();
    let mut warnings = Vec::new();
    for (field, default) in ignored {
        let Some(value) = map.remove(field.as_str()) else {
            continue;
        };
        // A pointer field's `false` is a value, not "unset", where the default is true.
        let quiet_zero = is_zero(&value) && default != Some("true");
        if quiet_zero || default.is_some_and(|d| is_default(&value, d)) {
            continue;
        }
        warnings.push(format!(
            "KubeletConfiguration field {field} is not implemented by wasmlet; ignored"
        ));
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::file::{mapping, typed};

    fn one(field: &str) -> serde_yaml_ng::Mapping {
        mapping(&format!("{field}: null")).expect("yaml")
    }

    /// Whether the typed file has `field` (serde says "unknown field" otherwise).
    fn read(field: &str) -> bool {
        let v = serde_yaml_ng::Value::Mapping(one(field));
        match serde_yaml_ng::from_value::<crate::config::file::File>(v) {
            Ok(_) => true,
            Err(e) => !e.to_string().contains("unknown field"),
        }
    }

    #[test]
    fn the_table_is_the_file() {
        for (field, support) in KUBELET_FIELDS {
            match support {
                Implemented => assert!(read(field), "{field} is not read"),
                Ignored(_) => assert!(!read(field), "{field} is read but listed as ignored"),
            }
        }
        let none = Default::default();
        for field in WASMLET_FIELDS {
            assert!(read(field) && typed(one(field), &none).is_ok(), "{field}");
            assert!(
                !KUBELET_FIELDS.iter().any(|(n, _)| n == field),
                "{field} is the kubelet's"
            );
        }
        assert_eq!(
            KUBELET_FIELDS.len(),
            125,
            "1.33's fields, apiVersion and kind"
        );
    }

    #[test]
    fn zeros_and_defaults_pass_quietly() {
        let mut m = mapping(
            "cpuManagerReconcilePeriod: 0s\nlogging: {flushFrequency: 0, options: {json: {infoBufferSize: '0'}}, verbosity: 0}\n\
             runtimeRequestTimeout: 0s\nhttpCheckFrequency: 0s\n\
             streamingConnectionIdleTimeout: 4h0m0s\nfailSwapOn: true\nmemoryThrottlingFactor: 0.9\n\
             cpuManagerPolicy: none\nsyncFrequency: 0s\n",
        )
        .expect("yaml");
        assert_eq!(take_ignored(&mut m), Vec::<String>::new());
        assert_eq!(m.len(), 1, "only syncFrequency is left: {m:?}");
        let mut m =
            mapping("cpuManagerPolicy: static\nfailSwapOn: false\nfeatureGates: {A: true}\n")
                .expect("yaml");
        let w = take_ignored(&mut m);
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].contains("cpuManagerPolicy"), "{w:?}");
        assert!(m.is_empty());
    }
}
