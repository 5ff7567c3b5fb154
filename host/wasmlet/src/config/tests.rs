//! The configuration file's tests: defaults, every field read, and each bad value
//! refused naming the file and the field.

use super::labels::check_node_labels;
use super::*;

fn parse(text: &str) -> Result<Config> {
    Config::parse(text, Path::new("/etc/wasmlet/config.yaml"))
}

#[test]
fn a_kubelet_configuration_is_accepted_with_defaults() {
    let c = parse(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         staticPodPath: /etc/kubernetes/manifests\nfileCheckFrequency: 1s\n\
         clusterDNS: [10.96.0.10]\nauthentication: {anonymous: {enabled: false}}\n",
    )
    .expect("valid");
    assert_eq!(c.file_check_frequency, Duration::from_secs(1));
    assert_eq!(c.sync_frequency, Duration::from_secs(60));
    assert_eq!(c.max_pods, 110);
    assert_eq!(c.healthz.1, 10248);
    assert_eq!(c.read_only.1, 10255);
    assert_eq!(
        c.runtime_endpoint.as_deref(),
        Some(DEFAULT_RUNTIME_ENDPOINT)
    );
    assert!(parse("").is_ok(), "an empty file is all defaults");
    assert_eq!(c.pod_pids_limit, None);
    let tree = c.cgroups.as_ref().expect("the QoS tree by default");
    assert_eq!(tree.root, "/");
    assert_eq!(c.cluster_dns.servers, ["10.96.0.10"]);
    assert_eq!(c.cluster_dns.domain, "");
}

#[test]
fn cluster_dns_and_domain_are_read_and_checked() {
    let c = parse("clusterDNS: [10.96.0.10, 'fd00::a']\nclusterDomain: cluster.local.\n")
        .expect("valid");
    assert_eq!(c.cluster_dns.servers, ["10.96.0.10", "fd00::a"]);
    assert_eq!(c.cluster_dns.domain, "cluster.local");
    let e = parse("clusterDNS: [kube-dns]\n").expect_err("not an IP");
    assert_eq!(
        e.to_string(),
        "/etc/wasmlet/config.yaml: clusterDNS[0]: \"kube-dns\" is not an IP address"
    );
    let c = parse("allowedUnsafeSysctls: ['kernel.msg*', net.core.somaxconn]\n").expect("valid");
    assert_eq!(
        c.allowed_unsafe_sysctls,
        ["kernel.msg*", "net.core.somaxconn"]
    );
    let e = parse("allowedUnsafeSysctls: [kernel.panic]\n").expect_err("not namespaced");
    assert_eq!(
        e.to_string(),
        "/etc/wasmlet/config.yaml: allowedUnsafeSysctls[0]: \"kernel.panic\" is not known to be namespaced"
    );
    let e = parse("clusterDomain: 'bad_domain'\n").expect_err("not a name");
    assert!(e.to_string().contains("clusterDomain"), "{e}");
}

#[test]
fn log_rotation_is_the_kubelets_by_default_and_as_written() {
    let r = parse("").expect("defaults").log_rotation;
    assert_eq!(
        (r.policy.max_bytes, r.policy.max_files),
        (10 * 1024 * 1024, 5)
    );
    assert_eq!((r.interval, r.workers), (Duration::from_secs(10), 1));
    let r = parse(
        "containerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 2\ncontainerLogMaxWorkers: 4\n\
         containerLogMonitorInterval: 3s\n",
    )
    .expect("valid")
    .log_rotation;
    assert_eq!((r.policy.max_bytes, r.policy.max_files), (1 << 20, 2));
    assert_eq!((r.interval, r.workers), (Duration::from_secs(3), 4));
    assert_eq!(
        parse("containerLogMaxSize: 2048")
            .expect("a plain number of bytes")
            .log_rotation
            .policy
            .max_bytes,
        2048
    );
}

