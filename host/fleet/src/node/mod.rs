//! One node's side of cluster plugins: a watch of every WasmletPlugin and of its own
//! Node (its labels select it), and for each object what the node does about it —
//! nothing, load (fetch, verify, compile, swap in), keep the old version serving while
//! a new one is refused, or unload — and the entry it reports.
//!
//! Loads run concurrently but are polled by this task alone, so a load overtaken by a
//! newer version or a deletion is dropped before it can swap anything in.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::future::{AbortHandle, Abortable, BoxFuture};
use futures::stream::{FuturesUnordered, StreamExt};
use k8s_openapi::api::core::v1 as k8s;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use wasmlet_agent::time::now_rfc3339;
use wasmlet_plugin_host::chain::AdmissionChain;
use wasmlet_plugin_host::kinds::{PodSources, ProbeHandlers};

use crate::events::PluginEvents;

mod load;
mod monitor;
mod report;
mod seen;

use crate::config::{FleetConfig, Grants};
use crate::fetch::Fetcher;
use crate::object::{self, Desired, Kind};
use crate::plan::plan;
use crate::status::{Entry, State, Write, Writer};
use load::{LoadResult, Loaded, load};
use seen::{Changed, Seen};

/// First wait before a failed load is tried again; doubled up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(5);
const MAX_RETRY: Duration = Duration::from_secs(300);
/// The file listing what the node serves, for starting without the API server.
const STATE_FILE: &str = "serving.json";
/// The first pause after listing or watching WasmletPlugins failed, doubled per failure.
const WATCH_RETRY_FIRST: Duration = Duration::from_millis(800);
/// The longest pause between attempts to list WasmletPlugins (a CRD installed later is
/// found within this).
const WATCH_RETRY_MAX: Duration = Duration::from_secs(60);

/// Where cluster plugins go on the node, and where it tells what it did with them.
#[derive(Clone)]
pub struct Targets {
    /// The admission chain (cluster links follow the node's own).
    pub chain: Arc<AdmissionChain>,
    /// The probe handlers (cluster handlers take kinds the node leaves free).
    pub probes: Arc<ProbeHandlers>,
    /// The pod sources (cluster sources are polled after the node's own).
    pub sources: Arc<PodSources>,
    /// The events on the WasmletPlugins.
    pub events: PluginEvents,
    /// The pods the node runs, which its admission policies are asked about when a
    /// version of one begins serving (none: no audits).
    pub admitted: Option<AdmittedPods>,
}

/// The pods a node runs, as its admission policies see them.
#[derive(Clone)]
pub struct AdmittedPods {
    /// The node.
    pub node: Arc<wasmlet_plugin_host::Node>,
    /// Its admitted pods.
    pub pods: Arc<wasmlet_plugin_host::Admitted>,
}

/// An audit under way: the policy, the digest asked, what it said.
type AuditRun = BoxFuture<'static, (String, String, Option<wasmlet_plugin_host::Audit>)>;

/// A load the node has started.
struct Loading {
    desired: Desired,
    token: u64,
    abort: AbortHandle,
}

/// A version the node could not load, and when it tries again.
struct Failed {
    desired: Desired,
    message: String,
    retry_at: Instant,
    attempt: u32,
}

struct Controller {
    node: String,
    grants: Grants,
    targets: Targets,
    fetcher: Arc<Fetcher>,
    store: PathBuf,
    writer: Option<Writer>,
    /// The objects' UIDs, by name (kept until a deleted one is unloaded).
    uids: BTreeMap<String, String>,
    /// The objects as last seen, by name.
    objects: BTreeMap<String, Arc<Seen>>,
    /// The first list of objects is complete.
    listed: bool,
    labels: BTreeMap<String, String>,
    serving: BTreeMap<String, Desired>,
    /// The key that signed each serving version, when one did.
    signers: BTreeMap<String, String>,
    loading: BTreeMap<String, Loading>,
    failed: BTreeMap<String, Failed>,
    /// The entry last asked for per plugin.
    reported: BTreeMap<String, Entry>,
    /// `reported` changed since it was last sent to the writer.
    unsent: bool,
    loads: FuturesUnordered<BoxFuture<'static, Option<LoadResult>>>,
    next_token: u64,
    /// The audit of each admission policy's serving version, once it ended.
    audits: BTreeMap<String, crate::status::Audit>,
    audit_runs: FuturesUnordered<AuditRun>,
    /// Policies served from the store since the start, audited at the first tick.
    unaudited: BTreeSet<String>,
    /// When the counts of policies in Monitor mode are next read.
    tick_at: Option<Instant>,
}

