//! In-place pod resize in a sync (the kubelet 1.33's handlePodResourcesResize and
//! doPodResizeAction): the pod runs as allocated; a running container whose allocation
//! changed gets UpdateContainerResources — each resource's decreases before its
//! increases, the pod cgroup before the containers when the pod grows and after them
//! when it shrinks — or is restarted when its `resizePolicy` says so.

use std::sync::Arc;
use wasmlet_core::pod::Place;
use wasmlet_core::resize::{ContainerUpdate, Plan, Resource, with_amounts};

use k8s_openapi::api::core::v1 as k8s;
use tracing::{info, warn};
use wasmlet_cri::CriRuntime;

use super::SyncContext;
use crate::criconfig;
use wasmlet_core::actions::{self, Kill};
use wasmlet_core::pod::{self, PodKey};
use wasmlet_core::runtime::PodRuntime;

impl<R: CriRuntime + 'static> SyncContext<R> {
    /// The pod as it runs: `pod` with its allocated resources (a resize asked for is
    /// allocated here when it fits); its status learns the allocation and what waits.
    pub(super) fn allocated(&self, pod: &Arc<k8s::Pod>) -> Arc<k8s::Pod> {
        let a = self.allocations.allocate(pod);
        let pending = a.pending.map(|p| (p.reason.to_owned(), p.message));
        let uid = pod::uid(pod);
        self.statuses
            .set_allocated(uid, a.differs.then(|| a.pod.clone()), pending);
        a.pod
    }

    /// The resize the running pod needs; containers its `resizePolicy` restarts are
    /// added to `actions` (killed, then started again).
    pub(super) fn resize_plan(
        &self,
        pod: &k8s::Pod,
        rt: &PodRuntime,
        actions: &mut actions::PodActions,
    ) -> Plan {
        let uid = pod::uid(pod);
        let mut plan =
            wasmlet_core::resize::plan(pod, rt, &|name| self.allocations.actuated(uid, name));
        if actions.kill_pod {
            return Plan::default();
        }
        for r in plan.restart.drain(..) {
            if actions.kill.iter().any(|k| k.id == r.id) {
                continue;
            }
            actions.kill.push(Kill {
                id: r.id,
                name: r.name,
                message: r.message,
                grace: None,
            });
            match r.which {
                Place::App(i) if !actions.start.contains(&i) => actions.start.push(i),
                Place::Init(i) if !actions.init.contains(&i) => actions.init.push(i),
                _ => {}
            }
        }
        let in_progress = !plan.is_empty();
        self.statuses
            .set_resize_progress(uid, in_progress.then(|| (String::new(), String::new())));
        plan
    }

    /// Applies `plan`: the pod cgroup and the containers' resources, in the kubelet's
    /// order; each container's new resources recorded as actuated. A failure is the
    /// `PodResizeInProgress` condition's `Error` and is tried again at the next sync.
    pub(super) async fn resize(&self, pod: &k8s::Pod, plan: &Plan) {
        if plan.is_empty() {
            return;
        }
        let uid = pod::uid(pod);
        let result = self.apply_resize(pod, plan).await;
        let progress = match result {
            Ok(()) => {
                info!(pod = %PodKey::of(pod), "resized in place");
                None
            }
            Err(e) => {
                warn!(pod = %PodKey::of(pod), "resize failed: {e}");
                Some(("Error".to_owned(), e))
            }
        };
        self.statuses.set_resize_progress(uid, progress);
    }

    /// Memory, then CPU: for each, the pod cgroup first when it grows, the containers
    /// (decreases first), the pod cgroup last when it shrinks.
    async fn apply_resize(&self, pod: &k8s::Pod, plan: &Plan) -> Result<(), String> {
        let steps = [
            (Resource::Memory, &plan.memory, plan.memory_first),
            (Resource::Cpu, &plan.cpu, plan.cpu_first),
        ];
        for (resource, list, pod_first) in steps {
            if pod_first {
                self.resize_pod_cgroup(pod, resource).await?;
            }
            for update in list {
                self.update_container(pod, resource, update).await?;
            }
            if !pod_first {
                self.resize_pod_cgroup(pod, resource).await?;
            }
        }
        Ok(())
    }

    async fn resize_pod_cgroup(&self, pod: &k8s::Pod, resource: Resource) -> Result<(), String> {
        match &self.node.pod_cgroups {
            Some(cgroups) => cgroups
                .resize(pod, resource == Resource::Cpu)
                .await
                .map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }

    /// One UpdateContainerResources: `resource` as allocated, the other as it was
    /// last given.
    async fn update_container(
        &self,
        pod: &k8s::Pod,
        resource: Resource,
        update: &ContainerUpdate,
    ) -> Result<(), String> {
        let uid = pod::uid(pod);
        let Some(c) = pod::container_named(pod, &update.name) else {
            return Ok(());
        };
        let mut amounts = self.allocations.actuated(uid, &c.name).unwrap_or_default();
        let d = update.desired;
        match resource {
            Resource::Memory => {
                (amounts.memory_request, amounts.memory_limit) = (d.memory_request, d.memory_limit);
            }
            Resource::Cpu => {
                (amounts.cpu_request, amounts.cpu_limit) = (d.cpu_request, d.cpu_limit)
            }
        }
        let linux = criconfig::resources(pod, &with_amounts(c, amounts), &self.node);
        self.runtime
            .update_container_resources(&update.id, linux)
            .await
            .map_err(|e| format!("container {}: {}", c.name, e.message()))?;
        self.allocations.set_actuated(uid, &c.name, amounts);
        Ok(())
    }
}