#[test]
fn the_server_defaults_are_the_secure_ones() {
    let c = parse("").expect("defaults");
    let s = c.server.expect("on by default");
    assert_eq!(s.addr, "0.0.0.0:10250".parse().expect("addr"));
    assert!(!s.authn.anonymous && s.authn.webhook);
    assert_eq!(s.authn.cache_ttl, Duration::from_secs(120));
    assert_eq!(s.authz.mode, wasmlet_server::authz::Mode::Webhook);
    assert_eq!(
        (s.authz.authorized_ttl, s.authz.unauthorized_ttl),
        (Duration::from_secs(300), Duration::from_secs(30))
    );
    assert_eq!(
        c.read_only.0,
        IpAddr::from([127, 0, 0, 1]),
        "read-only stays local"
    );
    let c = parse(
        "address: 10.0.0.5\nport: 11250\ntlsMinVersion: VersionTLS13\n\
         tlsCertFile: /etc/pki/kubelet.crt\ntlsPrivateKeyFile: /etc/pki/kubelet.key\n\
         authentication: {anonymous: {enabled: true}, webhook: {enabled: false, cacheTTL: 0s},\
          x509: {clientCAFile: /etc/pki/ca.crt}}\n\
         authorization: {mode: AlwaysAllow, webhook: {cacheAuthorizedTTL: 1m, cacheUnauthorizedTTL: 5s}}\n",
    )
    .expect("valid");
    let s = c.server.expect("on");
    assert_eq!(s.addr, "10.0.0.5:11250".parse().expect("addr"));
    assert_eq!(
        c.read_only.0,
        IpAddr::from([10, 0, 0, 5]),
        "address is the kubelet's, for both"
    );
    assert!(s.authn.anonymous && !s.authn.webhook);
    assert_eq!(
        s.authn.cache_ttl,
        Duration::from_secs(120),
        "0s is the kubelet's zero value: its default"
    );
    assert_eq!(
        s.tls.client_ca_file.as_deref(),
        Some(Path::new("/etc/pki/ca.crt"))
    );
    assert_eq!(s.tls.min_version, wasmlet_server::tls::MinVersion::Tls13);
    assert_eq!(s.authz.mode, wasmlet_server::authz::Mode::AlwaysAllow);
    assert_eq!(s.authz.unauthorized_ttl, Duration::from_secs(5));
    assert!(
        parse("enableServer: false")
            .expect("valid")
            .server
            .is_none()
    );
}

#[test]
fn device_plugins_register_where_the_kubelets_do_unless_told() {
    let dir = |text: &str| parse(text).expect("valid").device_plugin_dir;
    assert_eq!(dir(""), Some("/var/lib/kubelet/device-plugins".into()));
    assert_eq!(dir("devicePluginDir: /run/dp"), Some("/run/dp".into()));
    assert_eq!(dir("devicePluginDir: ''"), None, "off");
}

#[test]
fn start_calls_are_paced_per_cpu_unless_told() {
    assert_eq!(parse("").expect("valid").max_parallel_start_calls, None);
    assert_eq!(
        parse("maxParallelStartCalls: 0")
            .expect("valid")
            .max_parallel_start_calls,
        Some(0),
        "no limit"
    );
    assert_eq!(wasmlet_agent::sync::pacing::default_limit(2), 8);
    assert_eq!(wasmlet_agent::sync::pacing::default_limit(0), 4);
}

