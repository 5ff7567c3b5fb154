//! The seam into the agent: the pods the collector measures, read from the agent's
//! pod cache (sandboxes and running containers, as PLEG last saw them) and its pods'
//! specs (emptyDir volumes).

use std::sync::Arc;

use wasmlet_agent::agent::Agent;
use wasmlet_agent::criconfig;
use wasmlet_agent::runtime::State;
use wasmlet_cri::CriRuntime;

use crate::collect::{ContainerRef, PodInfo, PodLister};

/// The agent's pods, for the collector.
pub struct AgentPods<R>(pub Arc<Agent<R>>);

impl<R: CriRuntime + 'static> PodLister for AgentPods<R> {
    fn pods(&self) -> Vec<PodInfo> {
        let ctx = &self.0.ctx;
        let node = &ctx.node;
        ctx.cache
            .all()
            .iter()
            .filter_map(|rt| {
                let sandbox = rt.sandboxes.iter().find(|s| s.ready)?;
                let spec = ctx.statuses.get(&rt.uid).map(|e| e.pod);
                let mut containers: Vec<ContainerRef> = rt
                    .containers
                    .iter()
                    .filter(|c| c.state == State::Running && c.sandbox_id == sandbox.id)
                    .map(|c| ContainerRef {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        started_at: c.started_at.max(c.created_at),
                        image: c.image.clone(),
                    })
                    .collect();
                // In the spec's order (the cache holds the newest first).
                if let Some(names) = spec.as_ref().and_then(|p| p.spec.as_ref()) {
                    let position = |n: &str| {
                        names
                            .init_containers
                            .iter()
                            .flatten()
                            .chain(&names.containers)
                            .position(|c| c.name == n)
                            .unwrap_or(usize::MAX)
                    };
                    containers.sort_by_key(|c| position(&c.name));
                }
                let empty_dirs = spec
                    .as_ref()
                    .and_then(|p| p.spec.as_ref())
                    .and_then(|s| s.volumes.as_ref())
                    .map(|vs| {
                        vs.iter()
                            .filter(|v| {
                                v.empty_dir
                                    .as_ref()
                                    .is_some_and(|e| e.medium.as_deref() != Some("Memory"))
                            })
                            .filter_map(|v| {
                                let pod = spec.as_ref()?;
                                Some((
                                    v.name.clone(),
                                    criconfig::empty_dir_path(pod, node, &v.name),
                                ))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                Some(PodInfo {
                    uid: rt.uid.clone(),
                    name: rt.name.clone(),
                    namespace: rt.namespace.clone(),
                    start_time: sandbox.created_at,
                    containers,
                    log_dir: node
                        .pod_logs_dir
                        .join(format!("{}_{}_{}", rt.namespace, rt.name, rt.uid)),
                    empty_dirs,
                    cgroup: node.pod_cgroups.as_ref().map(|c| c.cgroup_parent(&rt.uid)),
                })
            })
            .collect()
    }
}

/// Samples `agent`'s node and pods every `period` (the first sample at once), with
/// `root_dir`'s filesystem as `nodefs`. Returns the samples and the sampling task.
pub fn sample<R: CriRuntime + 'static>(
    agent: &Arc<Agent<R>>,
    root_dir: &std::path::Path,
    period: std::time::Duration,
) -> (Arc<crate::Stats>, tokio::task::JoinHandle<()>) {
    let collector = crate::Collector::new(
        agent.ctx.runtime.clone(),
        Arc::new(AgentPods(agent.clone())),
        crate::CollectorSettings {
            node_name: agent.node.name.clone(),
            root_dir: root_dir.to_path_buf(),
            files: crate::node::NodeFiles::default(),
        },
    );
    let stats = Arc::new(crate::Stats::new());
    let task = stats.spawn(collector, period);
    (stats, task)
}
