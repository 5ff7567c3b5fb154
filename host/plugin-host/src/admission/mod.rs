//! Admission policies: [`AdmissionPlugin`], which decides on reused or fresh instances;
//! what it decides on ([`input`]) is lent to the guest as `pod-view` and `node-view`
//! ([`views`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use wasmtime::Store;

use crate::backend::World;
use crate::bindings;
use crate::bindings::exports::wasmlet::plugin::admission::Verdict;
use crate::call::plugin_store;
use crate::engine::PluginEngine;
use crate::error::PluginError;
use crate::host::PluginState;
use crate::limits::{InstanceMode, Limits};
use crate::loaded::{CallResult, Loaded, Plugin};

pub(crate) mod input;
mod views;

pub use input::{Admission, NodeLoad};
use views::lent;

/// Idle instances kept per plugin in [`InstanceMode::Reused`].
const IDLE_PER_PLUGIN: usize = 8;

/// How long a reused instance is kept unused before it is dropped. A node admits in
/// bursts (a node starting, a deployment scaled): the instances a burst made are given
/// back once it is over — for a Python or JavaScript policy each holds megabytes of its
/// interpreter's heap — and the first decision after a quiet spell makes a new one.
pub const IDLE_INSTANCE_LIFETIME: std::time::Duration = std::time::Duration::from_secs(10);

/// A loaded admission policy.
pub struct AdmissionPlugin {
    policy: Arc<Policy>,
}

/// What an [`AdmissionPlugin`] is; shared with the background tasks that prepare its
/// next fresh instances.
struct Policy {
    loaded: Loaded,
    pre: bindings::AdmissionPolicyPre<PluginState>,
    /// Instances kept between calls ([`InstanceMode::Reused`]).
    idle: std::sync::Mutex<Vec<Warm>>,
    /// Instances made ahead of calls and never called yet ([`InstanceMode::PerCall`]).
    spares: std::sync::Mutex<Vec<Warm>>,
    /// Whether a background task is tearing down a used instance and making a spare.
    retiring: AtomicBool,
    /// Whether a background task is dropping idle instances as they expire.
    expiring: AtomicBool,
}

impl Plugin for AdmissionPlugin {
    fn loaded(&self) -> &Loaded {
        &self.policy.loaded
    }
}

/// An instance with its store: kept for reuse, or made ahead as a spare.
struct Warm {
    store: Store<PluginState>,
    bindings: bindings::AdmissionPolicy,
    /// When its last call ended (when it was made, for a spare).
    used_at: tokio::time::Instant,
}

/// Fresh instances made ahead per [`InstanceMode::PerCall`] policy: decisions that come
/// one after another each find one ready; calls that overlap make their own.
const SPARES: usize = 1;

impl std::fmt::Debug for AdmissionPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionPlugin")
            .field("name", &self.name())
            .field("limits", self.limits())
            .finish()
    }
}

/// Takes an instance from `list`, if it has one.
fn take(list: &std::sync::Mutex<Vec<Warm>>) -> Option<Warm> {
    list.lock().unwrap_or_else(|e| e.into_inner()).pop()
}

/// Puts an instance into `list` unless it already holds `max`.
fn keep(list: &std::sync::Mutex<Vec<Warm>>, warm: Warm, max: usize) {
    let mut list = list.lock().unwrap_or_else(|e| e.into_inner());
    if list.len() < max {
        list.push(warm);
    }
}

impl Policy {
    /// A new instance in a new store with this plugin's limits and the deadline
    /// callback: every epoch tick the guest yields to the async runtime (a long call
    /// never starves the other tasks) and is cut off once its call's deadline has passed.
    async fn instantiate(&self) -> Result<Warm, PluginError> {
        let started = std::time::Instant::now();
        let l = &self.loaded;
        let _running = l.running();
        let mut store = plugin_store(&l.engine, l.state(l.limits.deadline, None));
        let made = self.pre.instantiate_async(&mut store).await;
        let bindings = l.finish(&mut store, "admit", l.limits.deadline, made)?;
        self.loaded.instantiated(started);
        Ok(Warm {
            store,
            bindings,
            used_at: tokio::time::Instant::now(),
        })
    }

