//! The kubelet's defaulting (its `SetDefaults_KubeletConfiguration`), in one place: a
//! value field left at Go's zero value (`0s`, `0`, `""`) takes the kubelet's default, so
//! the file kubeadm writes (`syncFrequency: 0s`, `nodeStatusUpdateFrequency: 0s`, …)
//! means what it means to the kubelet. Fields the kubelet keeps as pointers are
//! `Option`s here; unset, they take the defaults of what they become (the eviction
//! thresholds, the rotation policy, …), which are the kubelet's.

use std::time::Duration;

use super::file::{Dur, File};

/// The kubelet's default runtime endpoint.
pub const RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

/// `zero` → `default`.
fn duration(field: &mut Dur, default: Duration) {
    if field.is_zero() {
        *field = Dur(default);
    }
}

fn int(field: &mut i64, default: i64) {
    if *field == 0 {
        *field = default;
    }
}

fn text(field: &mut String, default: &str) {
    if field.is_empty() {
        default.clone_into(field);
    }
}

/// Which defaults apply beyond the KubeletConfiguration's.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Mode {
    /// There was no configuration file: the kubelet's command-line defaults apply
    /// (anonymous requests allowed, no webhook authentication, every request
    /// authorized).
    pub legacy: bool,
    /// Run as `kubelet`: the kubelet's directories (`/var/lib/kubelet`,
    /// `/var/log/pods`), where kubeadm and log collectors look; else wasmlet's
    /// (`/var/lib/wasmlet`, `<rootDir>/pod-logs`).
    pub kubelet: bool,
}

/// Fills `f`'s zero values with the kubelet's defaults.
pub(super) fn apply(f: &mut File, mode: Mode) {
    let secs = Duration::from_secs;
    duration(&mut f.sync_frequency, secs(60));
    duration(&mut f.file_check_frequency, secs(20));
    // The report frequency follows the update frequency when only that is set.
    if f.node_status_report_frequency.is_zero() {
        f.node_status_report_frequency = if f.node_status_update_frequency.is_zero() {
            Dur(secs(300))
        } else {
            f.node_status_update_frequency
        };
    }
    duration(&mut f.node_status_update_frequency, secs(10));
    int(&mut f.node_lease_duration_seconds, 40);
    duration(&mut f.image_minimum_gc_age, secs(120));
    duration(&mut f.eviction_pressure_transition_period, secs(300));
    int(&mut f.max_pods, 110);
    int(&mut f.event_burst, 100);
    int(&mut f.kube_api_burst, 100);
    text(&mut f.healthz_bind_address, "127.0.0.1");
    text(&mut f.cgroup_driver, "cgroupfs");
    text(&mut f.container_runtime_endpoint, RUNTIME_ENDPOINT);
    if f.pod_pids_limit.is_some_and(|n| n < 0) {
        f.pod_pids_limit = Some(-1);
    }
    if f.static_pod_path
        .as_ref()
        .is_some_and(|p| p.as_os_str().is_empty())
    {
        f.static_pod_path = None;
    }
    for p in [&mut f.tls_cert_file, &mut f.tls_private_key_file] {
        if p.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
            *p = None;
        }
    }
    if f.container_log_max_size
        .as_ref()
        .is_some_and(|v| v.as_str() == Some(""))
    {
        f.container_log_max_size = None;
    }
    directories(f, mode.kubelet);
    f.authentication.set_defaults(mode.legacy);
    f.authorization.set_defaults(mode.legacy);
}

/// `rootDir` and `podLogsDir` unless given.
fn directories(f: &mut File, kubelet: bool) {
    if f.root_dir.as_ref().is_none_or(|p| p.as_os_str().is_empty()) {
        f.root_dir = Some(
            if kubelet {
                "/var/lib/kubelet"
            } else {
                "/var/lib/wasmlet"
            }
            .into(),
        );
    }
    if kubelet && f.pod_logs_dir.is_none() {
        f.pod_logs_dir = Some("/var/log/pods".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::file::{mapping, typed};

    fn defaulted(text: &str) -> File {
        let mut f = typed(mapping(text).expect("yaml"), &Default::default()).expect("valid");
        apply(&mut f, Mode::default());
        f
    }

    #[test]
    fn zeros_become_the_kubelets_defaults() {
        let f = defaulted(
            "syncFrequency: 0s\nfileCheckFrequency: 0s\nnodeStatusUpdateFrequency: 0s\n\
             nodeStatusReportFrequency: 0s\nimageMinimumGCAge: 0s\nmaxPods: 0\n\
             containerRuntimeEndpoint: ''\nevictionPressureTransitionPeriod: 0s\n",
        );
        assert_eq!(f.sync_frequency.0, Duration::from_secs(60));
        assert_eq!(f.file_check_frequency.0, Duration::from_secs(20));
        assert_eq!(f.node_status_update_frequency.0, Duration::from_secs(10));
        assert_eq!(f.node_status_report_frequency.0, Duration::from_secs(300));
        assert_eq!(f.image_minimum_gc_age.0, Duration::from_secs(120));
        assert_eq!(f.max_pods, 110);
        assert_eq!(f.container_runtime_endpoint, RUNTIME_ENDPOINT);
        assert_eq!(f.cgroup_driver, "cgroupfs");
        let f = defaulted("nodeStatusUpdateFrequency: 4s\n");
        assert_eq!(
            f.node_status_report_frequency.0,
            Duration::from_secs(4),
            "the report follows the update when only it is set"
        );
        let f = defaulted("podPidsLimit: -5\n");
        assert_eq!(f.pod_pids_limit, Some(-1));
        assert_eq!(
            f.root_dir.as_deref(),
            Some(std::path::Path::new("/var/lib/wasmlet"))
        );
        let mut f = typed(mapping("").expect("yaml"), &Default::default()).expect("valid");
        apply(
            &mut f,
            Mode {
                kubelet: true,
                legacy: false,
            },
        );
        assert_eq!(
            f.root_dir.as_deref(),
            Some(std::path::Path::new("/var/lib/kubelet"))
        );
        assert_eq!(
            f.pod_logs_dir.as_deref(),
            Some(std::path::Path::new("/var/log/pods"))
        );
    }
}
