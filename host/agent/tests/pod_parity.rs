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
