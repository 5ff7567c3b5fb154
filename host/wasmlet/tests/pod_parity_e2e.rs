//! The kubelet behaviours of issue 15 that depend on the runtime, end to end: `wasmlet
//! run --kubeconfig` on the real containerd with the API server double, pods made the
//! way the conformance tests make them, and what their containers print read back
//! through `pods/log`. subPathExpr (a subpath made and shared with the volume's other
//! mount; an absolute one refused; a failing one fixed by an update), the managed
//! `/etc/hosts` (aliases, subdomain, a container's own `/etc/hosts`, host network), the
//! resolver from clusterDNS/clusterDomain, the Service variables, sysctls (safe ones
//! applied in the sandbox, an unsafe one refused at admission), ephemeral containers
//! (started in the running pod, exec reaches them) and activeDeadlineSeconds.
//!
//! containerd comes from `WASMLET_CRI_ENDPOINT` (`cargo xtask test` starts it); without
//! it the test is skipped, unless `WASMLET_REQUIRE_CONTAINERD=1`.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/containerd.rs"]
mod containerd;

use cluster::{busybox, client_from, phase, remove_pods, running, wait_pod};
use containerd::endpoint;

const NODE: &str = "pod-parity-e2e";

fn pod(name: &str, restart: &str, container: Value) -> Value {
    cluster::pod(NODE, name, restart, container)
}

fn waiting(p: &Value) -> (String, String) {
    let w = &p["status"]["containerStatuses"][0]["state"]["waiting"];
    (
        w["reason"].as_str().unwrap_or("").to_owned(),
        w["message"].as_str().unwrap_or("").to_owned(),
    )
}