/// Starts following the cluster's WasmletPlugins for `node` (labelled `labels` until
/// its Node says otherwise), keeping components under `dir`. What the node served
/// before a restart is loaded from its store before this returns, so it serves even
/// when the API server does not answer.
pub async fn start(
    client: kube::Client,
    node: &str,
    labels: BTreeMap<String, String>,
    config: &FleetConfig,
    dir: &Path,
    targets: Targets,
    shutdown: CancellationToken,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let verifier = wasmlet_signing::Verifier::load(&config.verification)
        .map_err(|e| std::io::Error::other(format!("clusterPlugins.verification.{e}")))?
        .map(Arc::new);
    let fetcher = Arc::new(Fetcher::new(
        client.clone(),
        &config.namespace,
        &dir.join("components"),
        verifier,
    )?);
    let mut c = Controller {
        node: node.to_owned(),
        grants: config.grants.clone(),
        targets,
        fetcher,
        store: dir.join(STATE_FILE),
        writer: Some(Writer::start(client.clone(), node.to_owned())),
        uids: BTreeMap::new(),
        objects: BTreeMap::new(),
        listed: false,
        labels,
        serving: BTreeMap::new(),
        signers: BTreeMap::new(),
        loading: BTreeMap::new(),
        failed: BTreeMap::new(),
        reported: BTreeMap::new(),
        unsent: false,
        loads: FuturesUnordered::new(),
        next_token: 0,
        audits: BTreeMap::new(),
        audit_runs: FuturesUnordered::new(),
        unaudited: BTreeSet::new(),
        tick_at: None,
    };
    c.restore().await;
    Ok(tokio::spawn(c.run(client, shutdown)))
}

impl Controller {
    /// Loads what the node served before it stopped, from its store.
    async fn restore(&mut self) {
        let Ok(text) = std::fs::read(&self.store) else {
            return;
        };
        let saved: Vec<Desired> = match serde_json::from_slice(&text) {
            Ok(s) => s,
            Err(e) => {
                warn!(file = %self.store.display(), error = %e, "the list of cluster plugins this node served is not readable; starting without them");
                return;
            }
        };
        for d in saved {
            let path = Fetcher::path(self.fetcher.dir(), &d.sha256);
            if !path.is_file() {
                warn!(plugin = %d.name, file = %path.display(), "a cluster plugin this node served is no longer in its store; it waits for the API server");
                continue;
            }
            let planned = plan(
                &d,
                &path,
                &self.grants,
                &self.targets.probes,
                &self.targets.sources,
            );
            let result = match planned {
                Ok(p) => {
                    self.set_cluster_order(Some(&d));
                    load(self.fetcher.clone(), self.targets.clone(), d.clone(), p).await
                }
                Err(e) => Err(e.to_string()),
            };
            match result {
                Ok(loaded) => {
                    info!(plugin = %d.name, digest = loaded.digest, "serving a cluster plugin from the node's store until the API server says otherwise");
                    self.set_signer(&d.name, loaded.verified);
                    self.unaudited.insert(d.name.clone());
                    self.serving.insert(d.name.clone(), d);
                }
                Err(e) => {
                    warn!(plugin = %d.name, error = %e, "a cluster plugin this node served does not load from its store")
                }
            }
        }
        self.set_cluster_order(None);
        self.schedule_tick();
    }

