//! The CRI configurations' tests: sandbox and container configs from pod specs, the
//! environment, mounts, resources and security contexts, as the kubelet makes them.

use super::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;
use wasmlet_core::runtime::{CONTAINER_NAME_LABEL, RESTART_COUNT_ANNOTATION};

fn ctx(dir: &Path) -> NodeContext {
    wasmlet_core::criconfig::testing::node(dir)
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wasmlet-criconfig-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tempdir");
    d
}

fn pod(json: &str) -> k8s::Pod {
    wasmlet_core::criconfig::testing::static_pod(json)
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
    let c = &wasmlet_core::pod::containers(&p)[0];
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
    let config = |p: &k8s::Pod| {
        container_config(
            p,
            &wasmlet_core::pod::containers(p)[0],
            false,
            0,
            "",
            &ctx(&dir),
        )
    };
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
        expand_sub_path("$(B)/$(A)/$(C)", &env).map_err(|e| e.to_string()),
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
    let containers = wasmlet_core::pod::containers(&p);
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
    let cfg = container_config(
        &p,
        &wasmlet_core::pod::containers(&p)[0],
        false,
        0,
        "",
        &node,
    )
    .expect("config");
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
