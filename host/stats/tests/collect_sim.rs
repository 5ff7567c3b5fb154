//! Where a pod's usage comes from when the agent cannot read its pod cgroup: the
//! runtime's `ListPodSandboxStats` (asked with the pod's UID label) for a pod whose
//! sandbox was given a cgroup parent, the sum of its containers for one without; a
//! runtime that cannot measure a sandbox is asked again only after a minute.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use wasmlet_cri::CriRuntime;
use wasmlet_cri::proto::{
    ContainerConfig, ContainerMetadata, ImageSpec, LinuxPodSandboxConfig, PodSandboxConfig,
    PodSandboxMetadata,
};
use wasmlet_cri::recording::Recorder;
use wasmlet_cri_sim::Simulator;
use wasmlet_stats::cgroup::Cgroups;
use wasmlet_stats::node::NodeFiles;
use wasmlet_stats::{Collector, CollectorSettings, ContainerRef, PodInfo, PodLister};

struct Pods(Mutex<Vec<PodInfo>>);

impl PodLister for Pods {
    fn pods(&self) -> Vec<PodInfo> {
        self.0.lock().map(|p| p.clone()).unwrap_or_default()
    }
}

/// Runs pod `uid` with one sleeping container, its sandbox given `parent` as cgroup
/// parent (or none); the pod as the collector is told of it.
async fn run(sim: &Simulator, uid: &str, parent: Option<&str>) -> PodInfo {
    let config = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: uid.into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        labels: BTreeMap::from([("io.kubernetes.pod.uid".to_owned(), uid.to_owned())]),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: parent.unwrap_or_default().to_owned(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let sandbox = sim
        .run_pod_sandbox(config.clone(), "")
        .await
        .expect("RunPodSandbox");
    let container = ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "app".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: "localhost/busybox:latest".into(),
            ..Default::default()
        }),
        command: vec!["sleep".into(), "3600".into()],
        ..Default::default()
    };
    let id = sim
        .create_container(&sandbox, container, config)
        .await
        .expect("CreateContainer");
    sim.start_container(&id).await.expect("StartContainer");
    PodInfo {
        uid: uid.into(),
        name: uid.into(),
        namespace: "default".into(),
        containers: vec![ContainerRef {
            id,
            name: "app".into(),
            ..Default::default()
        }],
        cgroup: parent.map(str::to_owned),
        ..Default::default()
    }
}

#[tokio::test]
async fn pods_whose_cgroup_the_agent_cannot_read_are_measured_by_the_runtime() {
    let sim = Simulator::new();
    let measured = run(&sim, "given", Some("/wasmlet/podgiven")).await;
    let summed = run(&sim, "bare", None).await;
    let pods = Arc::new(Pods(Mutex::new(vec![measured, summed])));
    // A cgroup filesystem with nothing of these pods in it.
    let empty = std::env::temp_dir().join(format!("wasmlet-collect-sim-{}", std::process::id()));
    std::fs::create_dir_all(&empty).expect("dir");
    let settings = CollectorSettings {
        node_name: "node".into(),
        root_dir: empty.clone(),
        files: NodeFiles {
            cgroups: Some(Cgroups::at(&empty, true)),
            ..NodeFiles::default()
        },
        system_containers: Vec::new(),
    };
    let runtime = Arc::new(Recorder::new(sim.clone()));
    let mut collector = Collector::new(runtime.clone(), pods.clone(), settings);
    let sample = collector.collect().await;
    let given = sample.summary.pod("default", "given").expect("given");
    assert_eq!(
        given.memory.as_ref().and_then(|m| m.working_set_bytes),
        Some(4 << 20),
        "the sandbox's memory, as the runtime measures it"
    );
    assert_eq!(
        given.process_stats.as_ref().and_then(|p| p.process_count),
        Some(2),
        "its container's process and the sandbox's"
    );
    let net = given.network.as_ref().expect("the sandbox's network");
    assert_eq!(net.default.name, "eth0");
    assert_eq!(net.interfaces.len(), 1);
    assert!(
        given
            .cpu
            .as_ref()
            .is_some_and(|c| c.usage_core_nano_seconds.is_some())
    );
    let bare = sample.summary.pod("default", "bare").expect("bare");
    assert_eq!(
        bare.memory.as_ref().and_then(|m| m.working_set_bytes),
        Some(4 << 20),
        "the sum of its containers"
    );
    assert!(
        bare.network.is_none(),
        "the runtime cannot measure it either"
    );
    assert_eq!(
        runtime.count("ListPodSandboxStats"),
        1,
        "asked for the pod with a cgroup parent only"
    );

    // A pod the runtime fails to measure (its sandbox has no cgroup parent, though the
    // agent thinks it has one): left to its containers, and not asked again this minute.
    let mut odd = run(&sim, "odd", None).await;
    odd.cgroup = Some("/wasmlet/pododd".into());
    pods.0.lock().expect("pods").push(odd);
    let sample = collector.collect().await;
    let odd = sample.summary.pod("default", "odd").expect("odd");
    assert_eq!(
        odd.memory.as_ref().and_then(|m| m.working_set_bytes),
        Some(4 << 20)
    );
    assert!(odd.network.is_none());
    assert!(
        sample
            .summary
            .pod("default", "given")
            .and_then(|p| p.network.as_ref())
            .is_some(),
        "one pod's failure is its own"
    );
    runtime.clear();
    collector.collect().await;
    assert_eq!(
        runtime.count("ListPodSandboxStats"),
        1,
        "the pod it failed to measure is not asked for again within the minute"
    );
    let _ = std::fs::remove_dir_all(&empty);
}