#[test]
fn pod_cgroups_follow_the_kubelets_fields() {
    use wasmlet_agent::cgroups::tree::Driver;
    let c = parse("podPidsLimit: 1024\ncgroupRoot: /nodes/a\n").expect("valid");
    assert_eq!(c.pod_pids_limit, Some(1024));
    let tree = c.cgroups.expect("cgroupsPerQOS is the default");
    assert_eq!(
        (tree.driver, tree.root.as_str()),
        (Driver::Cgroupfs, "/nodes/a")
    );
    assert!(
        tree.enforce_pods,
        "enforceNodeAllocatable defaults to [pods]"
    );
    let c = parse("podPidsLimit: -1\ncgroupsPerQOS: false\n").expect("valid");
    assert_eq!(c.pod_pids_limit, None);
    assert_eq!(c.cgroups, None);
    let c = parse("cgroupDriver: systemd\npodPidsLimit: 10\n").expect("valid");
    assert_eq!(c.cgroups.expect("tree").driver, Driver::Systemd);
    let c = parse("enforceNodeAllocatable: []\n").expect("valid");
    assert!(!c.cgroups.expect("tree").enforce_pods);
    let c = parse(
        "enforceNodeAllocatable: [pods, system-reserved]\nsystemReservedCgroup: /system.slice\n\
         systemReserved: {cpu: 500m, memory: 1Gi}\n",
    )
    .expect("valid");
    let reserved = &c.cgroups.expect("tree").reserved;
    assert_eq!(reserved.len(), 1);
    assert_eq!(reserved[0].cgroup, "/system.slice");
    assert_eq!(reserved[0].reserved.memory_bytes, 1 << 30);
}

#[test]
fn swap_and_the_oom_group_are_read_and_checked_as_the_kubelet_does() {
    use wasmlet_agent::criconfig::SwapBehavior;
    let c = parse("memorySwap: {swapBehavior: LimitedSwap}\nsingleProcessOOMKill: true\n")
        .expect("valid");
    assert_eq!(c.container_cgroups.swap, SwapBehavior::LimitedSwap);
    assert_eq!(c.container_cgroups.single_process_oom_kill, Some(true));
    let c = parse("memorySwap: {}\n").expect("valid");
    assert_eq!(c.container_cgroups.swap, SwapBehavior::NoSwap);
    let err = parse("memorySwap: {swapBehavior: Sometimes}\n").expect_err("invalid");
    assert!(
        format!("{err:#}").contains("memorySwap.swapBehavior: \"Sometimes\" must be one of"),
        "{err:#}"
    );
    // False is the kubelet's refusal on a v1 host (this one's kind), accepted on v2.
    let v1 = !std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let c = parse("singleProcessOOMKill: false\n");
    assert_eq!(c.is_err(), v1, "{c:?}");
}

#[test]
fn what_the_kubelet_refuses_of_the_cgroup_fields_is_refused_by_name() {
    for (text, says) in [
        (
            "enforceNodeAllocatable: [kube-reserved]\n",
            "enforceNodeAllocatable: enforcing kubeReserved needs kubeReservedCgroup",
        ),
        (
            "enforceNodeAllocatable: [pods, none]\n",
            "enforceNodeAllocatable: may not contain other enforcements",
        ),
        (
            "enforceNodeAllocatable: [everything]\n",
            "enforceNodeAllocatable: \"everything\": valid options are",
        ),
        (
            "cgroupsPerQOS: false\nenforceNodeAllocatable: [pods]\n",
            "enforceNodeAllocatable: not supported unless cgroupsPerQOS",
        ),
        ("cgroupDriver: cgroupfs2\n", "cgroupDriver: \"cgroupfs2\""),
        (
            "cgroupRoot: nodes\n",
            "cgroupRoot: \"nodes\" must be an absolute",
        ),
        (
            "cgroupDriver: systemd\ncgroupRoot: /nodes/a\n",
            "cgroupRoot: \"/nodes/a\": with cgroupDriver systemd it must be a slice",
        ),
    ] {
        let err = format!("{:#}", parse(text).expect_err(text));
        assert!(err.contains(says), "{text}: {err}");
    }
}

