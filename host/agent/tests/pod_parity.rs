//! Kubelet behaviours the sig-node conformance tests check, against the CRI simulator:
//! a failing subPathExpr that the pod's update fixes, activeDeadlineSeconds, ephemeral
//! containers and the Service variables. Time is paused.

mod support;

use std::time::Duration;

use support::*;

fn waiting_reason(p: &k8s_openapi::api::core::v1::Pod, name: &str) -> Option<(String, String)> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)?
        .state
        .as_ref()?
        .waiting
        .as_ref()
        .map(|w| {
            (
                w.reason.clone().unwrap_or_default(),
                w.message.clone().unwrap_or_default(),
            )
        })
}

const SUBPATH_POD: &str = r#"{"metadata":{"name":"var-expansion","uid":"subpath-1",
    "annotations":{"notmysubpath":"mypath"EXTRA}},"spec":{
    "volumes":[{"name":"workdir1","emptyDir":{}}],
    "containers":[{"name":"dapi-container","image":"localhost/busybox:latest",
      "command":["sh","-c","tail -f /dev/null"],
      "env":[{"name":"POD_NAME","value":"foo"},
             {"name":"ANNOTATION","valueFrom":{"fieldRef":{"fieldPath":"metadata.annotations['mysubpath']"}}}],
      "volumeMounts":[{"name":"workdir1","mountPath":"/subpath_mount","subPathExpr":"$(ANNOTATION)/$(POD_NAME)"},
                      {"name":"workdir1","mountPath":"/volume_mount"}]}]}}"#;

/// `Variable Expansion should verify that a failing subpath expansion can be modified
/// during the lifecycle of a container`: Pending with CreateContainerConfigError while
/// the annotation is missing, Running once an update adds it.
#[tokio::test(start_paused = true)]
async fn a_failing_sub_path_expansion_waits_until_the_pod_is_fixed() {
    let (sim, agent, events) = start_recording("subpath");
    send(&agent, vec![pod(&SUBPATH_POD.replace("EXTRA", ""))]).await;
    let p = wait_for(
        &agent,
        "var-expansion",
        "CreateContainerConfigError",
        Duration::from_secs(5),
        |p| {
            waiting_reason(p, "dapi-container")
                .is_some_and(|(r, _)| r == "CreateContainerConfigError")
        },
    )
    .await;
    assert_eq!(phase(&p), "Pending");
    assert_eq!(
        waiting_reason(&p, "dapi-container")
            .map(|(_, m)| m)
            .as_deref(),
        Some("missing value for ANNOTATION")
    );
    // Still so after a while: retried, never started.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let p = wait_for(
        &agent,
        "var-expansion",
        "Pending",
        Duration::from_secs(1),
        |_| true,
    )
    .await;
    assert_eq!(phase(&p), "Pending");
    assert_eq!(sim.counts().1, 0, "no container was made");
    assert!(
        events
            .events()
            .iter()
            .any(|e| e.reason == "Failed" && e.message == "Error: missing value for ANNOTATION"),
        "the kubelet's event: {:?}",
        events.events()
    );
    send(
        &agent,
        vec![pod(
            &SUBPATH_POD.replace("EXTRA", r#","mysubpath":"mypath""#)
        )],
    )
    .await;
    let p = wait_for(
        &agent,
        "var-expansion",
        "Running",
        Duration::from_secs(15),
        |p| phase(p) == "Running",
    )
    .await;
    assert_eq!(container(&p, "dapi-container").restart_count, 0);
    agent.shutdown().await;
}

