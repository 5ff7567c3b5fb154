//! The probe handlers and pod sources of a `plugins:` configuration, loaded and
//! following their files: [`ProbeHandlers`] (which handler checks each probe kind) and
//! [`PodSources`] (each source with its poll period).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{ConfigError, PluginsConfig, ProbeSpec, SourceSpec};
use crate::engine::PluginEngine;
use crate::error::PluginError;
use crate::loaded::Plugin;
use crate::probe::ProbeHandler;
use crate::source::PodSource;
use crate::watch::{Loader, PluginDirectory, PluginSet, StartError};

/// The directory configured plugins of `kind` are relative to.
fn kind_dir(config: &PluginsConfig, kind: &str) -> PathBuf {
    config
        .directory
        .as_ref()
        .map(|d| d.join(kind))
        .unwrap_or_default()
}

/// The error for a plugin named twice in the list `plugins.<list>`.
fn named_twice(list: &str, index: usize, name: &str) -> StartError {
    ConfigError {
        field: format!("plugins.{list}[{index}].name"),
        message: format!("{name} is named twice"),
    }
    .into()
}

/// Loads every configured plugin in `specs` with `load` into a new set and follows
/// their files (`path` says where a spec's file is).
async fn start_set<T: Plugin, S: Send + Sync + 'static>(
    specs: BTreeMap<String, S>,
    path: impl Fn(&S) -> PathBuf,
    load: impl Fn(&str, &S) -> Result<T, PluginError> + Send + Sync + 'static,
    what: &'static str,
    reload_on_sighup: bool,
) -> Result<(Arc<PluginSet<T>>, PluginDirectory), StartError> {
    let configured = specs.iter().map(|(n, s)| (n.clone(), path(s))).collect();
    let load: Loader<T> = Arc::new(move |name| load(name, &specs[name]));
    let set = Arc::new(PluginSet::default());
    let directory =
        PluginDirectory::start(set.clone(), configured, load, what, reload_on_sighup).await?;
    Ok((set, directory))
}

/// The configured probe handlers, by the probe kinds they check.
pub struct ProbeHandlers {
    set: Arc<PluginSet<ProbeHandler>>,
    by_kind: BTreeMap<String, String>,
    /// Handlers the cluster gives this node (WasmletPlugins), by probe kind: only for
    /// kinds the node's own configuration leaves to no handler.
    cluster: arc_swap::ArcSwap<BTreeMap<String, Arc<ProbeHandler>>>,
    directory: PluginDirectory,
}

/// Why no handler checks a probe kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoHandler {
    /// No handler (configured or from the cluster) names the kind.
    #[error("no probe handler is configured for {0} probes")]
    NotConfigured(String),
    /// The configured handler is not loaded (its file missing or refused).
    #[error("probe handler {name} (for {kind} probes) is not loaded")]
    NotLoaded {
        /// The handler.
        name: String,
        /// The probe kind.
        kind: String,
    },
}

impl ProbeHandlers {
    /// Loads every handler in `config.probes` and follows their files. A handler that
    /// does not load is logged; probes of its kinds fail until a good version appears.
    pub async fn start(
        engine: &PluginEngine,
        config: &PluginsConfig,
        reload_on_sighup: bool,
    ) -> Result<Self, StartError> {
        let base = kind_dir(config, "probes");
        let mut specs = BTreeMap::new();
        let mut by_kind = BTreeMap::<String, String>::new();
        for (i, entry) in config.probes.iter().enumerate() {
            let spec = entry.spec(&base, i)?;
            for kind in &spec.kinds {
                if let Some(other) = by_kind.insert(kind.clone(), entry.name.clone()) {
                    return Err(ConfigError {
                        field: format!("plugins.probes[{i}].kinds"),
                        message: format!("{kind} probes are already checked by {other}"),
                    }
                    .into());
                }
            }
            if specs.insert(entry.name.clone(), spec).is_some() {
                return Err(named_twice("probes", i, &entry.name));
            }
        }
        let engine = engine.clone();
        let (set, directory) = start_set(
            specs,
            |spec: &ProbeSpec| spec.path.clone(),
            move |name, spec| {
                engine.load_probe(
                    name,
                    &spec.path,
                    spec.config.clone(),
                    spec.limits.clone(),
                    spec.grants.clone(),
                )
            },
            "probe handler",
            reload_on_sighup,
        )
        .await?;
        Ok(Self {
            set,
            by_kind,
            cluster: Default::default(),
            directory,
        })
    }

    /// The handler that checks `kind` probes (`httpGet`, `exec`, a custom kind), or why
    /// there is none.
    pub fn for_kind(&self, kind: &str) -> Result<Arc<ProbeHandler>, NoHandler> {
        let Some(name) = self.by_kind.get(kind) else {
            return self
                .cluster
                .load()
                .get(kind)
                .cloned()
                .ok_or_else(|| NoHandler::NotConfigured(kind.to_owned()));
        };
        self.set.get(name).ok_or_else(|| NoHandler::NotLoaded {
            name: name.clone(),
            kind: kind.to_owned(),
        })
    }

    /// Re-reads every handler's file now.
    pub fn rescan(&self) {
        self.directory.rescan();
    }

    /// The node's own handler for `kind` probes, if its configuration names one.
    pub fn configured_for(&self, kind: &str) -> Option<&str> {
        self.by_kind.get(kind).map(String::as_str)
    }

