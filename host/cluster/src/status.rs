//! The status sync: the agent's pod statuses written to the API server.
//!
//! - Pods from the API server get their status as a merge PATCH of
//!   `pods/NAME/status` carrying `metadata.uid` (a pod deleted and created again under
//!   the same name is not patched: the UID differs and the API server answers 409).
//! - Static pods get a mirror pod ([`crate::mirror`]) created, replaced when the static
//!   pod changes or the mirror pod is deleted through the API, and deleted when the
//!   static pod goes; their status goes to the mirror pod. As with the kubelet, a static
//!   pod whose manifest went away or changed keeps the mirror pod (and its status goes
//!   there) until its containers have stopped; the next version waits until then.
//! - A pod the API server deletes is deleted for good — `gracePeriodSeconds: 0` with a
//!   UID precondition, the kubelet's final delete — once its containers and sandbox are
//!   gone and its last status is sent.
//!
//! Every status change raises the pod's version in the agent's status manager. A pod
//! has at most one request in flight; its body is the newest status at the moment the
//! rate limiter (kubeAPIQPS / kubeAPIBurst) lets it go, and when it ends the pod is
//! looked at again: bursts coalesce, and an older status can never overwrite a newer
//! one. A status equal to the one sent is not sent again. A new pod's first status waits
//! for its first sync (at most [`HOLD_FIRST`]): a pod that starts at once reports
//! Running in one patch instead of Pending and then Running; a pod refused at admission
//! has its final status already and never syncs, so it is written at once. Whatever
//! failed is tried again on the next resync, every [`RESYNC`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use wasmlet_agent::statuses::{PodEntry, StatusManager};
use wasmlet_core::pod::{self, PodKey};

use crate::mirror::{self, MirrorPods};
use crate::ratelimit::RateLimiter;

/// How often everything not in step with the API server is tried again.
pub const RESYNC: Duration = Duration::from_secs(10);
/// The most requests in flight at once.
const MAX_IN_FLIGHT: usize = 32;
/// The longest a new pod's first status waits for its first sync.
pub const HOLD_FIRST: Duration = Duration::from_secs(1);

/// Whether every pod source has reported at least once: until then, a mirror pod
/// without its static pod may only mean the static pod is not read yet.
pub type SourcesReady = Arc<dyn Fn() -> bool + Send + Sync>;

/// What the sync needs.
pub struct StatusSync {
    /// The API server.
    pub client: kube::Client,
    /// The agent's statuses.
    pub statuses: Arc<StatusManager>,
    /// The mirror pods the pod watch shows.
    pub mirrors: Arc<MirrorPods>,
    /// The registered Node, as an owner reference (mirror pods wait for it).
    pub owner: watch::Receiver<Option<OwnerReference>>,
    /// Whether all pod sources have reported.
    pub sources_ready: SourcesReady,
    /// The client rate limiter.
    pub limiter: Arc<RateLimiter>,
}

/// What the API server has of one pod, as far as this sync knows.
#[derive(Debug, Default)]
struct Synced {
    /// The status version the API server has.
    sent: u64,
    /// The object it went to (the pod's UID, or its mirror pod's).
    sent_to: Option<String>,
    /// The status as last sent (fields it had and the new one lacks are cleared).
    base: Option<Value>,
    /// A request is in flight.
    in_flight: bool,
    /// The object is gone from the API server, or is another pod now: nothing more to
    /// send.
    gone: bool,
    /// The final delete is done.
    deleted: bool,
    /// The mirror pod this sync created, until the watch shows it.
    mirror: Option<k8s::Pod>,
}

/// A request to make.
enum Job {
    /// PATCH `pods/NAME/status` of `target` with the agent's newest status of pod
    /// `uid`; fields of `base` the status lacks are cleared.
    Patch {
        target: Target,
        uid: String,
        base: Option<Value>,
    },
    /// The final delete of a pod the API server deleted.
    Delete(Target),
    /// Create the mirror pod, deleting a stale one first.
    Mirror {
        stale: Option<Target>,
        create: Box<k8s::Pod>,
    },
    /// Delete a mirror pod whose static pod is gone.
    Orphan(Target),
}

/// An API object: namespace, name, UID.
#[derive(Debug, Clone)]
struct Target {
    namespace: String,
    name: String,
    uid: String,
}

impl Target {
    fn of(p: &k8s::Pod) -> Self {
        Target {
            namespace: p.metadata.namespace.clone().unwrap_or_default(),
            name: p.metadata.name.clone().unwrap_or_default(),
            uid: p.metadata.uid.clone().unwrap_or_default(),
        }
    }
}

/// How a request ended.
enum Done {
    Patched {
        version: u64,
        to: String,
        status: Value,
    },
    Deleted,
    MirrorCreated(Box<k8s::Pod>),
    OrphanDeleted,
    /// 404, or 409 on the UID: the object is not (or no longer) the one meant.
    Gone,
    Failed,
    /// Nothing was sent (the pod went meanwhile).
    Skipped,
}

fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// The merge patch for `status` on the object with UID `uid`: fields `base` had that
/// `status` lacks are set to null (cleared).
pub fn patch_body(uid: &str, status: &Value, base: Option<&Value>) -> Value {
    let mut status = status.clone();
    if let (Some(Value::Object(old)), Value::Object(new)) = (base, &mut status) {
        for k in old.keys() {
            if !new.contains_key(k) {
                new.insert(k.clone(), Value::Null);
            }
        }
    }
    json!({"metadata": {"uid": uid}, "status": status})
}

fn delete_params(uid: &str) -> DeleteParams {
    DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..Default::default()
    }
}

async fn perform(
    client: kube::Client,
    limiter: Arc<RateLimiter>,
    statuses: Arc<StatusManager>,
    job: Job,
) -> Done {
    limiter.acquire().await;
    match job {
        Job::Patch { target, uid, base } => {
            // The newest status now, not the one when the request was planned.
            let Some(entry) = statuses.get(&uid) else {
                return Done::Skipped;
            };
            patch_status(&client, target, entry.version, &entry.status, base.as_ref()).await
        }
        Job::Delete(target) => match delete(&client, &target).await {
            Ok(()) => {
                info!(namespace = %target.namespace, pod = %target.name, "Pod fully terminated and removed from etcd");
                Done::Deleted
            }
            Err(e) => {
                warn!(pod = %target.name, error = %e, "the final delete failed; retrying");
                Done::Failed
            }
        },
        Job::Mirror { stale, create } => mirror(&client, &limiter, stale, create).await,
        Job::Orphan(target) => match delete(&client, &target).await {
            Ok(()) => {
                info!(namespace = %target.namespace, pod = %target.name, "deleted the mirror pod of a static pod that is gone");
                Done::OrphanDeleted
            }
            Err(e) => {
                warn!(pod = %target.name, error = %e, "deleting an orphaned mirror pod failed; retrying");
                Done::Failed
            }
        },
    }
}

