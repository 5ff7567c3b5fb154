//! A pod's start path against the in-process CRI simulator with slow calls: what each
//! start waits for, and what it does not. Time is paused: the simulated seconds pass in
//! milliseconds, and what they add up to is exact.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use support::*;
use tonic::Code;
use wasmlet_agent::agent::Agent;
use wasmlet_cri_sim::Simulator;

const SLEEPER: &str = r#"{"metadata":{"name":"sleeper"},"spec":{"containers":[
    {"name":"main","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent",
     "command":["sleep","3600"]}]}}"#;

/// Sends the pod `json` (named "sleeper") and waits until it is Running; how long that
/// took on the paused clock, and the pod as it then was.
async fn running_after(agent: &Agent<Simulator>, json: &str) -> (Duration, k8s::Pod) {
    let sent = tokio::time::Instant::now();
    send(agent, vec![pod(json)]).await;
    let p = wait_for(agent, "sleeper", "Running", Duration::from_secs(120), |p| {
        phase(p) == "Running"
    })
    .await;
    (sent.elapsed(), p)
}

/// Whether a new pod's image is present is asked while its sandbox is made, not after:
/// a slow ImageStatus adds nothing to a start that waits on a slower RunPodSandbox, and
/// it is not asked again before the container is created.
#[tokio::test(start_paused = true)]
async fn a_new_pods_image_is_looked_up_while_its_sandbox_is_made() {
    let (sim, agent) = start("ahead");
    sim.set_method_latency("RunPodSandbox", Duration::from_secs(5));
    sim.set_method_latency("ImageStatus", Duration::from_secs(3));
    let (took, p) = running_after(&agent, SLEEPER).await;
    // 5 s of sandbox; the image's 3 s within them. (After the sandbox, or asked twice:
    // 8 s or more.)
    assert!(
        took >= Duration::from_secs(5) && took < Duration::from_secs(6),
        "Running after {took:?}"
    );
    assert!(
        container(&p, "main")
            .state
            .and_then(|s| s.running)
            .is_some()
    );
    agent.shutdown().await;
}

/// A sandbox that cannot be made ends its sync at once, without waiting for what was
/// being asked beside it: the retry comes ERROR_RETRY (10 s) after the failure, not
/// after a slow image lookup.
#[tokio::test(start_paused = true)]
async fn a_sandbox_that_fails_does_not_wait_for_the_lookups_beside_it() {
    let (sim, agent) = start("ahead-fails");
    sim.set_method_latency("ImageStatus", Duration::from_secs(20));
    sim.fail_next("RunPodSandbox", 1, Code::Internal, "CNI is not ready");
    let (took, _) = running_after(&agent, SLEEPER).await;
    // Failed at once, made again 10 s later, its image's 20 s after that: 30 s. (Had
    // the failed sync waited for its lookup: 20 + 10 + 20 s.)
    assert!(
        took >= Duration::from_secs(30) && took < Duration::from_secs(40),
        "Running after {took:?}"
    );
    agent.shutdown().await;
}

/// An image the runtime does not have is still pulled after the sandbox is made, as the
/// kubelet does (its Pulling and Pulled events follow the sandbox's creation): what was
/// asked while the sandbox was made only says that it must be.
#[tokio::test(start_paused = true)]
async fn a_missing_image_is_pulled_after_the_sandbox_as_the_kubelet_does() {
    let (sim, agent, events) = start_recording("ahead-pull");
    sim.set_method_latency("RunPodSandbox", Duration::from_secs(5));
    sim.set_method_latency("PullImage", Duration::from_secs(2));
    let missing = SLEEPER.replace("localhost/busybox:latest", "registry.example/app:1");
    let (took, _) = running_after(&agent, &missing).await;
    assert!(
        took >= Duration::from_secs(7) && took < Duration::from_secs(8),
        "Running after {took:?}: the pull is to follow the 5 s sandbox"
    );
    let reasons: Vec<String> = events
        .events()
        .into_iter()
        .map(|e| e.reason)
        .filter(|r| ["Pulling", "Pulled", "Created", "Started"].contains(&r.as_str()))
        .collect();
    assert_eq!(reasons, ["Pulling", "Pulled", "Created", "Started"]);
    agent.shutdown().await;
}

/// Two containers of one pod with the same missing image: the first pulls it, the
/// second finds it present — what was asked before the sandbox was made is not taken
/// for the second's answer.
#[tokio::test(start_paused = true)]
async fn an_image_one_container_pulled_is_present_for_the_next() {
    let (_sim, agent, events) = start_recording("ahead-shared");
    let shared = r#"{"metadata":{"name":"sleeper"},"spec":{"containers":[
        {"name":"a","image":"registry.example/app:1","imagePullPolicy":"IfNotPresent",
         "command":["sleep","3600"]},
        {"name":"b","image":"registry.example/app:1","imagePullPolicy":"IfNotPresent",
         "command":["sleep","3600"]}]}}"#;
    running_after(&agent, shared).await;
    let pulls: Vec<(String, String)> = events
        .events()
        .into_iter()
        .filter(|e| ["Pulling", "Pulled"].contains(&e.reason.as_str()))
        .map(|e| (e.reason, e.message))
        .collect();
    assert_eq!(pulls.len(), 3, "{pulls:?}");
    assert_eq!(
        pulls.iter().filter(|(r, _)| r == "Pulling").count(),
        1,
        "{pulls:?}"
    );
    assert!(
        pulls[2].1.contains("already present on machine"),
        "{pulls:?}"
    );
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn slow_runtime_calls_hold_up_only_their_own_pod() {
    let (sim, agent) = start("slow");
    // Creating a sandbox takes 5 s and every list 2 s (so does each relist).
    sim.set_method_latency("RunPodSandbox", Duration::from_secs(5));
    sim.set_method_latency("ListContainers", Duration::from_secs(2));
    sim.set_method_latency("ListPodSandbox", Duration::from_secs(2));
    let named = |name: &str| SLEEPER.replace("\"sleeper\"", &format!("\"{name}\""));
    send(&agent, vec![pod(&named("first")), pod(&named("second"))]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Both are being created at once, neither waits for the other.
    for name in ["first", "second"] {
        wait_for(&agent, name, "Pending", Duration::from_secs(1), |p| {
            phase(p) == "Pending"
        })
        .await;
    }
    // "first" goes away while its sandbox is still being made: the kill waits for that
    // call, then removes what it made; "second" runs, and reports Running without
    // waiting for a (slow) relist.
    send(&agent, vec![pod(&named("second"))]).await;
    let started = tokio::time::Instant::now();
    wait_for(&agent, "second", "Running", Duration::from_secs(8), |p| {
        phase(p) == "Running"
    })
    .await;
    // 5 s of sandbox, then one read back through the slow lists: not after the other
    // pod's calls, nor a relist's.
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "Running {:?} after the pods were sent",
        started.elapsed() + Duration::from_secs(1)
    );
    let one_pod = || agent.ctx.statuses.pods().len() == 1;
    let left = Duration::from_secs(60).saturating_sub(started.elapsed());
    until_counts(&sim, (1, 1), one_pod, "first not removed", left).await;
    agent.shutdown().await;
}