/// A container that exited while its configuration could not be made (here a
/// subPathExpr whose annotation went away; on a control-plane node after a reboot, what
/// the API server was to supply) is not crash-looping: the back-off advances when a
/// container is created again, not at each failed configuration, so once the
/// configuration can be made it starts at the next try — not minutes later in
/// CrashLoopBackOff.
#[tokio::test(start_paused = true)]
async fn configuration_errors_do_not_advance_the_crash_loop_back_off() {
    let (_sim, agent, _events) = start_recording("config-backoff");
    let with = |extra: &str| {
        pod(&SUBPATH_POD
            .replace("EXTRA", extra)
            .replace("tail -f /dev/null", "sleep 1; exit 1"))
    };
    send(&agent, vec![with(r#","mysubpath":"mypath""#)]).await;
    wait_for(
        &agent,
        "var-expansion",
        "Running",
        Duration::from_secs(5),
        |p| phase(p) == "Running",
    )
    .await;
    // The annotation goes while the container runs; it exits a second later.
    send(&agent, vec![with("")]).await;
    let broken = tokio::time::Instant::now();
    let mut reasons = Vec::new();
    while broken.elapsed() < Duration::from_secs(150) {
        let pods = agent.ctx.statuses.pods();
        if let Some(p) = pods.iter().find(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("var-expansion"))
        }) && let Some((r, _)) = waiting_reason(p, "dapi-container")
            && reasons.last() != Some(&r)
        {
            reasons.push(r);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(reasons, ["CreateContainerConfigError"]);
    send(&agent, vec![with(r#","mysubpath":"mypath""#)]).await;
    let p = wait_for(
        &agent,
        "var-expansion",
        "restarted",
        Duration::from_secs(11),
        |p| container(p, "dapi-container").restart_count == 1,
    )
    .await;
    assert!(
        waiting_reason(&p, "dapi-container").is_none_or(|(r, _)| r != "CrashLoopBackOff"),
        "{p:?}"
    );
    agent.shutdown().await;
}

const DEADLINE_POD: &str = r#"{"metadata":{"name":"deadline","uid":"deadline-1"},"spec":{DEADLINE
    "containers":[{"name":"main","image":"localhost/busybox:latest","command":["sleep","3600"]}]}}"#;

fn reason_and_message(p: &k8s_openapi::api::core::v1::Pod) -> (String, String) {
    let s = p.status.clone().unwrap_or_default();
    (s.reason.unwrap_or_default(), s.message.unwrap_or_default())
}

/// `Pods should allow activeDeadlineSeconds to be updated`: a running pod whose deadline
/// is set (lower than how long it has run) is stopped and ends Failed with the
/// kubelet's reason and message; one created with a deadline is stopped when it runs
/// out.
#[tokio::test(start_paused = true)]
async fn active_deadline_seconds_stops_the_pod_and_fails_it() {
    let (sim, agent, events) = start_recording("deadline");
    send(&agent, vec![pod(&DEADLINE_POD.replace("DEADLINE", ""))]).await;
    wait_for(&agent, "deadline", "Running", Duration::from_secs(5), |p| {
        phase(p) == "Running"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let p = wait_for(
        &agent,
        "deadline",
        "Running",
        Duration::from_secs(1),
        |_| true,
    )
    .await;
    assert_eq!(phase(&p), "Running", "no deadline, no end");
    // Lowered below how long it has run already: at once.
    send(
        &agent,
        vec![pod(
            &DEADLINE_POD.replace("DEADLINE", r#""activeDeadlineSeconds":5,"#)
        )],
    )
    .await;
    let p = wait_for(&agent, "deadline", "Failed", Duration::from_secs(5), |p| {
        phase(p) == "Failed"
    })
    .await;
    assert_eq!(
        reason_and_message(&p),
        (
            "DeadlineExceeded".to_string(),
            "Pod was active on the node longer than the specified deadline".to_string()
        )
    );
    // Its containers are stopped (within its grace period) and it stays Failed.
    let p = wait_for(
        &agent,
        "deadline",
        "stopped",
        Duration::from_secs(40),
        |p| {
            container(p, "main")
                .state
                .is_some_and(|s| s.terminated.is_some())
        },
    )
    .await;
    assert_eq!(phase(&p), "Failed");
    assert_eq!(
        events
            .events()
            .iter()
            .filter(|e| e.reason == "DeadlineExceeded")
            .count(),
        1
    );
    assert_eq!(sim.counts().1, 1, "kept, not removed, until the pod is");

    // Created with a deadline: it runs until then, not longer.
    let (_sim, agent, _) = start_recording("deadline-new");
    let started = tokio::time::Instant::now();
    send(
        &agent,
        vec![pod(
            &DEADLINE_POD.replace("DEADLINE", r#""activeDeadlineSeconds":30,"#)
        )],
    )
    .await;
    wait_for(&agent, "deadline", "Running", Duration::from_secs(5), |p| {
        phase(p) == "Running"
    })
    .await;
    let p = wait_for(&agent, "deadline", "Failed", Duration::from_secs(40), |p| {
        phase(p) == "Failed"
    })
    .await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(29) && took <= Duration::from_secs(32),
        "{took:?}"
    );
    assert_eq!(reason_and_message(&p).0, "DeadlineExceeded");
    agent.shutdown().await;
}

const EPHEMERAL_POD: &str = r#"{"metadata":{"name":"ephemeral","uid":"ephemeral-1"},"spec":{
    "containers":[{"name":"app","image":"localhost/busybox:latest","command":["sleep","3600"]}]EPHEMERAL}}"#;

fn ephemeral_status(
    p: &k8s_openapi::api::core::v1::Pod,
    name: &str,
) -> Option<k8s_openapi::api::core::v1::ContainerStatus> {
    p.status
        .as_ref()?
        .ephemeral_container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
        .cloned()
}

/// `Ephemeral Containers will start an ephemeral container in an existing pod` and
/// `should update the ephemeral containers in an existing pod`: each new ephemeral
/// container starts once in the running sandbox, beside the app container, is reported
/// in ephemeralContainerStatuses, and is never restarted.
#[tokio::test(start_paused = true)]
async fn ephemeral_containers_start_once_in_the_running_pod() {
    let (sim, agent) = start("ephemeral");
    send(&agent, vec![pod(&EPHEMERAL_POD.replace("EPHEMERAL", ""))]).await;
    let p = wait_for(
        &agent,
        "ephemeral",
        "Running",
        Duration::from_secs(5),
        |p| phase(p) == "Running",
    )
    .await;
    let app_id = container(&p, "app").container_id;
    let debugger = r#","ephemeralContainers":[{"name":"debugger","image":"localhost/busybox:latest",
        "command":["sh","-c","sleep 5; exit 3"],"stdin":true,"tty":true}"#;
    send(
        &agent,
        vec![pod(
            &EPHEMERAL_POD.replace("EPHEMERAL", &format!("{debugger}]"))
        )],
    )
    .await;
    let p = wait_for(
        &agent,
        "ephemeral",
        "debugger running",
        Duration::from_secs(5),
        |p| {
            ephemeral_status(p, "debugger")
                .and_then(|s| s.state)
                .is_some_and(|s| s.running.is_some())
        },
    )
    .await;
    let s = ephemeral_status(&p, "debugger").expect("status");
    assert!(!s.ready, "ephemeral containers are never ready");
    assert_eq!(s.restart_count, 0);
    assert_eq!(container(&p, "app").container_id, app_id, "the app runs on");
    assert_eq!(phase(&p), "Running");
    let config = sim.container_config("debugger").expect("created");
    assert!(
        config.tty && config.stdin,
        "kubectl debug -it attaches to it"
    );
    // It exits: it stays exited, and the pod runs on.
    let p = wait_for(
        &agent,
        "ephemeral",
        "debugger exited",
        Duration::from_secs(20),
        |p| {
            ephemeral_status(p, "debugger")
                .and_then(|s| s.state)
                .is_some_and(|s| s.terminated.is_some_and(|t| t.exit_code == 3))
        },
    )
    .await;
    assert_eq!(phase(&p), "Running");
    // A second one added later starts too; the first is not started again.
    let second = r#",{"name":"debugger2","image":"localhost/busybox:latest","command":["sleep","3600"],
            "targetContainerName":"app"}"#;
    send(
        &agent,
        vec![pod(
            &EPHEMERAL_POD.replace("EPHEMERAL", &format!("{debugger}{second}]"))
        )],
    )
    .await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let p = wait_for(
        &agent,
        "ephemeral",
        "debugger2 running",
        Duration::from_secs(5),
        |p| {
            ephemeral_status(p, "debugger2")
                .and_then(|s| s.state)
                .is_some_and(|s| s.running.is_some())
        },
    )
    .await;
    let first = ephemeral_status(&p, "debugger").expect("first");
    assert!(first.state.is_some_and(|s| s.terminated.is_some()));
    assert_eq!(first.restart_count, 0, "never restarted");
    assert_eq!(sim.counts().1, 3, "app, debugger (exited), debugger2");
    // `kubectl debug --target app`: in the app's process namespace.
    let ns = sim
        .container_config("debugger2")
        .and_then(|c| c.linux)
        .and_then(|l| l.security_context)
        .and_then(|s| s.namespace_options)
        .expect("namespace options");
    assert_eq!(ns.pid, wasmlet_cri::proto::NamespaceMode::Target as i32);
    let app = container(&p, "app").container_id.expect("app id");
    assert!(app.ends_with(&ns.target_id), "{app} vs {}", ns.target_id);
    agent.shutdown().await;
}
