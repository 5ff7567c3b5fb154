//! The runtime's floor: the bare CRI calls a pod needs (RunPodSandbox →
//! CreateContainer → StartContainer), one task per pod, no agent — the least any agent
//! can take on that runtime — and clean-up of what a benchmark node made.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use wasmlet_cri::proto::{
    ContainerConfig, ContainerMetadata, ImageSpec, PodSandboxConfig, PodSandboxFilter,
    PodSandboxMetadata,
};
use wasmlet_cri::{CriClient, CriRuntime};

/// The bare CRI sequence for `n` pods, one task per pod, no agent — the least any agent
/// can take: how long until every StartContainer returned, and per container how long
/// after its process started that was.
pub async fn floor(client: &CriClient, n: usize) -> (Duration, Vec<Duration>) {
    let (took, tails, _) = floor_started(client, n).await;
    (took, tails)
}

/// [`floor`], and how long until the last container's process started (containerd's
/// `startedAt`, read after the clock stopped): what an agent is measured by when its
/// containers' starts are read back from the runtime rather than polled for.
pub async fn floor_started(client: &CriClient, n: usize) -> (Duration, Vec<Duration>, Duration) {
    let node = "bench-floor";
    let started = Instant::now();
    let started_unix = wasmlet_cri::labels::unix_nanos();
    let mut tasks = Vec::new();
    for i in 0..n {
        let c = client.clone();
        tasks.push(tokio::spawn(async move {
            let labels: BTreeMap<String, String> =
                [("wasmlet.io/node".to_string(), node.to_string())]
                    .into_iter()
                    .collect();
            let sandbox = PodSandboxConfig {
                metadata: Some(PodSandboxMetadata {
                    name: format!("floor-{i}"),
                    uid: format!("floor-uid-{i}-{}", std::process::id()),
                    namespace: "bench".into(),
                    attempt: 0,
                }),
                hostname: format!("floor-{i}"),
                labels: labels.clone(),
                ..Default::default()
            };
            let id = c
                .run_pod_sandbox(sandbox.clone(), "")
                .await
                .expect("sandbox");
            let config = ContainerConfig {
                metadata: Some(ContainerMetadata {
                    name: "c".into(),
                    attempt: 0,
                }),
                image: Some(ImageSpec {
                    image: "localhost/busybox:latest".into(),
                    ..Default::default()
                }),
                command: vec!["sleep".into(), "3600".into()],
                labels,
                ..Default::default()
            };
            let cid = c
                .create_container(&id, config, sandbox)
                .await
                .expect("create");
            c.start_container(&cid).await.expect("start");
            (cid, wasmlet_cri::labels::unix_nanos())
        }));
    }
    let mut returned = Vec::new();
    for t in tasks {
        returned.push(t.await.expect("floor task"));
    }
    let took = started.elapsed();
    // How long after its process started StartContainer itself returned: the least any
    // agent can lag behind the runtime (read after the clock stopped).
    let mut tails = Vec::new();
    let mut last_start = started_unix;
    for (cid, at) in returned {
        let status = client.container_status(&cid, false).await.expect("status");
        let started_at = status.status.map_or(at, |s| s.started_at);
        last_start = last_start.max(started_at);
        tails.push(Duration::from_nanos(
            u64::try_from((at - started_at).max(0)).unwrap_or(0),
        ));
    }
    remove_all(client, node).await;
    let all_started = Duration::from_nanos(u64::try_from(last_start - started_unix).unwrap_or(0));
    (took, tails, all_started)
}

/// The sandboxes of benchmark node `node` (by the `wasmlet.io/node` label).
pub async fn sandboxes(client: &CriClient, node: &str) -> Vec<String> {
    let filter = PodSandboxFilter {
        label_selector: [("wasmlet.io/node".to_string(), node.to_string())]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    client
        .list_pod_sandbox(Some(filter))
        .await
        .map(|l| l.into_iter().map(|s| s.id).collect())
        .unwrap_or_default()
}

/// Stops and removes every sandbox of benchmark node `node`.
pub async fn remove_all(client: &CriClient, node: &str) {
    for id in sandboxes(client, node).await {
        let _ = client.stop_pod_sandbox(&id).await;
        let _ = client.remove_pod_sandbox(&id).await;
    }
}
