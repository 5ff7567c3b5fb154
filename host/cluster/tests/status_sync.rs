//! The status sync on its own, against the API server double: a burst of status changes
//! while a (slow) patch is in flight ends in few patches, and the newest status is the
//! one the API server keeps — never an older one over it; a pod refused at admission is
//! written at once, not held for a first sync that never comes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;
use wasmlet_agent::statuses::{Context, StatusManager};
use wasmlet_apiserver_sim::ApiServerSim;
use wasmlet_cluster::mirror::MirrorPods;
use wasmlet_cluster::ratelimit::RateLimiter;
use wasmlet_cluster::{connect, status};
use wasmlet_core::runtime::{ContainerInfo, PodRuntime, Sandbox, State};
use wasmlet_core::status::ProbeView;

fn runtime(uid: &str, restarts: i32) -> PodRuntime {
    PodRuntime {
        uid: uid.into(),
        sandboxes: vec![Sandbox {
            id: "s".into(),
            ready: true,
            ips: vec!["10.0.0.9".into()],
            ..Default::default()
        }],
        containers: vec![ContainerInfo {
            id: format!("c{restarts}"),
            name: "c".into(),
            sandbox_id: "s".into(),
            state: State::Running,
            restart_count: restarts,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The double with pod `default/p` bound to node `n`, and a status sync to it from a
/// status manager of its own.
struct Synced {
    api: ApiServerSim,
    served: wasmlet_apiserver_sim::Served,
    statuses: Arc<StatusManager>,
    pod: Arc<k8s::Pod>,
    stop: tokio_util::sync::CancellationToken,
    /// The Node's owner reference, never set (kept, so the sync does not see it go).
    _owner: tokio::sync::watch::Sender<Option<OwnerReference>>,
}

async fn synced(test: &str) -> Synced {
    let api = ApiServerSim::new();
    let served = api
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let dir =
        std::env::temp_dir().join(format!("wasmlet-status-sync-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("kubeconfig");
    wasmlet_apiserver_sim::write_kubeconfig(&kubeconfig, &served.url()).expect("kubeconfig");
    let client = connect::client(&kubeconfig).await.expect("client");
    let stored = api
        .create(
            "api/v1",
            "pods",
            json!({"metadata": {"name": "p", "namespace": "default"},
                "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "i"}]}}),
        )
        .expect("create");
    let pod: k8s::Pod = serde_json::from_value(stored).expect("pod");
    let statuses = Arc::new(StatusManager::new());
    let (owner_tx, owner) = tokio::sync::watch::channel(None);
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(status::run(
        status::StatusSync {
            client,
            statuses: statuses.clone(),
            mirrors: Arc::new(MirrorPods::default()),
            owner,
            sources_ready: Arc::new(|| true),
            limiter: Arc::new(RateLimiter::new(50.0, 100)),
        },
        stopped,
    ));
    Synced {
        api,
        served,
        statuses,
        pod: Arc::new(pod),
        stop,
        _owner: owner_tx,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bursts_coalesce_and_the_newest_status_wins() {
    let Synced {
        api,
        served,
        statuses,
        pod,
        stop,
        ..
    } = synced("burst").await;
    let uid = pod.metadata.uid.clone().expect("uid");
    // Every write takes 300 ms; the pod's status changes 20 times in 100 ms.
    api.set_latency(Duration::from_millis(300));
    statuses.set_pod(pod.clone());
    statuses.first_sync_done(&uid);
    let probes = |_: &str| ProbeView::default();
    for restarts in 0..20 {
        statuses.update(
            &uid,
            &runtime(&uid, restarts),
            &Context {
                runtime_name: "sim",
                host_ip: "192.168.0.1",
                probes: &probes,
                now: "2026-11-22T10:00:00Z",
            },
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(statuses.get(&uid).expect("held").version, 20);
    let started = Instant::now();
    loop {
        let restarts = api
            .get("api/v1", "pods", "default", "p")
            .and_then(|p| p["status"]["containerStatuses"][0]["restartCount"].as_i64());
        if restarts == Some(19) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the newest status never arrived: restartCount {restarts:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Settled: nothing older comes after it, and the burst took a few patches, not 20.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let stored = api.get("api/v1", "pods", "default", "p").expect("pod");
    assert_eq!(stored["status"]["containerStatuses"][0]["restartCount"], 19);
    let patches = api
        .requests()
        .iter()
        .filter(|(m, p)| m == "PATCH" && p.ends_with("/pods/p/status"))
        .count();
    assert!(
        (1..=3).contains(&patches),
        "{patches} patches for 20 changes"
    );
    stop.cancel();
    served.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_refused_at_admission_is_written_at_once() {
    let Synced {
        api,
        served,
        statuses,
        pod,
        stop,
        ..
    } = synced("rejected").await;
    let started = Instant::now();
    statuses.reject(pod, "AppArmor", "Cannot enforce AppArmor", "192.168.0.1");
    loop {
        let phase = api
            .get("api/v1", "pods", "default", "p")
            .and_then(|p| p["status"]["phase"].as_str().map(str::to_owned));
        if phase.as_deref() == Some("Failed") {
            break;
        }
        // Not held for a first sync that never comes (the kubelet writes it at once).
        assert!(
            started.elapsed() < status::HOLD_FIRST / 2,
            "the rejection was not written within {:?}: {phase:?}",
            status::HOLD_FIRST / 2
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stored = api.get("api/v1", "pods", "default", "p").expect("pod");
    assert_eq!(stored["status"]["reason"], "AppArmor");
    stop.cancel();
    served.stop();
}
