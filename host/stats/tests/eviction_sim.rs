//! Eviction end to end on the simulator: an agent running two API pods, the eviction
//! manager fed a scripted memory climb (a fake sampler), acting through the agent.
//! Exactly one pod — the BestEffort one using the most memory — is evicted, with the
//! status, event and node condition a user sees; new BestEffort pods are refused while
//! the pressure lasts; the condition clears after the transition period.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use wasmlet_agent::agent::{Agent, AgentOptions};
use wasmlet_agent::events::MemoryRecorder;
use wasmlet_agent::node::NodeFacts;
use wasmlet_agent::syncloop::SourceSet;
use wasmlet_agent::testing::NoProbes;
use wasmlet_cri_sim::Simulator;
use wasmlet_plugin_host::source::SourcePod;
use wasmlet_stats::eviction::run::{BoxFuture, Housekeeping, PressureState, Sampler};
use wasmlet_stats::eviction::{self, Pressure};
use wasmlet_stats::summary::{
    ContainerStats, MemoryStats, NodeStats, PodReference, PodStats, Summary,
};
use wasmlet_stats::{Sample, Stats};

const MI: u64 = 1 << 20;

/// Node memory left (MiB) and each pod's working set (UID, MiB).
type Memory = (u64, Vec<(&'static str, u64)>);

/// What the next sample will say.
#[derive(Clone, Default)]
struct Script(Arc<std::sync::Mutex<Memory>>);

impl Script {
    fn set(&self, available_mi: u64, pods: Vec<(&'static str, u64)>) {
        *self.0.lock().expect("script") = (available_mi, pods);
    }
}

impl Sampler for Script {
    fn sample(&mut self) -> BoxFuture<'_, Sample> {
        let (available, pods) = self.0.lock().expect("script").clone();
        Box::pin(async move {
            let memory = |ws: u64| MemoryStats {
                working_set_bytes: Some(ws * MI),
                ..Default::default()
            };
            Sample {
                at: 0,
                summary: Summary {
                    node: NodeStats {
                        node_name: "node-evict".into(),
                        memory: Some(MemoryStats {
                            available_bytes: Some(available * MI),
                            working_set_bytes: Some(8192 * MI - available * MI),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    pods: pods
                        .into_iter()
                        .map(|(uid, ws)| PodStats {
                            pod_ref: PodReference {
                                name: uid.into(),
                                namespace: "default".into(),
                                uid: uid.into(),
                            },
                            containers: vec![ContainerStats {
                                name: "app".into(),
                                memory: Some(memory(ws)),
                                ..Default::default()
                            }],
                            memory: Some(memory(ws)),
                            ..Default::default()
                        })
                        .collect(),
                },
                pods: Default::default(),
            }
        })
    }
}

fn api_pod(uid: &str, resources: serde_json::Value) -> SourcePod {
    SourcePod {
        origin: format!("{uid}.json"),
        pod: serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid},
            "spec": {
                "terminationGracePeriodSeconds": 30,
                "containers": [{"name": "app", "image": "localhost/busybox:latest",
                                "command": ["sleep", "3600"], "resources": resources}],
            },
        }))
        .expect("pod"),
    }
}

/// A 4-CPU, 8 GiB node called `name`.
fn facts(name: &str) -> NodeFacts {
    wasmlet_agent::testing::node_facts(name)
}

/// An agent for `node` keeping its state in `root`, its pods from the API source.
fn options(node: NodeFacts, root: &std::path::Path) -> AgentOptions {
    AgentOptions {
        relist_period: Duration::from_millis(200),
        sources: vec!["api".into()],
        ..wasmlet_agent::testing::options(node, root)
    }
}

fn phase(agent: &Agent<Simulator>, uid: &str) -> (String, String, String) {
    let e = agent.ctx.statuses.get(uid).expect("pod known");
    (
        e.status.phase.clone().unwrap_or_default(),
        e.status.reason.clone().unwrap_or_default(),
        e.status.message.clone().unwrap_or_default(),
    )
}

async fn wait(what: &str, ok: impl Fn() -> bool) {
    for _ in 0..300 {
        if ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("not {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_climb_evicts_exactly_the_right_pod() {
    let root = std::env::temp_dir().join(format!("wasmlet-evict-sim-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let sim = Arc::new(Simulator::new());
    let events = Arc::new(MemoryRecorder::default());
    let pressure = Arc::new(PressureState::default());
    let check: wasmlet_agent::syncloop::NodeCheck = {
        let pressure = pressure.clone();
        Arc::new(move |pod: &k8s::Pod| eviction::admit(&pressure.current(), pod))
    };
    let engine = wasmlet_plugin_host::PluginEngine::new().expect("engine");
    let chain = Arc::new(wasmlet_plugin_host::chain::AdmissionChain::new(engine));
    let facts = facts("node-evict");
    let node = wasmlet_plugin_host::convert::node(&facts.object(true, "", "2026-11-23T10:00:00Z"))
        .expect("node");
    let agent = Arc::new(Agent::start(
        sim.clone(),
        AgentOptions {
            events: Some(events.clone()),
            ..options(facts, &root)
        },
        Arc::new(NoProbes),
        Some(wasmlet_agent::syncloop::Admission {
            chain,
            node: Arc::new(node),
            admitted: Arc::default(),
            node_check: Some(check),
        }),
        None,
    ));
    let send = |pods: Vec<SourcePod>| {
        let tx = agent.sources();
        async move {
            tx.send(SourceSet::whole("api", pods))
                .await
                .expect("loop runs");
        }
    };
    let hog = api_pod("hog", serde_json::json!({}));
    let calm = api_pod("calm", serde_json::json!({"requests": {"memory": "1Gi"}}));
    send(vec![hog.clone(), calm.clone()]).await;
    wait("both running", || {
        ["hog", "calm"].iter().all(|u| {
            agent
                .ctx
                .statuses
                .get(u)
                .is_some_and(|e| e.status.phase.as_deref() == Some("Running"))
        })
    })
    .await;

    let script = Script::default();
    let gc = Arc::new(tokio::sync::Mutex::new(
        wasmlet_stats::imagegc::ImageGc::new(Default::default()),
    ));
    let mut hk = Housekeeping {
        sampler: Box::new(script.clone()),
        stats: Arc::new(Stats::new()),
        manager: eviction::Manager::new(eviction::Config {
            // Longer than the 2 s the evicted pod's container is given to stop (the
            // kubelet's minimum, even for a hard threshold's grace 0).
            transition: Duration::from_secs(5),
            ..eviction::Config::default()
        }),
        node: Arc::new(wasmlet_stats::agent::AgentNode {
            agent: agent.clone(),
            images: gc,
        }),
        pressure: pressure.clone(),
        period: Duration::from_secs(10),
    };

    // Plenty left: nothing happens.
    script.set(3000, vec![("hog", 200), ("calm", 100)]);
    let d = hk.round().await;
    assert!(d.pressure.is_empty() && d.evict.is_none());

    // The hog climbs past memory.available<100Mi.
    script.set(60, vec![("hog", 7000), ("calm", 300)]);
    let d = hk.round().await;
    assert_eq!(d.evict.as_ref().map(|e| e.uid.as_str()), Some("hog"));
    assert!(pressure.has(Pressure::Memory));
    let (p, reason, message) = phase(&agent, "hog");
    assert_eq!((p.as_str(), reason.as_str()), ("Failed", "Evicted"));
    assert_eq!(
        message,
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 60Mi. \
         Container app was using 7000Mi, request is 0, has larger consumption of memory. "
    );
    let status = agent.ctx.statuses.get("hog").expect("hog").status;
    let target = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("a DisruptionTarget condition");
    assert_eq!(
        (target.status.as_str(), target.reason.as_deref()),
        ("True", Some("TerminationByKubelet"))
    );
    assert_eq!(target.message.as_deref(), Some(message.as_str()));
    let evicted: Vec<_> = events
        .events()
        .into_iter()
        .filter(|e| e.reason == "Evicted")
        .collect();
    assert_eq!(evicted.len(), 1, "one Evicted event");
    assert_eq!(evicted[0].pod.name, "hog");
    assert_eq!(evicted[0].kind, wasmlet_agent::events::Kind::Warning);
    // Its containers are stopped (grace 0 for a hard threshold: SIGKILL after the
    // minimum 2 s); calm keeps running.
    wait("hog's container stopped", || {
        agent
            .ctx
            .cache
            .get("hog")
            .is_some_and(|rt| rt.running().next().is_none())
    })
    .await;
    assert_eq!(phase(&agent, "calm").0, "Running");

    // Memory is back: no second eviction, but the condition holds, and a new BestEffort
    // pod is refused with the kubelet's reason.
    script.set(4000, vec![("calm", 300)]);
    let d = hk.round().await;
    assert!(d.evict.is_none());
    assert!(pressure.has(Pressure::Memory));
    send(vec![hog, calm, api_pod("late", serde_json::json!({}))]).await;
    wait("late refused", || {
        agent
            .ctx
            .statuses
            .get("late")
            .is_some_and(|e| e.status.phase.as_deref() == Some("Failed"))
    })
    .await;
    let (_, reason, message) = phase(&agent, "late");
    assert_eq!(reason, "Evicted");
    assert_eq!(
        message,
        "Pod was rejected: The node had condition: [MemoryPressure]. "
    );

    // After the transition period: the condition clears.
    tokio::time::sleep(Duration::from_millis(5100)).await;
    let d = hk.round().await;
    assert!(d.pressure.is_empty());
    assert!(!pressure.has(Pressure::Memory));
    assert_eq!(phase(&agent, "calm").0, "Running");
    assert_eq!(phase(&agent, "hog").1, "Evicted", "kept until deleted");

    agent.shutdown().await;
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_reclaim_removes_what_finished_pods_left_and_keeps_their_status() {
    let root = std::env::temp_dir().join(format!("wasmlet-reclaim-sim-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let sim = Arc::new(Simulator::new());
    let agent = Agent::start(
        sim.clone(),
        options(facts("node-reclaim"), &root),
        Arc::new(NoProbes),
        None,
        None,
    );
    // A job that has finished and a server that runs.
    let mut done = api_pod("done", serde_json::json!({}));
    done.pod.metadata.annotations = Some(
        [(
            "sim.wasmlet.io/script.app".to_owned(),
            "exit-after=100ms exit-code=0".to_owned(),
        )]
        .into(),
    );
    if let Some(spec) = done.pod.spec.as_mut() {
        spec.restart_policy = Some("Never".into());
    }
    let server = api_pod("server", serde_json::json!({}));
    agent
        .sources()
        .send(SourceSet::whole("api", vec![done, server]))
        .await
        .expect("loop runs");
    wait("the job done, the server running", || {
        agent
            .ctx
            .statuses
            .get("done")
            .is_some_and(|e| e.status.phase.as_deref() == Some("Succeeded"))
            && agent
                .ctx
                .statuses
                .get("server")
                .is_some_and(|e| e.status.phase.as_deref() == Some("Running"))
    })
    .await;
    let before = agent.ctx.statuses.get("done").expect("done").status;
    // Its sandbox stopped too (a finished pod's is), seen by the cache.
    wait("the job's sandbox stopped", || {
        agent
            .ctx
            .cache
            .get("done")
            .is_some_and(|rt| rt.sandboxes.iter().all(|s| !s.ready))
    })
    .await;

    let removed = wasmlet_stats::agent::remove_dead_containers(&agent).await;
    assert_eq!(
        removed,
        wasmlet_stats::agent::Removed {
            containers: 1,
            sandboxes: 1
        }
    );
    assert_eq!(
        sim.counts(),
        (1, 1),
        "the server's sandbox and container stay"
    );
    // Relists later, the job's status is what it was: Succeeded, its container
    // terminated with exit code 0.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let after = agent.ctx.statuses.get("done").expect("done").status;
    assert_eq!(after.phase.as_deref(), Some("Succeeded"));
    assert_eq!(after.container_statuses, before.container_statuses);
    assert_eq!(
        agent
            .ctx
            .statuses
            .get("server")
            .and_then(|e| e.status.phase),
        Some("Running".into())
    );
    // Nothing left to reclaim.
    assert_eq!(
        wasmlet_stats::agent::remove_dead_containers(&agent).await,
        wasmlet_stats::agent::Removed::default()
    );
    agent.shutdown().await;
}
