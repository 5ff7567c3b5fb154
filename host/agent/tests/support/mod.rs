//! What the agent's simulator tests share: an agent on the in-process CRI simulator
//! with exec probes, pods sent as the `file` source, and waits on their statuses (in
//! paused time).
#![allow(dead_code)]

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use wasmlet_agent::agent::{Agent, AgentOptions};
use wasmlet_agent::events::MemoryRecorder;
use wasmlet_agent::prober::{CheckError, Checker};
use wasmlet_agent::syncloop::SourceSet;
use wasmlet_cri_sim::Simulator;
use wasmlet_plugin_host::probe::{Action, ContainerExec, Outcome, Target};
use wasmlet_plugin_host::source::SourcePod;

/// Exec probes as the shipped exec handler makes them (exit 0 passes), and a custom
/// kind whose argument says how it goes.
pub struct ExecChecker;

impl Checker for ExecChecker {
    fn check<'a>(
        &'a self,
        _kind: &'a str,
        target: &'a Target,
        exec: Option<Arc<dyn ContainerExec>>,
    ) -> Pin<Box<dyn Future<Output = Result<Outcome, CheckError>> + Send + 'a>> {
        Box::pin(async move {
            // A custom kind: `answers ok=yes` passes; `answers ok=redirect` passes as an
            // HTTP probe redirected to another host does (the kubelet's warning).
            if let Action::Custom(args) = &target.action {
                if args.iter().any(|(k, v)| k == "ok" && v == "redirect") {
                    let body = "Probe terminated redirects, Response body: <a href=\"http://0.0.0.0/\">Found</a>.";
                    return Ok(Outcome::Success(body.into()));
                }
                return Ok(if args.iter().any(|(k, v)| k == "ok" && v == "yes") {
                    Outcome::Success("answered".into())
                } else {
                    Outcome::Failure("did not answer".into())
                });
            }
            let Action::Exec(cmd) = &target.action else {
                return Err(CheckError::Other("only exec here".into()));
            };
            let exec = exec.ok_or_else(|| CheckError::Other("no exec".into()))?;
            let out = exec
                .exec_sync(
                    cmd.clone(),
                    Duration::from_millis(u64::from(target.timeout_ms)),
                )
                .await
                .map_err(CheckError::Other)?;
            Ok(if out.exit_code == 0 {
                Outcome::Success(String::new())
            } else {
                Outcome::Failure(format!("exit {}", out.exit_code))
            })
        })
    }
}

pub fn options(name: &str) -> AgentOptions {
    let root =
        std::env::temp_dir().join(format!("wasmlet-agent-sim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    wasmlet_agent::testing::options(
        wasmlet_agent::testing::node_facts(&format!("node-{name}")),
        &root,
    )
}

/// A simulator and an agent on it, with exec probes and no admission.
pub fn start(name: &str) -> (Arc<Simulator>, Agent<Simulator>) {
    let (sim, agent, _) = start_recording(name);
    (sim, agent)
}

/// [`start`], keeping the events the agent records.
pub fn start_recording(name: &str) -> (Arc<Simulator>, Agent<Simulator>, Arc<MemoryRecorder>) {
    let sim = Arc::new(Simulator::new());
    let events = Arc::new(MemoryRecorder::default());
    let agent = Agent::start(
        sim.clone(),
        AgentOptions {
            events: Some(events.clone()),
            ..options(name)
        },
        Arc::new(ExecChecker),
        None,
        None,
    );
    (sim, agent, events)
}

/// An agent on the simulator that admits pods through `chain`, recording its events.
pub fn start_admitting(
    name: &str,
    chain: Arc<wasmlet_plugin_host::chain::AdmissionChain>,
) -> (Arc<Simulator>, Agent<Simulator>, Arc<MemoryRecorder>) {
    let events = Arc::new(MemoryRecorder::default());
    let opts = AgentOptions {
        events: Some(events.clone()),
        ..options(name)
    };
    let node =
        wasmlet_plugin_host::convert::node(&opts.node.object(true, "", "2026-11-22T10:00:00Z"))
            .expect("node");
    let sim = Arc::new(Simulator::new());
    let agent = Agent::start(
        sim.clone(),
        opts,
        Arc::new(ExecChecker),
        Some(wasmlet_agent::syncloop::Admission {
            chain,
            node: Arc::new(node),
            admitted: Arc::default(),
            node_check: None,
        }),
        None,
    );
    (sim, agent, events)
}

pub fn pod(json: &str) -> SourcePod {
    SourcePod {
        origin: "test.yaml".into(),
        pod: serde_json::from_str(json).expect("pod json"),
    }
}

pub async fn send(agent: &Agent<Simulator>, pods: Vec<SourcePod>) {
    send_from(agent, "file", pods).await;
}

/// Sends `pods` as the whole set of pod source `source` (`file`, `api`).
pub async fn send_from(agent: &Agent<Simulator>, source: &str, pods: Vec<SourcePod>) {
    agent
        .sources()
        .send(SourceSet::whole(source, pods))
        .await
        .expect("loop runs");
}

/// Waits (in paused time) until `check` holds for the pod named `name`.
pub async fn wait_for(
    agent: &Agent<Simulator>,
    name: &str,
    what: &str,
    limit: Duration,
    check: impl Fn(&k8s::Pod) -> bool,
) -> k8s::Pod {
    let started = tokio::time::Instant::now();
    loop {
        let pods = agent.ctx.statuses.pods();
        if let Some(p) = pods.iter().find(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(name))
        }) && check(p)
        {
            return p.clone();
        }
        if started.elapsed() > limit {
            panic!(
                "{name}: not {what} after {limit:?}: {}",
                serde_json::to_string_pretty(&pods).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the runtime holds `counts` (sandboxes, containers) and `also` holds;
/// after `limit`, fails with `what` and the counts there were.
pub async fn until_counts(
    sim: &Simulator,
    counts: (usize, usize),
    also: impl Fn() -> bool,
    what: &str,
    limit: Duration,
) {
    let started = tokio::time::Instant::now();
    while sim.counts() != counts || !also() {
        assert!(
            started.elapsed() < limit,
            "{what}: {:?} after {limit:?}",
            sim.counts()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn phase(p: &k8s::Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn container(p: &k8s::Pod, name: &str) -> k8s::ContainerStatus {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == name))
        .cloned()
        .unwrap_or_else(|| panic!("no status for {name}"))
}

pub fn condition(p: &k8s::Pod, kind: &str) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == kind))
        .is_some_and(|c| c.status == "True")
}