    /// Drops the idle instances unused for [`IDLE_INSTANCE_LIFETIME`], on a background
    /// task that lives while there are idle instances (one per plugin; none without a
    /// runtime, where instances are simply kept). It holds the policy weakly: an
    /// unloaded policy's instances go with it.
    fn expire_idle(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.expiring.swap(true, Ordering::AcqRel) {
            return;
        }
        let policy = Arc::downgrade(self);
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(IDLE_INSTANCE_LIFETIME).await;
                let Some(policy) = policy.upgrade() else {
                    return;
                };
                let now = tokio::time::Instant::now();
                let mut idle = policy.idle.lock().unwrap_or_else(|e| e.into_inner());
                idle.retain(|w| now.duration_since(w.used_at) < IDLE_INSTANCE_LIFETIME);
                if idle.is_empty() {
                    drop(idle);
                    policy.page_out_code();
                    // An instance kept from here on starts a task of its own.
                    policy.expiring.store(false, Ordering::Release);
                    return;
                }
            }
        });
    }

    /// Once a large plugin has no instance left, the pages of its compiled code (and of
    /// its memory image, mapped from the same cache entry) leave the agent's resident
    /// memory until its next call reads them back: a Python or JavaScript policy's
    /// interpreter kept 20–30 MB resident that a node admitting a pod now and then does
    /// not need in between. Small plugins keep theirs (a megabyte at most, read on every
    /// admission); one compiled without a cache has no file to read its pages back from,
    /// and keeps them too.
    fn page_out_code(&self) {
        let image = self.pre.instance_pre().component().image_range();
        let size = image.end as usize - image.start as usize;
        if size >= crate::backend::BASELINE_FROM_BYTES {
            let bytes = crate::memory::page_out_file_at(image.start);
            tracing::debug!(
                plugin = &*self.loaded.name,
                bytes,
                "an idle plugin's code paged out"
            );
        }
    }

    /// Makes a spare fresh instance for a later call, unless there are enough.
    async fn make_spare(&self) {
        if self.spares.lock().unwrap_or_else(|e| e.into_inner()).len() >= SPARES {
            return;
        }
        match self.instantiate().await {
            Ok(spare) => keep(&self.spares, spare, SPARES),
            // The next call instantiates for itself and reports the error.
            Err(e) => tracing::debug!(plugin = &*self.loaded.name, "spare instance: {e}"),
        }
    }
}

impl AdmissionPlugin {
    /// Instances kept for reuse between calls ([`InstanceMode::Reused`]: at most 8,
    /// each dropped once unused for [`IDLE_INSTANCE_LIFETIME`]).
    pub fn idle_instances(&self) -> usize {
        self.policy
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Fresh instances made ahead and not yet used ([`InstanceMode::PerCall`]: at most
    /// one, made on a background task after a call).
    pub fn spare_instances(&self) -> usize {
        self.policy
            .spares
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Decides on `admission`, in a fresh instance or a reused one as its limits say.
    pub async fn admit(&self, admission: &Arc<Admission>) -> Result<Verdict, PluginError> {
        let started = std::time::Instant::now();
        let result = self.decide(admission).await;
        self.policy.loaded.record(
            started,
            match &result {
                Ok(Verdict::Admit) => CallResult::Passed,
                Ok(Verdict::Reject(_)) => CallResult::Failed,
                Err(_) => CallResult::Error,
            },
        );
        result
    }

    /// One decision. A reused instance goes back to the idle list when its call
    /// succeeded. A fresh instance serves one call only: a spare made ahead of the call
    /// when there is one (instantiating is then off the decision's path), and once
    /// the call is over, the used instance is torn down and the next spare made on a
    /// background task.
    async fn decide(&self, admission: &Arc<Admission>) -> Result<Verdict, PluginError> {
        const CALL: &str = "admit";
        let policy = &self.policy;
        let _running = policy.loaded.running();
        let limits = self.limits();
        let reuse = limits.instances == InstanceMode::Reused;
        let ready = take(if reuse { &policy.idle } else { &policy.spares });
        let mut warm = match ready {
            Some(mut warm) => {
                warm.store.data_mut().deadline_at = std::time::Instant::now() + limits.deadline;
                warm
            }
            None => policy.instantiate().await?,
        };
        warm.store.set_epoch_deadline(1);
        warm.store.data_mut().admission = Some(admission.clone());
        let verdict = warm
            .bindings
            .wasmlet_plugin_admission()
            .call_admit(&mut warm.store, lent(), lent())
            .await;
        let verdict = policy
            .loaded
            .finish(&mut warm.store, CALL, limits.deadline, verdict);
        warm.store.data_mut().admission = None;
        if reuse {
            // Only an instance whose call succeeded goes back; a trapped one is dropped.
            if verdict.is_ok() {
                warm.used_at = tokio::time::Instant::now();
                keep(&policy.idle, warm, IDLE_PER_PLUGIN);
                policy.expire_idle();
            }
        } else {
            self.retire(warm);
        }
        verdict
    }

    /// Tears down a used fresh instance and makes the next spare on a background task,
    /// so that the caller waits for neither. One such task at a time: when decisions
    /// come faster than it works (or there is no runtime to run it), the caller tears
    /// its instance down itself and the next call instantiates for itself — used
    /// instances never pile up.
    fn retire(&self, used: Warm) {
        let policy = &self.policy;
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(runtime) if !policy.retiring.swap(true, Ordering::AcqRel) => runtime,
            _ => return drop(used),
        };
        let policy = policy.clone();
        runtime.spawn(async move {
            drop(used);
            policy.make_spare().await;
            policy.retiring.store(false, Ordering::Release);
        });
    }
}

impl PluginEngine {
    /// Compiles the component at `path` as admission policy `name`, checking that it
    /// implements the `admission-policy` world.
    pub fn load_admission(
        &self,
        name: &str,
        path: &Path,
        config: BTreeMap<String, String>,
        limits: Limits,
    ) -> Result<AdmissionPlugin, PluginError> {
        let (loaded, pre) = self.load_as(
            name,
            path,
            World::Admission,
            config,
            limits,
            bindings::AdmissionPolicyPre::new,
        )?;
        Ok(AdmissionPlugin {
            policy: Arc::new(Policy {
                loaded,
                pre,
                idle: std::sync::Mutex::new(Vec::new()),
                spares: std::sync::Mutex::new(Vec::new()),
                retiring: AtomicBool::new(false),
                expiring: AtomicBool::new(false),
            }),
        })
    }
}
