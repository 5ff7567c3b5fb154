//! The seam into the agent: the pods the collector measures, read from the agent's
//! pod cache (sandboxes and running containers, as PLEG last saw them) and its pods'
//! specs (emptyDir volumes).

use std::sync::Arc;

use wasmlet_agent::agent::Agent;
use wasmlet_agent::criconfig;
use wasmlet_core::runtime::State;
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
                // emptyDirs on disk (a Memory medium counts as memory, not storage).
                let empty_dirs = spec
                    .iter()
                    .flat_map(|pod| {
                        let volumes = pod.spec.iter().flat_map(|s| s.volumes.iter().flatten());
                        volumes
                            .filter(|v| {
                                v.empty_dir
                                    .as_ref()
                                    .is_some_and(|e| e.medium.as_deref() != Some("Memory"))
                            })
                            .map(|v| {
                                let dir = criconfig::empty_dir_path(pod, node, &v.name);
                                (v.name.clone(), dir)
                            })
                    })
                    .collect();
                Some(PodInfo {
                    uid: rt.uid.clone(),
                    name: rt.name.clone(),
                    namespace: rt.namespace.clone(),
                    start_time: sandbox.created_at,
                    containers,
                    log_dir: criconfig::pod_log_directory(node, &rt.namespace, &rt.name, &rt.uid),
                    empty_dirs,
                    cgroup: node
                        .pod_cgroups
                        .as_ref()
                        .and_then(|c| c.pod_cgroup(&rt.uid)),
                })
            })
            .collect()
    }
}

/// The collector of `agent`'s node and pods, `root_dir`'s filesystem as `nodefs`.
pub fn collector<R: CriRuntime + 'static>(
    agent: &Arc<Agent<R>>,
    root_dir: &std::path::Path,
) -> crate::collect::Collector<R> {
    let files = crate::node::NodeFiles::default();
    // The kubelet's own system containers: where it runs, and where the pods do.
    let mut system_containers = Vec::new();
    if let Some(cg) = &files.cgroups
        && let Ok(text) = std::fs::read_to_string(files.proc.join("self/cgroup"))
    {
        system_containers.push(crate::collect::SystemContainer {
            name: "kubelet".into(),
            cgroups: crate::cgroup::ProcessCgroups::parse(&text, cg.v2()),
        });
    }
    if let Some(pods) = &agent.ctx.node.pod_cgroups {
        let root = Some(pods.root_cgroup());
        system_containers.push(crate::collect::SystemContainer {
            name: "pods".into(),
            cgroups: crate::cgroup::ProcessCgroups {
                cpu: root.clone(),
                memory: root,
            },
        });
    }
    crate::collect::Collector::new(
        agent.ctx.runtime.clone(),
        Arc::new(AgentPods(agent.clone())),
        crate::collect::CollectorSettings {
            node_name: agent.node.name.clone(),
            root_dir: root_dir.to_path_buf(),
            files,
            system_containers,
        },
    )
}

/// Samples `agent`'s node and pods every `period` (the first sample at once), without
/// eviction. Returns the samples and the sampling task.
pub fn sample<R: CriRuntime + 'static>(
    agent: &Arc<Agent<R>>,
    root_dir: &std::path::Path,
    period: std::time::Duration,
) -> (Arc<crate::latest::Stats>, tokio::task::JoinHandle<()>) {
    let stats = Arc::new(crate::latest::Stats::new());
    let task = stats.spawn(collector(agent, root_dir), period);
    (stats, task)
}

/// The agent as eviction acts on it: its pods' priorities and requests, evictions
/// through [`Agent::evict`], and unused images removed through the runtime.
pub struct AgentNode<R> {
    /// The agent.
    pub agent: Arc<Agent<R>>,
    /// Image garbage collection (node-level reclaim for disk signals).
    pub images: Arc<tokio::sync::Mutex<crate::imagegc::ImageGc>>,
}

