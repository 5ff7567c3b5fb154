//! The CRI configurations' tests: sandbox and container configs from pod specs, the
//! environment, mounts, resources and security contexts, as the kubelet makes them.

use super::*;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::path::Path;

fn ctx(dir: &Path) -> NodeContext {
    NodeContext {
        node_name: "node-a".into(),
        hostname: "node-a.local".into(),
        host_ip: "192.168.1.2".into(),
        pod_logs_dir: dir.join("logs"),
        pods_dir: dir.join("pods"),
        dns: parse_resolv_conf("nameserver 1.1.1.1\nsearch lan\noptions ndots:2\n"),
        cluster_dns: Vec::new(),
        cluster_domain: String::new(),
        hosts_file: dir.join("node-hosts"),
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
    crate::pod::make_static(&mut p, ("file", "p.yaml"), "node-a", None);
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
                   {"name":"CPU_ZERO","valueFrom":{"resourceFieldRef":{"resource":"limits.cpu","divisor":"0"}}},
                   {"name":"MEM_ZERO","valueFrom":{"resourceFieldRef":{"resource":"limits.memory","divisor":"0"}}},
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
    assert_eq!(
        env["CPU_ZERO"], "4",
        "a zero divisor (what the API server sends for none) is 1"
    );
    assert_eq!(env["MEM_ZERO"], (8192u64 << 20).to_string());
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
    assert_eq!(
        cfg.mounts[0].host_path,
        empty_dir_path(&p, &ctx(&dir), "data").to_string_lossy(),
        "the emptyDir, set up with the pod's volumes (crate::volumes)"
    );
    assert_eq!(
        cfg.mounts.len(),
        4,
        "two volumes, /etc/hosts and the termination log"
    );
    assert!(cfg.mounts[1].readonly);
    assert_eq!(cfg.mounts[2].container_path, "/etc/hosts");
    assert_eq!(cfg.mounts[3].container_path, "/dev/termination-log");
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

fn env_of(cfg: &proto::ContainerConfig) -> BTreeMap<String, String> {
    cfg.envs
        .iter()
        .map(|e| (e.key.clone(), e.value.clone()))
        .collect()
}

/// The Variable Expansion conformance cases on subPathExpr, as the kubelet words them.
#[test]
fn sub_path_expr_expands_the_environment_and_refuses_what_the_kubelet_refuses() {
    let dir = tempdir("subpathexpr");
    let make = |value: &str, expr: &str| {
        pod(&r#"{"metadata":{"name":"var","annotations":{"notmysubpath":"mypath"}},"spec":{
              "volumes":[{"name":"workdir1","emptyDir":{}}],
              "containers":[{"name":"dapi-container","image":"i",
                "env":[{"name":"POD_NAME","value":"VALUE"},
                       {"name":"ANNOTATION","valueFrom":{"fieldRef":{"fieldPath":"metadata.annotations['mysubpath']"}}}],
                "volumeMounts":[{"name":"workdir1","mountPath":"/logscontainer","subPathExpr":"EXPR"},
                                {"name":"workdir1","mountPath":"/volume_mount"}]}]}}"#
            .replace("VALUE", value)
            .replace("EXPR", expr))
    };
    let config =
        |p: &k8s::Pod| container_config(p, &crate::pod::containers(p)[0], false, 0, "", &ctx(&dir));
    // should allow substituting values in a volume subpath
    let p = make("foo", "$(POD_NAME)");
    let cfg = config(&p).expect("expands");
    let volume = empty_dir_path(&p, &ctx(&dir), "workdir1");
    assert_eq!(
        cfg.mounts[0].host_path,
        volume.join("foo").to_string_lossy()
    );
    assert!(
        volume.join("foo").is_dir(),
        "made so the other mount sees it"
    );
    assert_eq!(cfg.mounts[1].host_path, volume.to_string_lossy());
    // ... with absolute path
    let err = config(&make("/tmp", "$(POD_NAME)")).expect_err("absolute");
    assert_eq!(
        err.to_string(),
        "error SubPath `/tmp` must not be an absolute path"
    );
    assert!(
        !err.is_volume(),
        "the container's configuration, not a mount failure"
    );
    // ... with backticks (the value is `..`)
    let err = config(&make("..", "$(POD_NAME)")).expect_err("backsteps");
    assert_eq!(
        err.to_string(),
        "unable to provision SubPath `..`: must not contain '..'"
    );
    let err = config(&make("..", "logs/$(POD_NAME)/x")).expect_err("nested backsteps");
    assert!(err.to_string().contains("must not contain '..'"), "{err}");
    // a failing subpath expansion: the annotation is not there (yet)
    let p = make("foo", "$(ANNOTATION)/$(POD_NAME)");
    let err = config(&p).expect_err("missing annotation");
    assert_eq!(err.to_string(), "missing value for ANNOTATION");
    // ... and once it is, the same pod starts
    let mut p = p;
    p.metadata
        .annotations
        .get_or_insert_default()
        .insert("mysubpath".into(), "mypath".into());
    let cfg = config(&p).expect("fixed");
    assert!(cfg.mounts[0].host_path.ends_with("workdir1/mypath/foo"));
    // $$ is a literal dollar; unknown variables are all named.
    let env = BTreeMap::from([("A".to_string(), "a".to_string())]);
    assert_eq!(expand_sub_path("$$(A)/$(A)", &env).as_deref(), Ok("$(A)/a"));
    assert_eq!(
        expand_sub_path("$(B)/$(A)/$(C)", &env),
        Err("missing value for B, C".to_string())
    );
}

