//! [`AdmissionDirectory`]: the admission chain kept in step with a plugin directory;
//! [`PluginDirectory`]: the same for a [`PluginSet`] of probe handlers or pod sources.
//!
//! `<directory>/admission/` is watched (inotify through `notify`). Adding a `.wasm` adds
//! a link, replacing one swaps its plugin (calls in flight finish on the old version),
//! removing one removes its link; a version that does not load is refused and the old
//! one keeps serving. A plugin the configuration lists is required: while its file is
//! missing or has never loaded, its link is unavailable and its failure policy decides
//! (`Fail` rejects pods, `Ignore` skips it). The same happens on demand ([`AdmissionDirectory::rescan`], for an
//! API call) and, when asked for, on `SIGHUP`.
//!
//! A configured plugin whose file lives outside the directory is not watched; it is
//! re-read on a rescan.
//!
//! Writing a component in place (`cp`) shows up as several events, and the first may
//! see half a file: a version that fails to load is only reported once the file has
//! stopped changing for [`SETTLE`]. Renaming a finished file into place (`mv`) is one
//! event and swaps at once.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::Watcher;
use tokio::sync::mpsc;

use crate::cache;
use crate::chain::{AdmissionChain, FailurePolicy, LinkSpec, Mode};
use crate::config::{ConfigError, PluginsConfig};
use crate::limits::Limits;
use crate::loaded::Plugin;

/// How long a file that failed to load must stay unchanged before the failure counts.
pub const SETTLE: Duration = Duration::from_millis(100);

/// Why the directory could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A value in the `plugins:` section is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The directory could not be created or watched.
    #[error("plugin directory {path}: {message}")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

enum Msg {
    Changed(PathBuf),
    Rescan,
}

/// The admission chain, following its directory. Dropping it stops the watching; the
/// chain keeps its plugins.
pub struct AdmissionDirectory {
    tx: mpsc::UnboundedSender<Msg>,
    task: tokio::task::JoinHandle<()>,
    _watcher: Option<notify::RecommendedWatcher>,
}

impl Drop for AdmissionDirectory {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The settings of every configured link, by name, in chain order.
struct Configured {
    dir: Option<PathBuf>,
    links: Vec<(String, LinkSpec)>,
}

impl Configured {
    /// The link a file belongs to: a configured one, or one named after the file.
    fn for_path(&self, path: &Path) -> Option<(String, LinkSpec)> {
        if let Some((name, spec)) = self.links.iter().find(|(_, s)| s.path == path) {
            return Some((name.clone(), spec.clone()));
        }
        let dir = self.dir.as_deref()?;
        let file = path.file_name()?.to_str()?;
        let stem = file.strip_suffix(".wasm")?;
        if path.parent() != Some(dir) || stem.is_empty() || file.starts_with('.') {
            return None;
        }
        let name = stem.replace('_', "-");
        if self.links.iter().any(|(n, _)| *n == name) {
            // A configured plugin whose file lives elsewhere: not this one.
            return None;
        }
        Some((
            name,
            LinkSpec {
                path: path.to_owned(),
                config: Default::default(),
                limits: Limits::default(),
                failure_policy: FailurePolicy::Fail,
                mode: Mode::Enforce,
            },
        ))
    }
}

impl AdmissionDirectory {
    /// Loads the configured chain and every other component in `<directory>/admission/`,
    /// then follows the directory. A plugin that does not load is logged and its link is
    /// unavailable (its failure policy applies) until a good version appears; only an
    /// invalid configuration or an unusable directory is an error.
    pub async fn start(
        chain: Arc<AdmissionChain>,
        config: &PluginsConfig,
        reload_on_sighup: bool,
    ) -> Result<Self, StartError> {
        let dir = config.directory.as_ref().map(|d| d.join("admission"));
        let base = dir.clone().unwrap_or_default();
        let links = config
            .admission
            .iter()
            .enumerate()
            .map(|(i, entry)| Ok((entry.name.clone(), entry.link_spec(&base, i)?)))
            .collect::<Result<Vec<_>, ConfigError>>()?;
        chain.set_order(links.iter().map(|(n, _)| n.clone()).collect());
        let configured = Arc::new(Configured { dir, links });

        let (tx, rx) = mpsc::unbounded_channel();
        let watcher = match &configured.dir {
            Some(dir) => Some(watch(dir, tx.clone())?),
            None => None,
        };
        let follower = Follower { chain, configured };
        follower.rescan().await;
        let task = tokio::spawn(follow(follower, rx, reload_on_sighup));
        Ok(Self {
            tx,
            task,
            _watcher: watcher,
        })
    }

