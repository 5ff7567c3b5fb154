//! The CRI configurations' tests: sandbox and container configs from pod specs, the
//! environment, resources, security contexts and DNS, as the kubelet makes them — and
//! what a container needs on the node, as [`NodeFile`]s (nothing here touches the disk).

use super::*;
use std::path::Path;

fn ctx(dir: &Path) -> NodeContext {
    super::testing::node(dir)
}

fn pod(json: &str) -> k8s::Pod {
    super::testing::static_pod(json)
}

/// A first container's configuration alone, with `refs` (what the node must hold:
/// `what_the_node_must_hold_comes_in_order`).
fn with_refs(
    p: &k8s::Pod,
    c: &k8s::Container,
    node: &NodeContext,
    refs: &EnvData,
) -> Result<proto::ContainerConfig, ConfigError> {
    container_config(p, c, (false, 0), "", node, refs).map(|(config, _)| config)
}

/// `c`'s configuration alone, of its `restart_count`th restart, in a sandbox at `pod_ip`.
fn config_of(
    p: &k8s::Pod,
    c: &k8s::Container,
    restart_count: i32,
    pod_ip: &str,
    node: &NodeContext,
) -> Result<proto::ContainerConfig, ConfigError> {
    let refs = EnvData::default();
    container_config(p, c, (false, restart_count), pod_ip, node, &refs).map(|(config, _)| config)
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
    let dir = Path::new("/nonexistent").join("sandbox");
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
    let dir = Path::new("/nonexistent").join("allocatable");
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
    let cfg = config_of(&p, c, 0, "", &ctx(&dir)).expect("config");
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
fn environment_from_config_maps_and_secrets() {
    let dir = Path::new("/nonexistent").join("envrefs");
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
    let cfg = with_refs(&p, c, &ctx(&dir), &refs).expect("config");
    let env: BTreeMap<String, String> = cfg.envs.into_iter().map(|e| (e.key, e.value)).collect();
    assert_eq!(env["APP_mode"], "fast");
    assert_eq!(env["PASSWORD"], "s3cret");
    assert_eq!(env["MODE"], "fast");
    assert_eq!(env["URL"], "http://db.local/");
    assert!(!env.contains_key("OPT"));
    // A key that is not there, in the kubelet's words.
    refs.secrets.insert("db".into(), Some(BTreeMap::new()));
    let err = with_refs(&p, c, &ctx(&dir), &refs).expect_err("no key");
    assert_eq!(
        err.to_string(),
        "couldn't find key password in Secret shop/db"
    );
    refs.secrets.insert("db".into(), None);
    let err = with_refs(&p, c, &ctx(&dir), &refs).expect_err("no secret");
    assert_eq!(err.to_string(), "secret \"db\" not found");
}

#[test]
fn missing_config_maps_and_unsupported_volumes_are_config_errors() {
    let dir = Path::new("/nonexistent").join("errors");
    let p = pod(
        r#"{"metadata":{"name":"w"},"spec":{"containers":[{"name":"c","image":"i",
          "env":[{"name":"X","valueFrom":{"configMapKeyRef":{"name":"cfg","key":"x"}}}]}]}}"#,
    );
    let err = config_of(&p, &crate::pod::containers(&p)[0], 0, "", &ctx(&dir))
        .expect_err("no configmaps here");
    assert_eq!(err.to_string(), "configmap \"cfg\" not found");
    let p = pod(
        r#"{"metadata":{"name":"w"},"spec":{"volumes":[{"name":"s","persistentVolumeClaim":{"claimName":"x"}}],
          "containers":[{"name":"c","image":"i","volumeMounts":[{"name":"s","mountPath":"/s"}]}]}}"#,
    );
    let err =
        config_of(&p, &crate::pod::containers(&p)[0], 0, "", &ctx(&dir)).expect_err("claim volume");
    assert!(err.to_string().contains("volume \"s\""), "{err}");
}

fn env_of(cfg: &proto::ContainerConfig) -> BTreeMap<String, String> {
    cfg.envs
        .iter()
        .map(|e| (e.key.clone(), e.value.clone()))
        .collect()
}

