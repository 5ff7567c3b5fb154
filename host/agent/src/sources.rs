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

/// Starts one poller per configured source; they stop when `shutdown` turns true.
pub fn start(
    sources: Arc<PodSources>,
    tx: mpsc::Sender<SourceSet>,
    shutdown: watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    sources
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
        .collect()
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
                        unchanged: Vec::new(),
                        problems: snapshot.problems,
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
