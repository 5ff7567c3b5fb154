//! What the manager knows, without I/O: each resource's devices and their health, the
//! plugins' endpoints and when they stopped, and which devices each container holds.
//! The kubelet's rules: capacity counts every device a plugin listed, allocatable the
//! healthy ones; a plugin that goes away leaves its devices unhealthy for
//! [`STOP_GRACE`], then its resource is reported removed (capacity 0).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tonic::transport::Channel;

use crate::options::ContainerOptions;
use crate::proto::device_plugin_client::DevicePluginClient;

/// How long a stopped plugin's resource stays on the node before it is removed (the
/// kubelet's endpointStopGracePeriod).
pub const STOP_GRACE: Duration = Duration::from_secs(5 * 60);

/// The health a plugin gives a device that may be allocated.
pub const HEALTHY: &str = "Healthy";

/// A set of device IDs.
pub type Ids = BTreeSet<String>;

/// A plugin's endpoint: which registration it is, its client while it runs, when it
/// stopped, and whether it asks for PreStartContainer and offers preferred allocations.
#[derive(Debug, Clone, Default)]
pub struct Endpoint {
    /// Which registration of the resource this is (a plugin may register again).
    pub generation: u64,
    /// The plugin's client (a handle: calls are made outside the state's lock); `None`
    /// once the plugin went away, or for a resource restored from a checkpoint.
    pub client: Option<DevicePluginClient<Channel>>,
    /// When its plugin went away; `None` while it runs.
    pub stopped_at: Option<Instant>,
    /// `DevicePluginOptions.pre_start_required`.
    pub pre_start: bool,
    /// `DevicePluginOptions.get_preferred_allocation_available`.
    pub preferred: bool,
}

/// The devices given to one container for one resource, and what the plugin said the
/// container needs to use them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The device IDs.
    pub ids: Ids,
    /// The plugin's answer to Allocate.
    pub options: ContainerOptions,
}

/// A container of a pod: (pod UID, container name).
pub type ContainerKey = (String, String);

/// What the node status gets: device counts per resource, and the resources gone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capacity {
    /// Every device listed, per resource.
    pub capacity: BTreeMap<String, u64>,
    /// The healthy devices, per resource.
    pub allocatable: BTreeMap<String, u64>,
    /// Resources whose plugin has been gone past [`STOP_GRACE`]: reported once, with
    /// capacity 0 (the kubelet keeps them on the node at 0 rather than dropping them).
    pub removed: Vec<String>,
}

/// Why devices cannot be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocateError {
    /// No plugin ever registered the resource.
    #[error("cannot allocate unregistered device {0}")]
    Unregistered(String),
    /// None of its devices is healthy.
    #[error("no healthy devices present; cannot allocate unhealthy devices {0}")]
    NoneHealthy(String),
    /// Devices given to the container earlier are not healthy any more.
    #[error(
        "previously allocated devices are no longer healthy; cannot allocate unhealthy devices {0}"
    )]
    NoLongerHealthy(String),
    /// Fewer healthy free devices than asked for.
    #[error(
        "requested number of devices unavailable for {resource}. Requested: {requested}, Available: {available}"
    )]
    Unavailable {
        /// The resource.
        resource: String,
        /// How many more were needed.
        requested: usize,
        /// How many were free.
        available: usize,
    },
    /// The container holds a different number of devices than it now asks for.
    #[error(
        "pod {pod:?} container {container:?} changed request for resource {resource:?} from {held} to {wanted}"
    )]
    Changed {
        /// The pod's UID.
        pod: String,
        /// The container.
        container: String,
        /// The resource.
        resource: String,
        /// How many it holds.
        held: usize,
        /// How many it asks for.
        wanted: usize,
    },
    /// The plugin has no endpoint (it never connected, or went away).
    #[error("unknown Device Plugin {0}")]
    UnknownPlugin(String),
    /// A call to the plugin failed.
    #[error("{0}")]
    Plugin(String),
}