    async fn run(mut self, client: kube::Client, shutdown: CancellationToken) {
        let plugins: Api<object::Watched> = Api::all(client.clone());
        // The watcher's own back-off starts over at every `Init`, which it sends before
        // each list attempt: with the CRD missing it would retry (and fail) every second
        // for good. The pause between attempts grows until a list or watch delivers.
        let mut objects = watcher::watcher(plugins, watcher::Config::default()).boxed();
        let nodes: Api<k8s::Node> = Api::all(client);
        let mut node = watcher::watcher(
            nodes,
            watcher::Config::default().fields(&format!("metadata.name={}", self.node)),
        )
        .default_backoff()
        .boxed();
        let mut failing = false;
        let mut pause: Option<Instant> = None;
        let mut delay = WATCH_RETRY_FIRST;
        loop {
            let retry = self.failed.values().map(|f| f.retry_at).min();
            tokio::select! {
                event = objects.next(), if pause.is_none() => match event {
                    Some(Ok(event)) => {
                        if !matches!(event, Event::Init) {
                            delay = WATCH_RETRY_FIRST;
                            if failing {
                                info!("watching WasmletPlugins again");
                                failing = false;
                            }
                        }
                        let changed = self.apply(event);
                        self.changed(changed);
                    }
                    Some(Err(e)) => {
                        if !failing {
                            failing = true;
                            let hint = watch_hint(&e.to_string());
                            warn!(error = %e, "listing or watching WasmletPlugins failed{hint}; the node keeps serving the cluster plugins it has and retries");
                        } else {
                            debug!(error = %e, retry_in = ?delay, "listing or watching WasmletPlugins failed again");
                        }
                        pause = Some(Instant::now() + delay);
                        delay = (delay * 2).min(WATCH_RETRY_MAX);
                    }
                    None => return,
                },
                () = sleep_until(pause), if pause.is_some() => pause = None,
                event = node.next() => {
                    if let Some(Ok(Event::Apply(n) | Event::InitApply(n))) = event {
                        if let (Some(w), Some(uid)) = (&self.writer, n.metadata.uid) {
                            w.send(Write::Owner(uid));
                        }
                        let labels = n.metadata.labels.unwrap_or_default();
                        if labels != self.labels {
                            self.labels = labels;
                            self.reconcile();
                        }
                    }
                },
                Some(done) = self.loads.next(), if !self.loads.is_empty() => {
                    if let Some((name, token, result)) = done {
                        self.finished(&name, token, result);
                        self.reconcile();
                    }
                },
                () = sleep_until(retry) => self.reconcile(),
                Some((name, digest, audit)) = self.audit_runs.next(), if !self.audit_runs.is_empty() => {
                    self.audited(&name, &digest, audit);
                },
                () = sleep_until(self.tick_at) => self.tick(),
                () = shutdown.cancelled() => return,
            }
            self.schedule_tick();
            self.send_entries();
        }
    }

    fn keep_uid(&mut self, o: &object::Watched) {
        if let (Some(name), Some(uid)) = (&o.metadata.name, &o.metadata.uid) {
            self.uids.insert(name.clone(), uid.clone());
        }
    }

    /// The UID of object `name`, for its events.
    fn uid(&self, name: &str) -> String {
        self.uids.get(name).cloned().unwrap_or_default()
    }

    /// Takes a watch event into the objects; what to bring in line with them.
    fn apply(&mut self, event: Event<object::Watched>) -> Changed {
        match event {
            Event::Init => {
                self.objects.clear();
                self.listed = false;
                Changed::Nothing
            }
            Event::InitApply(o) => {
                self.keep_uid(&o);
                let (name, seen) = Seen::from(o);
                self.objects.insert(name, Arc::new(seen));
                Changed::Nothing
            }
            Event::InitDone => {
                self.listed = true;
                Changed::All
            }
            Event::Apply(o) => {
                self.keep_uid(&o);
                let (name, seen) = Seen::from(o);
                let status_only = self
                    .objects
                    .get(&name)
                    .is_some_and(|old| old.object == seen.object);
                self.objects.insert(name.clone(), Arc::new(seen));
                match (self.listed, status_only) {
                    // The controller's counts: nothing for the node to do.
                    (false, _) | (true, true) => Changed::Nothing,
                    (true, false) => Changed::One(name),
                }
            }
            Event::Delete(o) => {
                let (name, _) = Seen::from(o);
                self.objects.remove(&name);
                if self.listed {
                    Changed::One(name)
                } else {
                    Changed::Nothing
                }
            }
        }
    }

    /// Brings the node in line with what `changed`.
    fn changed(&mut self, changed: Changed) {
        match changed {
            Changed::Nothing => {}
            Changed::All => {
                // Even with nothing to say: the node's object says it is there.
                self.unsent = true;
                self.reconcile();
            }
            Changed::One(name) => self.reconcile_one(&name),
        }
    }

    /// Brings every plugin in line with its object.
    fn reconcile(&mut self) {
        if !self.listed {
            return;
        }
        let names: BTreeSet<String> = self
            .objects
            .keys()
            .chain(self.serving.keys())
            .chain(self.loading.keys())
            .chain(self.failed.keys())
            .cloned()
            .collect();
        for name in names {
            self.reconcile_one(&name);
        }
    }

