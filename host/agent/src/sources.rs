//! Source pollers: each configured pod-source plugin is polled every `period` (the
//! kubelet's fileCheckFrequency) — and at once when its manifest directory changes —
//! and its set goes to the syncLoop. A poll that fails keeps the previous set (it is
//! logged, and retried at the next period); a manifest the source could not read is
//! reported by name and its pod kept as it was.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{debug, warn};
use wasmlet_plugin_host::kinds::PodSources;

use crate::syncloop::SourceSet;

/// How long a burst of directory changes is left to settle before the poll: long
/// enough for a burst of writes to end in one poll, short beside a pod's start. (A file
/// caught half written is reported and read again at its next change.)
const SETTLE: Duration = Duration::from_millis(5);

/// Starts one poller per configured source, and one per source the cluster adds (each
/// replaced when its version changes; a removed one's pods are removed with it); they
/// stop when `shutdown` turns true.
pub fn start(
    sources: Arc<PodSources>,
    tx: mpsc::Sender<SourceSet>,
    shutdown: watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let mut tasks: Vec<JoinHandle<()>> = sources
        .configured()
        .iter()
        .map(|(name, spec)| {
            tokio::spawn(poll_loop(
                sources.clone(),
                name.clone(),
                spec.period,
                spec.grants.directory.clone(),
                tx.clone(),
                shutdown.clone(),
            ))
        })
        .collect();
    tasks.push(tokio::spawn(follow_cluster(sources, tx, shutdown)));
    tasks
}

/// Keeps a poller running for each of the cluster's sources.
async fn follow_cluster(
    sources: Arc<PodSources>,
    tx: mpsc::Sender<SourceSet>,
    mut shutdown: watch::Receiver<bool>,
) {
    struct Running {
        source: Arc<wasmlet_plugin_host::source::PodSource>,
        task: JoinHandle<()>,
    }
    let mut changes = sources.cluster_changes();
    let mut running: std::collections::BTreeMap<String, Running> = Default::default();
    loop {
        let wanted = changes.borrow_and_update().clone();
        let gone: Vec<String> = running
            .keys()
            .filter(|n| !wanted.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            if let Some(r) = running.remove(&name) {
                r.task.abort();
            }
            // Its pods go with it, as a deleted manifest's do.
            let set = SourceSet {
                source: name,
                removed: true,
                ..SourceSet::default()
            };
            if tx.send(set).await.is_err() {
                return;
            }
        }
        for (name, c) in wanted {
            if running
                .get(&name)
                .is_some_and(|r| Arc::ptr_eq(&r.source, &c.source))
            {
                continue;
            }
            // New, or a new version (perhaps with another period or directory): a
            // poller of its own, which polls at once.
            if let Some(r) = running.remove(&name) {
                r.task.abort();
            }
            let task = tokio::spawn(poll_loop(
                sources.clone(),
                name.clone(),
                c.period,
                c.directory.clone(),
                tx.clone(),
                shutdown.clone(),
            ));
            running.insert(
                name,
                Running {
                    source: c.source,
                    task,
                },
            );
        }
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { break },
            _ = shutdown.changed() => break,
        }
    }
    for r in running.into_values() {
        r.task.abort();
    }
}

/// Watches `dir` (not recursively), waking `changed` on every event.
fn watch_dir(dir: &std::path::Path, changed: Arc<Notify>) -> Option<notify::RecommendedWatcher> {
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        match event {
            // The source reading its manifests is no change: reacting to it would poll
            // again, forever.
            Ok(e) if matches!(e.kind, notify::EventKind::Access(_)) => {}
            // A change, or lost events: poll.
            _ => changed.notify_one(),
        }
    })
    .map_err(|e| warn!(dir = %dir.display(), "cannot watch the manifest directory: {e}"))
    .ok()?;
    match watcher.watch(dir, RecursiveMode::NonRecursive) {
        Ok(()) => Some(watcher),
        Err(e) => {
            warn!(dir = %dir.display(), "cannot watch the manifest directory (polling only): {e}");
            None
        }
    }
}

async fn poll_loop(
    sources: Arc<PodSources>,
    name: String,
    period: Duration,
    dir: Option<PathBuf>,
    tx: mpsc::Sender<SourceSet>,
    mut shutdown: watch::Receiver<bool>,
) {
    let changed = Arc::new(Notify::new());
    let _watcher = dir.as_ref().and_then(|d| {
        let _ = std::fs::create_dir_all(d);
        watch_dir(d, changed.clone())
    });
    let mut last_error = String::new();
    loop {
        match sources.get(&name) {
            None => {
                let message = format!("pod source {name} is not loaded; its pods are kept");
                if message != last_error {
                    warn!("{message}");
                    last_error = message;
                }
            }
            Some(source) => match source.poll().await {
                Ok(snapshot) => {
                    last_error.clear();
                    debug!(source = %name, pods = snapshot.pods.len(), "polled");
                    let set = SourceSet {
                        source: name.clone(),
                        pods: snapshot.pods,
                        problems: snapshot.problems,
                        ..SourceSet::default()
                    };
                    if tx.send(set).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let message = format!("{e}; its pods are kept");
                    if message != last_error {
                        warn!(source = %name, "{message}");
                        last_error = message;
                    }
                }
            },
        }
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            () = changed.notified() => {
                // Let a burst of writes (an editor's save) finish first.
                tokio::time::sleep(SETTLE).await;
            }
            _ = shutdown.changed() => return,
        }
    }
}
