//! The eviction manager on scripted samples, with paused time.

use std::time::Duration;

use tokio::time::Instant;

use super::rank::Requests;
use super::*;
use crate::summary::{
    ContainerStats, FsStats, MemoryStats, NodeStats, PodReference, PodStats, RlimitStats,
};

const MI: u64 = 1 << 20;

fn pod(uid: &str, priority: i32, request_mi: Option<u64>) -> PodFacts {
    PodFacts {
        uid: uid.into(),
        name: uid.into(),
        namespace: "default".into(),
        priority,
        critical: false,
        grace: Duration::from_secs(30),
        containers: vec![Requests {
            name: "app".into(),
            memory: request_mi.map(|m| (m * MI, format!("{m}Mi"))),
            ephemeral_storage: None,
        }],
    }
}

fn usage(uid: &str, mi: u64) -> PodStats {
    let mem = MemoryStats {
        working_set_bytes: Some(mi * MI),
        ..Default::default()
    };
    PodStats {
        pod_ref: PodReference {
            name: uid.into(),
            namespace: "default".into(),
            uid: uid.into(),
        },
        containers: vec![ContainerStats {
            name: "app".into(),
            memory: Some(mem.clone()),
            ..Default::default()
        }],
        memory: Some(mem),
        ephemeral_storage: Some(FsStats {
            used_bytes: Some(mi * MI),
            inodes_used: Some(mi),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A node with 4 GiB of which `available_mi` is left, and the pods' usage.
fn sample(available_mi: u64, pods: Vec<PodStats>) -> Summary {
    Summary {
        node: NodeStats {
            memory: Some(MemoryStats {
                available_bytes: Some(available_mi * MI),
                working_set_bytes: Some(4096 * MI - available_mi * MI),
                ..Default::default()
            }),
            fs: Some(FsStats {
                available_bytes: Some(50 << 30),
                capacity_bytes: Some(100 << 30),
                inodes_free: Some(900_000),
                inodes: Some(1_000_000),
                ..Default::default()
            }),
            rlimit: Some(RlimitStats {
                maxpid: Some(4_194_304),
                curproc: Some(300),
                ..Default::default()
            }),
            ..Default::default()
        },
        pods,
    }
}

#[tokio::test(start_paused = true)]
async fn memory_pressure_evicts_the_pod_above_its_requests_and_never_a_critical_one() {
    let mut m = Manager::new(Config::default());
    let mut critical = pod("static", 0, None);
    critical.critical = true;
    let pods = vec![
        pod("besteffort", 0, None),
        pod("burstable", 0, Some(1024)),
        critical,
    ];
    let s = sample(
        50,
        vec![
            usage("besteffort", 300),
            usage("burstable", 500),
            usage("static", 2048),
        ],
    );
    let d = m.synchronize(Instant::now(), &s, &pods);
    assert_eq!(d.pressure, [Pressure::Memory].into());
    let e = d.evict.expect("an eviction");
    assert_eq!(e.uid, "besteffort");
    assert_eq!(e.grace, Duration::ZERO, "a hard threshold gives no grace");
    assert_eq!(
        e.message,
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
         Container app was using 300Mi, request is 0, has larger consumption of memory. "
    );
}

#[tokio::test(start_paused = true)]
async fn lower_priority_goes_first_among_pods_above_requests() {
    let mut m = Manager::new(Config::default());
    let pods = vec![pod("high", 1000, Some(100)), pod("low", -10, Some(100))];
    let s = sample(10, vec![usage("high", 900), usage("low", 200)]);
    let d = m.synchronize(Instant::now(), &s, &pods);
    assert_eq!(d.evict.expect("eviction").uid, "low");
    // Within requests: the pod above them goes first whatever its priority.
    let pods = vec![
        pod("within", -10, Some(1000)),
        pod("above", 1000, Some(100)),
    ];
    let s = sample(10, vec![usage("within", 900), usage("above", 200)]);
    let d = Manager::new(Config::default()).synchronize(Instant::now(), &s, &pods);
    assert_eq!(d.evict.expect("eviction").uid, "above");
}

#[tokio::test(start_paused = true)]
async fn the_condition_clears_only_after_the_transition_period() {
    let mut m = Manager::new(Config::default());
    let pods = vec![pod("a", 0, None)];
    assert!(
        m.synchronize(Instant::now(), &sample(50, vec![usage("a", 10)]), &pods)
            .pressure
            .contains(&Pressure::Memory)
    );
    // Memory is back: no eviction, but the condition holds for 5 minutes.
    tokio::time::advance(Duration::from_secs(10)).await;
    let d = m.synchronize(Instant::now(), &sample(2000, vec![usage("a", 10)]), &pods);
    assert!(d.evict.is_none());
    assert!(d.pressure.contains(&Pressure::Memory));
    tokio::time::advance(Duration::from_secs(280)).await;
    let d = m.synchronize(Instant::now(), &sample(2000, vec![]), &pods);
    assert!(
        d.pressure.contains(&Pressure::Memory),
        "290 s after: still on"
    );
    tokio::time::advance(Duration::from_secs(20)).await;
    let d = m.synchronize(Instant::now(), &sample(2000, vec![]), &pods);
    assert!(d.pressure.is_empty(), "310 s after: off");
}

#[tokio::test(start_paused = true)]
async fn a_soft_threshold_waits_for_its_grace_and_caps_the_pods_grace() {
    let thresholds = thresholds::parse(
        Some(&[("memory.available".to_owned(), "100Mi".to_owned())].into()),
        Some(&[("memory.available".to_owned(), "1Gi".to_owned())].into()),
        Some(&[("memory.available".to_owned(), "30s".to_owned())].into()),
        Some(&[("memory.available".to_owned(), "200Mi".to_owned())].into()),
    )
    .expect("thresholds");
    let mut m = Manager::new(Config {
        thresholds,
        transition: DEFAULT_TRANSITION,
        max_pod_grace: Duration::from_secs(10),
    });
    let pods = vec![pod("a", 0, None)];
    let d = m.synchronize(Instant::now(), &sample(900, vec![usage("a", 600)]), &pods);
    assert!(
        d.pressure.contains(&Pressure::Memory),
        "the condition is at once"
    );
    assert!(d.evict.is_none(), "the eviction waits for the grace period");
    tokio::time::advance(Duration::from_secs(20)).await;
    // Above 1Gi, but not above 1Gi + the minimum reclaim: still met.
    let d = m.synchronize(Instant::now(), &sample(1100, vec![usage("a", 600)]), &pods);
    assert!(d.evict.is_none());
    tokio::time::advance(Duration::from_secs(10)).await;
    let d = m.synchronize(Instant::now(), &sample(1100, vec![usage("a", 600)]), &pods);
    let e = d.evict.expect("evicted after 30 s");
    assert_eq!(
        e.grace,
        Duration::from_secs(10),
        "evictionMaxPodGracePeriod"
    );
    assert!(e.message.starts_with(
        "The node was low on resource: memory. Threshold quantity: 1Gi, available: 1100Mi. "
    ));
    // Back above the threshold plus the reclaim: resolved, the grace clock restarts.
    let d = m.synchronize(Instant::now(), &sample(1300, vec![]), &pods);
    assert!(d.evict.is_none());
    let d = m.synchronize(Instant::now(), &sample(900, vec![usage("a", 600)]), &pods);
    assert!(d.evict.is_none(), "met again: a new grace period");
}

#[tokio::test(start_paused = true)]
async fn disk_pressure_reclaims_at_node_level_before_evicting() {
    let mut m = Manager::new(Config::default());
    let pods = vec![pod("small", 0, None), pod("big", 0, None)];
    let mut s = sample(2000, vec![usage("small", 10), usage("big", 900)]);
    if let Some(fs) = s.node.fs.as_mut() {
        fs.available_bytes = Some(5 << 30);
    }
    let d = m.synchronize(Instant::now(), &s, &pods);
    assert_eq!(d.pressure, [Pressure::Disk].into());
    assert_eq!(d.reclaim, Some(Signal::NodeFsAvailable));
    assert!(d.evict.is_none());
    m.reclaimed(Signal::NodeFsAvailable);
    let d = m.synchronize(Instant::now(), &s, &pods);
    let e = d.evict.expect("still short after the reclaim");
    assert_eq!(e.uid, "big");
    assert!(
        e.message.starts_with(
            "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 5Gi. "
        ),
        "{}",
        e.message
    );
}

#[tokio::test(start_paused = true)]
async fn pid_pressure_ranks_by_processes() {
    let thresholds = thresholds::parse(
        Some(&[("pid.available".to_owned(), "10%".to_owned())].into()),
        None,
        None,
        None,
    )
    .expect("thresholds");
    let mut m = Manager::new(Config {
        thresholds,
        ..Config::default()
    });
    let mut forky = usage("forky", 10);
    forky.process_stats = Some(crate::summary::ProcessStats {
        process_count: Some(5000),
    });
    let mut calm = usage("calm", 10);
    calm.process_stats = Some(crate::summary::ProcessStats {
        process_count: Some(3),
    });
    let mut s = sample(2000, vec![calm, forky]);
    if let Some(r) = s.node.rlimit.as_mut() {
        r.maxpid = Some(10_000);
        r.curproc = Some(9_500);
    }
    let pods = vec![pod("calm", 0, None), pod("forky", 0, None)];
    let d = m.synchronize(Instant::now(), &s, &pods);
    assert_eq!(d.pressure, [Pressure::Pid].into());
    let e = d.evict.expect("eviction");
    assert_eq!(e.uid, "forky");
    assert_eq!(
        e.message,
        "The node was low on resource: pids. Threshold quantity: 1000, available: 500. "
    );
}

#[test]
fn admission_under_pressure_is_the_kubelets() {
    let pod = |json: serde_json::Value| -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(json).expect("pod")
    };
    let best_effort = pod(serde_json::json!({
        "metadata": {"name": "be", "uid": "1", "annotations": {"kubernetes.io/config.source": "api"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }));
    let burstable = pod(serde_json::json!({
        "metadata": {"name": "b", "uid": "2", "annotations": {"kubernetes.io/config.source": "api"}},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"memory": "64Mi"}}}]},
    }));
    let tolerant = pod(serde_json::json!({
        "metadata": {"name": "t", "uid": "3", "annotations": {"kubernetes.io/config.source": "api"}},
        "spec": {"containers": [{"name": "c", "image": "i"}],
                 "tolerations": [{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}]},
    }));
    let static_pod = pod(serde_json::json!({
        "metadata": {"name": "s", "uid": "4", "annotations": {"kubernetes.io/config.source": "file"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }));
    let none = std::collections::BTreeSet::new();
    assert_eq!(admit(&none, &best_effort), None);
    let memory: std::collections::BTreeSet<Pressure> = [Pressure::Memory].into();
    assert_eq!(
        admit(&memory, &best_effort),
        Some((
            "Evicted".to_owned(),
            "The node had condition: [MemoryPressure]. ".to_owned()
        ))
    );
    assert_eq!(admit(&memory, &burstable), None);
    assert_eq!(admit(&memory, &tolerant), None);
    assert_eq!(
        admit(&memory, &static_pod),
        None,
        "critical pods are admitted"
    );
    let disk: std::collections::BTreeSet<Pressure> = [Pressure::Memory, Pressure::Disk].into();
    assert_eq!(
        admit(&disk, &burstable).map(|r| r.1),
        Some("The node had condition: [MemoryPressure DiskPressure]. ".to_owned())
    );
}
