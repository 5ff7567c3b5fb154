//! The CRI configurations' tests: sandbox and container configs from pod specs, the
//! environment, mounts, resources and security contexts, as the kubelet makes them.

use super::*;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

fn ctx(dir: &Path) -> NodeContext {
    NodeContext {
        node_name: "node-a".into(),
        hostname: "node-a.local".into(),
        host_ip: "192.168.1.2".into(),
        pod_logs_dir: dir.join("logs"),
        pods_dir: dir.join("pods"),
        dns: parse_resolv_conf("nameserver 1.1.1.1\nsearch lan\noptions ndots:2\n"),
        memory_bytes: 8 << 30,
        allocatable: [
            ("cpu".to_string(), Quantity("3500m".into())),
            ("memory".to_string(), Quantity("8388608Ki".into())),
        ]
        .into(),
        pod_cgroups: None,
    }
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wasmlet-criconfig-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tempdir");
    d
}

fn pod(json: &str) -> k8s::Pod {
    let mut p: k8s::Pod = serde_json::from_str(json).expect("pod");
    crate::pod::make_static(&mut p, "file", "p.yaml", "node-a");
    p
}

#[test]
fn expansion_follows_kubernetes() {
    let env = BTreeMap::from([("A".to_string(), "x".to_string())]);
    assert_eq!(expand("$(A)-$(B)-$$(A)-$", &env), "x-$(B)-$(A)-$");
    assert_eq!(expand("no refs", &env), "no refs");
    assert_eq!(expand("$(A", &env), "$(A");
}

#[test]
fn sandbox_config_carries_identity_network_and_ports() {
    let dir = tempdir("sandbox");
    let p = pod(
        r#"{"metadata":{"name":"web","labels":{"app":"web"}},"spec":{
          "containers":[{"name":"c","image":"i","ports":[{"containerPort":80,"hostPort":8080}],
          "securityContext":{"privileged":true}}],
          "dnsConfig":{"nameservers":["9.9.9.9"],"options":[{"name":"ndots","value":"5"}]}}}"#,
    );
    let c = sandbox_config(&p, 2, &ctx(&dir));
    let m = c.metadata.as_ref().expect("metadata");
    assert_eq!((m.name.as_str(), m.attempt), ("web-node-a", 2));
    assert_eq!(c.labels["app"], "web");
    assert_eq!(c.labels[NODE_LABEL], "node-a");
    assert_eq!(c.labels[POD_UID_LABEL], crate::pod::uid(&p));
    assert_eq!(c.hostname, "web-node-a");
    assert_eq!(c.port_mappings[0].host_port, 8080);
    let dns = c.dns_config.as_ref().expect("dns");
    assert_eq!(dns.servers, ["1.1.1.1", "9.9.9.9"]);
    assert_eq!(dns.options, ["ndots:5"]);
    let sc = c
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .expect("security context");
    assert!(
        sc.privileged,
        "a privileged container makes the sandbox privileged"
    );
    assert!(
        c.log_directory
            .ends_with(&format!("default_web-node-a_{}", crate::pod::uid(&p)))
    );

    let host = pod(
        r#"{"metadata":{"name":"h"},"spec":{"hostNetwork":true,"containers":[{"name":"c","image":"i"}]}}"#,
    );
    let c = sandbox_config(&host, 0, &ctx(&dir));
    assert_eq!(c.hostname, "", "the node's own UTS namespace");
    assert_eq!(c.annotations[HOST_NETWORK_ANNOTATION], "true");
    let ns = c
        .linux
        .and_then(|l| l.security_context)
        .and_then(|s| s.namespace_options)
        .expect("namespaces");
    assert_eq!(ns.network, proto::NamespaceMode::Node as i32);
}

