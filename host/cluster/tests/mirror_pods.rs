//! Static pods and their mirror pods, with the agent on the in-process CRI simulator
//! and the API server double: static pods start with no API server, mirror pods follow
//! them, and — as the kubelet's — a mirror pod stays with a static pod until its
//! containers have stopped, a mirror pod deleted through the API comes back, and a
//! manifest removed and written again restarts its pod under the same UID.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

/// A control-plane node: its API server is one of its static pods, so nothing a static
/// pod needs may wait for the API server — the Service variables included (the kubelet
/// exempts static pods from waiting for the first list of Services). Once the API server
/// answers, the mirror pod follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_pods_start_before_the_api_server_was_ever_reached() {
    let (api, served, client) = Node::served_double(&Node::dir("no-apiserver")).await;
    let addr = served.addr;
    served.stop();
    let mut n = Node::start_on(
        "no-apiserver",
        api,
        (None, addr),
        client,
        Default::default(),
    )
    .await;
    n.set_static(vec![static_pod("latest")]).await;
    let started = Instant::now();
    let name = format!("etcd-{}", n.name);
    while !n.running_containers().await.iter().any(|(p, _)| *p == name) {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the static pod's container did not start without an API server: {:?}",
            n.agent.ctx.statuses.pods()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Services were never listed: the container gets none of their variables.
    let env = n.cri.container_config("c").expect("created").envs;
    assert!(
        env.iter().all(|e| !e.key.starts_with("KUBERNETES_")),
        "{env:?}"
    );

    // The API server comes up (as the static pod would): the mirror pod follows.
    n.served = Some(n.api.serve(n.addr).await.expect("serve"));
    n.wait(&format!("{name} Running"), Duration::from_secs(20), |p| {
        phase(p) == "Running"
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_pods_get_mirror_pods_that_follow_them() {
    let n = Node::start("mirror").await;
    let name = format!("etcd-{}", n.name);
    n.set_static(vec![static_pod("latest")]).await;
    let uid_of_node = || {
        n.api
            .get("api/v1", "nodes", "", &n.name)
            .and_then(|node| node["metadata"]["uid"].as_str().map(str::to_owned))
    };
    let started = Instant::now();
    let mirror = loop {
        if let Some(m) = n.stored(&name)
            && phase(Some(&m)) == "Running"
        {
            break m;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no running mirror pod for {name}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let static_uid = n.agent.ctx.statuses.pods()[0]
        .metadata
        .uid
        .clone()
        .expect("uid");
    assert_eq!(
        mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"],
        static_uid
    );
    assert_eq!(mirror["metadata"]["labels"]["tier"], "control");
    assert_ne!(
        mirror["metadata"]["uid"], static_uid,
        "the API server's own UID"
    );
    let owner = &mirror["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Node");
    assert_eq!(owner["name"], n.name.as_str());
    assert_eq!(owner["uid"].as_str(), uid_of_node().as_deref());
    assert_eq!(owner["controller"], true);
    // The mirror pod is not a pod to run: one container, not two.
    assert_eq!(n.running_containers().await.len(), 1);
    assert_eq!(n.agent.ctx.statuses.len(), 1);

    // The static pod changes: a new mirror pod replaces the old one.
    n.set_static(vec![static_pod("v2")]).await;
    let old_uid = mirror["metadata"]["uid"].clone();
    n.wait(
        &format!("{name} replaced by a mirror of the new static pod, Running"),
        Duration::from_secs(15),
        |p| {
            p.is_some_and(|p| {
                p["metadata"]["uid"] != old_uid
                    && p["spec"]["containers"][0]["image"] == "localhost/busybox:v2"
                    && phase(Some(p)) == "Running"
            })
        },
    )
    .await;

    // A mirror pod whose static pod is not here (left by an earlier life) is deleted.
    n.api
        .create(
            "api/v1",
            "pods",
            json!({"metadata": {"name": "old-static", "namespace": "default",
                "annotations": {"kubernetes.io/config.mirror": "abc"}},
                "spec": {"nodeName": n.name, "containers": [{"name": "c", "image": "i"}]}}),
        )
        .expect("orphan");
    n.wait("old-static deleted", Duration::from_secs(15), |p| {
        p.is_none()
    })
    .await;

    // The static pod goes: so does its mirror pod.
    n.set_static(Vec::new()).await;
    n.wait(&format!("{name} deleted"), Duration::from_secs(15), |p| {
        p.is_none()
    })
    .await;
}

/// The static pod `etcd` at `image_tag` whose container ignores SIGTERM, so that
/// stopping it takes its whole grace period, `grace` seconds.
fn slow_to_stop(image_tag: &str, grace: i64) -> Value {
    let mut p = static_pod(image_tag);
    p["metadata"]["annotations"] = json!({"sim.wasmlet.io/script.c": "ignore-term"});
    p["spec"]["terminationGracePeriodSeconds"] = json!(grace);
    p
}

fn uid(p: Option<&Value>) -> Value {
    p.map_or(Value::Null, |p| p["metadata"]["uid"].clone())
}

/// Waits until the mirror pod runs the image at `tag`, and returns its UID.
async fn running_mirror(n: &Node, tag: &str) -> Value {
    let name = format!("etcd-{}", n.name);
    let image = format!("localhost/busybox:{tag}");
    n.wait(
        &format!("{name} Running {tag}"),
        Duration::from_secs(20),
        |p| {
            phase(p) == "Running" && p.is_some_and(|p| p["spec"]["containers"][0]["image"] == image)
        },
    )
    .await;
    uid(n.stored(&name).as_ref())
}

/// For `during`, the mirror pod keeps UID `kept` and stays Running (the kubelet's
/// MirrorPodWithGracePeriod specs).
async fn mirror_stays(n: &Node, kept: &Value, during: Duration) {
    let name = format!("etcd-{}", n.name);
    let started = Instant::now();
    while started.elapsed() < during {
        let stored = n.stored(&name);
        assert_eq!(
            &uid(stored.as_ref()),
            kept,
            "{name} replaced while its static pod stops"
        );
        assert_eq!(phase(stored.as_ref()), "Running", "{stored:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The kubelet keeps a static pod's mirror pod — and its status there — until the
/// static pod's containers have stopped, whether its manifest changed or went away, and
/// never runs two versions of one static pod at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_pod_stays_until_its_static_pod_has_stopped() {
    let n = Node::start("mirror-grace").await;
    let name = format!("etcd-{}", n.name);
    n.set_static(vec![slow_to_stop("latest", 3)]).await;
    let first = running_mirror(&n, "latest").await;

    // Changed: the old version stops within its 3 s; the new one waits for it.
    n.set_static(vec![slow_to_stop("v2", 3)]).await;
    mirror_stays(&n, &first, Duration::from_millis(2_500)).await;
    let running = n.running_containers().await;
    assert_eq!(running.len(), 1, "one version at a time: {running:?}");
    let second = running_mirror(&n, "v2").await;
    assert_ne!(second, first);

    // Gone: the mirror pod stays while it stops, then goes.
    n.set_static(Vec::new()).await;
    mirror_stays(&n, &second, Duration::from_millis(2_500)).await;
    n.wait(&format!("{name} deleted"), Duration::from_secs(10), |p| {
        p.is_none()
    })
    .await;
    assert!(n.running_containers().await.is_empty());
}

/// A mirror pod deleted through the API with a grace period is deleted for good at once
/// and made again (the kubelet's "should be recreated when mirror pod gracefully
/// deleted"); the static pod itself is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_pod_deleted_gracefully_is_made_again() {
    let n = Node::start("mirror-deleted").await;
    let name = format!("etcd-{}", n.name);
    n.set_static(vec![static_pod("latest")]).await;
    let first = running_mirror(&n, "latest").await;
    let containers = n.running_containers().await;
    n.pods()
        .delete(&name, &kube::api::DeleteParams::default().grace_period(30))
        .await
        .expect("delete");
    n.wait(
        &format!("{name} made again"),
        Duration::from_secs(15),
        |p| {
            phase(p) == "Running"
                && uid(p) != first
                && p.is_some_and(|p| p["metadata"]["deletionTimestamp"].is_null())
        },
    )
    .await;
    assert_eq!(
        n.running_containers().await,
        containers,
        "the static pod runs on"
    );
}

/// A manifest removed and written again (the same pod, the same UID) restarts the pod:
/// its container is stopped and started again with restart count 1, as the kubelet's
/// ("should successfully recreate when file is removed and recreated").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_pod_removed_and_added_again_restarts_with_its_count() {
    let n = Node::start("mirror-readd").await;
    let name = format!("etcd-{}", n.name);
    n.set_static(vec![static_pod("latest")]).await;
    let first = running_mirror(&n, "latest").await;
    let before = n.running_containers().await;
    n.set_static(Vec::new()).await;
    n.set_static(vec![static_pod("latest")]).await;
    n.wait(
        &format!("{name} restarted once"),
        Duration::from_secs(20),
        |p| {
            phase(p) == "Running"
                && p.is_some_and(|p| {
                    let c = &p["status"]["containerStatuses"][0];
                    c["restartCount"] == 1 && !c["state"]["running"].is_null()
                })
        },
    )
    .await;
    assert_eq!(uid(n.stored(&name).as_ref()), first, "the same mirror pod");
    let after = n.running_containers().await;
    assert_eq!(after.len(), 1);
    assert_ne!(after, before, "a new container");
}
