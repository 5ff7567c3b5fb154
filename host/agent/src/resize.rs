//! The allocation manager of in-place pod resize (the kubelet 1.33's
//! `pkg/kubelet/allocation`): what the node granted each pod's resizable containers
//! (its allocation) and what each running container was last given (its actuated
//! resources), both kept in a checkpoint under the root directory so that an agent
//! restart neither re-decides a resize nor resizes again what is already sized.
//!
//! The decisions are [`wasmlet_core::resize`]'s; this keeps the state, finds the room
//! the other pods leave, and says what each pod's resize conditions are.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1 as k8s;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};
use wasmlet_core::cgroups::values::effective_requests;
use wasmlet_core::quantity::parse_quantity;
use wasmlet_core::resize::{self, Allocation, Amounts, Decision, Pending, Room};

/// The checkpoint's file name under the root directory.
pub const CHECKPOINT: &str = "wasmlet_allocated_pods_state.json";

/// What is kept: allocations and actuated resources, by pod UID.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    allocated: BTreeMap<String, Allocation>,
    actuated: BTreeMap<String, BTreeMap<String, Amounts>>,
    /// The active pods' effective requests under their allocations (CPU millicores,
    /// memory bytes): the room a resize is checked against.
    #[serde(skip)]
    active: BTreeMap<String, (u64, u64)>,
}

/// A pod's resize as its status shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conditions {
    /// `PodResizePending` (reason, message).
    pub pending: Option<(String, String)>,
    /// `PodResizeInProgress` (reason, message; both empty while it goes well).
    pub in_progress: Option<(String, String)>,
}

/// Allocations of every pod the agent runs.
pub struct Allocations {
    path: Option<PathBuf>,
    /// Changed since last written: a new pod's allocation and what a container was
    /// created with are written with the next [`Allocations::flush`] (housekeeping), not
    /// one file write per container start; a resize allocated is written at once.
    dirty: std::sync::atomic::AtomicBool,
    /// The node's allocatable CPU (millicores) and memory (bytes).
    allocatable: (u64, u64),
    state: Mutex<State>,
}

/// A pod's allocated resources, as the runtime was last told and as granted.
#[derive(Debug, Clone)]
pub struct Allocated {
    /// The pod as it runs: its spec with the allocated resources.
    pub pod: Arc<k8s::Pod>,
    /// Whether that differs from the spec as asked.
    pub differs: bool,
    /// Why a resize asked for waits.
    pub pending: Option<Pending>,
}