#[test]
fn unset_limits_read_as_the_nodes_allocatable() {
    let dir = tempdir("allocatable");
    let p = pod(
        r#"{"metadata":{"name":"w"},"spec":{"containers":[{"name":"c","image":"busybox:1",
            "env":[{"name":"CPU","valueFrom":{"resourceFieldRef":{"resource":"limits.cpu"}}},
                   {"name":"CPU_M","valueFrom":{"resourceFieldRef":{"resource":"limits.cpu","divisor":"1m"}}},
                   {"name":"MEM","valueFrom":{"resourceFieldRef":{"resource":"limits.memory","divisor":"1Mi"}}},
                   {"name":"REQ","valueFrom":{"resourceFieldRef":{"resource":"requests.cpu"}}}]}]}}"#,
    );
    let c = &crate::pod::containers(&p)[0];
    let cfg = container_config(&p, c, false, 0, "", &ctx(&dir)).expect("config");
    let env: BTreeMap<_, _> = cfg
        .envs
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect();
    assert_eq!(env["CPU"], "4", "3500m allocatable, rounded up to cores");
    assert_eq!(env["CPU_M"], "3500");
    assert_eq!(env["MEM"], "8192");
    assert_eq!(env["REQ"], "0", "an unset request stays 0");
}

#[test]
fn container_config_resolves_env_mounts_and_resources() {
    let dir = tempdir("container");
    let p = pod(
        r#"{"metadata":{"name":"web","labels":{"tier":"front"}},"spec":{
          "volumes":[{"name":"data","emptyDir":{}},{"name":"host","hostPath":{"path":"HOSTDIR","type":"DirectoryOrCreate"}}],
          "containers":[{"name":"c","image":"busybox:1","command":["sh","-c"],"args":["echo $(GREETING) $(POD)"],
            "env":[{"name":"NAME","value":"world"},{"name":"GREETING","value":"hello $(NAME)"},
                   {"name":"POD","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}},
                   {"name":"IP","valueFrom":{"fieldRef":{"fieldPath":"status.podIP"}}},
                   {"name":"TIER","valueFrom":{"fieldRef":{"fieldPath":"metadata.labels['tier']"}}},
                   {"name":"CPU","valueFrom":{"resourceFieldRef":{"resource":"limits.cpu"}}}],
            "volumeMounts":[{"name":"data","mountPath":"/data"},{"name":"host","mountPath":"/host","readOnly":true}],
            "resources":{"limits":{"cpu":"500m","memory":"64Mi"}}}]}}"#
            .replace("HOSTDIR", &dir.join("hp").to_string_lossy())
            .as_str(),
    );
    let c = &crate::pod::containers(&p)[0];
    let cfg = container_config(&p, c, false, 3, "10.88.0.9", &ctx(&dir)).expect("config");
    let env: BTreeMap<_, _> = cfg
        .envs
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect();
    assert_eq!(env["GREETING"], "hello world");
    assert_eq!(env["POD"], "web-node-a");
    assert_eq!(env["IP"], "10.88.0.9");
    assert_eq!(env["TIER"], "front");
    assert_eq!(env["CPU"], "1", "cpu rounds up to whole cores");
    assert_eq!(cfg.args, ["echo hello world web-node-a"]);
    assert_eq!(cfg.metadata.as_ref().map(|m| m.attempt), Some(3));
    assert_eq!(cfg.log_path, "c/3.log");
    assert_eq!(cfg.annotations[RESTART_COUNT_ANNOTATION], "3");
    assert_eq!(cfg.labels[CONTAINER_NAME_LABEL], "c");
    assert!(dir.join("hp").is_dir(), "DirectoryOrCreate");
    assert!(empty_dir_path(&p, &ctx(&dir), "data").is_dir());
    assert_eq!(cfg.mounts.len(), 3, "two volumes and the termination log");
    assert!(cfg.mounts[1].readonly);
    assert_eq!(cfg.mounts[2].container_path, "/dev/termination-log");
    let r = cfg
        .linux
        .as_ref()
        .and_then(|l| l.resources.as_ref())
        .expect("resources");
    assert_eq!(
        (r.cpu_period, r.cpu_quota, r.cpu_shares),
        (100_000, 50_000, 512)
    );
    assert_eq!(r.memory_limit_in_bytes, 64 << 20);
    assert_eq!(
        r.oom_score_adj, -997,
        "limits alone make the pod Guaranteed"
    );
    let sc = cfg
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .expect("security");
    assert_eq!(sc.masked_paths.len(), MASKED_PATHS.len());
}