/// The pod's FQDN: `<hostname>.<subdomain>.<namespace>.svc.<clusterDomain>`, ending in
/// `svc.` without a cluster domain; the sandbox's hostname with `setHostnameAsFQDN`, and
/// refused (no sandbox) when longer than the kernel's 64 bytes.
#[test]
fn the_fqdn_and_the_sandbox_hostname_are_the_kubelets() {
    let dir = Path::new("/nonexistent").join("fqdn");
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
    let e = kernel_hostname(&long, &node)
        .expect_err("too long")
        .to_string();
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
    let dir = Path::new("/nonexistent").join("dns");
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
    let dir = Path::new("/nonexistent").join("svcenv");
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
    let cfg = with_refs(&p, c, &ctx(&dir), &refs).expect("config");
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
    let err = with_refs(&p, c, &ctx(&dir), &refs).expect_err("not listed");
    assert!(
        err.to_string()
            .starts_with("services have not yet been read")
    );
}

#[test]
fn what_the_node_must_hold_comes_in_order() {
    let node = ctx(Path::new("/nonexistent/files"));
    let p = pod(
        r#"{"metadata":{"name":"p","namespace":"ns","uid":"u1"},"spec":{
          "hostAliases":[{"ip":"10.1.1.1","hostnames":["db"]}],
          "volumes":[{"name":"made","hostPath":{"path":"/srv/made","type":"DirectoryOrCreate"}},
                     {"name":"sock","hostPath":{"path":"/run/x.sock","type":"Socket"}},
                     {"name":"scratch","emptyDir":{}}],
          "containers":[{"name":"c","image":"busybox","volumeMounts":[
            {"name":"made","mountPath":"/m"},{"name":"sock","mountPath":"/s"},
            {"name":"scratch","mountPath":"/d","subPath":"one"}]}]}}"#,
    );
    let c = &crate::pod::containers(&p)[0];
    let (config, files) =
        container_config(&p, c, (false, 2), "10.88.0.4", &node, &EnvData::default())
            .expect("config");
    let pod_dir = pod_dir(&p, &node);
    let hosts = match &files[2] {
        NodeFile::Hosts(h) => h.clone(),
        other => panic!("the hosts file third: {other:?}"),
    };
    assert_eq!(
        files,
        vec![
            NodeFile::HostPath {
                volume: "made".into(),
                path: "/srv/made".into(),
                kind: HostPathKind::DirectoryOrCreate,
            },
            // A socket's type asks nothing of the node before the mount.
            NodeFile::SubPath {
                mount: "scratch".into(),
                container: "c".into(),
                path: pod_dir.join("volumes/kubernetes.io~empty-dir/scratch/one"),
            },
            NodeFile::Hosts(hosts.clone()),
            NodeFile::TerminationLog(pod_dir.join("containers/c/2.termination-log")),
        ]
    );
    assert_eq!(hosts.path, pod_dir.join("etc-hosts"));
    assert_eq!(hosts.node_file, None);
    let text = hosts.content("ignored: not the node's network");
    assert!(
        text.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"),
        "{text}"
    );
    assert!(
        text.ends_with("10.88.0.4\tp-node-a\n\n# Entries added by HostAliases.\n10.1.1.1\tdb\n"),
        "{text}"
    );
    let mounted: Vec<(&str, &str)> = config
        .mounts
        .iter()
        .map(|m| (m.container_path.as_str(), m.host_path.as_str()))
        .collect();
    assert_eq!(mounted.len(), 5, "{mounted:?}");
    assert_eq!(mounted[3].0, ETC_HOSTS);
    assert_eq!(mounted[4].0, "/dev/termination-log");

    // On the node's network the node's own file is read in after the header.
    let mut host = p.clone();
    host.spec.as_mut().expect("spec").host_network = Some(true);
    let hosts = hosts_file(&host, &node, "");
    assert_eq!(hosts.node_file, Some(node.hosts_file.clone()));
    assert_eq!(
        hosts.content("127.0.0.1\tlocalhost\n"),
        "# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n\n# Entries added by HostAliases.\n10.1.1.1\tdb\n"
    );
}

#[test]
fn a_bad_sub_path_is_refused_before_anything_is_asked_of_the_node() {
    let node = ctx(Path::new("/nonexistent/bad"));
    let p = pod(
        r#"{"metadata":{"name":"p","namespace":"ns","uid":"u1"},"spec":{
          "volumes":[{"name":"made","hostPath":{"path":"/srv/made","type":"DirectoryOrCreate"}}],
          "containers":[{"name":"c","image":"busybox","volumeMounts":[
            {"name":"made","mountPath":"/m"},{"name":"made","mountPath":"/n","subPath":"../up"}]}]}}"#,
    );
    let err = config_of(&p, &crate::pod::containers(&p)[0], 0, "", &node).expect_err("refused");
    assert!(err.message.contains("must not contain '..'"), "{err}");
    assert!(!err.is_volume());
}
