//! Sidecar containers (init containers with `restartPolicy: Always`) against the
//! in-process CRI simulator: started in order, each letting the next init container
//! start once it runs (or once its startup probe passed — readiness checked at once
//! then), restarted whatever the pod's policy, probed with the kubelet's warnings, and
//! stopped after the app containers in reverse order. Time is paused.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use support::*;

/// A pod with two sidecars around a regular init container: `proxy` starts first and
/// keeps running, `setup` runs once it has started, `logs` after it; the app comes last.
/// The app exits (restartPolicy Never): the pod ends, its sidecars stopped after it in
/// reverse order, each waiting for the one declared after it.
const SIDECARS: &str = r#"{"metadata":{"name":"sidecars","annotations":{
      "sim.wasmlet.io/script.proxy":"ignore-term","sim.wasmlet.io/script.logs":"ignore-term",
      "sim.wasmlet.io/script.app":"exit-after=20s"}},
    "spec":{"restartPolicy":"Never","terminationGracePeriodSeconds":10,
    "initContainers":[
      {"name":"proxy","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent","restartPolicy":"Always","command":["sleep","3600"]},
      {"name":"setup","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent","command":["sh","-c","sleep 2"]},
      {"name":"logs","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent","restartPolicy":"Always","command":["sleep","3600"]}],
    "containers":[{"name":"app","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent","command":["sleep","3600"]}]}}"#;

fn init_status(p: &k8s::Pod, name: &str) -> k8s::ContainerStatus {
    p.status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .and_then(|l| l.iter().find(|c| c.name == name).cloned())
        .unwrap_or_else(|| panic!("no init container status {name}"))
}

type Moment = k8s_openapi::jiff::Timestamp;

fn started_at(c: &k8s::ContainerStatus) -> Option<Moment> {
    let state = c.state.as_ref()?;
    let at = match (&state.running, &state.terminated) {
        (Some(r), _) => r.started_at.clone(),
        (_, Some(t)) => t.started_at.clone(),
        _ => None,
    };
    at.map(|t| t.0)
}

fn finished_at(c: &k8s::ContainerStatus) -> Option<Moment> {
    let t = c.state.as_ref()?.terminated.as_ref()?;
    t.finished_at.as_ref().map(|t| t.0)
}

#[tokio::test(start_paused = true)]
async fn sidecars_start_in_order_run_beside_the_app_and_stop_after_it_in_reverse() {
    let (_sim, agent) = start("sidecars");
    send(&agent, vec![pod(SIDECARS)]).await;
    let p = wait_for(
        &agent,
        "sidecars",
        "Running",
        Duration::from_secs(10),
        |p| phase(p) == "Running" && condition(p, "Initialized"),
    )
    .await;
    let (proxy, setup, logs) = (
        init_status(&p, "proxy"),
        init_status(&p, "setup"),
        init_status(&p, "logs"),
    );
    assert!(
        proxy
            .state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .is_some()
    );
    assert_eq!((proxy.started, proxy.ready), (Some(true), true));
    assert!(finished_at(&setup).is_some(), "setup ran to its end");
    assert!(
        started_at(&proxy) <= started_at(&setup),
        "proxy before setup"
    );
    assert!(
        finished_at(&setup) <= started_at(&logs),
        "logs after setup ended"
    );
    assert!(condition(&p, "Ready"), "sidecars and app ready");
    // The app exits: the pod ends, sidecars stopped app first, then logs, then proxy.
    let p = wait_for(
        &agent,
        "sidecars",
        "Succeeded",
        Duration::from_secs(60),
        |p| phase(p) == "Succeeded",
    )
    .await;
    let (app, logs, proxy) = (
        container(&p, "app"),
        init_status(&p, "logs"),
        init_status(&p, "proxy"),
    );
    let (app_end, logs_end, proxy_end) =
        (finished_at(&app), finished_at(&logs), finished_at(&proxy));
    assert!(app_end.is_some() && logs_end.is_some() && proxy_end.is_some());
    assert!(app_end < logs_end, "{app_end:?} {logs_end:?}");
    assert!(
        logs_end < proxy_end,
        "logs waited out, then proxy: {logs_end:?} {proxy_end:?}"
    );
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_sidecar_that_exits_is_restarted_under_restart_policy_never() {
    let (_sim, agent) = start("sidecar-restart");
    send(
        &agent,
        vec![pod(
            r#"{"metadata":{"name":"flaky","annotations":{"sim.wasmlet.io/script.proxy":"exit-after=3s exit-code=1"}},
            "spec":{"restartPolicy":"Never","initContainers":[
              {"name":"proxy","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent","restartPolicy":"Always","command":["sleep","3600"]}],
            "containers":[{"name":"app","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent","command":["sleep","3600"]}]}}"#,
        )],
    )
    .await;
    let p = wait_for(
        &agent,
        "flaky",
        "the sidecar restarted",
        Duration::from_secs(60),
        |p| init_status(p, "proxy").restart_count >= 2,
    )
    .await;
    assert_eq!(
        phase(&p),
        "Running",
        "a restarting sidecar keeps the pod Running"
    );
    assert!(container(&p, "app").state.and_then(|s| s.running).is_some());
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn readiness_is_checked_as_soon_as_the_startup_probe_passes() {
    let (_sim, agent) = start("ready-after-startup");
    send(
        &agent,
        vec![pod(
            r#"{"metadata":{"name":"slow"},"spec":{"initContainers":[
              {"name":"proxy","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent","restartPolicy":"Always","command":["sleep","3600"],
               "startupProbe":{"exec":{"command":["true"]},"initialDelaySeconds":5,"periodSeconds":1},
               "readinessProbe":{"exec":{"command":["true"]},"periodSeconds":60}}],
            "containers":[{"name":"app","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent","command":["sleep","3600"],
               "startupProbe":{"exec":{"command":["true"]},"initialDelaySeconds":5,"periodSeconds":1},
               "readinessProbe":{"exec":{"command":["true"]},"periodSeconds":60}}]}}"#,
        )],
    )
    .await;
    // Started at 5 s each (the app after the sidecar): ready well before a readiness
    // period of 60 s has passed.
    let p = wait_for(&agent, "slow", "Ready", Duration::from_secs(20), |p| {
        condition(p, "Ready")
    })
    .await;
    assert!(init_status(&p, "proxy").ready);
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_probe_that_passes_with_a_warning_says_so_in_an_event_and_restarts_nothing() {
    let (_sim, agent, events) = start_recording("probe-warning");
    send(
        &agent,
        vec![pod(
            r#"{"metadata":{"name":"redirect","annotations":{"probe.wasmlet.io/sidecar.livenessProbe":"answers ok=redirect"}},
            "spec":{"initContainers":[{"name":"sidecar","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent",
              "restartPolicy":"Always","command":["sleep","3600"],"livenessProbe":{"periodSeconds":1,"failureThreshold":1}}],
            "containers":[{"name":"main","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent","command":["sleep","3600"]}]}}"#,
        )],
    )
    .await;
    let p = wait_for(
        &agent,
        "redirect",
        "Running",
        Duration::from_secs(10),
        |p| phase(p) == "Running",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let warned = events
        .events()
        .into_iter()
        .find(|e| e.reason == "ProbeWarning");
    let warned = warned.expect("a ProbeWarning event");
    assert_eq!(warned.kind, wasmlet_agent::events::Kind::Warning);
    assert!(
        warned
            .message
            .starts_with("Liveness probe warning: Probe terminated redirects, Response body: "),
        "{}",
        warned.message
    );
    assert_eq!(init_status(&p, "sidecar").restart_count, 0);
    agent.shutdown().await;
}