#[test]
fn cluster_fields_set_labels_taints_reservations_timing_and_limits() {
    let c = parse(
        "nodeLabels: {pool: wasm}\n\
         registerWithTaints: [{key: dedicated, value: wasm, effect: NoSchedule}]\n\
         kubeReserved: {cpu: 100m, memory: 256Mi}\n\
         systemReserved: {cpu: 0.5, memory: 256Mi, ephemeral-storage: 1Gi, pid: 1000}\n\
         nodeStatusUpdateFrequency: 5s\nnodeStatusReportFrequency: 1m\n\
         nodeLeaseDurationSeconds: 20\nkubeAPIQPS: 0\nkubeAPIBurst: 10\neventRecordQPS: 5\n",
    )
    .expect("valid");
    assert_eq!(c.node_labels["pool"], "wasm");
    for ok in [
        "topology.kubernetes.io/zone",
        "node.kubernetes.io/pool",
        "kubelet.kubernetes.io/x",
        "example.com/y",
    ] {
        let labels = BTreeMap::from([(ok.to_string(), "v".to_string())]);
        assert!(check_node_labels(&labels).is_ok(), "{ok}");
    }
    assert_eq!(c.taints[0].effect, "NoSchedule");
    assert_eq!(
        c.reserved,
        Reserved {
            cpu_millis: 600,
            memory_bytes: 512 << 20,
            ephemeral_storage_bytes: 1 << 30,
            pids: 1000,
        }
    );
    assert_eq!(
        c.timing,
        Timing {
            update: Duration::from_secs(5),
            report: Duration::from_secs(60),
            lease_seconds: 20,
        }
    );
    assert_eq!(
        c.limits,
        Limits {
            api_qps: 0.0,
            api_burst: 10,
            event_qps: 5.0,
            event_burst: 100,
        }
    );
    let d = parse("").expect("defaults");
    assert_eq!(d.timing, Timing::default());
    assert_eq!(d.limits, Limits::default());
}

#[test]
fn errors_name_the_file_and_the_field() {
    for (text, field) in [
        ("maxPods: -1", "maxPods"),
        ("maxPods: many", "maxPods"),
        ("syncFrequency: soon", "syncFrequency"),
        ("healthzPort: 70000", "healthzPort"),
        ("staticPodPath: manifests", "staticPodPath"),
        ("nodeIP: tenth", "nodeIP"),
        (
            "containerRuntimeEndpoint: tcp://x",
            "containerRuntimeEndpoint",
        ),
        ("noSuchField: 1", "noSuchField"),
        ("maxParallelStartCalls: -1", "maxParallelStartCalls"),
        ("maxParallelStartCalls: many", "maxParallelStartCalls"),
        ("podPidsLimit: lots", "podPidsLimit"),
        ("cgroupDriver: cgroupv3", "cgroupDriver"),
        ("cgroupRoot: relative", "cgroupRoot"),
        ("devicePluginDir: plugins", "devicePluginDir"),
        ("kind: Pod", "kind"),
        ("kubeReserved: {gpu: 1}", "kubeReserved.gpu"),
        (
            "nodeLabels: {node-role.kubernetes.io/control-plane: ''}",
            "node-role.kubernetes.io/control-plane",
        ),
        ("systemReserved: {memory: lots}", "systemReserved.memory"),
        (
            "registerWithTaints: [{key: a, effect: Sometimes}]",
            "registerWithTaints[0].effect",
        ),
        ("registerWithTaints: [{key: a}]", "registerWithTaints"),
        ("nodeLeaseDurationSeconds: -5", "nodeLeaseDurationSeconds"),
        (
            "nodeStatusUpdateFrequency: soon",
            "nodeStatusUpdateFrequency",
        ),
        ("kubeAPIQPS: -1", "kubeAPIQPS"),
        ("eventBurst: -1", "eventBurst"),
        ("port: 70000", "port"),
        ("address: everywhere", "address"),
        ("tlsMinVersion: TLS1.3", "tlsMinVersion"),
        (
            "tlsCipherSuites: [TLS_RSA_WITH_RC4_128_SHA]",
            "tlsCipherSuites",
        ),
        ("tlsCertFile: /a.crt", "tlsPrivateKeyFile"),
        (
            "tlsCertFile: relative.crt\ntlsPrivateKeyFile: /k",
            "tlsCertFile",
        ),
        ("authorization: {mode: RBAC}", "authorization.mode"),
        (
            "authentication: {webhook: {cacheTTL: soon}}",
            "authentication.webhook.cacheTTL",
        ),
        (
            "authentication: {x509: {clientCAFile: ca.crt}}",
            "clientCAFile",
        ),
        ("authentication: {oidc: {}}", "oidc"),
        ("containerLogMaxSize: lots", "containerLogMaxSize"),
        ("containerLogMaxSize: 0", "containerLogMaxSize"),
        ("containerLogMaxFiles: 1", "containerLogMaxFiles"),
        ("containerLogMaxWorkers: 0", "containerLogMaxWorkers"),
        (
            "containerLogMonitorInterval: 1s",
            "containerLogMonitorInterval",
        ),
        (
            "plugins: {admission: [{name: x, failurePolicy: Sometimes}]}",
            "failurePolicy",
        ),
        (
            "plugins: {directory: /etc/wasmlet/plugins, verification: {publicKeys: [/nonexistent/release.pub], required: true}}",
            "plugins.verification.publicKeys: /nonexistent/release.pub:",
        ),
        (
            "plugins: {verification: {required: true}}",
            "plugins.verification.required: true needs at least one key",
        ),
        (
            "clusterPlugins: {verification: {publicKeys: [keys/release.pub]}}",
            "clusterPlugins.verification.publicKeys[0]: keys/release.pub is not an absolute path",
        ),
    ] {
        let err = format!("{:#}", parse(text).expect_err(text));
        assert!(err.starts_with("/etc/wasmlet/config.yaml"), "{text}: {err}");
        assert!(err.contains(field), "{text}: {err}");
    }
}