    /// Re-reads every plugin file now, as `SIGHUP` does: changed files are swapped in,
    /// missing ones removed.
    pub fn rescan(&self) {
        let _ = self.tx.send(Msg::Rescan);
    }
}

fn watch(
    dir: &Path,
    tx: mpsc::UnboundedSender<Msg>,
) -> Result<notify::RecommendedWatcher, StartError> {
    let fail = |e: &dyn std::fmt::Display| StartError::Directory {
        path: dir.to_owned(),
        message: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(|e| fail(&e))?;
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        match event {
            // Opening and reading a file (this follower digesting it, the loader
            // compiling it) is no change; reacting to it would read it again, forever.
            Ok(event) if matches!(event.kind, notify::EventKind::Access(_)) => {}
            Ok(event) => {
                for path in event.paths {
                    let _ = tx.send(Msg::Changed(path));
                }
            }
            // Lost events (queue overflow): read everything again.
            Err(_) => {
                let _ = tx.send(Msg::Rescan);
            }
        }
    })
    .map_err(|e| fail(&e))?;
    watcher
        .watch(dir, notify::RecursiveMode::NonRecursive)
        .map_err(|e| fail(&e))?;
    Ok(watcher)
}

struct Follower {
    chain: Arc<AdmissionChain>,
    configured: Arc<Configured>,
}

/// What follows a directory: reads every file again, or one that changed.
trait Follow: Send + Sync + 'static {
    /// What it follows, for logs.
    fn what(&self) -> &'static str;
    async fn rescan(&self);
    async fn changed(&self, path: &Path);
}

/// Feeds `follower` the directory's events until the sender is gone: a burst of events
/// for one file loads it once; lost events and `SIGHUP` read everything again.
async fn follow<F: Follow>(
    follower: F,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    reload_on_sighup: bool,
) {
    let mut hangup = if reload_on_sighup {
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .map_err(|e| tracing::warn!(error = %e, "cannot listen for SIGHUP"))
            .ok()
    } else {
        None
    };
    loop {
        let first = tokio::select! {
            msg = rx.recv() => match msg {
                Some(msg) => msg,
                None => return,
            },
            Some(()) = async { hangup.as_mut()?.recv().await } => {
                tracing::info!("SIGHUP: re-reading {}", follower.what());
                Msg::Rescan
            }
        };
        // Take whatever else is already queued, so a burst of events for one file
        // loads it once.
        let mut paths = BTreeSet::new();
        let mut rescan = false;
        let mut take = |msg| match msg {
            Msg::Changed(path) => {
                paths.insert(path);
            }
            Msg::Rescan => rescan = true,
        };
        take(first);
        while let Ok(msg) = rx.try_recv() {
            take(msg);
        }
        if rescan {
            follower.rescan().await;
        } else {
            for path in paths {
                follower.changed(&path).await;
            }
        }
    }
}

/// After a failed load: whether `path` stayed as it was (`before`) for [`SETTLE`], so
/// the failure is the file's and not a half-written copy's.
async fn settled(path: &Path, before: &std::fs::Metadata) -> bool {
    tokio::time::sleep(SETTLE).await;
    std::fs::metadata(path)
        .is_ok_and(|m| m.len() == before.len() && m.modified().ok() == before.modified().ok())
}

