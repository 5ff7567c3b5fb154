//! Volumes as a container on the real containerd sees them (issue 25), through `wasmlet
//! run --kubeconfig` and the API server double, checked the way the sig-storage
//! conformance tests check them — from what the container prints: an emptyDir is mode
//! 0777 and writable by a non-root user, `medium: Memory` is a tmpfs of the asked size,
//! and both are taken away once their pod has finished;
//! a pod's `fsGroup` owns a projected secret with `defaultMode: 0440` so that a non-root
//! user reads it; a ConfigMap volume follows an update while the container runs; and a
//! CPU limit read through the downward API with the divisor the API server sends (`"0"`)
//! is whole cores, rounded up.
//!
//! containerd comes from `WASMLET_CRI_ENDPOINT` (`cargo xtask test` starts it); without
//! it the test is skipped, unless `WASMLET_REQUIRE_CONTAINERD=1`.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::{Value, json};

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/containerd.rs"]
mod containerd;

use cluster::{busybox, client_from, phase, remove_pods, wait_pod};
use containerd::endpoint;

const NODE: &str = "volumes-e2e";

fn pod(name: &str, restart: &str, container: Value, volumes: Value) -> Value {
    let mut p = cluster::pod(NODE, name, restart, container);
    p["spec"]["volumes"] = volumes;
    p
}

