//! Source pollers: each configured pod-source plugin is polled every `period` (the
//! kubelet's fileCheckFrequency) — and at once when its manifest directory changes —
//! and its set goes to the syncLoop. A poll that fails keeps the previous set (it is
//! logged, and retried at the next period); a manifest the source could not read is
//! reported by name and its pod kept as it was.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};
use wasmlet_plugin_host::kinds::PodSources;
use wasmlet_plugin_host::source::{Snapshot, SourcePod};

use crate::syncloop::SourceSet;

/// How long a burst of directory changes is left to settle before the poll: long
/// enough for a burst of writes to end in one poll, short beside a pod's start. (A file
/// caught half written is reported and read again at its next change.) A file renamed
/// into place or closed after writing is whole: its poll does not wait.
const SETTLE: Duration = Duration::from_millis(5);

/// Starts one poller per configured source, and one per source the cluster adds (each
/// replaced when its version changes; a removed one's pods are removed with it); they
/// stop when `shutdown` is cancelled.
pub fn start(
    sources: Arc<PodSources>,
    tx: mpsc::Sender<SourceSet>,
    shutdown: CancellationToken,
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
    shutdown: CancellationToken,
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
                stop(r.task).await;
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
                stop(r.task).await;
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
            () = shutdown.cancelled() => break,
        }
    }
    for r in running.into_values() {
        r.task.abort();
    }
}

/// Stops a poller and waits until it has stopped. `abort` alone only asks: a poller
/// running on another worker thread can still send the set it holds, and a set sent
/// after its source's removal would bring the removed pods back.
async fn stop(task: JoinHandle<()>) {
    task.abort();
    let _ = task.await;
}

/// What the manifest directory's watch saw since the last poll.
#[derive(Default)]
struct DirChanges {
    /// Woken on every change.
    changed: Notify,
    /// A file was completed (renamed into place, or closed after writing): poll now.
    whole: AtomicBool,
    /// Manifest files removed, by file name.
    removed: Mutex<HashSet<String>>,
}

impl DirChanges {
    fn saw(&self, kind: &notify::EventKind, paths: &[PathBuf]) {
        use notify::EventKind::{Access, Modify, Remove};
        use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
        // The source reading its manifests is no change: reacting to it would poll
        // again, forever. (A file closed after writing is one.)
        if matches!(kind, Access(a) if *a != AccessKind::Close(AccessMode::Write)) {
            return;
        }
        let gone = matches!(kind, Remove(_) | Modify(ModifyKind::Name(RenameMode::From)));
        if gone {
            let names = paths.iter().filter_map(|p| p.file_name());
            let mut set = self.removed.lock().unwrap_or_else(|p| p.into_inner());
            set.extend(names.map(|n| n.to_string_lossy().into_owned()));
        }
        let whole = matches!(
            kind,
            Modify(ModifyKind::Name(RenameMode::To | RenameMode::Both))
                | Access(AccessKind::Close(AccessMode::Write))
        );
        if whole {
            self.whole.store(true, Ordering::Release);
        }
        self.changed.notify_one();
    }