    /// Makes `handler` check `kinds` probes for the cluster, in one step (checks in
    /// flight finish on the handler they started with), and drops the cluster handler
    /// called the same from every other kind. The caller keeps to kinds the node's
    /// configuration leaves free ([`Self::configured_for`]).
    pub fn set_cluster(&self, handler: Arc<ProbeHandler>, kinds: &[String]) {
        self.cluster.rcu(|current| {
            let mut next: BTreeMap<String, Arc<ProbeHandler>> = current
                .iter()
                .filter(|(_, h)| h.name() != handler.name())
                .map(|(k, h)| (k.clone(), h.clone()))
                .collect();
            for kind in kinds {
                next.insert(kind.clone(), handler.clone());
            }
            next
        });
    }

    /// Removes the cluster handler `name` from every kind it checks.
    pub fn remove_cluster(&self, name: &str) {
        self.cluster.rcu(|current| {
            current
                .iter()
                .filter(|(_, h)| h.name() != name)
                .map(|(k, h)| (k.clone(), h.clone()))
                .collect::<BTreeMap<_, _>>()
        });
    }

    /// The cluster handler checking `kind` probes, if any.
    pub fn cluster_for(&self, kind: &str) -> Option<Arc<ProbeHandler>> {
        self.cluster.load().get(kind).cloned()
    }

    /// Every handler loaded now, by name: the node's, then the cluster's.
    pub fn loaded(&self) -> Vec<Arc<ProbeHandler>> {
        let mut out: Vec<Arc<ProbeHandler>> = self
            .set
            .names()
            .iter()
            .filter_map(|n| self.set.get(n))
            .collect();
        for h in self.cluster.load().values() {
            if !out.iter().any(|o| Arc::ptr_eq(o, h)) {
                out.push(h.clone());
            }
        }
        out
    }
}

/// A pod source taken from the cluster (a WasmletPlugin), with how it is polled.
#[derive(Debug, Clone)]
pub struct ClusterSource {
    /// The loaded source.
    pub source: Arc<PodSource>,
    /// How often it is polled.
    pub period: std::time::Duration,
    /// The directory it reads (watched for changes), if any.
    pub directory: Option<PathBuf>,
}

/// The configured pod sources, and those the cluster adds (cluster mode).
pub struct PodSources {
    set: Arc<PluginSet<PodSource>>,
    specs: Vec<(String, SourceSpec)>,
    directory: PluginDirectory,
    /// The cluster's sources, by name; pollers follow its changes.
    cluster: tokio::sync::watch::Sender<BTreeMap<String, ClusterSource>>,
}

impl PodSources {
    /// Loads every source in `config.sources` and follows their files. A source that
    /// does not load is logged and not polled until a good version appears.
    pub async fn start(
        engine: &PluginEngine,
        config: &PluginsConfig,
        reload_on_sighup: bool,
    ) -> Result<Self, StartError> {
        let base = kind_dir(config, "sources");
        let mut specs: Vec<(String, SourceSpec)> = Vec::new();
        for (i, entry) in config.sources.iter().enumerate() {
            if specs.iter().any(|(n, _)| *n == entry.name) {
                return Err(named_twice("sources", i, &entry.name));
            }
            specs.push((entry.name.clone(), entry.spec(&base, i)?));
        }
        let engine = engine.clone();
        let (set, directory) = start_set(
            specs.iter().cloned().collect(),
            |spec: &SourceSpec| spec.path.clone(),
            move |name, spec| {
                engine.load_source(
                    name,
                    &spec.path,
                    spec.config.clone(),
                    spec.limits.clone(),
                    spec.grants.clone(),
                )
            },
            "pod source",
            reload_on_sighup,
        )
        .await?;
        Ok(Self {
            set,
            specs,
            directory,
            cluster: tokio::sync::watch::Sender::new(BTreeMap::new()),
        })
    }

    /// The configured sources, in configuration order, with their settings.
    pub fn configured(&self) -> &[(String, SourceSpec)] {
        &self.specs
    }

    /// The current version of source `name`, configured or from the cluster (none
    /// while it does not load).
    pub fn get(&self, name: &str) -> Option<Arc<PodSource>> {
        self.set
            .get(name)
            .or_else(|| self.cluster_source(name).map(|c| c.source))
    }

    /// Whether `name` is one of the node's configured sources.
    pub fn is_configured(&self, name: &str) -> bool {
        self.specs.iter().any(|(n, _)| n == name)
    }

    /// Serves `source` (a new one, or a new version of one) as the cluster's source of
    /// its name.
    pub fn set_cluster(&self, source: ClusterSource) {
        self.cluster.send_modify(|m| {
            m.insert(source.source.name().to_owned(), source);
        });
    }

    /// Stops serving the cluster's source `name`.
    pub fn remove_cluster(&self, name: &str) {
        self.cluster.send_if_modified(|m| m.remove(name).is_some());
    }

    /// The cluster's source `name`, if it serves one.
    pub fn cluster_source(&self, name: &str) -> Option<ClusterSource> {
        self.cluster.borrow().get(name).cloned()
    }

    /// The cluster's sources, by name.
    pub fn cluster_sources(&self) -> BTreeMap<String, ClusterSource> {
        self.cluster.borrow().clone()
    }

    /// The cluster's sources, changes included, as they happen.
    pub fn cluster_changes(&self) -> tokio::sync::watch::Receiver<BTreeMap<String, ClusterSource>> {
        self.cluster.subscribe()
    }

    /// Re-reads every source's file now.
    pub fn rescan(&self) {
        self.directory.rescan();
    }

    /// Every source loaded now, by name: the node's, then the cluster's.
    pub fn loaded(&self) -> Vec<Arc<PodSource>> {
        self.set
            .names()
            .iter()
            .filter_map(|n| self.set.get(n))
            .chain(self.cluster.borrow().values().map(|c| c.source.clone()))
            .collect()
    }
}
