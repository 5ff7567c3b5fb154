//! Taking over a node the kubelet ran: a pod whose sandbox and container the kubelet
//! made — its labels and annotations, its container hash, no `wasmlet.io/node` label — is
//! adopted as it runs: the same container, not restarted, Running. (The way back, the
//! kubelet adopting wasmlet's, rests on the same labels and on the container hash being
//! the kubelet's: `pod::kubelet`'s tests hold it against the upstream kubelet's values.)

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::*;
use wasmlet_agent::agent::Agent;
use wasmlet_core::pod::{self, kubelet};
use wasmlet_cri::CriRuntime;
use wasmlet_cri::proto;
use wasmlet_cri_sim::Simulator;

const WEB: &str = r#"{"metadata":{"name":"web","namespace":"default","uid":"0d3f7a52-kubelet"},
    "spec":{"containers":[{"name":"main","image":"localhost/busybox:latest",
     "imagePullPolicy":"IfNotPresent","command":["sleep","3600"]}]}}"#;

/// Starts the pod as the kubelet would have: its labels and annotations only.
async fn as_the_kubelet_made_it(sim: &Simulator, node: &str) -> String {
    let mut spec = pod(WEB).pod;
    pod::make_static(&mut spec, ("file", "test.yaml"), node, None);
    let (name, ns, uid) = (
        spec.metadata.name.clone().unwrap_or_default(),
        "default".to_owned(),
        pod::uid(&spec).to_owned(),
    );
    let labels = |extra: &[(&str, &str)]| -> Vec<(String, String)> {
        [
            ("io.kubernetes.pod.name", name.as_str()),
            ("io.kubernetes.pod.namespace", ns.as_str()),
            ("io.kubernetes.pod.uid", uid.as_str()),
        ]
        .iter()
        .chain(extra)
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
    };
    let sandbox = proto::PodSandboxConfig {
        metadata: Some(proto::PodSandboxMetadata {
            name: name.clone(),
            uid: uid.clone(),
            namespace: ns.clone(),
            attempt: 0,
        }),
        labels: labels(&[]).into_iter().collect(),
        annotations: [("kubernetes.io/config.source".to_owned(), "file".to_owned())].into(),
        ..Default::default()
    };
    let id = sim
        .run_pod_sandbox(sandbox.clone(), "")
        .await
        .expect("sandbox");
    let c = &spec.spec.as_ref().expect("spec").containers[0];
    let hash = kubelet::container_hash(c).expect("the kubelet's hash");
    let config = proto::ContainerConfig {
        metadata: Some(proto::ContainerMetadata {
            name: "main".into(),
            attempt: 0,
        }),
        image: Some(proto::ImageSpec {
            image: "localhost/busybox:latest".into(),
            ..Default::default()
        }),
        command: vec!["sleep".into(), "3600".into()],
        labels: labels(&[("io.kubernetes.container.name", "main")])
            .into_iter()
            .collect(),
        annotations: [
            ("io.kubernetes.container.hash", hash.as_str()),
            ("io.kubernetes.container.restartCount", "0"),
            (
                "io.kubernetes.container.terminationMessagePath",
                "/dev/termination-log",
            ),
            ("io.kubernetes.container.terminationMessagePolicy", "File"),
            ("io.kubernetes.pod.terminationGracePeriod", "30"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect(),
        ..Default::default()
    };
    let cid = sim
        .create_container(&id, config, sandbox)
        .await
        .expect("container");
    sim.start_container(&cid).await.expect("start");
    cid
}

#[tokio::test(start_paused = true)]
async fn pods_the_kubelet_started_are_adopted_as_they_run() {
    let sim = Arc::new(Simulator::new());
    let opts = options("takeover");
    let made = as_the_kubelet_made_it(&sim, &opts.node.name).await;
    let agent = Agent::start(sim.clone(), opts, Arc::new(ExecChecker), None, None);
    send(&agent, vec![pod(WEB)]).await;
    let running = wait_for(&agent, "web", "Running", Duration::from_secs(5), |p| {
        phase(p) == "Running"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let status = container(&running, "main");
    let id = status.container_id.unwrap_or_default();
    assert!(
        id.ends_with(&format!("://{made}")),
        "the kubelet's container, adopted: {id}"
    );
    assert_eq!(status.restart_count, 0);
    assert_eq!(sim.counts(), (1, 1), "nothing made again");
    agent.shutdown().await;
}
