//! Restarts against the in-process CRI simulator, as the kubelet restarts: a crash loop
//! backs off 10, 20, 40 s; a failing liveness or startup probe kills the container (with
//! the probe's own grace period) and it starts again; a container a probe keeps killing
//! backs off too. Time is paused: back-off and grace periods pass in milliseconds.

mod support;

use std::time::Duration;

use support::*;
use wasmlet_cri::CriRuntime;

#[tokio::test(start_paused = true)]
async fn a_crash_loop_backs_off_10_20_40_seconds() {
    let (sim, agent, events) = start_recording("crash");
    send(
        &agent,
        vec![pod(
            r#"{"metadata":{"name":"crasher"},"spec":{"containers":[
            {"name":"c","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent",
             "command":["sh","-c","sleep 1; exit 1"]}]}}"#,
        )],
    )
    .await;
    // Record when each instance starts (from the runtime's ContainerStatus).
    let mut starts: Vec<i64> = Vec::new();
    let begun = tokio::time::Instant::now();
    while starts.len() < 5 && begun.elapsed() < Duration::from_secs(200) {
        let list = sim.list_containers(None).await.expect("list");
        for c in list {
            let st = sim
                .container_status(&c.id, false)
                .await
                .expect("status")
                .status
                .expect("status");
            if st.started_at > 0 && !starts.contains(&st.started_at) {
                starts.push(st.started_at);
            }
        }
        starts.sort();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(starts.len() >= 5, "only {} starts", starts.len());
    // Each instance runs 1 s; the waits between its exit and the next start:
    let gaps: Vec<f64> = starts
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64 / 1e9 - 1.0)
        .collect();
    let expected = [0.0, 10.0, 20.0, 40.0];
    for (gap, want) in gaps.iter().zip(expected) {
        assert!(
            (gap - want).abs() < 0.2,
            "restart gaps {gaps:?}, want {expected:?} (within 0.2 s)"
        );
    }
    let p = wait_for(
        &agent,
        "crasher",
        "in CrashLoopBackOff",
        Duration::from_secs(30),
        |p| {
            container(p, "c")
                .state
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .is_some_and(|w| w.reason.as_deref() == Some("CrashLoopBackOff"))
        },
    )
    .await;
    let c = container(&p, "c");
    assert!(c.restart_count >= 4, "{c:?}");
    let last = c.last_state.and_then(|s| s.terminated).expect("last state");
    assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
    assert_eq!(phase(&p), "Running");
    // Garbage collection keeps at most one dead container per name.
    assert!(sim.counts().1 <= 2, "{:?}", sim.counts());
    // The events `kubectl describe pod` would list.
    let reasons = events.reasons("crasher-node-crash");
    assert_eq!(
        reasons[..3],
        ["Pulled", "Created", "Started"],
        "image present, then the container: {reasons:?}"
    );
    let back_off = events
        .events()
        .into_iter()
        .find(|e| e.reason == "BackOff")
        .expect("a BackOff event");
    assert_eq!(back_off.kind, wasmlet_agent::events::Kind::Warning);
    assert_eq!(back_off.field_path.as_deref(), Some("spec.containers{c}"));
    assert!(
        back_off.message.starts_with(
            "Back-off restarting failed container c in pod crasher-node-crash_default("
        ),
        "{}",
        back_off.message
    );
    agent.shutdown().await;
}

/// Pod `live`: container `c` (PID 1 ignoring SIGTERM) whose exec liveness probe, every
/// 2 s with a failure threshold of 2, fails from 5 s on; the pod's grace period
/// `pod_grace`, the probe's own `probe_grace`.
fn failing_liveness(
    pod_grace: u32,
    probe_grace: Option<u32>,
) -> wasmlet_plugin_host::source::SourcePod {
    let mut p = pod(
        r#"{"metadata":{"name":"live","annotations":{"sim.wasmlet.io/script.c":"exec-fail-after=5s"}},"spec":{"containers":[
        {"name":"c","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent","command":["sleep","3600"],
         "livenessProbe":{"exec":{"command":["cat","/tmp/healthy"]},"periodSeconds":2,"failureThreshold":2}}]}}"#,
    );
    let spec = p.pod.spec.as_mut().expect("spec");
    spec.termination_grace_period_seconds = Some(pod_grace.into());
    if let Some(probe) = spec.containers[0].liveness_probe.as_mut() {
        probe.termination_grace_period_seconds = probe_grace.map(i64::from);
    }
    p
}

/// A liveness probe with a `terminationGracePeriodSeconds` of its own: the kill after it
/// fails waits that long for the container (which ignores SIGTERM), not the pod's 600 s.
#[tokio::test(start_paused = true)]
async fn a_probe_s_own_grace_period_ends_its_kill() {
    let (_sim, agent, _events) = start_recording("probe-grace");
    send(&agent, vec![failing_liveness(600, Some(3))]).await;
    // Fails from 5 s on; two failures 2 s apart; then the probe's 3 s.
    wait_for(&agent, "live", "restarted", Duration::from_secs(20), |p| {
        container(p, "c").restart_count >= 1
    })
    .await;
    agent.shutdown().await;
}