    fn reconcile_one(&mut self, name: &str) {
        let Some(seen) = self.objects.get(name).cloned() else {
            // Deleted: unloaded; its status went with it.
            self.unload(name, "the WasmletPlugin was deleted");
            self.uids.remove(name);
            self.report(name, None);
            return;
        };
        let obj = &seen.object;
        let generation = obj["metadata"]["generation"].as_i64().unwrap_or(0);
        let serving_digest = self
            .serving
            .get(name)
            .map(|d| format!("sha256:{}", d.sha256));
        let status = |state: State, message: String| {
            Some((generation, serving_digest.clone(), state, message))
        };
        let desired = match object::selector(obj).map(|s| s.matches(&self.labels)) {
            Ok(false) => {
                self.unload(name, "the node no longer matches its nodeSelector");
                self.report(name, None);
                return;
            }
            Ok(true) => object::desired(obj),
            Err(e) => Err(e),
        };
        let desired = match desired {
            Ok(d) => d,
            Err(message) => {
                // A version the node cannot run: the old one, if any, keeps serving.
                self.cancel(name);
                self.report(name, status(State::Failed, message.to_string()));
                return;
            }
        };
        if let Some((state, message)) = self.settled(name, &desired) {
            if state == State::Loaded {
                self.cancel(name);
                self.failed.remove(name);
            }
            self.report(name, status(state, message));
            return;
        }
        let path = Fetcher::path(self.fetcher.dir(), &desired.sha256);
        let planned = plan(
            &desired,
            &path,
            &self.grants,
            &self.targets.probes,
            &self.targets.sources,
        );
        let (state, message) = match planned {
            Err(message) => {
                self.cancel(name);
                (State::Failed, message.to_string())
            }
            Ok(_) if self.foreign(name) => (
                State::Failed,
                format!(
                    "this node has an admission plugin of its own called {name}; a WasmletPlugin cannot replace it"
                ),
            ),
            Ok(p) => (State::Pending, self.begin_load(name, desired, p)),
        };
        self.report(name, status(state, message));
    }

    /// What the node already does about `desired`, if it need not start anything:
    /// serving it, loading it, or waiting to retry it after it failed.
    fn settled(&self, name: &str, desired: &Desired) -> Option<(State, String)> {
        if self
            .serving
            .get(name)
            .is_some_and(|s| s.same_plugin(desired))
        {
            return Some((State::Loaded, String::new()));
        }
        if self
            .loading
            .get(name)
            .is_some_and(|l| l.desired.same_plugin(desired))
        {
            return Some((State::Pending, format!("loading sha256:{}", desired.sha256)));
        }
        self.failed
            .get(name)
            .filter(|f| f.desired.same_plugin(desired) && f.retry_at > Instant::now())
            .map(|f| (State::Failed, f.message.clone()))
    }

    /// Starts loading `desired` as planned (any other load of `name` cancelled);
    /// returns the status message that says so.
    fn begin_load(&mut self, name: &str, desired: Desired, planned: crate::plan::Plan) -> String {
        self.cancel(name);
        self.set_cluster_order(Some(&desired));
        let token = self.next_token;
        self.next_token += 1;
        let (abort, registration) = AbortHandle::new_pair();
        let future = load(
            self.fetcher.clone(),
            self.targets.clone(),
            desired.clone(),
            planned,
        );
        let owned = name.to_owned();
        self.loads.push(Box::pin(async move {
            Abortable::new(future, registration)
                .await
                .ok()
                .map(|r| (owned, token, r))
        }));
        let message = format!("loading sha256:{}", desired.sha256);
        self.loading.insert(
            name.to_owned(),
            Loading {
                desired,
                token,
                abort,
            },
        );
        message
    }

    /// Whether `name` is a link of the node's own chain.
    fn foreign(&self, name: &str) -> bool {
        !self.serving.contains_key(name)
            && !self.loading.contains_key(name)
            && self.targets.chain.names().iter().any(|n| n == name)
    }