    /// The files removed since the last call.
    fn take_removed(&self) -> HashSet<String> {
        std::mem::take(&mut *self.removed.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Waits for a change; then, unless a file was completed, for the burst to settle.
    async fn next(&self) {
        self.changed.notified().await;
        if !self.whole.swap(false, Ordering::AcqRel) {
            tokio::time::sleep(SETTLE).await;
        }
    }
}

/// Watches `dir` (not recursively), telling `changes` of every event.
fn watch_dir(
    dir: &std::path::Path,
    changes: Arc<DirChanges>,
) -> Option<notify::RecommendedWatcher> {
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        match event {
            Ok(e) => changes.saw(&e.kind, &e.paths),
            // Lost events: poll.
            Err(_) => changes.changed.notify_one(),
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
    shutdown: CancellationToken,
) {
    let changes = Arc::new(DirChanges::default());
    let _watcher = dir.as_ref().and_then(|d| {
        let _ = std::fs::create_dir_all(d);
        watch_dir(d, changes.clone())
    });
    let mut last_error = String::new();
    loop {
        // Taken before the poll: a file removed while it reads counts for the next.
        let gone = changes.take_removed();
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
                    if let Some(without) = without_removed((&name, dir.as_ref()), &snapshot, &gone)
                        && tx.send(without).await.is_err()
                    {
                        return;
                    }
                    let set = SourceSet {
                        source: name.clone(),
                        pods: snapshot.pods,
                        problems: snapshot.problems,
                        directory: dir.clone(),
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
            // A burst of writes (an editor's save) settles first.
            () = changes.next() => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// A manifest removed and written again between two polls is, as for the kubelet
/// (which follows each file's events), its pod removed and added again: the set without
/// the pods of files removed since the last poll, when any of them is back.
fn without_removed(
    (source, directory): (&str, Option<&PathBuf>),
    snapshot: &Snapshot,
    removed: &HashSet<String>,
) -> Option<SourceSet> {
    let file = |p: &SourcePod| p.origin.split('#').next().unwrap_or_default().to_owned();
    let pods = &snapshot.pods;
    if removed.is_empty() || !pods.iter().any(|p| removed.contains(&file(p))) {
        return None;
    }
    Some(SourceSet {
        source: source.to_owned(),
        pods: pods
            .iter()
            .filter(|p| !removed.contains(&file(p)))
            .cloned()
            .collect(),
        problems: snapshot.problems.clone(),
        directory: directory.cloned(),
        ..SourceSet::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmlet_plugin_host::config::PluginsConfig;
    use wasmlet_plugin_host::kinds::ClusterSource;

    /// A manifest renamed into place or closed after writing is polled at once; any
    /// other change (a file created, written to, removed) waits for its burst to settle.
    async fn waited(changes: &DirChanges) -> Duration {
        let start = tokio::time::Instant::now();
        changes.next().await;
        start.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_whole_file_is_polled_at_once_and_a_burst_settles_first() {
        use notify::EventKind::{Access, Create, Modify, Remove};
        use notify::event::{
            AccessKind, AccessMode, CreateKind, ModifyKind, RemoveKind, RenameMode,
        };
        let changes = DirChanges::default();
        let file = |name: &str| vec![PathBuf::from("/etc/kubernetes/manifests").join(name)];
        // The source's own reads are no change.
        changes.saw(&Access(AccessKind::Read), &file("a.yaml"));
        changes.saw(
            &Access(AccessKind::Close(AccessMode::Read)),
            &file("a.yaml"),
        );
        let idle = tokio::time::timeout(Duration::from_secs(60), changes.next()).await;
        assert!(idle.is_err(), "a read woke the poller");
        changes.saw(&Create(CreateKind::File), &file("a.yaml"));
        changes.saw(&Modify(ModifyKind::Any), &file("a.yaml"));
        assert_eq!(waited(&changes).await, SETTLE, "written: settles");
        changes.saw(&Modify(ModifyKind::Name(RenameMode::To)), &file("b.yaml"));
        assert_eq!(waited(&changes).await, Duration::ZERO, "renamed into place");
        changes.saw(
            &Access(AccessKind::Close(AccessMode::Write)),
            &file("a.yaml"),
        );
        assert_eq!(
            waited(&changes).await,
            Duration::ZERO,
            "closed after writing"
        );
        // A whole file is polled at once once: what follows it settles again.
        changes.saw(&Modify(ModifyKind::Any), &file("a.yaml"));
        assert_eq!(waited(&changes).await, SETTLE);
        changes.saw(&Remove(RemoveKind::File), &file("a.yaml"));
        changes.saw(&Modify(ModifyKind::Name(RenameMode::From)), &file("b.yaml"));
        assert_eq!(
            changes.take_removed(),
            HashSet::from(["a.yaml".to_owned(), "b.yaml".to_owned()])
        );
        assert!(changes.take_removed().is_empty());
    }

    /// A cluster source removed while its poller is busy sends nothing after its
    /// removal: a late set would bring its pods back for good.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nothing_of_a_removed_cluster_source_follows_its_removal() {
        let dir = std::env::temp_dir().join(format!("wasmlet-sources-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(
            dir.join("web.yaml"),
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - {name: main, image: busybox}\n",
        )
        .expect("manifest");
        let engine = wasmlet_plugin_host::PluginEngine::new().expect("engine");
        let sources = Arc::new(
            PodSources::start(&engine, &PluginsConfig::default(), false)
                .await
                .expect("sources"),
        );
        let (tx, mut rx) = mpsc::channel(16);
        let stop_all = CancellationToken::new();
        let _tasks = start(sources.clone(), tx, stop_all.clone());
        let grants = wasmlet_plugin_host::source::SourceGrants {
            directory: Some(dir.clone()),
            urls: Vec::new(),
        };
        let path = wasmlet_plugin_host::dev::shipped_plugin("source-file");
        let (limits, config) = (Default::default(), Default::default());
        let source = Arc::new(
            engine
                .load_source("team", &path, config, limits, grants)
                .expect("loads"),
        );
        for round in 0..10_u64 {
            // Polled back to back, so the removal finds a poll under way.
            sources.set_cluster(ClusterSource {
                source: source.clone(),
                period: Duration::from_millis(1),
                directory: None,
            });
            let first = rx.recv().await.expect("a set");
            assert_eq!((first.source.as_str(), first.pods.len()), ("team", 1));
            // The next poll is under way by now (it starts 1 ms after a set is sent).
            tokio::time::sleep(Duration::from_millis(5 + round)).await;
            sources.remove_cluster("team");
            while !rx.recv().await.expect("the removal").removed {}
            let late = tokio::time::timeout(Duration::from_millis(20), rx.recv()).await;
            let late = late.ok().flatten().map(|s| (s.source, s.removed));
            assert_eq!(late, None, "round {round}: a set after the removal");
        }
        stop_all.cancel();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_manifest_removed_and_back_between_polls_is_removed_first() {
        let pod = |origin: &str| SourcePod {
            origin: origin.into(),
            pod: Default::default(),
        };
        let snapshot = Snapshot {
            pods: vec![pod("a.yaml"), pod("all.yaml#1"), pod("all.yaml#2")],
            problems: vec![wasmlet_plugin_host::source::Problem {
                origin: "broken.yaml".into(),
                message: "bad".into(),
            }],
        };
        let removed = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
        assert!(without_removed(("file", None), &snapshot, &removed(&[])).is_none());
        assert!(
            without_removed(("file", None), &snapshot, &removed(&["gone.yaml"])).is_none(),
            "removed and not back: the set itself says so"
        );
        let first =
            without_removed(("file", None), &snapshot, &removed(&["all.yaml"])).expect("a set");
        let origins: Vec<&str> = first.pods.iter().map(|p| p.origin.as_str()).collect();
        assert_eq!(origins, ["a.yaml"]);
        assert_eq!(
            first.problems, snapshot.problems,
            "a broken manifest's pod is kept"
        );
    }

    /// The pods the shipped file source reads from kubeadm's manifests (and the others
    /// of the kubelet UID test data) are what the kubelet reads: they get its UIDs.
    #[tokio::test]
    async fn the_file_source_reads_manifests_into_the_kubelets_uids() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../core/src/pod/kubelet/testdata");
        let engine = wasmlet_plugin_host::PluginEngine::new().expect("engine");
        let grants = wasmlet_plugin_host::source::SourceGrants {
            directory: Some(dir.clone()),
            urls: Vec::new(),
        };
        let path = wasmlet_plugin_host::dev::shipped_plugin("source-file");
        let (limits, config) = (Default::default(), Default::default());
        let source = engine
            .load_source("file", &path, config, limits, grants)
            .expect("loads");
        let snapshot = source.poll().await.expect("polls");
        let problems: Vec<_> = snapshot
            .problems
            .iter()
            .filter(|p| !p.origin.ends_with(".txt"))
            .collect();
        assert!(problems.is_empty(), "{problems:?}");
        let expected = std::fs::read_to_string(dir.join("uids.txt")).expect("uids");
        let expected: Vec<(&str, &str)> = expected
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once(' '))
            .collect();
        assert_eq!(snapshot.pods.len(), expected.len());
        for (file, want) in expected {
            let read = snapshot
                .pods
                .iter()
                .find(|p| p.origin == file)
                .unwrap_or_else(|| panic!("{file} not read"));
            let at = std::path::Path::new("/etc/kubernetes/manifests").join(file);
            let mut pod = read.pod.clone();
            let location = Some(wasmlet_core::pod::kubelet::Location::File(&at));
            wasmlet_core::pod::make_static(&mut pod, ("file", file), "node-a", location);
            assert_eq!(wasmlet_core::pod::uid(&pod), want, "{file}");
        }
    }
}