/// A startup probe that fails (threshold 1) restarts the container at once, with the
/// probe's own grace period — not at the next periodic sync a minute later (the e2e_node
/// spec "should override timeoutGracePeriodSeconds when StartupProbe field is set").
#[tokio::test(start_paused = true)]
async fn a_failing_startup_probe_restarts_the_container_at_once() {
    let (_sim, agent, events) = start_recording("startup");
    let p = pod(
        r#"{"metadata":{"name":"live","annotations":{"sim.wasmlet.io/script.c":"exec-fail-after=0s"}},"spec":{
        "terminationGracePeriodSeconds":600,"containers":[
        {"name":"c","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent","command":["sleep","3600"],
         "startupProbe":{"exec":{"command":["cat","/tmp/startup"]},"initialDelaySeconds":2,"failureThreshold":1,
                         "terminationGracePeriodSeconds":3}}]}}"#,
    );
    send(&agent, vec![p]).await;
    // The first check fails 2 s after the start; then the probe's 3 s.
    wait_for(&agent, "live", "restarted", Duration::from_secs(10), |p| {
        container(p, "c").restart_count >= 1
    })
    .await;
    assert!(
        events.events().iter().any(|e| e.reason == "Killing"
            && e.message == "Container c failed startup probe, will be restarted"),
        "{:?}",
        events.events()
    );
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_failing_liveness_probe_restarts_the_container() {
    let (_sim, agent, events) = start_recording("liveness");
    send(&agent, vec![failing_liveness(3, None)]).await;
    // Fails from 5 s on; two failures 2 s apart; then a 3 s grace period.
    let p = wait_for(&agent, "live", "restarted", Duration::from_secs(15), |p| {
        container(p, "c").restart_count >= 1
    })
    .await;
    let c = container(&p, "c");
    assert!(
        c.state.as_ref().and_then(|s| s.running.as_ref()).is_some(),
        "{c:?}"
    );
    let said: Vec<(String, String)> = events
        .events()
        .into_iter()
        .filter(|e| matches!(e.reason.as_str(), "Unhealthy" | "Killing"))
        .map(|e| (e.reason, e.message))
        .collect();
    assert!(
        said.iter()
            .any(|(r, m)| r == "Unhealthy" && m.starts_with("Liveness probe failed: ")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|(r, m)| r == "Killing"
                && m == "Container c failed liveness probe, will be restarted"),
        "{said:?}"
    );
    agent.shutdown().await;
}

/// A container its liveness probe kills again and again backs off as the kubelet's does:
/// each restart measures from the instance that exited before the one just killed, so
/// the first two restarts are at once and the later ones wait 10, 20, 40 s, with
/// CrashLoopBackOff shown — not a restart every probe cycle for ever.
#[tokio::test(start_paused = true)]
async fn a_container_its_liveness_probe_keeps_killing_backs_off() {
    let (sim, agent, events) = start_recording("liveness-backoff");
    send(&agent, vec![failing_liveness(1, None)]).await;
    let begun = tokio::time::Instant::now();
    let mut starts: Vec<i64> = Vec::new();
    let mut backed_off = false;
    while begun.elapsed() < Duration::from_secs(150) {
        for c in sim.list_containers(None).await.expect("list") {
            let st = sim.container_status(&c.id, false).await.expect("status");
            let started = st.status.expect("status").started_at;
            if started > 0 && !starts.contains(&started) {
                starts.push(started);
            }
        }
        backed_off |= agent.ctx.statuses.pods().iter().any(|p| {
            container(p, "c")
                .state
                .and_then(|s| s.waiting)
                .is_some_and(|w| w.reason.as_deref() == Some("CrashLoopBackOff"))
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    starts.sort();
    let gaps: Vec<f64> = starts
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64 / 1e9)
        .collect();
    // Each instance runs 4 s before its kill. Kills 1 and 2 restart at once (no
    // instance had exited before the first; the first exited 4 s before the second,
    // past no back-off yet); from the third on, the wait counts from the kill: 10, 20,
    // 40 s. Without the back-off: a start every 4 s, 38 in 150 s.
    let want = [4.0, 4.0, 14.0, 24.0, 44.0];
    assert_eq!(gaps.len(), want.len(), "gaps {gaps:?}, want {want:?}");
    for (gap, want) in gaps.iter().zip(want) {
        assert!((gap - want).abs() < 0.5, "gaps {gaps:?}, want {want:?}");
    }
    assert!(backed_off, "the container showed CrashLoopBackOff");
    assert!(
        events
            .reasons("live-node-liveness-backoff")
            .contains(&"BackOff".to_owned())
    );
    agent.shutdown().await;
}