/// The manager's state.
#[derive(Debug, Default)]
pub struct State {
    /// The plugins' endpoints, per resource.
    pub endpoints: BTreeMap<String, Endpoint>,
    /// Healthy devices per resource (a resource may be known here and not there).
    healthy: BTreeMap<String, Ids>,
    /// Unhealthy devices per resource.
    unhealthy: BTreeMap<String, Ids>,
    /// What each container holds, per resource.
    pub grants: BTreeMap<ContainerKey, BTreeMap<String, Grant>>,
}

impl State {
    /// A plugin connected for `resource`: its endpoint replaces any earlier one.
    pub fn connected(&mut self, resource: &str, endpoint: Endpoint) {
        self.endpoints.insert(resource.to_owned(), endpoint);
    }

    /// The plugin of registration `generation` went away at `now`: every device of
    /// its resource is unhealthy from now on. A later registration is left alone.
    pub fn disconnected(&mut self, resource: &str, generation: u64, now: Instant) {
        let Some(endpoint) = self.endpoints.get_mut(resource) else {
            return;
        };
        if endpoint.generation != generation {
            return;
        }
        endpoint.stopped_at = Some(now);
        endpoint.client = None;
        let healthy = self.healthy.get_mut(resource).map(std::mem::take);
        let unhealthy = self.unhealthy.entry(resource.to_owned()).or_default();
        unhealthy.extend(healthy.into_iter().flatten());
    }

    /// `resource` was registered before the agent restarted (its checkpoint says so):
    /// it counts no device, its plugin stopped at `now`, until the plugin registers
    /// again (the kubelet's stopped endpoint of a checkpointed resource).
    pub fn restored(&mut self, resource: &str, now: Instant) {
        self.endpoints.insert(
            resource.to_owned(),
            Endpoint {
                stopped_at: Some(now),
                ..Endpoint::default()
            },
        );
        self.healthy.insert(resource.to_owned(), Ids::new());
        self.unhealthy.insert(resource.to_owned(), Ids::new());
    }

    /// The plugin listed its devices (ID and health): they replace the earlier list.
    pub fn listed<'a>(
        &mut self,
        resource: &str,
        devices: impl IntoIterator<Item = (&'a str, bool)>,
    ) {
        let (mut healthy, mut unhealthy) = (Ids::new(), Ids::new());
        for (id, ok) in devices {
            if ok {
                healthy.insert(id.to_owned());
            } else {
                unhealthy.insert(id.to_owned());
            }
        }
        self.healthy.insert(resource.to_owned(), healthy);
        self.unhealthy.insert(resource.to_owned(), unhealthy);
    }

    /// The devices as the node status counts them at `now`; resources whose plugin
    /// stopped more than [`STOP_GRACE`] ago are forgotten and returned as removed.
    pub fn capacity(&mut self, now: Instant) -> Capacity {
        let mut out = Capacity::default();
        let expired = |e: Option<&Endpoint>| {
            e.is_none_or(|e| {
                e.stopped_at
                    .is_some_and(|t| now.duration_since(t) > STOP_GRACE)
            })
        };
        let gone: BTreeSet<String> = self
            .healthy
            .keys()
            .chain(self.unhealthy.keys())
            .filter(|r| expired(self.endpoints.get(*r)))
            .cloned()
            .collect();
        for resource in &gone {
            self.endpoints.remove(resource);
            self.healthy.remove(resource);
            self.unhealthy.remove(resource);
        }
        out.removed = gone.into_iter().collect();
        for (resource, ids) in &self.healthy {
            out.capacity.insert(resource.clone(), ids.len() as u64);
            out.allocatable.insert(resource.clone(), ids.len() as u64);
        }
        for (resource, ids) in &self.unhealthy {
            *out.capacity.entry(resource.clone()).or_default() += ids.len() as u64;
        }
        out
    }