fn allocatable(
    list: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> (u64, u64) {
    let get = |name: &str, scale: i32| {
        list.get(name)
            .and_then(|q| parse_quantity(&q.0, scale).ok())
            .unwrap_or(u64::MAX)
    };
    (get("cpu", 3), get("memory", 0))
}

impl Allocations {
    /// The allocations kept under `root_dir` (none kept when `None`: tests), for a node
    /// whose allocatable resources are `allocatable`.
    pub fn load(
        root_dir: Option<&Path>,
        allocatable: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    ) -> Self {
        let path = root_dir.map(|d| d.join(CHECKPOINT));
        let state = path
            .as_deref()
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|bytes| match serde_json::from_slice::<State>(&bytes) {
                Ok(s) => Some(s),
                Err(e) => {
                    warn!("{CHECKPOINT}: not read ({e}); allocations start over");
                    None
                }
            })
            .unwrap_or_default();
        Allocations {
            path,
            dirty: std::sync::atomic::AtomicBool::new(false),
            allocatable: self::allocatable(allocatable),
            state: Mutex::new(state),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the state to be written at the next flush.
    fn save_soon(&self) {
        self.dirty.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Writes the checkpoint if anything changed since it was last written.
    pub fn flush(&self) {
        if self.dirty.swap(false, std::sync::atomic::Ordering::Relaxed) {
            let state = self.lock();
            self.save(&state);
        }
    }

    /// Writes the checkpoint (a failure is logged: the state stays in memory).
    fn save(&self, state: &State) {
        let Some(path) = &self.path else {
            return;
        };
        let written = serde_json::to_vec(state)
            .map_err(|e| e.to_string())
            .and_then(|bytes| {
                let tmp = path.with_extension("tmp");
                std::fs::write(&tmp, bytes)
                    .and_then(|()| std::fs::rename(&tmp, path))
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = written {
            warn!(path = %path.display(), "allocation checkpoint not written: {e}");
        }
    }

    /// The room the pods other than `uid` leave.
    fn room(&self, state: &State, uid: &str) -> Room {
        let (cpu_used, memory_used) = state
            .active
            .iter()
            .filter(|(u, _)| *u != uid)
            .fold((0, 0), |(c, m), (_, (pc, pm))| (c + pc, m + pm));
        Room {
            cpu: self.allocatable.0,
            memory: self.allocatable.1,
            cpu_used,
            memory_used,
        }
    }

    /// The pod `desired` runs as: a new pod gets its spec as its allocation; a resize
    /// (the spec asking for other resources than allocated) is allocated when it fits
    /// beside the other pods, else it waits and the pod keeps its allocation.
    pub fn allocate(&self, desired: &Arc<k8s::Pod>) -> Allocated {
        let uid = wasmlet_core::pod::uid(desired).to_owned();
        let mut state = self.lock();
        let Some(allocation) = state.allocated.get(&uid).cloned() else {
            state
                .allocated
                .insert(uid.clone(), resize::allocation_of(desired));
            state.active.insert(uid, effective_requests(desired));
            self.save_soon();
            return Allocated {
                pod: desired.clone(),
                differs: false,
                pending: None,
            };
        };
        if resize::allocated_pod(desired, &allocation).is_none() {
            // The common case: the spec is the allocation (no resize, or one applied;
            // its requests were counted when it was allocated).
            state
                .active
                .entry(uid)
                .or_insert_with(|| effective_requests(desired));
            return Allocated {
                pod: desired.clone(),
                differs: false,
                pending: None,
            };
        }
        let room = self.room(&state, &uid);
        let pending = match resize::decide(desired, &allocation, room) {
            Decision::Unchanged => None,
            Decision::Allocate => {
                info!(pod = %wasmlet_core::pod::PodKey::of(desired), "resize allocated");
                state
                    .allocated
                    .insert(uid.clone(), resize::allocation_of(desired));
                self.save(&state);
                None
            }
            Decision::Pending(p) => Some(p),
        };
        let allocation = &state.allocated[&uid];
        let running = resize::allocated_pod(desired, allocation).map(Arc::new);
        let pod = running.clone().unwrap_or_else(|| desired.clone());
        state.active.insert(uid, effective_requests(&pod));
        Allocated {
            pod,
            differs: running.is_some(),
            pending,
        }
    }

    /// What container `name` of pod `uid` was last given.
    pub fn actuated(&self, uid: &str, name: &str) -> Option<Amounts> {
        self.lock().actuated.get(uid)?.get(name).copied()
    }

    /// Records what container `name` of pod `uid` was given (created with, or updated
    /// to).
    pub fn set_actuated(&self, uid: &str, name: &str, amounts: Amounts) {
        let mut state = self.lock();
        let entry = state.actuated.entry(uid.to_owned()).or_default();
        if entry.get(name) == Some(&amounts) {
            return;
        }
        entry.insert(name.to_owned(), amounts);
        self.save_soon();
    }

    /// The pod no longer runs: its requests leave the room others may take.
    pub fn deactivate(&self, uid: &str) {
        self.lock().active.remove(uid);
    }

    /// Forgets pod `uid` (removed).
    pub fn remove(&self, uid: &str) {
        let mut state = self.lock();
        let had = state.allocated.remove(uid).is_some() | state.actuated.remove(uid).is_some();
        state.active.remove(uid);
        if had {
            self.save_soon();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(cpu: &str) -> Arc<k8s::Pod> {
        let mut p: k8s::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}
        }))
        .expect("pod");
        wasmlet_core::pod::make_api(&mut p);
        Arc::new(p)
    }

    fn node() -> BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
        [("cpu", "2"), ("memory", "4Gi")]
            .into_iter()
            .map(|(k, v)| {
                (
                    k.to_owned(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.into()),
                )
            })
            .collect()
    }

    #[test]
    fn allocations_and_actuated_resources_survive_a_restart() {
        let dir = std::env::temp_dir().join(format!("wasmlet-alloc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let a = Allocations::load(Some(&dir), &node());
        assert!(
            !a.allocate(&pod("500m")).differs,
            "a new pod's spec is its allocation"
        );
        a.set_actuated(
            "u1",
            "c",
            Amounts::of(
                pod("500m")
                    .spec
                    .as_ref()
                    .and_then(|s| s.containers[0].resources.as_ref()),
            ),
        );
        let unwritten = Allocations::load(Some(&dir), &node());
        assert_eq!(
            unwritten.actuated("u1", "c"),
            None,
            "written at the next flush"
        );
        a.flush();
        drop(a);
        let again = Allocations::load(Some(&dir), &node());
        assert_eq!(again.actuated("u1", "c").map(|x| x.cpu_limit), Some(500));
        // Asked for more than the node has: still the allocation kept before.
        let too_big = again.allocate(&pod("3"));
        assert!(too_big.differs);
        assert_eq!(too_big.pending.map(|p| p.reason), Some("Infeasible"));
        // A resize that fits becomes the allocation, kept too.
        assert!(!again.allocate(&pod("1")).differs);
        drop(again);
        let third = Allocations::load(Some(&dir), &node());
        assert!(third.allocate(&pod("500m")).pending.is_none(), "500m fits");
        third.remove("u1");
        assert_eq!(third.actuated("u1", "c"), None);
        std::fs::remove_dir_all(&dir).expect("clean");
    }
}
