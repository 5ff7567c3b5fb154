//! The kubelet's command line (Kubernetes 1.33) on `wasmlet run`, so kubeadm's unit and
//! drop-in start wasmlet unchanged: `--config`, `--kubeconfig`, `--bootstrap-kubeconfig`,
//! `--container-runtime-endpoint`, `--node-ip`, … with the kubelet's meaning and
//! precedence (a flag overrides the file, the file the defaults).
//!
//! One table, [`FLAGS`], says what each flag does: it sets a configuration field (and
//! goes through the same checks as the file, an error naming the flag), it is one of
//! the kubelet's flag-only settings ([`Invocation`]), or wasmlet ignores it with a
//! warning naming it. Any other flag is an error naming it. Values are written as the
//! kubelet takes them: `--flag=value` or `--flag value`, booleans as `--flag` or
//! `--flag=false`, lists comma-separated, maps `k=v,…` (eviction thresholds `k<v,…`),
//! taints `key=value:Effect,…`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::{Arg, ArgAction, ArgMatches};
use serde_yaml_ng::{Mapping, Value};

/// How a flag's text becomes a field's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Str,
    Int,
    Bool,
    /// Comma-separated; repeated flags add up.
    List,
    /// `k=v,k2=v2`.
    Map,
    /// `k<v,k2<v2` (eviction thresholds).
    Langle,
    /// `key=value:Effect,…`.
    Taints,
    /// `k=v,…`, added to the file's `nodeLabels`.
    Labels,
}

/// What a flag does.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// Sets the field at this dotted path.
    Field(&'static str, Kind),
    /// A setting of the command line only.
    Own(Own, Kind),
    /// Not implemented: warned about by name and ignored.
    Ignored(Kind),
}

/// The kubelet's flag-only settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Own {
    Config,
    BootstrapKubeconfig,
    CertDir,
    HostnameOverride,
    CloudProvider,
    PodInfraContainerImage,
    Verbosity,
    Version,
}

use Kind::{Bool, Int, Labels, Langle, List, Map, Str, Taints};
use Target::{Field, Ignored};

