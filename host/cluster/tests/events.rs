//! The event writer against the API server double: no event holds up another. Events
//! for a namespace being deleted (403 NamespaceTerminating) or gone (404) are dropped at
//! once and counted, never retried (after the first answer, without asking), and the
//! events behind them are stored within the gather window; an event that fails because the API server is away is tried again
//! later while newer ones go straight through once it is back.

use std::time::{Duration, Instant, SystemTime};

use serde_json::json;
use wasmlet_agent::events::{Event, Kind, Recorder};
use wasmlet_apiserver_sim::ApiServerSim;
use wasmlet_cluster::events::{ApiRecorder, RETRY_SLEEP};
use wasmlet_cluster::ratelimit::RateLimiter;
use wasmlet_core::pod::PodKey;

fn event(ns: &str, pod: &str, reason: &str) -> Event {
    Event {
        pod: PodKey {
            uid: format!("uid-{pod}"),
            namespace: ns.into(),
            name: pod.into(),
        },
        source: "api".into(),
        field_path: None,
        kind: Kind::Normal,
        reason: reason.into(),
        message: format!("{reason} {pod}"),
        time: SystemTime::now(),
        regarding: None,
    }
}

fn posts(api: &ApiServerSim, ns: &str) -> usize {
    api.requests()
        .iter()
        .filter(|(m, p)| m == "POST" && p == &format!("/api/v1/namespaces/{ns}/events"))
        .count()
}

async fn wait(what: &str, within: Duration, ok: impl Fn() -> bool) -> Duration {
    let started = Instant::now();
    while !ok() {
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_event_holds_up_another() {
    let dir = std::env::temp_dir().join(format!("wasmlet-events-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let api = ApiServerSim::new();
    let served = api
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let addr = served.addr;
    let kubeconfig = dir.join("kubeconfig");
    wasmlet_apiserver_sim::write_kubeconfig(&kubeconfig, &served.url()).expect("kubeconfig");
    let client = wasmlet_cluster::connect::client(&kubeconfig)
        .await
        .expect("client");
    // "doomed" still holds a pod while it is deleted (terminating); "gone" is empty.
    api.create(
        "api/v1",
        "pods",
        json!({"metadata": {"name": "last", "namespace": "doomed"}, "spec": {"containers": []}}),
    )
    .expect("pod");
    api.delete_namespace("doomed");
    api.delete_namespace("gone");

    let (recorder, queue) = ApiRecorder::new();
    let stats = recorder.stats();
    let _stop = tokio_util::sync::CancellationToken::new();
    let stopped = _stop.clone();
    tokio::spawn(wasmlet_cluster::events::run(
        client,
        "node-e".into(),
        queue,
        RateLimiter::new(50.0, 100),
        stopped,
    ));
    for i in 0..20 {
        recorder.record(event("doomed", &format!("d{i}"), "Killing"));
        recorder.record(event("gone", &format!("g{i}"), "Killing"));
    }
    recorder.record(event("default", "web", "Started"));
    let took = wait(
        "the event behind 40 rejected ones",
        Duration::from_secs(2),
        || stats.written() == 1,
    )
    .await;
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(stats.dropped("rejected"), 40);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        (posts(&api, "doomed"), posts(&api, "gone")),
        (1, 1),
        "each namespace asked once: a rejected event is never retried, and a namespace \
         that said it is going or gone is not asked again for a while"
    );

    // The API server away: the event is set aside; once it is back, newer events go
    // straight through and the old one follows when its retry is due.
    served.stop();
    recorder.record(event("default", "early", "Pulled"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let served = api.serve(addr).await.expect("serve again");
    recorder.record(event("default", "late", "Created"));
    let took = wait(
        "a new event while an old one waits",
        Duration::from_secs(3),
        || stats.written() == 2,
    )
    .await;
    assert!(took < RETRY_SLEEP / 2, "not held up by the retry: {took:?}");
    wait(
        "the old event, tried again",
        RETRY_SLEEP + Duration::from_secs(3),
        || stats.written() == 3,
    )
    .await;
    assert_eq!(stats.dropped("retries"), 0);
    served.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