impl Follow for Follower {
    fn what(&self) -> &'static str {
        "admission plugins"
    }

    /// Every file that may hold a link: configured ones, the directory's, the chain's.
    async fn rescan(&self) {
        let mut paths: BTreeSet<PathBuf> = self
            .configured
            .links
            .iter()
            .map(|(_, s)| s.path.clone())
            .collect();
        if let Some(dir) = &self.configured.dir
            && let Ok(entries) = std::fs::read_dir(dir)
        {
            paths.extend(entries.filter_map(|e| e.ok().map(|e| e.path())));
        }
        paths.extend(self.chain.names().iter().filter_map(|n| self.chain.path(n)));
        for path in paths {
            self.changed(&path).await;
        }
    }

    async fn changed(&self, path: &Path) {
        let Some((name, spec)) = self.configured.for_path(path) else {
            return;
        };
        let configured = self.configured.links.iter().any(|(n, _)| *n == name);
        let Ok(meta) = std::fs::metadata(path) else {
            if configured {
                // The configuration requires it: its failure policy applies until the
                // file is back. To drop it, drop it from the configuration.
                let why = format!(
                    "plugin {name}: component file {} is missing",
                    path.display()
                );
                self.chain.set_unavailable(&name, spec, why.clone());
                tracing::error!(plugin = %name, "{why}; its failure policy applies");
            } else if self.chain.remove(&name) {
                tracing::info!(plugin = %name, path = %path.display(), "admission plugin removed with its file");
            }
            return;
        };
        if !meta.is_file() {
            return;
        }
        // An unchanged file (a `touch`, a rescan) is not reloaded.
        if let (Some(current), Ok(bytes)) = (self.chain.current(&name), std::fs::read(path))
            && current.digest() == cache::sha256_hex(&bytes)
            && self.chain.path(&name).as_deref() == Some(path)
        {
            return;
        }
        if let Err(error) = self.chain.install(&name, spec.clone()).await {
            if configured {
                self.chain.add_unavailable(&name, spec, error.to_string());
            }
            if settled(path, &meta).await {
                if self.chain.current(&name).is_some() {
                    tracing::error!(plugin = %name, %error, "new version refused; the old one keeps serving");
                } else {
                    tracing::error!(plugin = %name, %error, "admission plugin unavailable");
                }
            }
            // Otherwise the file is still being written: its next event loads it.
        }
    }
}

/// Plugins by name (probe handlers, pod sources), each swapped in one atomic step:
/// a caller holding the old version finishes with it, the next caller gets the new one.
pub struct PluginSet<T> {
    plugins: arc_swap::ArcSwap<std::collections::BTreeMap<String, Arc<T>>>,
}

impl<T> Default for PluginSet<T> {
    fn default() -> Self {
        Self {
            plugins: arc_swap::ArcSwap::from_pointee(Default::default()),
        }
    }
}

impl<T> std::fmt::Debug for PluginSet<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl<T> PluginSet<T> {
    /// The current version of plugin `name`.
    pub fn get(&self, name: &str) -> Option<Arc<T>> {
        self.plugins.load().get(name).cloned()
    }

    /// The names of the plugins loaded now.
    pub fn names(&self) -> Vec<String> {
        self.plugins.load().keys().cloned().collect()
    }

    /// Puts `plugin` in as `name`, replacing any older version.
    pub fn insert(&self, name: &str, plugin: Arc<T>) {
        self.plugins.rcu(|map| {
            let mut map = (**map).clone();
            map.insert(name.to_owned(), plugin.clone());
            map
        });
    }

    /// Takes plugin `name` out; whether it was there.
    pub fn remove(&self, name: &str) -> bool {
        let mut removed = false;
        self.plugins.rcu(|map| {
            let mut map = (**map).clone();
            removed = map.remove(name).is_some();
            map
        });
        removed
    }
}