fn subpath_pod(name: &str, value: &str, expr: &str, script: &str) -> Value {
    let mut c = busybox("c", script);
    c["env"] = json!([
        {"name": "POD_NAME", "value": value},
        {"name": "ANNOTATION", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['mysubpath']"}}},
    ]);
    c["volumeMounts"] = json!([
        {"name": "workdir1", "mountPath": "/subpath_mount", "subPathExpr": expr},
        {"name": "workdir1", "mountPath": "/volume_mount"},
    ]);
    let mut p = pod(name, "Never", c);
    p["spec"]["volumes"] = json!([{"name": "workdir1", "emptyDir": {}}]);
    p["metadata"]["annotations"] = json!({"notmysubpath": "mypath"});
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subpaths_hosts_dns_services_sysctls_ephemeral_containers_and_deadlines_on_containerd() {
    let Some(endpoint) = endpoint() else { return };
    let cluster::Double {
        dir,
        api,
        served,
        kubeconfig,
        client_ca,
    } = cluster::Double::start("wasmlet-pod-parity-e2e", &endpoint, NODE).await;
    api.create(
        "api/v1",
        "services",
        json!({"metadata": {"name": "fooservice", "namespace": "default"},
               "spec": {"ports": [{"port": 8765, "protocol": "TCP", "targetPort": 8080}]}}),
    )
    .expect("service");

    // The managed /etc/hosts, the resolver and the Service variables, printed.
    let mut hosts = pod(
        "pp-hosts",
        "Never",
        busybox(
            "managed",
            "cat /etc/hosts; echo ---; cat /etc/resolv.conf; echo ---; env",
        ),
    );
    let mut own = busybox("own", "cat /etc/hosts");
    own["volumeMounts"] = json!([{"name": "host-etc-hosts", "mountPath": "/etc/hosts"}]);
    hosts["spec"]["containers"]
        .as_array_mut()
        .expect("containers")
        .push(own);
    hosts["spec"]["hostname"] = "web-0".into();
    hosts["spec"]["subdomain"] = "db".into();
    hosts["spec"]["hostAliases"] = json!([
        {"ip": "123.45.67.89", "hostnames": ["foo.remote", "bar.remote"]},
    ]);
    hosts["spec"]["volumes"] = json!([{"name": "host-etc-hosts",
        "hostPath": {"path": "/etc/hosts", "type": "FileOrCreate"}}]);
    let mut hostnet = pod("pp-hostnet", "Never", busybox("c", "cat /etc/hosts"));
    hostnet["spec"]["hostNetwork"] = true.into();
    // sysctls: a safe one set in the sandbox, an unsafe one refused.
    let mut sysctl = pod(
        "pp-sysctl",
        "Never",
        busybox("c", "cat /proc/sys/kernel/shm_rmid_forced"),
    );
    sysctl["spec"]["securityContext"] =
        json!({"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}]});
    let mut unsafe_sysctl = pod("pp-sysctl-unsafe", "Never", busybox("c", "true"));
    unsafe_sysctl["spec"]["securityContext"] = json!({"sysctls": [
        {"name": "kernel.shm_rmid_forced", "value": "1"},
        {"name": "kernel.msgmax", "value": "10000000"}]});
    for p in [
        subpath_pod(
            "pp-subpath",
            "foo",
            "$(POD_NAME)",
            "echo hi > /subpath_mount/f && cat /volume_mount/foo/f && test -d /volume_mount/foo && echo ok-subpath",
        ),
        subpath_pod("pp-subpath-abs", "/tmp", "$(POD_NAME)", "true"),
        subpath_pod("pp-subpath-back", "..", "$(POD_NAME)", "true"),
        subpath_pod(
            "pp-subpath-fix",
            "foo",
            "$(ANNOTATION)/$(POD_NAME)",
            "test -d /volume_mount/mypath/foo && echo fixed",
        ),
        hosts,
        hostnet,
        sysctl,
        unsafe_sysctl,
        pod("pp-ephemeral", "Always", busybox("app", "sleep 3600")),
        pod("pp-deadline", "Always", busybox("app", "sleep 3600")),
    ] {
        api.create("api/v1", "pods", p).expect("pod");
    }

    let agent = cluster::start_agent(
        &dir,
        &endpoint,
        &kubeconfig,
        &client_ca,
        NODE,
        "clusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\n",
    );
    let client = client_from(&kubeconfig).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let long = Duration::from_secs(60);
    let done = |p: &Value| matches!(phase(p), "Succeeded" | "Failed");

    // subPathExpr.
    let p = wait_pod(&api, &agent, "pp-subpath", long, done).await;
    assert_eq!(phase(&p), "Succeeded", "{}", p["status"]);
    assert_eq!(
        cluster::logs(&pods, "pp-subpath", Some("c")).await,
        "hi\nok-subpath\n"
    );
    let config_error = |p: &Value| waiting(p).0 == "CreateContainerConfigError";
    let p = wait_pod(&api, &agent, "pp-subpath-abs", long, config_error).await;
    assert_eq!(phase(&p), "Pending");
    assert_eq!(
        waiting(&p).1,
        "error SubPath `/tmp` must not be an absolute path"
    );
    let p = wait_pod(&api, &agent, "pp-subpath-back", long, config_error).await;
    assert_eq!(
        waiting(&p).1,
        "unable to provision SubPath `..`: must not contain '..'"
    );
    let p = wait_pod(&api, &agent, "pp-subpath-fix", long, config_error).await;
    assert_eq!(waiting(&p).1, "missing value for ANNOTATION");
    pods.patch(
        "pp-subpath-fix",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"mysubpath": "mypath"}}})),
    )
    .await
    .expect("annotate");
    let p = wait_pod(&api, &agent, "pp-subpath-fix", long, done).await;
    assert_eq!(phase(&p), "Succeeded", "{}", p["status"]);
    assert_eq!(
        cluster::logs(&pods, "pp-subpath-fix", Some("c")).await,
        "fixed\n"
    );

    // /etc/hosts, resolv.conf and the Service variables.
    let p = wait_pod(&api, &agent, "pp-hosts", long, done).await;
    assert_eq!(phase(&p), "Succeeded", "{}", p["status"]);
    let pod_ip = p["status"]["podIP"].as_str().expect("pod IP").to_owned();
    let out = cluster::logs(&pods, "pp-hosts", Some("managed")).await;
    let mut parts = out.split("---\n");
    let (hosts, resolv, env) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
    );
    assert!(
        hosts.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"),
        "{hosts}"
    );
    assert!(
        hosts.contains(&format!(
            "{pod_ip}\tweb-0.db.default.svc.cluster.local\tweb-0\n"
        )),
        "{hosts}"
    );
    assert!(
        hosts
            .ends_with("\n# Entries added by HostAliases.\n123.45.67.89\tfoo.remote\tbar.remote\n"),
        "{hosts}"
    );
    assert!(resolv.contains("nameserver 10.96.0.10"), "{resolv}");
    assert!(
        resolv.contains("search default.svc.cluster.local svc.cluster.local cluster.local"),
        "{resolv}"
    );
    assert!(resolv.contains("options ndots:5"), "{resolv}");
    for want in [
        "KUBERNETES_SERVICE_HOST=10.96.0.1",
        "KUBERNETES_SERVICE_PORT=443",
        "KUBERNETES_PORT_443_TCP=tcp://10.96.0.1:443",
        "FOOSERVICE_SERVICE_HOST=10.96.0.2",
        "FOOSERVICE_SERVICE_PORT=8765",
        "FOOSERVICE_PORT_8765_TCP_ADDR=10.96.0.2",
    ] {
        assert!(env.lines().any(|l| l == want), "{want} not in\n{env}");
    }
    let node_hosts = std::fs::read_to_string("/etc/hosts").expect("node's /etc/hosts");
    assert_eq!(
        cluster::logs(&pods, "pp-hosts", Some("own")).await,
        node_hosts,
        "a container mounting its own /etc/hosts keeps it"
    );
    let p = wait_pod(&api, &agent, "pp-hostnet", long, done).await;
    assert_eq!(phase(&p), "Succeeded", "{}", p["status"]);
    assert_eq!(
        cluster::logs(&pods, "pp-hostnet", Some("c")).await,
        format!("# Kubernetes-managed hosts file (host network).\n{node_hosts}")
    );

    // sysctls.
    let p = wait_pod(&api, &agent, "pp-sysctl", long, done).await;
    assert_eq!(phase(&p), "Succeeded", "{}", p["status"]);
    assert_eq!(cluster::logs(&pods, "pp-sysctl", Some("c")).await, "1\n");
    let p = wait_pod(&api, &agent, "pp-sysctl-unsafe", long, done).await;
    assert_eq!(
        (phase(&p), p["status"]["reason"].as_str()),
        ("Failed", Some("SysctlForbidden"))
    );
    assert_eq!(
        p["status"]["message"],
        "Pod was rejected: forbidden sysctl: \"kernel.msgmax\" not allowlisted"
    );

    // Ephemeral containers: added through the subresource as kubectl debug does.
    wait_pod(&api, &agent, "pp-ephemeral", long, running).await;
    let debugger = json!({"spec": {"ephemeralContainers": [{"name": "debugger", "image": cluster::IMAGE,
        "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", "echo debugging; sleep 3600"],
        "stdin": true, "tty": true}]}});
    pods.patch_subresource(
        "ephemeralcontainers",
        "pp-ephemeral",
        &PatchParams::default(),
        &Patch::Strategic(debugger),
    )
    .await
    .expect("add the ephemeral container");
    let ephemeral_running = |p: &Value| {
        p["status"]["ephemeralContainerStatuses"]
            .as_array()
            .is_some_and(|s| {
                s.iter()
                    .any(|c| c["name"] == "debugger" && !c["state"]["running"].is_null())
            })
    };
    let p = wait_pod(&api, &agent, "pp-ephemeral", long, ephemeral_running).await;
    assert_eq!(p["status"]["containerStatuses"][0]["restartCount"], 0);
    let mut exec = pods
        .exec(
            "pp-ephemeral",
            ["sh", "-c", "echo from-the-debugger"],
            &AttachParams::default().container("debugger").stderr(false),
        )
        .await
        .expect("exec in the ephemeral container");
    let mut out = String::new();
    exec.stdout()
        .expect("stdout")
        .read_to_string(&mut out)
        .await
        .expect("read");
    assert_eq!(out, "from-the-debugger\n");
    // `kubectl debug --target app`: the app's processes are the debugger's to see.
    let targeted = json!({"spec": {"ephemeralContainers": [{"name": "targeted", "image": cluster::IMAGE,
        "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3601"], "targetContainerName": "app"}]}});
    pods.patch_subresource(
        "ephemeralcontainers",
        "pp-ephemeral",
        &PatchParams::default(),
        &Patch::Strategic(targeted),
    )
    .await
    .expect("add the targeted ephemeral container");
    let targeted_running = |p: &Value| {
        p["status"]["ephemeralContainerStatuses"]
            .as_array()
            .is_some_and(|s| {
                s.iter()
                    .any(|c| c["name"] == "targeted" && !c["state"]["running"].is_null())
            })
    };
    wait_pod(&api, &agent, "pp-ephemeral", long, targeted_running).await;
    let mut exec = pods
        .exec(
            "pp-ephemeral",
            ["ps", "-o", "args"],
            &AttachParams::default().container("targeted").stderr(false),
        )
        .await
        .expect("exec in the targeted container");
    let mut ps = String::new();
    exec.stdout()
        .expect("stdout")
        .read_to_string(&mut ps)
        .await
        .expect("read");
    assert!(
        ps.lines().any(|l| l.trim() == "sleep 3600"),
        "the app's process: {ps}"
    );
    assert!(
        ps.lines().any(|l| l.trim() == "sleep 3601"),
        "its own: {ps}"
    );
    // A name already taken is refused by the API server; the pod runs on.
    let taken =
        json!({"spec": {"ephemeralContainers": [{"name": "app", "image": cluster::IMAGE}]}});
    let err = pods
        .patch_subresource(
            "ephemeralcontainers",
            "pp-ephemeral",
            &PatchParams::default(),
            &Patch::Strategic(taken),
        )
        .await
        .expect_err("duplicate name");
    assert!(
        err.to_string().contains("Duplicate value: \"app\""),
        "{err}"
    );

    // activeDeadlineSeconds set on a running pod.
    wait_pod(&api, &agent, "pp-deadline", long, running).await;
    pods.patch(
        "pp-deadline",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"activeDeadlineSeconds": 5}})),
    )
    .await
    .expect("deadline");
    let p = wait_pod(&api, &agent, "pp-deadline", long, |p| phase(p) == "Failed").await;
    assert_eq!(p["status"]["reason"], "DeadlineExceeded");
    assert_eq!(
        p["status"]["message"],
        "Pod was active on the node longer than the specified deadline"
    );

    drop(agent);
    remove_pods(&endpoint, NODE).await;
    served.stop();
}