/// Deletes `target` (its UID a precondition); gone already, or replaced, is done.
async fn delete(client: &kube::Client, target: &Target) -> Result<(), kube::Error> {
    let api = Api::<k8s::Pod>::namespaced(client.clone(), &target.namespace);
    match api.delete(&target.name, &delete_params(&target.uid)).await {
        Ok(_) => Ok(()),
        Err(e) if matches!(code(&e), Some(404 | 409)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// PATCHes `target`'s status with `status` (version `version` of the agent's), the
/// fields of `base` it lacks cleared.
async fn patch_status(
    client: &kube::Client,
    target: Target,
    version: u64,
    status: &k8s::PodStatus,
    base: Option<&Value>,
) -> Done {
    let status = serde_json::to_value(status).unwrap_or(Value::Null);
    let body = patch_body(&target.uid, &status, base);
    let r = Api::<k8s::Pod>::namespaced(client.clone(), &target.namespace)
        .patch_status(&target.name, &PatchParams::default(), &Patch::Merge(&body))
        .await;
    match r {
        Ok(_) => Done::Patched {
            version,
            to: target.uid,
            status,
        },
        Err(e) if matches!(code(&e), Some(404 | 409)) => {
            debug!(pod = %target.name, error = %e, "the pod is gone or was replaced; its status is not sent");
            Done::Gone
        }
        Err(e) => {
            warn!(namespace = %target.namespace, pod = %target.name, error = %e, "Failed to update status for pod; retrying");
            Done::Failed
        }
    }
}

/// Creates the mirror pod `create`, deleting the `stale` one first.
async fn mirror(
    client: &kube::Client,
    limiter: &RateLimiter,
    stale: Option<Target>,
    create: Box<k8s::Pod>,
) -> Done {
    let ns = create.metadata.namespace.clone().unwrap_or_default();
    let api = Api::<k8s::Pod>::namespaced(client.clone(), &ns);
    if let Some(stale) = stale {
        info!(pod = %stale.name, "deleting a mirror pod that no longer matches its static pod");
        if let Err(e) = api.delete(&stale.name, &delete_params(&stale.uid)).await
            && code(&e) != Some(404)
        {
            warn!(pod = %stale.name, error = %e, "deleting the old mirror pod failed; retrying");
            return Done::Failed;
        }
        limiter.acquire().await;
    }
    match api.create(&PostParams::default(), &create).await {
        Ok(created) => {
            info!(namespace = %ns, pod = created.metadata.name.as_deref().unwrap_or(""), "created the mirror pod");
            Done::MirrorCreated(Box::new(created))
        }
        Err(e) => {
            warn!(pod = create.metadata.name.as_deref().unwrap_or(""), error = %e, "creating the mirror pod failed; retrying");
            Done::Failed
        }
    }
}

/// The sync's state, one task.
struct Syncer {
    settings: StatusSync,
    synced: HashMap<String, Synced>,
    /// Mirror pods being deleted as orphans, by `namespace/name`.
    orphans: HashSet<String>,
    /// Pods to look at.
    pending: HashSet<String>,
    /// When held first statuses are due to be looked at again.
    recheck: Option<tokio::time::Instant>,
    tasks: JoinSet<(String, Done)>,
}

impl Syncer {
    /// The request pod `uid` needs now, if any.
    fn plan(&mut self, uid: &str, entry: &PodEntry) -> Option<Job> {
        let synced = self.synced.entry(uid.to_owned()).or_default();
        if synced.gone {
            return None;
        }
        // A new pod's first status waits for its first sync (or HOLD_FIRST); a rejected
        // pod's is final.
        let hold_until = entry.seen + HOLD_FIRST;
        let held = synced.sent == 0
            && !entry.first_synced
            && !entry.rejected
            && !pod::is_deleted(&entry.pod)
            && tokio::time::Instant::now() < hold_until;
        if held {
            self.recheck = Some(self.recheck.map_or(hold_until, |r| r.min(hold_until)));
        }
        if !pod::is_static(&entry.pod) {
            if entry.version > synced.sent && entry.version > 0 {
                if held {
                    return None;
                }
                let base = synced.base.clone().or_else(|| {
                    entry
                        .pod
                        .status
                        .as_ref()
                        .and_then(|s| serde_json::to_value(s).ok())
                });
                return Some(Job::Patch {
                    target: Target::of(&entry.pod),
                    uid: uid.to_owned(),
                    base,
                });
            }
            if pod::is_deleted(&entry.pod) && entry.reclaimed && !synced.deleted {
                return Some(Job::Delete(Target::of(&entry.pod)));
            }
            return None;
        }
        self.plan_static(uid, entry, held)
    }

    /// A static pod: its mirror pod first, then the status on it.
    fn plan_static(&mut self, uid: &str, entry: &PodEntry, held: bool) -> Option<Job> {
        let owner = self.settings.owner.borrow().clone()?;
        if !self.settings.mirrors.listed() {
            return None;
        }
        let name = PodKey::of(&entry.pod).full_name();
        if !entry.retired && self.settings.statuses.retiring(&name, uid) {
            // The mirror pod is the previous version's until that has stopped.
            return None;
        }
        let synced = self.synced.entry(uid.to_owned()).or_default();
        let seen = self.settings.mirrors.get(&name);
        if seen.is_some() {
            synced.mirror = None;
        }
        let Some(current) = seen.or_else(|| synced.mirror.clone()) else {
            if entry.retired {
                return None;
            }
            return Some(Job::Mirror {
                stale: None,
                create: Box::new(mirror::object(&entry.pod, &owner)),
            });
        };
        if !mirror::matches(&current, &entry.pod) {
            if entry.retired {
                // Stopping, and its mirror pod is another's or being deleted: leave it.
                return None;
            }
            // Another version's, or deleted through the API (the kubelet's way: deleted
            // at once, precondition on its UID, and made again).
            return Some(Job::Mirror {
                stale: Some(Target::of(&current)),
                create: Box::new(mirror::object(&entry.pod, &owner)),
            });
        }
        let target = Target::of(&current);
        let moved = synced.sent_to.as_deref() != Some(target.uid.as_str());
        if entry.version > 0 && (entry.version > synced.sent || moved) && !held {
            let base = if moved {
                current
                    .status
                    .as_ref()
                    .and_then(|s| serde_json::to_value(s).ok())
            } else {
                synced.base.clone()
            };
            return Some(Job::Patch {
                target,
                uid: uid.to_owned(),
                base,
            });
        }
        None
    }

    /// Mirror pods whose static pod is gone: deleted (once every source has reported).
    fn orphan_jobs(&mut self) -> Vec<(String, Job)> {
        if !self.settings.mirrors.listed() || !(self.settings.sources_ready)() {
            return Vec::new();
        }
        // A retired static pod's mirror stays until it has stopped.
        let wanted = self.settings.statuses.static_names();
        let mut jobs = Vec::new();
        for m in self.settings.mirrors.all() {
            let name = PodKey::of(&m).full_name();
            if wanted.contains(&name) || self.orphans.contains(&name) {
                continue;
            }
            self.orphans.insert(name.clone());
            jobs.push((format!("mirror:{name}"), Job::Orphan(Target::of(&m))));
        }
        jobs
    }

    fn spawn(&mut self, key: String, job: Job) {
        let client = self.settings.client.clone();
        let limiter = self.settings.limiter.clone();
        let statuses = self.settings.statuses.clone();
        self.tasks
            .spawn(async move { (key, perform(client, limiter, statuses, job).await) });
    }

    /// Starts what the pending pods need, as far as the in-flight limit allows.
    fn start(&mut self) {
        let pending: Vec<String> = self.pending.iter().cloned().collect();
        for uid in pending {
            if self.tasks.len() >= MAX_IN_FLIGHT {
                return;
            }
            self.pending.remove(&uid);
            let Some(entry) = self.settings.statuses.get(&uid) else {
                // Removed from the agent: forget it (its mirror pod, if any, is an
                // orphan now).
                if self.synced.get(&uid).is_some_and(|s| s.in_flight) {
                    self.pending.insert(uid);
                } else {
                    self.synced.remove(&uid);
                }
                continue;
            };
            if self.synced.get(&uid).is_some_and(|s| s.in_flight) {
                continue;
            }
            if let Some(job) = self.plan(&uid, &entry) {
                if let Some(s) = self.synced.get_mut(&uid) {
                    s.in_flight = true;
                }
                self.spawn(uid, job);
            }
        }
    }

    fn finished(&mut self, key: String, done: Done) {
        if let Some(name) = key.strip_prefix("mirror:") {
            self.orphans.remove(name);
            return;
        }
        let Some(s) = self.synced.get_mut(&key) else {
            return;
        };
        s.in_flight = false;
        match done {
            Done::Patched {
                version,
                to,
                status,
            } => {
                s.sent = version;
                s.sent_to = Some(to);
                s.base = Some(status);
            }
            Done::Deleted => s.deleted = true,
            Done::MirrorCreated(created) => {
                s.mirror = Some(*created);
                s.sent_to = None;
                s.base = None;
            }
            Done::OrphanDeleted | Done::Skipped => {}
            Done::Gone => {
                if s.mirror.is_some() || s.sent_to.is_some() {
                    // A mirror pod that went away: made again.
                    s.mirror = None;
                    s.sent_to = None;
                    s.base = None;
                    if let Some(e) = self.settings.statuses.get(&key)
                        && pod::is_static(&e.pod)
                    {
                        self.pending.insert(key);
                        return;
                    }
                }
                s.gone = true;
            }
            // Not again at once (the API server may be away): at the next resync, or
            // when the pod changes.
            Done::Failed => return,
        }
        // Whatever changed meanwhile goes next.
        self.pending.insert(key);
    }

    /// The resync: everything that failed or is behind.
    fn resync(&mut self) {
        self.pending.extend(self.synced.keys().cloned());
        self.pending.extend(self.settings.statuses.uids());
    }
}

/// Runs the sync until `shutdown` turns true.
pub async fn run(settings: StatusSync, shutdown: CancellationToken) {
    settings.statuses.follow();
    let mut owner = settings.owner.clone();
    let mirrors = settings.mirrors.clone();
    let mut sync = Syncer {
        settings,
        synced: HashMap::new(),
        orphans: HashSet::new(),
        pending: HashSet::new(),
        recheck: None,
        tasks: JoinSet::new(),
    };
    let mut resync = tokio::time::interval(RESYNC);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let far = Duration::from_secs(3600);
    loop {
        let mut orphans = false;
        let recheck = sync
            .recheck
            .unwrap_or_else(|| tokio::time::Instant::now() + far);
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep_until(recheck) => {
                sync.recheck = None;
                sync.resync();
            }
            () = sync.settings.statuses.changed() => {}
            () = mirrors.changed() => {
                orphans = true;
                sync.resync();
            }
            _ = owner.changed() => sync.resync(),
            _ = resync.tick() => {
                orphans = true;
                sync.resync();
            }
            Some(done) = sync.tasks.join_next() => {
                if let Ok((key, done)) = done {
                    sync.finished(key, done);
                }
            }
        }
        let changed = sync.settings.statuses.take_changes();
        if changed
            .iter()
            .any(|uid| sync.settings.statuses.get(uid).is_none())
        {
            // A static pod gone may free its name for the next version: everything
            // is looked at again.
            orphans = true;
            sync.resync();
        }
        sync.pending.extend(changed);
        if orphans {
            for (key, job) in sync.orphan_jobs() {
                sync.spawn(key, job);
            }
        }
        sync.start();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_names_the_uid_and_clears_what_went_away() {
        let body = patch_body(
            "u1",
            &json!({"phase": "Running", "podIP": "10.0.0.2"}),
            Some(&json!({"phase": "Pending", "message": "waiting", "podIP": "10.0.0.2"})),
        );
        assert_eq!(
            body,
            json!({"metadata": {"uid": "u1"}, "status": {"phase": "Running", "podIP": "10.0.0.2", "message": null}})
        );
        assert_eq!(
            patch_body("u1", &json!({"phase": "Running"}), None)["status"],
            json!({"phase": "Running"})
        );
    }
}