/// `KubeletManagedEtcHosts` and `hostAliases`: the file the kubelet writes, who gets it.
#[test]
fn the_managed_hosts_file_and_who_mounts_it() {
    let dir = tempdir("etchosts");
    let mut node = ctx(&dir);
    node.cluster_domain = "cluster.local".into();
    std::fs::write(&node.hosts_file, "127.0.0.1\tlocalhost\n10.0.0.1\tnode-a\n").expect("hosts");
    let p = pod(r#"{"metadata":{"name":"web","namespace":"shop"},"spec":{
          "hostname":"web-0","subdomain":"db",
          "hostAliases":[{"ip":"123.45.67.89","hostnames":["foo.remote","bar.remote"]},{"ip":"127.0.0.1","hostnames":["foo.local"]}],
          "volumes":[{"name":"h","hostPath":{"path":"/etc/hosts","type":"FileOrCreate"}}],
          "containers":[{"name":"managed","image":"i"},
            {"name":"own","image":"i","volumeMounts":[{"name":"h","mountPath":"/etc/hosts"}]}]}}"#);
    let content = hosts_file_content(&p, &node, "10.88.0.7").expect("content");
    assert_eq!(
        content,
        "# Kubernetes-managed hosts file.\n\
         127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\n\
         fe00::1\tip6-allnodes\n\
         fe00::2\tip6-allrouters\n\
         10.88.0.7\tweb-0.db.shop.svc.cluster.local\tweb-0\n\
         \n\
         # Entries added by HostAliases.\n\
         123.45.67.89\tfoo.remote\tbar.remote\n\
         127.0.0.1\tfoo.local\n"
    );
    let containers = crate::pod::containers(&p);
    let cfg = container_config(&p, &containers[0], false, 0, "10.88.0.7", &node).expect("config");
    let hosts = cfg
        .mounts
        .iter()
        .find(|m| m.container_path == "/etc/hosts")
        .expect("managed /etc/hosts");
    assert_eq!(
        std::fs::read_to_string(&hosts.host_path).expect("written"),
        content
    );
    assert!(!hosts.readonly);
    // A container that mounts its own /etc/hosts keeps it.
    let cfg = container_config(&p, &containers[1], false, 0, "10.88.0.7", &node).expect("config");
    let mounted: Vec<_> = cfg
        .mounts
        .iter()
        .filter(|m| m.container_path == "/etc/hosts")
        .collect();
    assert_eq!(mounted.len(), 1);
    assert_eq!(mounted[0].host_path, "/etc/hosts");
    // No pod IP yet (the runtime gave none): no managed file, as with the kubelet.
    let cfg = container_config(&p, &containers[0], false, 0, "", &node).expect("config");
    assert!(!cfg.mounts.iter().any(|m| m.container_path == "/etc/hosts"));
    // The node's network: the node's file, marked, with the aliases after it.
    let p = pod(r#"{"metadata":{"name":"hn"},"spec":{"hostNetwork":true,
          "hostAliases":[{"ip":"1.2.3.4","hostnames":["x"]}],"containers":[{"name":"c","image":"i"}]}}"#);
    assert_eq!(
        hosts_file_content(&p, &node, "").expect("content"),
        "# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n10.0.0.1\tnode-a\n\n# Entries added by HostAliases.\n1.2.3.4\tx\n"
    );
    let cfg =
        container_config(&p, &crate::pod::containers(&p)[0], false, 0, "", &node).expect("config");
    assert!(cfg.mounts.iter().any(|m| m.container_path == "/etc/hosts"));
    // Without a subdomain: the pod's address and hostname only.
    let p =
        pod(r#"{"metadata":{"name":"plain"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#);
    let content = hosts_file_content(&p, &node, "10.88.0.8").expect("content");
    assert!(
        content.ends_with("fe00::2\tip6-allrouters\n10.88.0.8\tplain-node-a\n"),
        "{content}"
    );
}