/// Loads plugin `name` from its configured settings.
pub type Loader<T> = Arc<dyn Fn(&str) -> Result<T, crate::error::PluginError> + Send + Sync>;

/// A [`PluginSet`] following the files of its configured plugins: a file written or
/// renamed into place swaps that plugin (a version that does not load is refused and
/// the old one keeps serving), a file removed takes it out (with an error logged: the
/// configuration still names it). Dropping it stops the watching.
pub struct PluginDirectory {
    tx: mpsc::UnboundedSender<Msg>,
    task: tokio::task::JoinHandle<()>,
    _watchers: Vec<notify::RecommendedWatcher>,
}

impl Drop for PluginDirectory {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PluginDirectory {
    /// Loads every configured plugin (`name`, its file) into `set` with `load`, then
    /// follows the directories their files are in. `what` names them in logs
    /// (`probe handler`, `pod source`).
    pub async fn start<T: Plugin>(
        set: Arc<PluginSet<T>>,
        configured: Vec<(String, PathBuf)>,
        load: Loader<T>,
        what: &'static str,
        reload_on_sighup: bool,
    ) -> Result<Self, StartError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let dirs: BTreeSet<PathBuf> = configured
            .iter()
            .filter_map(|(_, p)| p.parent().map(Path::to_owned))
            .collect();
        let watchers = dirs
            .iter()
            .map(|d| watch(d, tx.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let follower = SetFollower {
            set,
            configured,
            load,
            what,
        };
        follower.rescan().await;
        let task = tokio::spawn(follow(follower, rx, reload_on_sighup));
        Ok(Self {
            tx,
            task,
            _watchers: watchers,
        })
    }

    /// Re-reads every plugin file now, as `SIGHUP` does.
    pub fn rescan(&self) {
        let _ = self.tx.send(Msg::Rescan);
    }
}

struct SetFollower<T> {
    set: Arc<PluginSet<T>>,
    configured: Vec<(String, PathBuf)>,
    load: Loader<T>,
    what: &'static str,
}

impl<T: Plugin> Follow for SetFollower<T> {
    fn what(&self) -> &'static str {
        self.what
    }

    async fn rescan(&self) {
        for (_, path) in &self.configured {
            self.changed(path).await;
        }
    }

    async fn changed(&self, path: &Path) {
        let what = self.what;
        for (name, _) in self.configured.iter().filter(|(_, p)| p == path) {
            let Ok(meta) = std::fs::metadata(path) else {
                if self.set.remove(name) {
                    tracing::error!(plugin = %name, path = %path.display(), "{what} removed with its file; the configuration still names it");
                } else {
                    tracing::error!(plugin = %name, path = %path.display(), "{what} unavailable: component file missing");
                }
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            if let (Some(current), Ok(bytes)) = (self.set.get(name), std::fs::read(path))
                && current.digest() == cache::sha256_hex(&bytes)
            {
                continue;
            }
            let (load, owned) = (self.load.clone(), name.clone());
            // Compiling takes tens of milliseconds of CPU: keep it off the async workers.
            let loaded = tokio::task::spawn_blocking(move || load(&owned)).await;
            match loaded {
                Ok(Ok(plugin)) => {
                    tracing::info!(plugin = %name, digest = plugin.digest(), compiler = plugin.compiler().name(), "{what} loaded");
                    self.set.insert(name, Arc::new(plugin));
                }
                Ok(Err(error)) => {
                    if settled(path, &meta).await {
                        if self.set.get(name).is_some() {
                            tracing::error!(plugin = %name, %error, "new {what} version refused; the old one keeps serving");
                        } else {
                            tracing::error!(plugin = %name, %error, "{what} unavailable");
                        }
                    }
                }
                Err(e) => tracing::error!(plugin = %name, error = %e, "loading {what} panicked"),
            }
        }
    }
}