/// What kubeadm 1.28 writes to /var/lib/kubelet/config.yaml on a joining node.
const KUBEADM_CONFIG: &str = include_str!("../../tests/fixtures/kubeadm/config.yaml");

fn with_flags(text: Option<&str>, flags: &[&str]) -> Result<Config> {
    let given = Given::parse(flags)?;
    match text {
        Some(t) => Config::layers(Some((Path::new("/var/lib/kubelet/config.yaml"), t)), &given),
        None => Config::layers(None, &given),
    }
}

#[test]
fn kubeadms_file_and_flags_pass_as_they_are() {
    let c = with_flags(
        Some(KUBEADM_CONFIG),
        &[
            "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
            "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
            "--pod-infra-container-image=registry.k8s.io/pause:3.9",
            "--node-ip=10.0.0.5",
            "--cloud-provider=external",
            "--hostname-override=worker-1",
        ],
    )
    .expect("kubeadm's file and flags");
    assert_eq!(c.sync_frequency, Duration::from_secs(60), "0s: the default");
    assert_eq!(c.file_check_frequency, Duration::from_secs(20));
    assert_eq!(c.timing, Timing::default());
    assert_eq!(c.resources.eviction.transition, Duration::from_secs(300));
    let s = c.server.as_ref().expect("server");
    assert_eq!(s.authn.cache_ttl, Duration::from_secs(120));
    assert_eq!(s.authz.authorized_ttl, Duration::from_secs(300));
    assert_eq!(s.authz.unauthorized_ttl, Duration::from_secs(30));
    assert_eq!(
        c.runtime_endpoint.as_deref(),
        Some("unix:///var/run/containerd/containerd.sock"),
        "the flag fills what the file left empty"
    );
    assert_eq!(
        c.kubeconfig.as_deref(),
        Some(Path::new("/etc/kubernetes/kubelet.conf"))
    );
    assert_eq!(
        c.certificates,
        Certificates {
            bootstrap_kubeconfig: Some("/etc/kubernetes/bootstrap-kubelet.conf".into()),
            dir: "/var/lib/wasmlet/pki".into(),
            rotate_client: true,
            server_bootstrap: false,
        }
    );
    assert_eq!(
        c.sandbox_image.as_deref(),
        Some("registry.k8s.io/pause:3.9")
    );
    assert_eq!(c.hostname_override.as_deref(), Some("worker-1"));
    assert_eq!(c.node_ip.as_deref(), Some("10.0.0.5"));
    assert_eq!(c.taints.len(), 1);
    assert_eq!(c.taints[0].key, node::UNINITIALIZED_TAINT);
    assert_eq!(
        c.static_pod_path.as_deref(),
        Some(Path::new("/etc/kubernetes/manifests"))
    );
    assert_eq!(c.cluster_dns.domain, "cluster.local");
}

