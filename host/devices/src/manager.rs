//! The device manager: the plugins registered through [`crate::registration`], their
//! devices as [`State`] keeps them, and the allocation of devices to a pod's containers
//! at admission — the kubelet's devicemanager, without NUMA alignment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use tonic::transport::Channel;
use wasmlet_core::pod;

use crate::checkpoint;
use crate::options::ContainerOptions;
use crate::proto;
use crate::proto::device_plugin_client::DevicePluginClient;
use crate::state::{AllocateError, Capacity, ContainerKey, Endpoint, Grant, Ids, State};

/// How long PreStartContainer may take (the API's KubeletPreStartContainerRPCTimeoutInSecs).
pub const PRE_START_TIMEOUT: Duration = Duration::from_secs(30);

/// The devices each resource of a container's limits asks for, in name order. Only
/// `resources.limits` count: extended resources cannot be overcommitted, so their
/// requests equal their limits.
fn device_limits(c: &k8s::Container) -> Vec<(String, usize)> {
    let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
    limits
        .into_iter()
        .flatten()
        .filter_map(|(name, q)| {
            let n = wasmlet_core::quantity::parse_quantity(&q.0, 0).ok()?;
            Some((name.clone(), usize::try_from(n).ok()?))
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// The device manager of a node.
#[derive(Debug)]
pub struct Manager {
    /// The device plugin directory (`kubelet.sock`, the plugins' sockets, the checkpoint).
    dir: PathBuf,
    state: Mutex<State>,
    generation: AtomicU64,
    /// One allocation at a time (each may call plugins).
    allocating: tokio::sync::Mutex<()>,
}

impl Manager {
    /// A manager for the device plugin directory `dir`, with the grants its checkpoint
    /// holds (a checkpoint that cannot be read is logged and left: the grants are made
    /// again as containers start).
    pub fn new(dir: &Path) -> Arc<Self> {
        let mut state = State::default();
        let own = checkpoint::path(dir);
        let saved = if own.exists() {
            checkpoint::read(&own)
        } else {
            // A node taken over from the kubelet: its grants are the kubelet's.
            checkpoint::kubelet::read(dir)
        };
        match saved {
            Ok(saved) => {
                state.grants = saved.grants;
                // Until their plugins register again, the resources they had count
                // no device, and are removed once the stop grace period has passed.
                for resource in saved.resources {
                    state.restored(&resource, Self::now());
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "Continue after failing to read the device checkpoint; device allocation info may not be up to date")
            }
        }
        Arc::new(Manager {
            dir: dir.to_owned(),
            state: Mutex::new(state),
            generation: AtomicU64::new(0),
            allocating: tokio::sync::Mutex::new(()),
        })
    }

    /// The device plugin directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The device resources container `c`'s limits ask for, and how many of each.
    fn wanted(&self, c: &k8s::Container) -> Vec<(String, usize)> {
        let state = self.state();
        device_limits(c)
            .into_iter()
            .filter(|(r, _)| state.is_device_resource(r))
            .collect()
    }

    fn now() -> std::time::Instant {
        tokio::time::Instant::now().into_std()
    }

    /// Writes the checkpoint; a failure is logged (the grants stay in memory).
    fn save(&self, state: &State) {
        let file = checkpoint::path(&self.dir);
        if let Err(e) = checkpoint::write(&file, &state.grants, state.registered()) {
            tracing::error!(error = %e, file = %file.display(), "Writing the device checkpoint failed");
        }
    }

    /// A plugin for `resource` connected with `options`: it replaces any earlier one.
    /// Returns its registration's generation.
    pub(crate) fn connected(
        &self,
        resource: &str,
        options: &proto::DevicePluginOptions,
        client: DevicePluginClient<Channel>,
    ) -> u64 {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        self.state().connected(
            resource,
            Endpoint {
                generation,
                client: Some(client),
                stopped_at: None,
                pre_start: options.pre_start_required,
                preferred: options.get_preferred_allocation_available,
            },
        );
        tracing::info!(resource, "Device plugin connected");
        generation
    }

    /// The plugin of registration `generation` went away: its devices are unhealthy.
    pub(crate) fn disconnected(&self, resource: &str, generation: u64) {
        self.state().disconnected(resource, generation, Self::now());
        tracing::info!(
            resource,
            "Device plugin disconnected; its devices are unhealthy"
        );
    }

    /// The plugin listed its devices.
    pub(crate) fn listed(&self, resource: &str, devices: &[proto::Device]) {
        let mut state = self.state();
        state.listed(
            resource,
            devices
                .iter()
                .map(|d| (d.id.as_str(), d.health == crate::state::HEALTHY)),
        );
        self.save(&state);
        let healthy = devices
            .iter()
            .filter(|d| d.health == crate::state::HEALTHY)
            .count();
        tracing::info!(
            resource,
            total = devices.len(),
            healthy,
            "Processed device updates for resource"
        );
    }

    /// The devices as the node status reports them now (resources gone past their
    /// grace period are forgotten and returned once as removed).
    pub fn capacity(&self) -> Capacity {
        let mut state = self.state();
        let capacity = state.capacity(Self::now());
        if !capacity.removed.is_empty() {
            self.save(&state);
        }
        capacity
    }

    /// Gives `pod`'s containers their devices, as the kubelet does at admission: init
    /// containers first (the devices of one that runs to completion are given again
    /// to the containers after it; a sidecar keeps its own), then the app containers.
    /// Once every pod source has reported (`sources_ready`), grants of pods `active`
    /// says are gone are forgotten first; before that — the agent restarting and
    /// admitting its pods again — a container keeps what it holds, unchecked, as its
    /// plugin may not have registered again yet. An error rejects the pod
    /// (UnexpectedAdmissionError).
    pub async fn admit(
        &self,
        pod: &k8s::Pod,
        sources_ready: bool,
        active: impl Fn(&str) -> bool,
    ) -> Result<(), AllocateError> {
        let Some(spec) = pod.spec.as_ref() else {
            return Ok(());
        };
        let init = spec.init_containers.iter().flatten().map(|c| (c, true));
        let containers: Vec<_> = init
            .chain(spec.containers.iter().map(|c| (c, false)))
            .collect();
        if containers.iter().all(|(c, _)| self.wanted(c).is_empty()) {
            return Ok(());
        }
        let _one = self.allocating.lock().await;
        let uid = pod::uid(pod);
        if sources_ready {
            let mut state = self.state();
            if state.retain_pods(|p| p == uid || active(p)) {
                self.save(&state);
            }
        }
        let held_unchecked = !sources_ready;
        let mut reuse: BTreeMap<String, Ids> = BTreeMap::new();
        for (c, init) in containers {
            self.allocate(pod, c, &reuse, held_unchecked).await?;
            // An init container that runs to completion hands its devices on; a
            // sidecar or an app container keeps its own.
            let hands_on = init && !pod::is_restartable(c);
            for (resource, ids) in self.held(&(uid.to_owned(), c.name.clone())) {
                let set = reuse.entry(resource).or_default();
                if hands_on {
                    set.extend(ids);
                } else {
                    set.retain(|id| !ids.contains(id));
                }
            }
        }
        Ok(())
    }

    /// The device IDs container `key` holds, per resource.
    fn held(&self, key: &ContainerKey) -> BTreeMap<String, Ids> {
        self.state()
            .grants
            .get(key)
            .map(|g| g.iter().map(|(r, g)| (r.clone(), g.ids.clone())).collect())
            .unwrap_or_default()
    }

    /// Gives container `c` of `pod` the devices its limits ask for and it does not
    /// hold yet, asking each plugin to allocate them. With `held_unchecked`, devices
    /// the container holds are kept without looking at their health.
    async fn allocate(
        &self,
        pod: &k8s::Pod,
        c: &k8s::Container,
        reuse: &BTreeMap<String, Ids>,
        held_unchecked: bool,
    ) -> Result<(), AllocateError> {
        let key: ContainerKey = (pod::uid(pod).to_owned(), c.name.clone());
        let none = Ids::new();
        for (resource, wanted) in self.wanted(c) {
            let reusable = reuse.get(&resource).unwrap_or(&none);
            let chosen = {
                let state = self.state();
                let held = state
                    .grants
                    .get(&key)
                    .is_some_and(|g| g.contains_key(&resource));
                if held_unchecked && held {
                    continue;
                }
                state.choose(&key, &resource, wanted, reusable, &[])?
            };
            let Some(mut chosen) = chosen else {
                continue;
            };
            let (endpoint, mut client) = self.endpoint(&resource)?;
            if endpoint.preferred && !chosen.is_subset(reusable) {
                let preferred = self
                    .preferred(&mut client, &resource, reusable, wanted)
                    .await?;
                if let Some(again) = self
                    .state()
                    .choose(&key, &resource, wanted, reusable, &preferred)?
                {
                    chosen = again;
                }
            }
            let request = proto::AllocateRequest {
                container_requests: vec![proto::ContainerAllocateRequest {
                    devices_ids: chosen.iter().cloned().collect(),
                }],
            };
            let response = client
                .allocate(request)
                .await
                .map_err(|s| AllocateError::Plugin(rpc_error(&s)))?
                .into_inner();
            let first = response
                .container_responses
                .into_iter()
                .next()
                .ok_or_else(|| {
                    AllocateError::Plugin("no containers return in allocation response".into())
                })?;
            let mut state = self.state();
            let options = ContainerOptions::from(first);
            state.grant(
                key.clone(),
                &resource,
                Grant {
                    ids: chosen,
                    options,
                },
            );
            self.save(&state);
        }
        Ok(())
    }

    /// The running endpoint of `resource` and its client.
    fn endpoint(
        &self,
        resource: &str,
    ) -> Result<(Endpoint, DevicePluginClient<Channel>), AllocateError> {
        let Some(endpoint) = self.state().endpoints.get(resource).cloned() else {
            return Err(AllocateError::UnknownPlugin(resource.to_owned()));
        };
        match (endpoint.stopped_at, endpoint.client.clone()) {
            (None, Some(client)) => Ok((endpoint, client)),
            _ => Err(AllocateError::Plugin(format!(
                "endpoint of {resource} has been stopped"
            ))),
        }
    }

    /// The devices the plugin would rather give (GetPreferredAllocation).
    async fn preferred(
        &self,
        client: &mut DevicePluginClient<Channel>,
        resource: &str,
        reusable: &Ids,
        size: usize,
    ) -> Result<Vec<String>, AllocateError> {
        let mut available = self.state().free(resource);
        available.extend(reusable.iter().cloned());
        let request = proto::PreferredAllocationRequest {
            container_requests: vec![proto::ContainerPreferredAllocationRequest {
                available_device_i_ds: available.into_iter().collect(),
                must_include_device_i_ds: reusable.iter().cloned().collect(),
                allocation_size: i32::try_from(size).unwrap_or(i32::MAX),
            }],
        };
        let response = client
            .get_preferred_allocation(request)
            .await
            .map_err(|s| {
                AllocateError::Plugin(format!(
                    "device plugin GetPreferredAllocation rpc failed with err: {}",
                    rpc_error(&s)
                ))
            })?;
        Ok(response
            .into_inner()
            .container_responses
            .into_iter()
            .next()
            .map(|r| r.device_i_ds)
            .unwrap_or_default())
    }

    /// What container `c` of `pod` needs to use its devices, asked for as it is
    /// created: devices it should hold and does not (the agent restarted without its
    /// checkpoint, say) are allocated now, and PreStartContainer is called for the
    /// plugins that want it. `None` when it has no devices.
    pub async fn container_options(
        &self,
        pod: &k8s::Pod,
        c: &k8s::Container,
    ) -> Result<Option<ContainerOptions>, AllocateError> {
        let wanted = self.wanted(c);
        if wanted.is_empty() {
            return Ok(None);
        }
        let key: ContainerKey = (pod::uid(pod).to_owned(), c.name.clone());
        if self.held(&key).len() < wanted.len() {
            let _one = self.allocating.lock().await;
            self.allocate(pod, c, &BTreeMap::new(), false).await?;
        }
        let held = self.held(&key);
        for (resource, _) in &wanted {
            self.pre_start(resource, held.get(resource)).await?;
        }
        let state = self.state();
        let mut options = ContainerOptions::default();
        for grant in state.grants.get(&key).into_iter().flat_map(|g| g.values()) {
            options.merge(&grant.options);
        }
        Ok(Some(options))
    }

    /// Calls PreStartContainer with `ids` when the plugin of `resource` asked for it.
    async fn pre_start(&self, resource: &str, ids: Option<&Ids>) -> Result<(), AllocateError> {
        let wants = self
            .state()
            .endpoints
            .get(resource)
            .map(|e| e.pre_start)
            .ok_or_else(|| {
                AllocateError::Plugin(format!(
                    "endpoint not found in cache for a registered resource: {resource}"
                ))
            })?;
        if !wants {
            return Ok(());
        }
        let (_, mut client) = self.endpoint(resource)?;
        let request = proto::PreStartContainerRequest {
            devices_ids: ids.into_iter().flatten().cloned().collect(),
        };
        let call = client.pre_start_container(request);
        let outcome = tokio::time::timeout(PRE_START_TIMEOUT, call).await;
        match outcome {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(s)) => Err(rpc_error(&s)),
            Err(_) => Err(format!("deadline of {PRE_START_TIMEOUT:?} exceeded")),
        }
        .map_err(|e| {
            AllocateError::Plugin(format!(
                "device plugin PreStartContainer rpc failed with err: {e}"
            ))
        })
    }
}

/// A gRPC error as grpc-go prints one (`rpc error: code = Unknown desc = …`), which is
/// what the kubelet's messages carry.
pub(crate) fn rpc_error(s: &tonic::Status) -> String {
    let code = format!("{:?}", s.code());
    format!("rpc error: code = {code} desc = {}", s.message())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_positive_limits_ask_for_devices() {
        let c: k8s::Container = serde_json::from_value(serde_json::json!({
            "name": "app",
            "resources": {"limits": {"example.com/gpu": "2", "example.com/nic": "0", "cpu": "500m"}}
        }))
        .expect("container");
        let limits = device_limits(&c);
        assert_eq!(
            limits,
            [("cpu".to_string(), 1), ("example.com/gpu".to_string(), 2)]
        );
    }
}