/// Every flag of the kubelet 1.33 (and of 1.28, wasmlet's `--node-name`), and what it
/// does.
const FLAGS: &[(&str, Target)] = &[
    ("config", Target::Own(Own::Config, Str)),
    (
        "bootstrap-kubeconfig",
        Target::Own(Own::BootstrapKubeconfig, Str),
    ),
    ("cert-dir", Target::Own(Own::CertDir, Str)),
    ("hostname-override", Target::Own(Own::HostnameOverride, Str)),
    ("cloud-provider", Target::Own(Own::CloudProvider, Str)),
    (
        "pod-infra-container-image",
        Target::Own(Own::PodInfraContainerImage, Str),
    ),
    ("v", Target::Own(Own::Verbosity, Str)),
    ("version", Target::Own(Own::Version, Bool)),
    ("node-name", Field("nodeName", Str)),
    ("kubeconfig", Field("kubeconfig", Str)),
    ("root-dir", Field("rootDir", Str)),
    ("node-ip", Field("nodeIP", Str)),
    ("node-labels", Field("nodeLabels", Labels)),
    ("register-with-taints", Field("registerWithTaints", Taints)),
    (
        "container-runtime-endpoint",
        Field("containerRuntimeEndpoint", Str),
    ),
    ("pod-manifest-path", Field("staticPodPath", Str)),
    ("sync-frequency", Field("syncFrequency", Str)),
    ("file-check-frequency", Field("fileCheckFrequency", Str)),
    ("address", Field("address", Str)),
    ("port", Field("port", Int)),
    ("read-only-port", Field("readOnlyPort", Int)),
    ("healthz-bind-address", Field("healthzBindAddress", Str)),
    ("healthz-port", Field("healthzPort", Int)),
    ("enable-server", Field("enableServer", Bool)),
    ("tls-cert-file", Field("tlsCertFile", Str)),
    ("tls-private-key-file", Field("tlsPrivateKeyFile", Str)),
    ("tls-cipher-suites", Field("tlsCipherSuites", List)),
    ("tls-min-version", Field("tlsMinVersion", Str)),
    ("rotate-certificates", Field("rotateCertificates", Bool)),
    (
        "rotate-server-certificates",
        Field("serverTLSBootstrap", Bool),
    ),
    (
        "anonymous-auth",
        Field("authentication.anonymous.enabled", Bool),
    ),
    (
        "authentication-token-webhook",
        Field("authentication.webhook.enabled", Bool),
    ),
    (
        "authentication-token-webhook-cache-ttl",
        Field("authentication.webhook.cacheTTL", Str),
    ),
    (
        "client-ca-file",
        Field("authentication.x509.clientCAFile", Str),
    ),
    ("authorization-mode", Field("authorization.mode", Str)),
    (
        "authorization-webhook-cache-authorized-ttl",
        Field("authorization.webhook.cacheAuthorizedTTL", Str),
    ),
    (
        "authorization-webhook-cache-unauthorized-ttl",
        Field("authorization.webhook.cacheUnauthorizedTTL", Str),
    ),
    ("cluster-dns", Field("clusterDNS", List)),
    ("cluster-domain", Field("clusterDomain", Str)),
    ("resolv-conf", Field("resolvConf", Str)),
    (
        "allowed-unsafe-sysctls",
        Field("allowedUnsafeSysctls", List),
    ),
    ("max-pods", Field("maxPods", Int)),
    ("pod-max-pids", Field("podPidsLimit", Int)),
    ("cgroups-per-qos", Field("cgroupsPerQOS", Bool)),
    ("cgroup-root", Field("cgroupRoot", Str)),
    ("cgroup-driver", Field("cgroupDriver", Str)),
    ("fail-cgroupv1", Field("failCgroupV1", Bool)),
    ("kube-reserved", Field("kubeReserved", Map)),
    ("system-reserved", Field("systemReserved", Map)),
    (
        "enforce-node-allocatable",
        Field("enforceNodeAllocatable", List),
    ),
    ("system-reserved-cgroup", Field("systemReservedCgroup", Str)),
    ("kube-reserved-cgroup", Field("kubeReservedCgroup", Str)),
    (
        "node-status-update-frequency",
        Field("nodeStatusUpdateFrequency", Str),
    ),
    ("node-status-max-images", Field("nodeStatusMaxImages", Int)),
    ("kube-api-qps", Field("kubeAPIQPS", Int)),
    ("kube-api-burst", Field("kubeAPIBurst", Int)),
    ("event-qps", Field("eventRecordQPS", Int)),
    ("event-burst", Field("eventBurst", Int)),
    ("container-log-max-size", Field("containerLogMaxSize", Str)),
    (
        "container-log-max-files",
        Field("containerLogMaxFiles", Int),
    ),
    ("eviction-hard", Field("evictionHard", Langle)),
    ("eviction-soft", Field("evictionSoft", Langle)),
    (
        "eviction-soft-grace-period",
        Field("evictionSoftGracePeriod", Map),
    ),
    (
        "eviction-minimum-reclaim",
        Field("evictionMinimumReclaim", Map),
    ),
    (
        "eviction-pressure-transition-period",
        Field("evictionPressureTransitionPeriod", Str),
    ),
    (
        "eviction-max-pod-grace-period",
        Field("evictionMaxPodGracePeriod", Int),
    ),
    (
        "image-gc-high-threshold",
        Field("imageGCHighThresholdPercent", Int),
    ),
    (
        "image-gc-low-threshold",
        Field("imageGCLowThresholdPercent", Int),
    ),
    (
        "minimum-image-ttl-duration",
        Field("imageMinimumGCAge", Str),
    ),
    ("housekeeping-interval", Field("housekeepingInterval", Str)),
    // The kubelet's flags wasmlet does not implement.
    ("cloud-config", Ignored(Str)),
    ("config-dir", Ignored(Str)),
    ("contention-profiling", Ignored(Bool)),
    ("cpu-cfs-quota", Ignored(Bool)),
    ("cpu-cfs-quota-period", Ignored(Str)),
    ("cpu-manager-policy", Ignored(Str)),
    ("cpu-manager-policy-options", Ignored(Str)),
    ("cpu-manager-reconcile-period", Ignored(Str)),
    ("enable-controller-attach-detach", Ignored(Bool)),
    ("enable-debugging-handlers", Ignored(Bool)),
    ("exit-on-lock-contention", Ignored(Bool)),
    ("experimental-allocatable-ignore-eviction", Ignored(Bool)),
    ("experimental-mounter-path", Ignored(Str)),
    ("fail-swap-on", Ignored(Bool)),
    ("feature-gates", Ignored(Str)),
    ("hairpin-mode", Ignored(Str)),
    ("http-check-frequency", Ignored(Str)),
    ("image-service-endpoint", Ignored(Str)),
    ("iptables-drop-bit", Ignored(Str)),
    ("iptables-masquerade-bit", Ignored(Str)),
    ("keep-terminated-pod-volumes", Ignored(Bool)),
    ("kernel-memcg-notification", Ignored(Bool)),
    ("kube-api-content-type", Ignored(Str)),
    ("kubelet-cgroups", Ignored(Str)),
    ("local-storage-capacity-isolation", Ignored(Bool)),
    ("lock-file", Ignored(Str)),
    ("make-iptables-util-chains", Ignored(Bool)),
    ("manifest-url", Ignored(Str)),
    ("manifest-url-header", Ignored(Str)),
    ("max-open-files", Ignored(Str)),
    ("maximum-dead-containers", Ignored(Str)),
    ("maximum-dead-containers-per-container", Ignored(Str)),
    ("memory-manager-policy", Ignored(Str)),
    ("minimum-container-ttl-duration", Ignored(Str)),
    ("oom-score-adj", Ignored(Str)),
    ("pod-cidr", Ignored(Str)),
    ("provider-id", Ignored(Str)),
    ("pods-per-core", Ignored(Str)),
    ("protect-kernel-defaults", Ignored(Bool)),
    ("qos-reserved", Ignored(Str)),
    ("register-node", Ignored(Bool)),
    ("register-schedulable", Ignored(Bool)),
    ("registry-burst", Ignored(Str)),
    ("registry-qps", Ignored(Str)),
    ("reserved-cpus", Ignored(Str)),
    ("reserved-memory", Ignored(Str)),
    ("runonce", Ignored(Bool)),
    ("runtime-cgroups", Ignored(Str)),
    ("runtime-request-timeout", Ignored(Str)),
    ("seccomp-default", Ignored(Bool)),
    ("serialize-image-pulls", Ignored(Bool)),
    ("streaming-connection-idle-timeout", Ignored(Str)),
    ("system-cgroups", Ignored(Str)),
    ("topology-manager-policy", Ignored(Str)),
    ("topology-manager-policy-options", Ignored(Str)),
    ("topology-manager-scope", Ignored(Str)),
    ("volume-plugin-dir", Ignored(Str)),
    ("volume-stats-agg-period", Ignored(Str)),
    ("image-credential-provider-config", Ignored(Str)),
    ("image-credential-provider-bin-dir", Ignored(Str)),
    ("azure-container-registry-config", Ignored(Str)),
    ("vmodule", Ignored(Str)),
    ("log-flush-frequency", Ignored(Str)),
    ("logging-format", Ignored(Str)),
    ("log-json-split-stream", Ignored(Bool)),
    ("log-json-info-buffer-size", Ignored(Str)),
    ("log-text-split-stream", Ignored(Bool)),
    ("log-text-info-buffer-size", Ignored(Str)),
    ("application-metrics-count-limit", Ignored(Str)),
    ("boot-id-file", Ignored(Str)),
    ("container-hints", Ignored(Str)),
    ("containerd", Ignored(Str)),
    ("containerd-namespace", Ignored(Str)),
    ("enable-load-reader", Ignored(Bool)),
    ("event-storage-age-limit", Ignored(Str)),
    ("event-storage-event-limit", Ignored(Str)),
    ("global-housekeeping-interval", Ignored(Str)),
    ("log-cadvisor-usage", Ignored(Bool)),
    ("machine-id-file", Ignored(Str)),
    ("storage-driver-user", Ignored(Str)),
    ("storage-driver-password", Ignored(Str)),
    ("storage-driver-host", Ignored(Str)),
    ("storage-driver-db", Ignored(Str)),
    ("storage-driver-table", Ignored(Str)),
    ("storage-driver-secure", Ignored(Bool)),
    ("storage-driver-buffer-duration", Ignored(Str)),
];

