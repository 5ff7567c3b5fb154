//! In-place pod resize against the in-process CRI simulator, pods coming from the API
//! server's source: a resize that fits is allocated and applied to the running container
//! without a restart (UpdateContainerResources; status `allocatedResources` and
//! `resources`); one beyond the node stays `Infeasible` and the pod runs on; one whose
//! `resizePolicy` asks for it restarts the container. Time is paused.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use support::*;
use wasmlet_agent::agent::Agent;
use wasmlet_cri::CriRuntime;
use wasmlet_cri_sim::Simulator;
use wasmlet_plugin_host::source::SourcePod;

/// An API pod `rz` whose container `c` asks for `cpu` / `memory` (requests half the
/// limits), with `resizePolicy` entries `policy` (resource, RestartContainer).
fn api_pod(cpu_milli: u64, memory_mi: u64, restart_on: Option<&str>) -> SourcePod {
    let policy = restart_on.map_or(String::new(), |r| {
        format!(r#","resizePolicy":[{{"resourceName":"{r}","restartPolicy":"RestartContainer"}}]"#)
    });
    let json = format!(
        r#"{{"metadata":{{"name":"rz","namespace":"default","uid":"11111111-2222-3333-4444-555555555555"}},
        "spec":{{"containers":[{{"name":"c","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent","command":["sleep","3600"],
        "resources":{{"requests":{{"cpu":"{}m","memory":"{}Mi"}},"limits":{{"cpu":"{cpu_milli}m","memory":"{memory_mi}Mi"}}}}{policy}}}]}}}}"#,
        cpu_milli / 2,
        memory_mi / 2,
    );
    let mut pod: k8s::Pod = serde_json::from_str(&json).expect("pod");
    wasmlet_core::pod::make_api(&mut pod);
    SourcePod {
        origin: "api".into(),
        pod,
    }
}

async fn send_api(agent: &Agent<Simulator>, pod: SourcePod) {
    send_from(agent, "api", vec![pod]).await;
}

fn resources(p: &k8s::Pod) -> (Option<String>, Option<String>) {
    let c = container(p, "c");
    let limits = c.resources.and_then(|r| r.limits).unwrap_or_default();
    let allocated = c.allocated_resources.unwrap_or_default();
    (
        limits.get("cpu").map(|q| q.0.clone()),
        allocated.get("cpu").map(|q| q.0.clone()),
    )
}

/// The simulated container's CPU quota and memory limit as the runtime holds them.
async fn runtime_limits(sim: &Simulator, p: &k8s::Pod) -> (i64, i64) {
    let id = container(p, "c").container_id.expect("id");
    let id = id.split("://").nth(1).expect("runtime://id");
    let status = sim.container_status(id, false).await.expect("status");
    let linux = status
        .status
        .and_then(|s| s.resources)
        .and_then(|r| r.linux)
        .expect("resources");
    (linux.cpu_quota, linux.memory_limit_in_bytes)
}

fn pending(p: &k8s::Pod) -> Option<(String, String)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodResizePending")
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

#[tokio::test(start_paused = true)]
async fn a_resize_that_fits_is_applied_in_place_and_one_beyond_the_node_waits() {
    let (sim, agent) = start("resize");
    send_api(&agent, api_pod(200, 128, None)).await;
    let p = wait_for(&agent, "rz", "Running", Duration::from_secs(10), |p| {
        phase(p) == "Running"
    })
    .await;
    assert_eq!(resources(&p), (Some("200m".into()), Some("100m".into())));
    assert_eq!(runtime_limits(&sim, &p).await, (20_000, 128 << 20));
    let first = container(&p, "c").container_id;
    send_api(&agent, api_pod(400, 256, None)).await;
    let p = wait_for(&agent, "rz", "resized", Duration::from_secs(10), |p| {
        resources(p) == (Some("400m".into()), Some("200m".into()))
    })
    .await;
    assert_eq!(runtime_limits(&sim, &p).await, (40_000, 256 << 20));
    let c = container(&p, "c");
    assert_eq!(
        (c.container_id, c.restart_count),
        (first, 0),
        "resized, not restarted"
    );
    assert_eq!(pending(&p), None);
    // More CPU than the node has (4): infeasible; the pod runs on as it was.
    send_api(&agent, api_pod(10_000, 256, None)).await;
    let p = wait_for(&agent, "rz", "pending", Duration::from_secs(10), |p| {
        pending(p).is_some()
    })
    .await;
    assert_eq!(
        pending(&p),
        Some((
            "Infeasible".into(),
            "Node didn't have enough capacity: cpu, requested: 5000, capacity: 4000".into()
        ))
    );
    assert_eq!(resources(&p), (Some("400m".into()), Some("200m".into())));
    assert_eq!(runtime_limits(&sim, &p).await, (40_000, 256 << 20));
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_resize_policy_of_restart_container_restarts_it_with_the_new_resources() {
    let (sim, agent) = start("resize-restart");
    send_api(&agent, api_pod(200, 128, Some("memory"))).await;
    let p = wait_for(&agent, "rz", "Running", Duration::from_secs(10), |p| {
        phase(p) == "Running"
    })
    .await;
    let first = container(&p, "c").container_id;
    send_api(&agent, api_pod(200, 256, Some("memory"))).await;
    let p = wait_for(&agent, "rz", "restarted", Duration::from_secs(30), |p| {
        let c = container(p, "c");
        c.restart_count == 1 && c.state.and_then(|s| s.running).is_some()
    })
    .await;
    assert_ne!(container(&p, "c").container_id, first);
    assert_eq!(runtime_limits(&sim, &p).await, (20_000, 256 << 20));
    agent.shutdown().await;
}