/// The e2e_node spec "the image is updated after the restartable init container's
/// startup probe fails": a sidecar whose startup probe fails is restarted; its image
/// changed through the API, its next instance runs the new image, the pod still
/// initializing; the status names the running instance's image until then.
#[tokio::test(start_paused = true)]
async fn a_failing_sidecars_new_image_is_run_at_its_next_restart() {
    let (sim, agent) = start("sidecar-image");
    let sidecar_pod = |image: &str| {
        let json = format!(
            r#"{{"metadata":{{"name":"imgupdate","namespace":"default","uid":"aaaaaaaa-2222-3333-4444-555555555555"}},
            "spec":{{"restartPolicy":"Never","initContainers":[
              {{"name":"first","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent","restartPolicy":"Always","command":["sleep","600"]}},
              {{"name":"second","image":"{image}","imagePullPolicy":"IfNotPresent","restartPolicy":"Always","command":["sleep","600"],
               "startupProbe":{{"exec":{{"command":["false"]}},"initialDelaySeconds":20,"failureThreshold":1}}}}],
            "containers":[{{"name":"app","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent","command":["sleep","1"]}}]}}}}"#
        );
        let mut pod: k8s::Pod = serde_json::from_str(&json).expect("pod");
        wasmlet_core::pod::make_api(&mut pod);
        wasmlet_plugin_host::source::SourcePod {
            origin: "api".into(),
            pod,
        }
    };
    send_from(&agent, "api", vec![sidecar_pod("localhost/busybox:latest")]).await;
    wait_for(
        &agent,
        "imgupdate",
        "restarted once",
        Duration::from_secs(120),
        |p| init_status(p, "second").restart_count >= 1,
    )
    .await;
    send_from(&agent, "api", vec![sidecar_pod("localhost/agnhost:latest")]).await;
    // Until it is created again, the status names the image the instance runs (the
    // runtime's), not the spec's new one — as the kubelet reports it (the e2e_node spec
    // "when the init container is updated with a new image should not restart").
    tokio::time::sleep(Duration::from_secs(2)).await;
    let p = wait_for(
        &agent,
        "imgupdate",
        "listed",
        Duration::from_secs(1),
        |_| true,
    )
    .await;
    let s = init_status(&p, "second");
    assert_eq!(
        (s.restart_count, s.image.as_str()),
        (1, "localhost/busybox:latest")
    );
    let p = wait_for(
        &agent,
        "imgupdate",
        "restarted with the new image",
        Duration::from_secs(120),
        |p| {
            let s = init_status(p, "second");
            s.restart_count >= 2 && s.image == "localhost/agnhost:latest"
        },
    )
    .await;
    assert_eq!(phase(&p), "Pending");
    let created = sim.container_config("second").expect("created");
    assert_eq!(
        created.image.map(|i| i.image).as_deref(),
        Some("localhost/agnhost:latest")
    );
    agent.shutdown().await;
}