fn kind(target: Target) -> Kind {
    match target {
        Field(_, k) | Target::Own(_, k) | Ignored(k) => k,
    }
}

/// The clap argument for a table row.
fn arg(name: &'static str, target: Target) -> Arg {
    let mut a = Arg::new(name).long(name).action(ArgAction::Append);
    a = if kind(target) == Bool {
        a.num_args(0..=1)
            .require_equals(true)
            .default_missing_value("true")
            .value_name("BOOL")
            .hide_possible_values(true)
            .value_parser([
                "true", "false", "1", "0", "t", "f", "True", "False", "TRUE", "FALSE",
            ])
    } else {
        a.num_args(1).allow_hyphen_values(true).value_name("VALUE")
    };
    match target {
        Target::Own(own, _) => match own {
            Own::Verbosity => a
                .short('v')
                .help("Log verbosity, as the kubelet's (RUST_LOG wins)"),
            Own::Config => a.help("The KubeletConfiguration file"),
            Own::BootstrapKubeconfig => {
                a.help("Credentials that request a client certificate when --kubeconfig has none")
            }
            Own::CertDir => a.help("Where certificates are kept (default <rootDir>/pki)"),
            Own::HostnameOverride => a.help("The node's name and Hostname address"),
            Own::CloudProvider => a.help("\"external\": register with the uninitialized taint"),
            Own::PodInfraContainerImage => a.help("The sandbox image: never garbage-collected"),
            Own::Version => a.help("Print the Kubernetes version wasmlet stands in for"),
        },
        Ignored(_) => a.hide(true),
        Field(field, _) => a.help(format!("Sets {field}")),
    }
}

