//! `/configz`: the configuration in effect, under the KubeletConfiguration's names (as
//! the kubelet's `/configz` shows its `kubeletconfig`).

use std::time::Duration;

use serde_json::{Value, json};

use super::Config;

/// Go's duration text (`1m0s`, `500ms`), as the kubelet prints its durations.
fn go_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let frac = d.subsec_millis();
    let s = if frac == 0 {
        format!("{s}s")
    } else {
        format!("{s}.{frac:03}s")
    };
    match (h, m) {
        (0, 0) => s,
        (0, m) => format!("{m}m{s}"),
        (h, m) => format!("{h}h{m}m{s}"),
    }
}

/// Bytes as the shortest binary quantity (`10Mi`, `512Ki`, `1000`).
fn quantity(bytes: u64) -> String {
    for (unit, size) in [("Gi", 1u64 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    bytes.to_string()
}

impl Config {
    /// The configuration as `/configz` shows it.
    pub fn configz(&self, node_name: &str, cpus: u64) -> Value {
        let server = self.server.as_ref();
        let mut v = json!({
            "kind": "KubeletConfiguration",
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "nodeName": node_name,
            "staticPodPath": self.static_pod_path,
            "syncFrequency": go_duration(self.sync_frequency),
            "fileCheckFrequency": go_duration(self.file_check_frequency),
            "maxPods": self.max_pods,
            // wasmlet's, as the agent runs with it (the default is per CPU).
            "maxParallelStartCalls": self.start_parallelism(cpus),
            "healthzBindAddress": self.healthz.0.to_string(),
            "healthzPort": self.healthz.1,
            "readOnlyPort": self.read_only.1,
            "rootDir": self.root_dir,
            "podLogsDir": self.pod_logs_dir,
            "resolvConf": self.resolv_conf,
            "podPidsLimit": self.pod_pids_limit.map_or(-1, |n| i64::try_from(n).unwrap_or(-1)),
            "cgroupsPerQOS": self.cgroups.is_some(),
            "cgroupRoot": self.cgroups.as_ref().map_or("", |c| c.root.as_str()),
            "cgroupDriver": match self.cgroups.as_ref().map(|c| c.driver) {
                Some(wasmlet_agent::cgroups::tree::Driver::Systemd) => "systemd",
                _ => "cgroupfs",
            },
            "enforceNodeAllocatable": self.cgroups.as_ref().map_or_else(Vec::new, |c| {
                let mut keys: Vec<&str> = Vec::new();
                if c.enforce_pods {
                    keys.push("pods");
                }
                keys.extend(c.reserved.iter().map(|r| match r.field {
                    "systemReservedCgroup" => "system-reserved",
                    _ => "kube-reserved",
                }));
                keys
            }),
            "nodeStatusUpdateFrequency": go_duration(self.timing.update),
            "nodeStatusReportFrequency": go_duration(self.timing.report),
            "nodeLeaseDurationSeconds": self.timing.lease_seconds,
            // int32 in the kubelet's types: a decoder of KubeletConfiguration refuses
            // `50.0` (e2e_node's set-up reads /configz).
            "kubeAPIQPS": self.limits.api_qps.round() as i64,
            "kubeAPIBurst": self.limits.api_burst,
            "eventRecordQPS": self.limits.event_qps.round() as i64,
            "eventBurst": self.limits.event_burst,
            "enableServer": server.is_some(),
            "containerLogMaxSize": quantity(self.log_rotation.policy.max_bytes),
            "containerLogMaxFiles": self.log_rotation.policy.max_files,
            "containerLogMaxWorkers": self.log_rotation.workers,
            "containerLogMonitorInterval": go_duration(self.log_rotation.interval),
            "shutdownGracePeriod": go_duration(self.shutdown.grace),
            "shutdownGracePeriodCriticalPods": go_duration(self.shutdown.critical),
        });
        self.shutdown_fields(&mut v);
        if let (Some(s), Some(o)) = (server, v.as_object_mut()) {
            server_fields(s, o);
        }
        v
    }

    /// `shutdownGracePeriodByPodPriority`, when the groups were given that way.
    fn shutdown_fields(&self, v: &mut Value) {
        if !self.shutdown.by_priority() {
            return;
        }
        let groups: Vec<Value> = self
            .shutdown
            .groups
            .iter()
            .map(|g| json!({"priority": g.priority, "shutdownGracePeriodSeconds": g.grace_seconds}))
            .collect();
        if let Some(o) = v.as_object_mut() {
            o.insert("shutdownGracePeriodByPodPriority".into(), groups.into());
        }
    }
}

/// The kubelet server's fields: address and port, TLS, authentication, authorization.
fn server_fields(s: &crate::config::ServerConfig, o: &mut serde_json::Map<String, Value>) {
    o.insert("address".into(), s.addr.ip().to_string().into());
    o.insert("port".into(), s.addr.port().into());
    if let Some(c) = &s.tls.cert_file {
        o.insert("tlsCertFile".into(), json!(c));
    }
    if let Some(k) = &s.tls.key_file {
        o.insert("tlsPrivateKeyFile".into(), json!(k));
    }
    let min_version = match s.tls.min_version {
        wasmlet_server::tls::MinVersion::Tls12 => "VersionTLS12",
        wasmlet_server::tls::MinVersion::Tls13 => "VersionTLS13",
    };
    o.insert("tlsMinVersion".into(), min_version.into());
    if !s.tls.cipher_suites.is_empty() {
        o.insert("tlsCipherSuites".into(), json!(s.tls.cipher_suites));
    }
    o.insert(
        "authentication".into(),
        json!({
            "x509": {"clientCAFile": s.tls.client_ca_file},
            "webhook": {"enabled": s.authn.webhook, "cacheTTL": go_duration(s.authn.cache_ttl)},
            "anonymous": {"enabled": s.authn.anonymous},
        }),
    );
    let mode = match s.authz.mode {
        wasmlet_server::authz::Mode::Webhook => "Webhook",
        wasmlet_server::authz::Mode::AlwaysAllow => "AlwaysAllow",
    };
    o.insert(
        "authorization".into(),
        json!({
            "mode": mode,
            "webhook": {
                "cacheAuthorizedTTL": go_duration(s.authz.authorized_ttl),
                "cacheUnauthorizedTTL": go_duration(s.authz.unauthorized_ttl),
            },
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_go_does() {
        assert_eq!(go_duration(Duration::from_secs(60)), "1m0s");
        assert_eq!(go_duration(Duration::from_secs(120)), "2m0s");
        assert_eq!(go_duration(Duration::from_secs(20)), "20s");
        assert_eq!(go_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(go_duration(Duration::ZERO), "0s");
        assert_eq!(go_duration(Duration::from_secs(3630)), "1h0m30s");
    }

    #[test]
    fn configz_names_the_kubelets_fields() {
        let c = Config::parse(
            "authorization: {mode: AlwaysAllow}\n",
            std::path::Path::new("/c.yaml"),
        )
        .expect("valid");
        let z = c.configz("node-a", 2);
        assert_eq!(z["nodeName"], "node-a");
        assert_eq!(z["port"], 10250);
        assert_eq!(z["maxParallelStartCalls"], 8, "4 per CPU");
        assert_eq!(z["syncFrequency"], "1m0s");
        // int32 fields are integers, as Go decodes them.
        assert!(z["eventRecordQPS"].is_i64(), "{}", z["eventRecordQPS"]);
        assert!(z["kubeAPIQPS"].is_i64(), "{}", z["kubeAPIQPS"]);
        assert_eq!(z["authorization"]["mode"], "AlwaysAllow");
        assert_eq!(z["authentication"]["anonymous"]["enabled"], false);
        assert_eq!(z["authentication"]["webhook"]["cacheTTL"], "2m0s");
        assert_eq!(z["containerLogMaxSize"], "10Mi");
        assert_eq!(z["containerLogMaxFiles"], 5);
        assert_eq!(z["containerLogMonitorInterval"], "10s");
        assert_eq!(quantity(1536), "1536");
        assert_eq!(quantity(1 << 30), "1Gi");
    }
}