#[test]
fn flags_override_the_file_and_name_themselves_in_errors() {
    let c = with_flags(
        Some("maxPods: 20\nrootDir: /var/lib/a\nnodeLabels: {team: a}\n"),
        &[
            "--max-pods=30",
            "--root-dir=/var/lib/kubelet",
            "--node-labels=pool=wasm",
        ],
    )
    .expect("valid");
    assert_eq!(c.max_pods, 30);
    assert_eq!(c.root_dir, Path::new("/var/lib/kubelet"));
    assert_eq!(c.certificates.dir, Path::new("/var/lib/kubelet/pki"));
    assert_eq!(c.node_labels.len(), 2, "added to the file's labels");
    for (flags, start) in [
        (&["--node-ip=tenth"][..], "--node-ip: nodeIP: "),
        (&["--max-pods=-3"][..], "--max-pods: maxPods: "),
        (
            &["--sync-frequency=soon"][..],
            "--sync-frequency: syncFrequency: ",
        ),
        (&["--cloud-provider=aws"][..], "--cloud-provider: "),
        (
            &["--bootstrap-kubeconfig=/b.conf"][..],
            "--bootstrap-kubeconfig: ",
        ),
        (
            &["--node-labels=kubernetes.io/role=x"][..],
            "--node-labels: nodeLabels: ",
        ),
    ] {
        let e = with_flags(Some(""), flags).expect_err(flags[0]);
        assert!(e.to_string().starts_with(start), "{flags:?}: {e}");
    }
    let e = with_flags(Some("maxPods: -3\n"), &[]).expect_err("file");
    assert!(
        e.to_string()
            .starts_with("/var/lib/kubelet/config.yaml: maxPods: "),
        "{e}"
    );
}

#[test]
fn without_a_file_the_kubelets_command_line_defaults_apply() {
    let c = with_flags(None, &[]).expect("no file");
    let s = c.server.expect("server");
    assert!(
        s.authn.anonymous && !s.authn.webhook,
        "--anonymous-auth defaults to true"
    );
    assert_eq!(s.authz.mode, wasmlet_server::authz::Mode::AlwaysAllow);
    let c = with_flags(
        None,
        &["--anonymous-auth=false", "--authorization-mode=Webhook"],
    )
    .expect("flags");
    let s = c.server.expect("server");
    assert!(!s.authn.anonymous);
    assert_eq!(s.authz.mode, wasmlet_server::authz::Mode::Webhook);
}

#[test]
fn a_given_eviction_hard_replaces_the_defaults_unless_merged() {
    let signals = |c: &Config| -> Vec<&'static str> {
        c.resources
            .eviction
            .thresholds
            .iter()
            .map(|t| t.signal.name())
            .collect()
    };
    let c = parse("").expect("defaults");
    assert_eq!(
        signals(&c),
        [
            "memory.available",
            "nodefs.available",
            "nodefs.inodesFree",
            "imagefs.available",
            "imagefs.inodesFree"
        ],
        "the kubelet 1.33's five"
    );
    let c = parse("evictionHard: {memory.available: 1Gi}\n").expect("given");
    assert_eq!(signals(&c), ["memory.available"]);
    let c = parse("evictionHard: {memory.available: 1Gi}\nmergeDefaultEvictionSettings: true\n")
        .expect("merged");
    assert_eq!(signals(&c).len(), 5, "{:?}", signals(&c));
    let memory = c
        .resources
        .eviction
        .thresholds
        .iter()
        .find(|t| t.signal.name() == "memory.available");
    assert_eq!(
        memory.map(|t| t.quantity(0)).as_deref(),
        Some("1Gi"),
        "the given value wins"
    );
}