/// The kubelet's flags, as clap arguments.
pub fn args() -> Vec<Arg> {
    FLAGS.iter().map(|(n, t)| arg(n, *t)).collect()
}

/// The flags as given: each flag's values, in the order given.
#[derive(Debug, Clone, Default)]
pub struct Given {
    flags: Vec<(&'static str, Vec<String>)>,
    /// Run as `kubelet` (the name kubeadm's unit calls): the kubelet's directories are
    /// the defaults.
    pub as_kubelet: bool,
}

impl Given {
    /// Reads the flags out of clap's matches.
    pub fn from_matches(m: &ArgMatches) -> Self {
        let mut given: Vec<(usize, &'static str, Vec<String>)> = FLAGS
            .iter()
            .filter_map(|(name, _)| {
                let values: Vec<String> = m.get_many::<String>(name)?.cloned().collect();
                let first = m.index_of(name).unwrap_or(0);
                Some((first, *name, values))
            })
            .collect();
        given.sort_by_key(|(i, _, _)| *i);
        Given {
            flags: given.into_iter().map(|(_, n, v)| (n, v)).collect(),
            as_kubelet: false,
        }
    }

    /// From `--flag=value` texts (tests).
    #[cfg(test)]
    pub fn parse(args: &[&str]) -> Result<Self> {
        let cmd = clap::Command::new("run")
            .no_binary_name(true)
            .args(self::args());
        let m = cmd.try_get_matches_from(args)?;
        Ok(Self::from_matches(&m))
    }

    fn last(&self, own: Own) -> Option<&str> {
        self.flags.iter().rev().find_map(|(name, values)| {
            let own_is = matches!(target(name), Some(Target::Own(o, _)) if o == own);
            own_is.then(|| values.last().map(String::as_str)).flatten()
        })
    }

    /// `--config`.
    pub fn config(&self) -> Option<PathBuf> {
        self.last(Own::Config).map(PathBuf::from)
    }

    /// `--version`.
    pub fn version(&self) -> bool {
        self.last(Own::Version)
            .is_some_and(|v| parse_bool(v) == Some(true))
    }

    /// `--v` / `-v`: the kubelet's verbosity.
    pub fn verbosity(&self) -> Result<Option<u8>> {
        self.last(Own::Verbosity)
            .map(|v| {
                v.parse::<u8>()
                    .map_err(|_| anyhow::anyhow!("--v: {v:?} is not a verbosity level (0 to 10)"))
            })
            .transpose()
    }

    /// The flag-only settings.
    pub fn invocation(&self) -> Invocation {
        let path = |o| self.last(o).filter(|v| !v.is_empty()).map(PathBuf::from);
        let text = |o| self.last(o).filter(|v| !v.is_empty()).map(str::to_owned);
        Invocation {
            bootstrap_kubeconfig: path(Own::BootstrapKubeconfig),
            cert_dir: path(Own::CertDir),
            hostname_override: text(Own::HostnameOverride),
            cloud_provider: text(Own::CloudProvider),
            sandbox_image: text(Own::PodInfraContainerImage),
        }
    }

    /// Sets the fields the flags name in `map` (the file's fields), recording in
    /// `origins` which flag set which top-level field; returns a warning for each
    /// ignored flag.
    pub fn apply(
        &self,
        map: &mut Mapping,
        origins: &mut BTreeMap<String, String>,
    ) -> Result<Vec<String>> {
        let mut warnings = Vec::new();
        for (name, values) in &self.flags {
            match target(name) {
                Some(Field(path, kind)) => {
                    let flag = format!("--{name}");
                    let value = values
                        .iter()
                        .map(|v| convert(kind, v).map_err(|e| anyhow::anyhow!("{flag}: {e}")))
                        .reduce(|a, b| Ok(combine(a?, b?)))
                        .unwrap_or(Ok(Value::Null))?;
                    set(map, path, value, kind);
                    let top = path.split('.').next().unwrap_or(path);
                    origins.insert(top.to_owned(), flag);
                }
                Some(Ignored(_)) => warnings.push(format!(
                    "kubelet flag --{name} is not implemented by wasmlet; ignored"
                )),
                _ => {}
            }
        }
        Ok(warnings)
    }
}

/// The kubelet's settings that only its command line has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Invocation {
    /// `--bootstrap-kubeconfig`.
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// `--cert-dir`.
    pub cert_dir: Option<PathBuf>,
    /// `--hostname-override`.
    pub hostname_override: Option<String>,
    /// `--cloud-provider`.
    pub cloud_provider: Option<String>,
    /// `--pod-infra-container-image`.
    pub sandbox_image: Option<String>,
}

fn target(name: &str) -> Option<Target> {
    FLAGS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Go's `strconv.ParseBool`.
fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "True" | "TRUE" => Some(true),
        "0" | "f" | "F" | "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

fn pairs(text: &str, sep: char) -> Result<Mapping> {
    let mut m = Mapping::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((k, v)) = item.split_once(sep).filter(|(k, _)| !k.is_empty()) else {
            bail!("{item:?} is not key{sep}value");
        };
        m.insert(k.trim().into(), v.trim().into());
    }
    Ok(m)
}

/// `key=value:Effect` or `key:Effect`.
fn taints(text: &str) -> Result<Value> {
    let mut list = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((kv, effect)) = item.rsplit_once(':') else {
            bail!("{item:?} is not key=value:Effect");
        };
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        let mut t = Mapping::new();
        t.insert("key".into(), key.into());
        if !value.is_empty() {
            t.insert("value".into(), value.into());
        }
        t.insert("effect".into(), effect.into());
        list.push(Value::Mapping(t));
    }
    Ok(Value::Sequence(list))
}

