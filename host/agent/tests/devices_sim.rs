//! Device plugins on the agent, against the in-process CRI simulator and a real device
//! plugin on a unix socket: a pod asking for devices is given them at admission and its
//! container is created with what the plugin answered (environment and mounts); a pod
//! asking for more than the node has free is rejected as the kubelet rejects it; the
//! devices of a pod that is gone are given to the next. Real time: the plugin's calls
//! are real socket I/O.

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::*;
use wasmlet_agent::agent::{Agent, AgentOptions};
use wasmlet_cri_sim::Simulator;
use wasmlet_devices::testing::{self, Behaviour, TestPlugin};

const GPU: &str = "example.com/gpu";

fn gpu_pod(name: &str, gpus: u32) -> String {
    format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"default","uid":"uid-{name}"}},
        "spec":{{"containers":[{{"name":"app","image":"localhost/busybox:latest",
        "imagePullPolicy":"IfNotPresent","command":["sleep","3600"],
        "env":[{{"name":"MODE","value":"mine"}}],
        "resources":{{"limits":{{"{GPU}":"{gpus}"}},"requests":{{"{GPU}":"{gpus}"}}}}}}]}}}}"#
    )
}

#[tokio::test]
async fn a_pod_gets_its_devices_and_one_asking_for_too_many_is_rejected() {
    let base = options("devices");
    let dir = base.root_dir.join("device-plugins");
    let manager = testing::serve_manager(&dir);
    let plugin = TestPlugin::serve(
        &dir,
        "gpu",
        &[("0", true), ("1", true)],
        Behaviour::default(),
    );
    plugin.register(&dir, GPU).await.expect("registers");
    testing::until_counts(&manager, GPU, (Some(2), Some(2))).await;

    let sim = Arc::new(Simulator::new());
    let agent = Agent::start(
        sim.clone(),
        AgentOptions {
            devices: Some(manager.clone()),
            ..base
        },
        Arc::new(ExecChecker),
        None,
        None,
    );
    send(
        &agent,
        vec![pod(&gpu_pod("first", 1)), pod(&gpu_pod("greedy", 2))],
    )
    .await;
    wait_for(&agent, "first", "Running", Duration::from_secs(10), |p| {
        phase(p) == "Running"
    })
    .await;
    let greedy = wait_for(&agent, "greedy", "rejected", Duration::from_secs(10), |p| {
        phase(p) == "Failed"
    })
    .await;
    let status = greedy.status.expect("status");
    assert_eq!(status.reason.as_deref(), Some("UnexpectedAdmissionError"));
    assert_eq!(
        status.message.as_deref(),
        Some(
            "Pod was rejected: Allocate failed due to requested number of devices unavailable for example.com/gpu. Requested: 2, Available: 1, which is unexpected"
        )
    );

    let config = sim.container_config("app").expect("the app was created");
    let envs: Vec<(&str, &str)> = config
        .envs
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect();
    let given = plugin.allocated();
    assert_eq!(
        given.len(),
        1,
        "one Allocate, for the admitted pod: {given:?}"
    );
    let id = &given[0][0];
    assert!(envs.contains(&("TEST_DEVICES", id.as_str())), "{envs:?}");
    let mine = envs.iter().position(|e| *e == ("MODE", "mine"));
    let device = envs.iter().position(|e| e.0 == "TEST_DEVICES");
    assert!(
        device < mine,
        "the plugin's variables come before the container's own: {envs:?}"
    );
    assert_eq!(config.mounts[0].container_path, format!("/devices/{id}"));
    agent.shutdown().await;
}