/// The pod's FQDN: `<hostname>.<subdomain>.<namespace>.svc.<clusterDomain>`, ending in
/// `svc.` without a cluster domain; the sandbox's hostname with `setHostnameAsFQDN`, and
/// refused (no sandbox) when longer than the kernel's 64 bytes.
#[test]
fn the_fqdn_and_the_sandbox_hostname_are_the_kubelets() {
    let dir = tempdir("fqdn");
    let mut node = ctx(&dir);
    let fqdn = |sub: &str| {
        pod(&format!(
            r#"{{"metadata":{{"name":"web","namespace":"shop"}},"spec":{{
              "hostname":"web-0","subdomain":"{sub}","setHostnameAsFQDN":true,
              "containers":[{{"name":"c","image":"i"}}]}}}}"#
        ))
    };
    let p = fqdn("db");
    assert_eq!(
        hostname_and_domain(&p, &node).1.as_deref(),
        Some("db.shop.svc.")
    );
    assert_eq!(
        kernel_hostname(&p, &node).as_deref(),
        Ok("web-0.db.shop.svc.")
    );
    node.cluster_domain = "cluster.local".into();
    assert_eq!(
        sandbox_config(&p, 0, &node).hostname,
        "web-0.db.shop.svc.cluster.local"
    );
    let long = fqdn(&"d".repeat(40));
    let e = kernel_hostname(&long, &node).expect_err("too long");
    assert!(
        e.starts_with("failed to construct FQDN from pod hostname and cluster domain, FQDN web-0.")
            && e.ends_with("is too long (64 characters is the max, 69 characters requested)"),
        "{e}"
    );
    // Without setHostnameAsFQDN the hostname is the short name.
    let short = pod(r#"{"metadata":{"name":"web","namespace":"shop"},"spec":{
          "hostname":"web-0","subdomain":"db","containers":[{"name":"c","image":"i"}]}}"#);
    assert_eq!(sandbox_config(&short, 0, &node).hostname, "web-0");
}