/// `pod` as eviction ranks it.
pub fn pod_facts(pod: &k8s_openapi::api::core::v1::Pod) -> crate::eviction::PodFacts {
    use crate::eviction::rank::Requests;
    let spec = pod.spec.as_ref();
    let request = |c: &k8s_openapi::api::core::v1::Container, name: &str| {
        let q = c.resources.as_ref()?.requests.as_ref()?.get(name)?;
        let v = wasmlet_plugin_host::convert::parse_quantity(&q.0, 0).ok()?;
        Some((v, q.0.clone()))
    };
    let containers = spec
        .map(|s| {
            s.containers
                .iter()
                .map(|c| Requests {
                    name: c.name.clone(),
                    memory: request(c, "memory"),
                    ephemeral_storage: request(c, "ephemeral-storage"),
                })
                .collect()
        })
        .unwrap_or_default();
    crate::eviction::PodFacts {
        uid: wasmlet_core::pod::uid(pod).to_owned(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        priority: spec.and_then(|s| s.priority).unwrap_or(0),
        critical: crate::eviction::rank::critical(pod),
        grace: std::time::Duration::from_secs(
            u64::try_from(wasmlet_core::pod::grace_seconds(pod)).unwrap_or(0),
        ),
        containers,
    }
}

impl<R: CriRuntime + 'static> crate::eviction::run::Node for AgentNode<R> {
    fn pods(&self) -> Vec<crate::eviction::PodFacts> {
        self.agent
            .ctx
            .statuses
            .pods()
            .iter()
            .filter(|p| {
                let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                !matches!(phase, Some("Succeeded" | "Failed"))
                    && p.metadata.deletion_timestamp.is_none()
            })
            .map(pod_facts)
            .collect()
    }

    fn evict(&self, e: &crate::eviction::Eviction) -> bool {
        self.agent
            .evict(&e.uid, crate::eviction::REASON, &e.message, e.grace)
    }

    fn stopped(&self, uid: &str) -> bool {
        self.agent
            .ctx
            .cache
            .get(uid)
            .is_none_or(|rt| rt.running().next().is_none())
    }

    fn reclaim(
        &self,
        _signal: crate::eviction::Signal,
    ) -> crate::eviction::run::BoxFuture<'_, String> {
        Box::pin(async move {
            // Dead containers first, as the kubelet's DeleteAllUnusedContainers: they
            // hold the images the second step may then remove.
            let dead = remove_dead_containers(&self.agent).await;
            let runtime = self.agent.ctx.runtime.clone();
            let mut gc = self.images.lock().await;
            let images = match gc.delete_unused(runtime.as_ref()).await {
                Ok(r) => format!(
                    "{} unused images removed, {} bytes freed",
                    r.removed, r.freed
                ),
                Err(e) => format!("unused images not removed: {e}"),
            };
            format!(
                "{} dead containers and {} sandboxes of finished pods removed; {images}",
                dead.containers, dead.sandboxes
            )
        })
    }

    fn collect_images<'a>(
        &'a self,
        image_fs: Option<&'a crate::summary::FsStats>,
    ) -> crate::eviction::run::BoxFuture<'a, ()> {
        Box::pin(async move {
            let runtime = self.agent.ctx.runtime.clone();
            let mut gc = self.images.lock().await;
            let (capacity, available) = image_fs
                .and_then(|f| Some((f.capacity_bytes?, f.available_bytes?)))
                .unwrap_or((0, 0));
            if let Err(e) = gc
                .collect(
                    runtime.as_ref(),
                    capacity,
                    available,
                    tokio::time::Instant::now(),
                )
                .await
            {
                tracing::warn!("image garbage collection failed: {e}");
            }
        })
    }
}

/// What [`remove_dead_containers`] removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    /// Containers.
    pub containers: usize,
    /// Sandboxes.
    pub sandboxes: usize,
}

/// Node-level reclaim of dead containers under disk pressure: every container and
/// sandbox of a pod that has finished (Succeeded or Failed; its status is final and
/// kept), as the kubelet's garbage collector does when eviction asks it to. Running
/// pods keep their newest exited container of each name (the per-pod collection's
/// rule), pods the agent no longer has are removed by its own cleanup.
pub async fn remove_dead_containers<R: CriRuntime + 'static>(agent: &Agent<R>) -> Removed {
    let ctx = &agent.ctx;
    let mut removed = Removed::default();
    for rt in ctx.cache.all() {
        let finished = ctx
            .statuses
            .get(&rt.uid)
            .is_some_and(|e| matches!(e.status.phase.as_deref(), Some("Succeeded" | "Failed")));
        if !finished {
            continue;
        }
        for c in rt.containers.iter().filter(|c| c.state != State::Running) {
            match ctx.runtime.remove_container(&c.id).await {
                Ok(()) => removed.containers += 1,
                Err(e) => tracing::debug!(container = %c.id, "reclaim: {e}"),
            }
        }
        for sandbox in rt.sandboxes.iter().filter(|s| !s.ready) {
            match ctx.runtime.remove_pod_sandbox(&sandbox.id).await {
                Ok(()) => removed.sandboxes += 1,
                Err(e) => tracing::debug!(sandbox = %sandbox.id, "reclaim: {e}"),
            }
        }
    }
    removed
}

/// Node resources for `agent`: usage sampled every `period` into the returned
/// [`crate::Stats`], eviction on each sample with `eviction`, image garbage collection
/// by `images` (its policy and the images it protects); the pressure the node reports
/// set in `pressure`.
pub fn housekeeping<R: CriRuntime + 'static>(
    agent: &Arc<Agent<R>>,
    root_dir: &std::path::Path,
    period: std::time::Duration,
    eviction: crate::eviction::Config,
    images: crate::imagegc::ImageGc,
    pressure: Arc<crate::eviction::run::PressureState>,
) -> (Arc<crate::latest::Stats>, tokio::task::JoinHandle<()>) {
    let collector = collector(agent, root_dir);
    let stats = Arc::new(crate::latest::Stats::new());
    let gc = Arc::new(tokio::sync::Mutex::new(images));
    let node = Arc::new(AgentNode {
        agent: agent.clone(),
        images: gc.clone(),
    });
    let runtime = agent.ctx.runtime.clone();
    let housekeeping = crate::eviction::run::Housekeeping {
        sampler: Box::new(collector),
        stats: stats.clone(),
        manager: crate::eviction::Manager::new(eviction),
        node,
        pressure,
        period,
    };
    let task = tokio::spawn(async move {
        if let Some(image) = gc
            .lock()
            .await
            .protect_sandbox_image(runtime.as_ref())
            .await
        {
            tracing::debug!(%image, "image garbage collection keeps the runtime's sandbox image");
        }
        housekeeping.run().await;
    });
    (stats, task)
}