fn convert(kind: Kind, text: &str) -> Result<Value> {
    Ok(match kind {
        Str => text.into(),
        Int => text
            .parse::<i64>()
            .map_err(|_| anyhow::anyhow!("{text:?} is not a whole number"))?
            .into(),
        Bool => parse_bool(text)
            .ok_or_else(|| anyhow::anyhow!("{text:?} is not true or false"))?
            .into(),
        List => Value::Sequence(
            text.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(Value::from)
                .collect(),
        ),
        Map | Labels => Value::Mapping(pairs(text, '=')?),
        Langle => Value::Mapping(pairs(text, '<')?),
        Taints => taints(text)?,
    })
}

/// A repeated flag: lists and maps add up, other values the last wins.
fn combine(a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::Sequence(mut a), Value::Sequence(b)) => {
            a.extend(b);
            Value::Sequence(a)
        }
        (Value::Mapping(mut a), Value::Mapping(b)) => {
            a.extend(b);
            Value::Mapping(a)
        }
        (_, b) => b,
    }
}

/// Sets `path` (dotted) in `map`; `Labels` add to the labels already there.
fn set(map: &mut Mapping, path: &str, value: Value, kind: Kind) {
    let (head, rest) = match path.split_once('.') {
        Some((h, r)) => (h, Some(r)),
        None => (path, None),
    };
    match rest {
        Some(rest) => {
            let entry = map
                .entry(head.into())
                .or_insert_with(|| Value::Mapping(Mapping::new()));
            if !entry.is_mapping() {
                *entry = Value::Mapping(Mapping::new());
            }
            if let Value::Mapping(inner) = entry {
                set(inner, rest, value, kind);
            }
        }
        None if kind == Labels => {
            let old = map.remove(head).unwrap_or(Value::Null);
            let merged = match old {
                Value::Mapping(_) => combine(old, value),
                _ => value,
            };
            map.insert(head.into(), merged);
        }
        None => {
            map.insert(head.into(), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeadms_command_line_is_understood() {
        let given = Given::parse(&[
            "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
            "--config=/var/lib/kubelet/config.yaml",
            "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
            "--pod-infra-container-image=registry.k8s.io/pause:3.9",
            "--node-ip",
            "10.0.0.5",
            "--node-labels=pool=wasm,zone=a",
            "--register-with-taints=dedicated=wasm:NoSchedule,gpu:NoExecute",
            "--cloud-provider=external",
            "--hostname-override=Node-A",
            "--v=2",
            "--fail-swap-on=false",
            "--rotate-certificates",
            "--cluster-dns=10.96.0.10",
            "--cluster-dns=fd00::a",
            "--eviction-hard=memory.available<100Mi,nodefs.available<10%",
        ])
        .expect("parses");
        assert_eq!(given.config(), Some("/var/lib/kubelet/config.yaml".into()));
        assert_eq!(given.verbosity().expect("v"), Some(2));
        let inv = given.invocation();
        assert_eq!(
            inv.bootstrap_kubeconfig,
            Some("/etc/kubernetes/bootstrap-kubelet.conf".into())
        );
        assert_eq!(
            inv.sandbox_image.as_deref(),
            Some("registry.k8s.io/pause:3.9")
        );
        assert_eq!(inv.cloud_provider.as_deref(), Some("external"));
        assert_eq!(inv.hostname_override.as_deref(), Some("Node-A"));
        let mut map = Mapping::new();
        map.insert(
            "nodeLabels".into(),
            serde_yaml_ng::from_str("{team: a}").expect("yaml"),
        );
        let mut origins = BTreeMap::new();
        let warnings = given.apply(&mut map, &mut origins).expect("applies");
        assert_eq!(
            warnings,
            ["kubelet flag --fail-swap-on is not implemented by wasmlet; ignored"]
        );
        let y = serde_yaml_ng::to_string(&map).expect("yaml");
        for want in [
            "kubeconfig: /etc/kubernetes/kubelet.conf",
            "containerRuntimeEndpoint: unix:///var/run/containerd/containerd.sock",
            "nodeIP: 10.0.0.5",
            "rotateCertificates: true",
            "- 10.96.0.10\n- fd00::a",
            "memory.available: 100Mi",
            "team: a",
            "pool: wasm",
            "- key: gpu\n  effect: NoExecute",
        ] {
            assert!(y.contains(want), "{want:?} in\n{y}");
        }
        assert_eq!(origins["nodeIP"], "--node-ip");
    }

    #[test]
    fn bad_flags_are_named() {
        let e = Given::parse(&["--container-runtime=remote"]).expect_err("removed in 1.27");
        assert!(e.to_string().contains("--container-runtime"), "{e}");
        let given = Given::parse(&["--max-pods=lots"]).expect("clap takes text");
        let e = given
            .apply(&mut Mapping::new(), &mut BTreeMap::new())
            .expect_err("not a number");
        assert!(e.to_string().starts_with("--max-pods: "), "{e}");
        let given = Given::parse(&["--eviction-hard=memory.available=1Gi"]).expect("text");
        let e = given
            .apply(&mut Mapping::new(), &mut BTreeMap::new())
            .expect_err("wrong separator");
        assert!(e.to_string().starts_with("--eviction-hard: "), "{e}");
        assert!(
            Given::parse(&["--rotate-certificates", "true"]).is_err(),
            "booleans take ="
        );
        assert!(
            Given::parse(&["--v=2", "-v", "3"])
                .expect("both")
                .verbosity()
                .expect("v")
                == Some(3)
        );
    }

    #[test]
    fn every_flag_is_once_in_the_table() {
        let mut names: Vec<&str> = FLAGS.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len());
        for (_, t) in FLAGS {
            if let Field(path, _) = t {
                let top = path.split('.').next().unwrap_or(path);
                let support = super::super::fields::support(top);
                assert_eq!(
                    support,
                    Some(super::super::fields::Support::Implemented),
                    "{path}"
                );
            }
        }
    }
    /// Every flag `kubelet --help` of Kubernetes 1.33.3 lists is in the table (the
    /// upstream kubelet's own list): kubeadm, e2e_node and operators pass any of them.
    /// 1.28's list was the same but for `--keep-terminated-pod-volumes`, still taken
    /// (an older unit may pass it), and without the last three of 1.33's.
    #[test]
    fn every_kubelet_133_flag_is_taken() {
        const KUBELET_133: &str = "\
address allowed-unsafe-sysctls anonymous-auth application-metrics-count-limit
         authentication-token-webhook authentication-token-webhook-cache-ttl
         authorization-mode authorization-webhook-cache-authorized-ttl
         authorization-webhook-cache-unauthorized-ttl boot-id-file bootstrap-kubeconfig
         cert-dir cgroup-driver cgroup-root cgroups-per-qos client-ca-file cloud-config
         cloud-provider cluster-dns cluster-domain config config-dir container-hints
         container-log-max-files container-log-max-size container-runtime-endpoint containerd
         containerd-namespace contention-profiling cpu-cfs-quota cpu-cfs-quota-period
         cpu-manager-policy cpu-manager-policy-options cpu-manager-reconcile-period
         enable-controller-attach-detach enable-debugging-handlers enable-load-reader
         enable-server enforce-node-allocatable event-burst event-qps event-storage-age-limit
         event-storage-event-limit eviction-hard eviction-max-pod-grace-period
         eviction-minimum-reclaim eviction-pressure-transition-period eviction-soft
         eviction-soft-grace-period exit-on-lock-contention
         experimental-allocatable-ignore-eviction experimental-mounter-path fail-swap-on
         feature-gates file-check-frequency global-housekeeping-interval hairpin-mode
         healthz-bind-address healthz-port help hostname-override housekeeping-interval
         http-check-frequency image-credential-provider-bin-dir
         image-credential-provider-config image-gc-high-threshold image-gc-low-threshold
         image-service-endpoint kernel-memcg-notification
         kube-api-burst kube-api-content-type kube-api-qps kube-reserved kube-reserved-cgroup
         kubeconfig kubelet-cgroups local-storage-capacity-isolation lock-file
         log-cadvisor-usage log-flush-frequency log-json-info-buffer-size
         log-json-split-stream logging-format machine-id-file make-iptables-util-chains
         manifest-url manifest-url-header max-open-files max-pods maximum-dead-containers
         maximum-dead-containers-per-container memory-manager-policy
         minimum-container-ttl-duration minimum-image-ttl-duration node-ip node-labels
         node-status-max-images node-status-update-frequency oom-score-adj pod-cidr
         pod-infra-container-image pod-manifest-path pod-max-pids pods-per-core port
         protect-kernel-defaults provider-id qos-reserved read-only-port register-node
         register-schedulable register-with-taints registry-burst registry-qps reserved-cpus
         reserved-memory resolv-conf root-dir rotate-certificates rotate-server-certificates
         runonce runtime-cgroups runtime-request-timeout seccomp-default
         serialize-image-pulls storage-driver-buffer-duration storage-driver-db
         storage-driver-host storage-driver-password storage-driver-secure
         storage-driver-table storage-driver-user streaming-connection-idle-timeout
         sync-frequency system-cgroups system-reserved system-reserved-cgroup tls-cert-file
         tls-cipher-suites tls-min-version tls-private-key-file topology-manager-policy
         topology-manager-policy-options topology-manager-scope v version vmodule
         volume-plugin-dir volume-stats-agg-period
         fail-cgroupv1 log-text-info-buffer-size log-text-split-stream";
        let listed: Vec<&str> = KUBELET_133.split_whitespace().collect();
        assert_eq!(listed.len(), 152, "kubelet --help of v1.33.3");
        for flag in listed.iter().chain(&["keep-terminated-pod-volumes"]) {
            assert!(
                *flag == "help" || FLAGS.iter().any(|(n, _)| n == flag),
                "--{flag} is the kubelet's and missing from the table"
            );
        }
    }
}
