//! Volumes that follow what they project, with the agent in the loop on the API server
//! double: a changed ConfigMap or Secret, an optional one created later, and the pod's
//! own labels and annotations reach the running pod's files — at once, through the
//! watch of each referenced object, not at the pod's next periodic sync (a minute here).
//! Reads come from those watches, and the watches end with the pods.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;

async fn wait_file(path: &std::path::Path, want: &str, limit: Duration) {
    let started = std::time::Instant::now();
    loop {
        let have = std::fs::read_to_string(path).ok();
        if have.as_deref() == Some(want) {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "{}: {have:?} where {want:?} was expected within {limit:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projected_objects_and_pod_metadata_reach_a_running_pod_at_once() {
    let n = Node::start("follow").await;
    let config_maps: Api<k8s::ConfigMap> = Api::namespaced(n.client.clone(), "default");
    let secrets: Api<k8s::Secret> = Api::namespaced(n.client.clone(), "default");
    let cm = |name: &str, value: &str| -> k8s::ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"data-1": value}}))
            .expect("configmap")
    };
    config_maps
        .create(&PostParams::default(), &cm("app", "value-1"))
        .await
        .expect("app");
    let pod: k8s::Pod = serde_json::from_value(json!({
        "metadata": {"name": "reader", "namespace": "default", "labels": {"key1": "value1"}},
        "spec": {
            "nodeName": n.name,
            "terminationGracePeriodSeconds": 1,
            "volumes": [
                {"name": "app", "configMap": {"name": "app"}},
                {"name": "later", "projected": {"sources": [
                    {"configMap": {"name": "later", "optional": true}},
                    {"secret": {"name": "creds", "optional": true}},
                    {"downwardAPI": {"items": [
                        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                        {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]}}]}}
            ],
            "containers": [{"name": "c", "image": "localhost/busybox:latest",
                "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"],
                "volumeMounts": [{"name": "app", "mountPath": "/etc/app"},
                    {"name": "later", "mountPath": "/etc/later"}]}]
        }
    }))
    .expect("pod");
    let created = n
        .pods()
        .create(&PostParams::default(), &pod)
        .await
        .expect("create");
    n.wait("reader Running", Duration::from_secs(10), |p| {
        phase(p) == "Running"
    })
    .await;
    let volumes = n
        .root
        .join("pods")
        .join(created.metadata.uid.as_deref().expect("uid"))
        .join("volumes");
    let app = volumes.join("kubernetes.io~configmap/app");
    let later = volumes.join("kubernetes.io~projected/later");
    wait_file(&app.join("data-1"), "value-1", Duration::ZERO).await;
    wait_file(&later.join("labels"), "key1=\"value1\"\n", Duration::ZERO).await;
    assert!(
        !later.join("data-1").exists(),
        "the optional ConfigMap is not there yet"
    );
    assert_eq!(
        n.volumes.objects().watched(),
        3,
        "app, later and creds are watched"
    );

    // The ConfigMap changes: the file follows, well inside a second.
    config_maps
        .replace("app", &PostParams::default(), &cm("app", "value-2"))
        .await
        .expect("update");
    wait_file(&app.join("data-1"), "value-2", Duration::from_secs(2)).await;
    // The kubelet's layout: the key is a link into the current version.
    assert_eq!(
        std::fs::read_link(app.join("data-1")).expect("link"),
        std::path::Path::new("..data/data-1")
    );
    // Optional sources created after the pod started.
    config_maps
        .create(&PostParams::default(), &cm("later", "late"))
        .await
        .expect("later");
    let secret: k8s::Secret = serde_json::from_value(
        json!({"metadata": {"name": "creds"}, "data": {"password": "c2VjcmV0"}}),
    )
    .expect("secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("creds");
    wait_file(&later.join("data-1"), "late", Duration::from_secs(2)).await;
    wait_file(&later.join("password"), "secret", Duration::from_secs(2)).await;
    // The pod's labels and annotations.
    let patch =
        json!({"metadata": {"labels": {"key1": "value2"}, "annotations": {"builder": "foo"}}});
    n.pods()
        .patch("reader", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
    wait_file(
        &later.join("labels"),
        "key1=\"value2\"\n",
        Duration::from_secs(2),
    )
    .await;
    // The kubelet's own annotations (config.seen, config.source) are there too, as in
    // the kubelet's file.
    let annotations = std::fs::read_to_string(later.join("annotations")).expect("annotations");
    assert!(
        annotations.starts_with("builder=\"foo\"\n"),
        "{annotations}"
    );
    assert!(
        annotations.contains("kubernetes.io/config.source=\"api\"\n"),
        "{annotations}"
    );
    // A key removed from its source goes from the volume.
    config_maps
        .delete("later", &DeleteParams::default())
        .await
        .expect("delete");
    let started = std::time::Instant::now();
    while later.join("data-1").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "data-1 still there"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        n.requests("GET", "/configmaps/app") + n.requests("GET", "/secrets/creds"),
        0,
        "read from the watches, never one by one"
    );

    // The pod goes: its objects are not watched any more.
    n.pods()
        .delete("reader", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete");
    let started = std::time::Instant::now();
    while n.volumes.objects().watched() > 0 {
        assert!(started.elapsed() < Duration::from_secs(10), "watches left");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!volumes.exists(), "the pod's volumes are removed with it");
}