#[test]
fn environment_from_config_maps_and_secrets() {
    let dir = tempdir("envrefs");
    let p = pod(
        r#"{"metadata":{"name":"w","namespace":"shop"},"spec":{"containers":[{"name":"c","image":"i",
          "envFrom":[{"configMapRef":{"name":"app"},"prefix":"APP_"}],
          "env":[{"name":"PASSWORD","valueFrom":{"secretKeyRef":{"name":"db","key":"password"}}},
                 {"name":"MODE","valueFrom":{"configMapKeyRef":{"name":"app","key":"mode"}}},
                 {"name":"OPT","valueFrom":{"configMapKeyRef":{"name":"app","key":"nope","optional":true}}},
                 {"name":"URL","value":"http://$(APP_host)/"}]}]}}"#,
    );
    let c = &crate::pod::containers(&p)[0];
    assert_eq!(
        EnvData::wanted(c),
        [(false, "app".to_string()), (true, "db".to_string())]
    );
    let mut refs = EnvData::default();
    refs.config_maps.insert(
        "app".into(),
        Some(BTreeMap::from([
            ("mode".to_string(), "fast".to_string()),
            ("host".to_string(), "db.local".to_string()),
        ])),
    );
    refs.secrets.insert(
        "db".into(),
        Some(BTreeMap::from([(
            "password".to_string(),
            "s3cret".to_string(),
        )])),
    );
    let cfg = container_config_with(&p, c, false, 0, "", &ctx(&dir), &refs).expect("config");
    let env: BTreeMap<String, String> = cfg.envs.into_iter().map(|e| (e.key, e.value)).collect();
    assert_eq!(env["APP_mode"], "fast");
    assert_eq!(env["PASSWORD"], "s3cret");
    assert_eq!(env["MODE"], "fast");
    assert_eq!(env["URL"], "http://db.local/");
    assert!(!env.contains_key("OPT"));
    // A key that is not there, in the kubelet's words.
    refs.secrets.insert("db".into(), Some(BTreeMap::new()));
    let err = container_config_with(&p, c, false, 0, "", &ctx(&dir), &refs).expect_err("no key");
    assert_eq!(
        err.to_string(),
        "couldn't find key password in Secret shop/db"
    );
    refs.secrets.insert("db".into(), None);
    let err = container_config_with(&p, c, false, 0, "", &ctx(&dir), &refs).expect_err("no secret");
    assert_eq!(err.to_string(), "secret \"db\" not found");
}

#[test]
fn missing_config_maps_and_unsupported_volumes_are_config_errors() {
    let dir = tempdir("errors");
    let p = pod(
        r#"{"metadata":{"name":"w"},"spec":{"containers":[{"name":"c","image":"i",
          "env":[{"name":"X","valueFrom":{"configMapKeyRef":{"name":"cfg","key":"x"}}}]}]}}"#,
    );
    let err = container_config(&p, &crate::pod::containers(&p)[0], false, 0, "", &ctx(&dir))
        .expect_err("no configmaps here");
    assert_eq!(err.to_string(), "configmap \"cfg\" not found");
    let p = pod(
        r#"{"metadata":{"name":"w"},"spec":{"volumes":[{"name":"s","persistentVolumeClaim":{"claimName":"x"}}],
          "containers":[{"name":"c","image":"i","volumeMounts":[{"name":"s","mountPath":"/s"}]}]}}"#,
    );
    let err = container_config(&p, &crate::pod::containers(&p)[0], false, 0, "", &ctx(&dir))
        .expect_err("claim volume");
    assert!(err.to_string().contains("volume \"s\""), "{err}");
}