    /// A load ended.
    fn finished(&mut self, name: &str, token: u64, result: Result<Loaded, String>) {
        if self.loading.get(name).is_none_or(|l| l.token != token) {
            return;
        }
        let Some(loading) = self.loading.remove(name) else {
            return;
        };
        let d = loading.desired;
        match result {
            Ok(loaded) => {
                info!(
                    plugin = name,
                    digest = loaded.digest,
                    verified_by = loaded.verified,
                    generation = d.generation,
                    "cluster plugin serving"
                );
                let before = self
                    .serving
                    .get(name)
                    .map(|o| format!("sha256:{}", o.sha256));
                self.targets.events.loaded(
                    name,
                    &self.uid(name),
                    d.generation,
                    &loaded.digest,
                    loaded.verified.as_deref(),
                    before.as_deref(),
                );
                self.set_signer(name, loaded.verified);
                if let Some(old) = self.serving.get(name)
                    && old.kind != d.kind
                {
                    self.unload_kind(name, old.kind);
                }
                self.failed.remove(name);
                self.unaudited.remove(name);
                self.serving.insert(name.to_owned(), d);
                self.persist();
                self.begin_audit(name);
            }
            Err(message) => {
                let attempt = self
                    .failed
                    .get(name)
                    .filter(|f| f.desired.same_plugin(&d))
                    .map_or(1, |f| f.attempt + 1);
                let wait = (FIRST_RETRY * 2u32.saturating_pow(attempt.min(8) - 1)).min(MAX_RETRY);
                warn!(plugin = name, error = %message, retry_in = ?wait, "cluster plugin refused; the version serving before, if any, keeps serving");
                self.failed.insert(
                    name.to_owned(),
                    Failed {
                        desired: d,
                        message,
                        retry_at: Instant::now() + wait,
                        attempt,
                    },
                );
            }
        }
        self.set_cluster_order(None);
    }

    /// Stops a load in progress.
    fn cancel(&mut self, name: &str) {
        if let Some(l) = self.loading.remove(name) {
            l.abort.abort();
        }
    }

    /// Takes plugin `name` off the node.
    fn unload(&mut self, name: &str, why: &str) {
        self.cancel(name);
        self.failed.remove(name);
        self.signers.remove(name);
        self.audits.remove(name);
        self.unaudited.remove(name);
        if let Some(d) = self.serving.remove(name) {
            self.unload_kind(name, d.kind);
            let digest = format!("sha256:{}", d.sha256);
            self.targets
                .events
                .unloaded(name, &self.uid(name), &digest, why);
            info!(plugin = name, "cluster plugin unloaded");
            self.persist();
            self.set_cluster_order(None);
        }
    }

    fn unload_kind(&self, name: &str, kind: Kind) {
        match kind {
            Kind::Admission => {
                self.targets.chain.remove(name);
            }
            Kind::ProbeHandler => self.targets.probes.remove_cluster(name),
            Kind::PodSource => self.targets.sources.remove_cluster(name),
        }
    }

    /// Records the key that signed the version of `name` now serving.
    fn set_signer(&mut self, name: &str, key: Option<String>) {
        match key {
            Some(k) => self.signers.insert(name.to_owned(), k),
            None => self.signers.remove(name),
        };
    }

    /// Orders the cluster's admission links by `spec.admission.order`, then name;
    /// `adding` is about to join.
    fn set_cluster_order(&self, adding: Option<&Desired>) {
        let mut links: Vec<(i64, &str)> = self
            .serving
            .values()
            .chain(self.loading.values().map(|l| &l.desired))
            .chain(adding)
            .filter(|d| d.kind == Kind::Admission)
            .map(|d| {
                (
                    d.spec["admission"]["order"].as_i64().unwrap_or(0),
                    d.name.as_str(),
                )
            })
            .collect();
        links.sort();
        links.dedup_by(|a, b| a.1 == b.1);
        self.targets
            .chain
            .set_cluster_order(links.into_iter().map(|(_, n)| n.to_owned()).collect());
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// What an operator can do about a failed list or watch of WasmletPlugins, said with
/// the first failure (the retries that follow are quiet, with a growing pause).
fn watch_hint(error: &str) -> &'static str {
    if error.contains("404") {
        " (is the WasmletPlugin CRD installed? kubectl apply -f deploy/wasmletplugin-crd.yaml)"
    } else if error.contains("403") || error.contains("forbidden") {
        " (nodes may not read WasmletPlugins yet: apply deploy/wasmletplugin-rbac.yaml once per cluster)"
    } else {
        ""
    }
}