    /// Whether `resource` is one a plugin registered.
    pub fn is_device_resource(&self, resource: &str) -> bool {
        self.healthy.contains_key(resource)
            || self.unhealthy.contains_key(resource)
            || self.endpoints.contains_key(resource)
    }

    /// The registered devices that are healthy, per resource (for the checkpoint).
    pub fn registered(&self) -> BTreeMap<String, Vec<String>> {
        self.healthy
            .iter()
            .map(|(r, ids)| (r.clone(), ids.iter().cloned().collect()))
            .collect()
    }

    /// The devices of `resource` some container holds.
    fn in_use(&self, resource: &str) -> Ids {
        self.grants
            .values()
            .filter_map(|g| g.get(resource))
            .flat_map(|g| g.ids.iter().cloned())
            .collect()
    }

    /// Forgets the grants of pods `keep` says are gone (the kubelet's
    /// UpdateAllocatedDevices). Whether anything was forgotten.
    pub fn retain_pods(&mut self, keep: impl Fn(&str) -> bool) -> bool {
        let before = self.grants.len();
        self.grants.retain(|(pod, _), _| keep(pod));
        self.grants.len() != before
    }

    /// Which devices of `resource` the container `key` still needs for `wanted` in all
    /// (the kubelet's devicesToAllocate, without NUMA alignment): `Ok(None)` when it
    /// holds them already; otherwise devices taken first from `reusable` (what the
    /// pod's finished init containers held), then the free healthy ones, in `order`'s
    /// preference and then by ID.
    pub fn choose(
        &self,
        key: &ContainerKey,
        resource: &str,
        wanted: usize,
        reusable: &Ids,
        preferred: &[String],
    ) -> Result<Option<Ids>, AllocateError> {
        let held = self.grants.get(key).and_then(|g| g.get(resource));
        if let Some(held) = held
            && held.ids.len() != wanted
        {
            return Err(AllocateError::Changed {
                pod: key.0.clone(),
                container: key.1.clone(),
                resource: resource.to_owned(),
                held: held.ids.len(),
                wanted,
            });
        }
        let healthy = self
            .healthy
            .get(resource)
            .ok_or_else(|| AllocateError::Unregistered(resource.to_owned()))?;
        if healthy.is_empty() {
            return Err(AllocateError::NoneHealthy(resource.to_owned()));
        }
        if let Some(held) = held {
            return if held.ids.is_subset(healthy) {
                Ok(None)
            } else {
                Err(AllocateError::NoLongerHealthy(resource.to_owned()))
            };
        }
        let mut chosen = Ids::new();
        for id in reusable.iter().take(wanted) {
            chosen.insert(id.clone());
        }
        if chosen.len() == wanted {
            return Ok(Some(chosen));
        }
        let in_use = self.in_use(resource);
        let free: Vec<&String> = healthy.iter().filter(|id| !in_use.contains(*id)).collect();
        let needed = wanted - chosen.len();
        if free.len() < needed {
            return Err(AllocateError::Unavailable {
                resource: resource.to_owned(),
                requested: needed,
                available: free.len(),
            });
        }
        let by_preference = preferred
            .iter()
            .filter(|id| free.contains(id))
            .chain(free.iter().copied());
        for id in by_preference {
            if chosen.len() == wanted {
                break;
            }
            chosen.insert(id.clone());
        }
        Ok(Some(chosen))
    }

    /// The free healthy devices of `resource` (what a preferred allocation picks from).
    pub fn free(&self, resource: &str) -> Ids {
        let in_use = self.in_use(resource);
        self.healthy
            .get(resource)
            .map(|h| h.difference(&in_use).cloned().collect())
            .unwrap_or_default()
    }

    /// Records that container `key` holds `grant` of `resource`.
    pub fn grant(&mut self, key: ContainerKey, resource: &str, grant: Grant) {
        self.grants
            .entry(key)
            .or_default()
            .insert(resource.to_owned(), grant);
    }
}

#[cfg(test)]
mod tests;