/// A finished pod, not deleted: its volumes are taken down all the same (the kubelet's
/// Volume Manager spec), the tmpfs unmounted first; its own directory stays.
async fn volumes_taken_down(dir: &std::path::Path, p: &Value) {
    let uid = p["metadata"]["uid"].as_str().expect("uid");
    let volumes = dir.join("root/pods").join(uid).join("volumes");
    let started = Instant::now();
    while volumes.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{} is still there after the pod finished",
            volumes.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pod_dir = volumes.parent().expect("pod dir");
    assert!(
        pod_dir.is_dir(),
        "the pod's own directory stays until it is deleted"
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(
        !mounts.contains(uid),
        "a mount of the finished pod is left: {mounts}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_dirs_fs_group_updates_and_resource_values_as_a_container_sees_them() {
    let Some(endpoint) = endpoint() else { return };
    let cluster::Double {
        dir,
        api,
        served,
        kubeconfig,
        client_ca,
    } = cluster::Double::start("wasmlet-volumes-e2e", &endpoint, NODE).await;
    api.create(
        "api/v1",
        "secrets",
        json!({"metadata": {"name": "creds", "namespace": "default"},
               "data": {"data-1": "dmFsdWUtMQ=="}}),
    )
    .expect("secret");
    api.create(
        "api/v1",
        "configmaps",
        json!({"metadata": {"name": "settings", "namespace": "default"},
               "data": {"data-1": "value-1"}}),
    )
    .expect("configmap");

    // emptyDirs, as a non-root user: the default medium and a 4 MiB tmpfs.
    let mut c = busybox(
        "c",
        "stat -c '%a' /disk; stat -f -c '%T' /mem; stat -c '%a' /mem; \
         df -k /mem | tail -1 | awk '{print $2}'; \
         echo hi > /disk/f && echo hi > /mem/f && echo written",
    );
    c["securityContext"] = json!({"runAsUser": 1001});
    c["volumeMounts"] = json!([{"name": "disk", "mountPath": "/disk"},
                               {"name": "mem", "mountPath": "/mem"}]);
    let empty = pod(
        "vol-empty",
        "Never",
        c,
        json!([{"name": "disk", "emptyDir": {}},
               {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "4Mi"}}]),
    );
    // A projected secret, mode 0440, for a non-root user through its fsGroup.
    let mut c = busybox(
        "c",
        "cat /s/data-1; echo; stat -c '%a %g' /s/..data/data-1; id -G",
    );
    c["volumeMounts"] = json!([{"name": "s", "mountPath": "/s"}]);
    let mut group = pod(
        "vol-fsgroup",
        "Never",
        c,
        json!([{"name": "s", "projected": {"defaultMode": 0o440,
            "sources": [{"secret": {"name": "creds"}}]}}]),
    );
    group["spec"]["securityContext"] = json!({"runAsUser": 1000, "fsGroup": 1001});
    // A ConfigMap read over and over while it changes.
    let mut c = busybox(
        "c",
        "while true; do cat /etc/cm/data-1; echo; sleep 0.2; done",
    );
    c["volumeMounts"] = json!([{"name": "cm", "mountPath": "/etc/cm"}]);
    let follow = pod(
        "vol-follow",
        "Always",
        c,
        json!([{"name": "cm", "configMap": {"name": "settings"}}]),
    );
    // The downward API's CPU limit, as the conformance test sets it.
    let mut c = busybox("c", "echo CPU_LIMIT=$CPU_LIMIT; cat /info/cpu_limit; echo");
    c["resources"] = json!({"limits": {"cpu": "1250m", "memory": "64Mi"},
                            "requests": {"cpu": "250m", "memory": "32Mi"}});
    c["env"] = json!([{"name": "CPU_LIMIT",
        "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]);
    c["volumeMounts"] = json!([{"name": "info", "mountPath": "/info"}]);
    let resources = pod(
        "vol-resources",
        "Never",
        c,
        json!([{"name": "info", "downwardAPI": {"items": [{"path": "cpu_limit",
            "resourceFieldRef": {"containerName": "c", "resource": "limits.cpu"}}]}}]),
    );
    for p in [empty, group, follow, resources] {
        api.create("api/v1", "pods", p).expect("pod");
    }

    let agent = cluster::start_agent(&dir, &endpoint, &kubeconfig, &client_ca, NODE, "");
    let client = client_from(&kubeconfig).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let long = Duration::from_secs(60);
    let done = |p: &Value| matches!(phase(p), "Succeeded" | "Failed");

    let p = wait_pod(&api, &agent, "vol-empty", long, done).await;
    assert_eq!(phase(&p), "Succeeded", "{}", p["status"]);
    assert_eq!(
        cluster::logs(&pods, "vol-empty", None).await,
        "777\ntmpfs\n1777\n4096\nwritten\n",
        "0777 on disk; a 4 MiB tmpfs (mode 1777); both writable by user 1001"
    );
    volumes_taken_down(&dir, &p).await;

    let p = wait_pod(&api, &agent, "vol-fsgroup", long, done).await;
    assert_eq!(phase(&p), "Succeeded", "{}", p["status"]);
    let out = cluster::logs(&pods, "vol-fsgroup", None).await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..2], ["value-1", "440 1001"], "{out}");
    assert!(
        lines[2].split(' ').any(|g| g == "1001"),
        "the fsGroup is a supplemental group: {out}"
    );

    let p = wait_pod(&api, &agent, "vol-resources", long, done).await;
    assert_eq!(phase(&p), "Succeeded", "{}", p["status"]);
    assert_eq!(
        p["spec"]["containers"][0]["env"][0]["valueFrom"]["resourceFieldRef"]["divisor"], "0",
        "the double sends what the API server sends"
    );
    assert_eq!(
        cluster::logs(&pods, "vol-resources", None).await,
        "CPU_LIMIT=2\n2\n"
    );

    wait_pod(&api, &agent, "vol-follow", long, |p| phase(p) == "Running").await;
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "default");
    let updated = serde_json::from_value(json!({"metadata": {"name": "settings"},
        "data": {"data-1": "value-2"}}))
    .expect("configmap");
    configmaps
        .replace("settings", &Default::default(), &updated)
        .await
        .expect("update");
    let changed = Instant::now();
    loop {
        if cluster::logs(&pods, "vol-follow", None)
            .await
            .contains("value-2")
        {
            break;
        }
        assert!(
            changed.elapsed() < Duration::from_secs(10),
            "the running container never read the update\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "a ConfigMap update reached the container in {:?}",
        changed.elapsed()
    );

    // The tmpfs goes with the pod.
    let mem = dir.join("root/pods");
    api.delete(
        "api/v1",
        "pods",
        "default",
        "vol-empty",
        json!({"gracePeriodSeconds": 0}),
    )
    .ok();
    let deadline = Instant::now() + long;
    loop {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        if !mounts.contains(&*mem.to_string_lossy()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a tmpfs of the pod is still mounted\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(agent);
    remove_pods(&endpoint, NODE).await;
    served.stop();
}