/// The four dnsPolicy values against a node with and without a cluster DNS.
#[test]
fn dns_policies_as_the_kubelet_forms_them() {
    let dir = tempdir("dns");
    let mut node = ctx(&dir);
    let policy = |policy: &str, host_network: bool, dns_config: &str| {
        pod(&format!(
            r#"{{"metadata":{{"name":"d","namespace":"shop"}},"spec":{{"dnsPolicy":"{policy}",
              "hostNetwork":{host_network},{dns_config}"containers":[{{"name":"c","image":"i"}}]}}}}"#
        ))
    };
    let dns = |p: &k8s::Pod, node: &NodeContext| {
        let d = sandbox_config(p, 0, node).dns_config.expect("dns");
        (d.servers, d.searches, d.options)
    };
    // No clusterDNS: ClusterFirst is the node's resolver.
    assert_eq!(
        dns(&policy("ClusterFirst", false, ""), &node),
        (
            vec!["1.1.1.1".to_string()],
            vec!["lan".to_string()],
            vec!["ndots:2".to_string()]
        )
    );
    node.cluster_dns = vec!["10.96.0.10".into()];
    node.cluster_domain = "cluster.local".into();
    let cluster = (
        vec!["10.96.0.10".to_string()],
        [
            "shop.svc.cluster.local",
            "svc.cluster.local",
            "cluster.local",
            "lan",
        ]
        .map(str::to_owned)
        .to_vec(),
        vec!["ndots:5".to_string()],
    );
    assert_eq!(dns(&policy("ClusterFirst", false, ""), &node), cluster);
    assert_eq!(
        dns(&policy("ClusterFirstWithHostNet", true, ""), &node),
        cluster
    );
    // ClusterFirst on the node's network, and Default: the node's resolver.
    let host = (
        vec!["1.1.1.1".to_string()],
        vec!["lan".to_string()],
        vec!["ndots:2".to_string()],
    );
    assert_eq!(dns(&policy("ClusterFirst", true, ""), &node), host);
    assert_eq!(dns(&policy("Default", false, ""), &node), host);
    // None: the pod's dnsConfig alone; and dnsConfig merges into the others.
    let own = r#""dnsConfig":{"nameservers":["9.9.9.9"],"searches":["my.dns","lan"],"options":[{"name":"ndots","value":"1"},{"name":"edns0"}]},"#;
    assert_eq!(
        dns(&policy("None", false, own), &node),
        (
            vec!["9.9.9.9".to_string()],
            vec!["my.dns".to_string(), "lan".to_string()],
            vec!["ndots:1".to_string(), "edns0".to_string()]
        )
    );
    let (servers, searches, options) = dns(&policy("ClusterFirst", false, own), &node);
    assert_eq!(servers, ["10.96.0.10", "9.9.9.9"]);
    assert_eq!(
        searches,
        [
            "shop.svc.cluster.local",
            "svc.cluster.local",
            "cluster.local",
            "lan",
            "my.dns"
        ]
    );
    assert_eq!(options, ["ndots:1", "edns0"]);
}

/// Service variables sit below the container's own, which may refer to them.
#[test]
fn service_variables_are_overridden_by_the_containers_own() {
    let dir = tempdir("svcenv");
    let p = pod(
        r#"{"metadata":{"name":"w"},"spec":{"containers":[{"name":"c","image":"i",
          "env":[{"name":"KUBERNETES_SERVICE_PORT","value":"8443"},
                 {"name":"API","value":"https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"}]}]}}"#,
    );
    let refs = EnvData {
        services: vec![
            ("KUBERNETES_SERVICE_HOST".into(), "10.96.0.1".into()),
            ("KUBERNETES_SERVICE_PORT".into(), "443".into()),
        ],
        ..Default::default()
    };
    let c = &crate::pod::containers(&p)[0];
    let cfg = container_config_with(&p, c, false, 0, "", &ctx(&dir), &refs).expect("config");
    let env = env_of(&cfg);
    assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
    assert_eq!(env["KUBERNETES_SERVICE_PORT"], "8443");
    assert_eq!(env["API"], "https://10.96.0.1:8443");
    assert_eq!(cfg.envs.len(), 3);
    let refs = EnvData {
        services_error: Some(
            "services have not yet been read at least once, cannot construct envvars".into(),
        ),
        ..Default::default()
    };
    let err =
        container_config_with(&p, c, false, 0, "", &ctx(&dir), &refs).expect_err("not listed");
    assert!(
        err.to_string()
            .starts_with("services have not yet been read")
    );
}
