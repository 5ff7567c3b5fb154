//! `wasmlet controller`: counts the nodes' WasmletNodes into each WasmletPlugin's
//! status, as the DaemonSet controller counts a DaemonSet's pods — how many wasmlet
//! nodes the plugin's selector picks, how many serve its current generation, how many
//! refused it (the first few by name, with why) and how many have not said yet.
//!
//! kube's runtime does the watching: reflectors keep the WasmletNodes and the Nodes'
//! labels (metadata only), a controller with a work queue reconciles each WasmletPlugin
//! when it or any node's object changes. The nodes watch WasmletPlugins, so each write
//! here reaches every node: a plugin's counts are written when every selected node has
//! said what it does with the current generation, and while some have not, at most
//! every [`PROGRESS_PERIOD`] — a rollout that settles within it costs the nodes one
//! event. What policies in Monitor mode would have rejected changes with every pod the
//! nodes admit: when only that count changed, it is written at most every
//! [`COUNT_PERIOD`] (by default). Two replicas are safe: only the holder of a Lease
//! ([`lease`]) runs.

pub mod count;
pub mod lease;
pub mod legacy;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{FutureExt as _, StreamExt, future};
use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::{WatchStreamExt, reflector as reflect};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::object::{self, GROUP, KIND, VERSION, api_resource};
use crate::status::{self, Entries};
use count::{Counts, Seen};

/// The field manager of the counts.
pub const MANAGER: &str = "wasmlet-controller";
/// While some selected node has not said, how often the counts are written at most.
pub const PROGRESS_PERIOD: Duration = Duration::from_secs(5);
/// When only the count of what a policy in Monitor mode would have rejected changed,
/// how often it is written at most.
pub const COUNT_PERIOD: Duration = Duration::from_secs(30);
/// How long the work queue gathers triggers before it reconciles.
const DEBOUNCE: Duration = Duration::from_millis(100);
/// How long the first list of WasmletNodes and Nodes may take.
const READY_DEADLINE: Duration = Duration::from_secs(60);
/// After a failed reconcile.
const ERROR_REQUEUE: Duration = Duration::from_secs(5);

/// How a controller replica runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where its Lease is.
    pub namespace: String,
    /// The Lease's name.
    pub lease: String,
    /// This replica's name in the Lease.
    pub identity: String,
    /// The election's timings.
    pub timing: lease::Timing,
    /// When only the count of what policies in Monitor mode would have rejected
    /// changed, how often it is written at most ([`COUNT_PERIOD`] by default).
    pub count_period: Duration,
}

/// Why the controller stopped.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The first list did not finish.
    #[error(
        "listing {0} from the API server did not finish within {READY_DEADLINE:?} (is deploy/wasmletnode-crd.yaml applied, and may the controller list WasmletNodes and Nodes? deploy/wasmlet-controller.yaml)"
    )]
    NotReady(&'static str),
    /// Another replica leads now.
    #[error("no longer leading: {0}")]
    Lost(String),
}

/// A WasmletNode as the controller keeps it: its name and its entries.
#[derive(Clone, Debug, Deserialize)]
pub struct NodeObject {
    /// Name (and what the store needs).
    #[serde(deserialize_with = "object::light_meta")]
    pub metadata: ObjectMeta,
    /// `status.plugins`, by plugin.
    #[serde(default, deserialize_with = "entries_of")]
    pub status: Entries,
}

fn entries_of<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Entries, D::Error> {
    Ok(status::entries(&Value::deserialize(d)?))
}

object::cluster_resource!(NodeObject, object::NODE_KIND, object::NODE_PLURAL);

/// What reconciles share.
struct Context {
    api: Api<DynamicObject>,
    plugins: Store<DynamicObject>,
    wasmlet_nodes: Store<NodeObject>,
    nodes: Store<PartialObjectMeta<k8s::Node>>,
    /// Per plugin, since when its counts have waited for nodes that have not said.
    unsettled: Mutex<HashMap<String, Instant>>,
    /// Per plugin, when its counts were last written.
    written_at: Mutex<HashMap<String, Instant>>,
    /// See [`Options::count_period`].
    count_period: Duration,
}

/// Runs one replica: waits for the Lease, then keeps the counts until `shutdown`
/// (which gives the Lease up) or until it no longer leads.
pub async fn run(
    client: kube::Client,
    options: &Options,
    shutdown: CancellationToken,
) -> Result<(), ControllerError> {
    let mut election = lease::Election::new(
        client.clone(),
        &options.namespace,
        &options.lease,
        &options.identity,
        options.timing,
    );
    tokio::select! {
        () = election.acquire() => {}
        () = shutdown.cancelled() => return Ok(()),
    }
    let result = tokio::select! {
        r = lead(client, options.count_period, shutdown.clone()) => r,
        why = election.keep() => Err(ControllerError::Lost(why)),
    };
    election.release().await;
    result
}

/// Keeps the counts until `shutdown`.
async fn lead(
    client: kube::Client,
    count_period: Duration,
    shutdown: CancellationToken,
) -> Result<(), ControllerError> {
    let (wasmlet_nodes, nodes, triggers) = follow_nodes(&client);
    let ready = async {
        let _ = wasmlet_nodes.wait_until_ready().await;
        let _ = nodes.wait_until_ready().await;
    };
    if tokio::time::timeout(READY_DEADLINE, ready).await.is_err() {
        let what = if wasmlet_nodes.wait_until_ready().now_or_never().is_none() {
            "WasmletNodes"
        } else {
            "Nodes"
        };
        return Err(ControllerError::NotReady(what));
    }
    let resource = api_resource();
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let controller = Controller::new_with(api.clone(), watcher::Config::default(), resource)
        .with_config(ControllerConfig::default().debounce(DEBOUNCE));
    let context = Arc::new(Context {
        api,
        plugins: controller.store(),
        wasmlet_nodes,
        nodes,
        unsettled: Mutex::new(HashMap::new()),
        written_at: Mutex::new(HashMap::new()),
        count_period,
    });
    info!("counting WasmletNodes into WasmletPlugins");
    controller
        .reconcile_all_on(tokio_stream::wrappers::UnboundedReceiverStream::new(
            triggers,
        ))
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, context)
        .for_each(|result| {
            if let Err(e) = result {
                debug!(error = %e, "reconcile");
            }
            future::ready(())
        })
        .await;
    Ok(())
}

/// Reflectors of the WasmletNodes and of the Nodes' metadata, driven by a task of their
/// own; each change sends a trigger.
fn follow_nodes(
    client: &kube::Client,
) -> (
    Store<NodeObject>,
    Store<PartialObjectMeta<k8s::Node>>,
    mpsc::UnboundedReceiver<()>,
) {
    let (wasmlet_nodes, wn_writer) = reflector::store();
    let (nodes, n_writer) = reflector::store();
    let wn = reflect(
        wn_writer,
        watcher(
            Api::<NodeObject>::all(client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .map(|r| r.map(|_| ()).map_err(|e| ("WasmletNodes", e)))
    .boxed();
    let n = reflect(
        n_writer,
        watcher(
            Api::<PartialObjectMeta<k8s::Node>>::all(client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .map(|r| r.map(|_| ()).map_err(|e| ("Nodes", e)))
    .boxed();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut both = futures::stream::select(wn, n);
        while let Some(event) = both.next().await {
            if let Err((what, e)) = event {
                warn!(error = %e, "watching {what} failed; retrying");
            }
            if tx.send(()).is_err() {
                return;
            }
        }
    });
    (wasmlet_nodes, nodes, rx)
}

fn error_policy(plugin: Arc<DynamicObject>, error: &kube::Error, _: Arc<Context>) -> Action {
    warn!(plugin = %plugin.metadata.name.as_deref().unwrap_or_default(), %error, "writing the plugin's counts failed; retrying");
    Action::requeue(ERROR_REQUEUE)
}

/// Brings one WasmletPlugin's status in line with the nodes' objects.
async fn reconcile(plugin: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, kube::Error> {
    let name = plugin.metadata.name.clone().unwrap_or_default();
    let status = &plugin.data["status"];
    if let Some(patch) = legacy::cleanup(
        status,
        plugin
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default(),
        |node| {
            ctx.wasmlet_nodes
                .get(&ObjectRef::new(node))
                .is_some_and(|o| o.status.contains_key(&name))
        },
    ) {
        // The write brings the object back through the watch, to be counted then.
        match ctx
            .api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                info!(plugin = %name, "took out entries of nodes that have moved to WasmletNodes")
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
        return Ok(Action::await_change());
    }
    let counts = ctx.count(&plugin, &name);
    let written: Option<Counts> = serde_json::from_value(status.clone()).ok();
    if written.as_ref() == Some(&counts) {
        ctx.wrote(&name, true);
        return Ok(Action::await_change());
    }
    if !counts.settled()
        && let Some(wait) = ctx.waiting(&name)
    {
        return Ok(Action::requeue(wait));
    }
    if written.is_some_and(|w| w.differs_only_in_monitored(&counts))
        && let Some(wait) = ctx.count_wait(&name)
    {
        return Ok(Action::requeue(wait));
    }
    let body = json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "metadata": {"name": name},
        "status": counts,
    });
    match ctx
        .api
        .patch_status(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Action::await_change()),
        Err(e) => return Err(e),
    }
    debug!(plugin = %name, generation = counts.observed_generation, serving = counts.serving, pending = counts.pending, "counts written");
    ctx.written_at
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name.clone(), Instant::now());
    let settled = counts.settled();
    ctx.wrote(&name, settled);
    Ok(if settled {
        Action::await_change()
    } else {
        Action::requeue(PROGRESS_PERIOD)
    })
}

impl Context {
    /// The counts of `plugin` over the wasmlet nodes: those with a WasmletNode, and
    /// those that still write into the plugins (see [`legacy`]), whose Node is there.
    fn count(&self, plugin: &DynamicObject, name: &str) -> Counts {
        let generation = plugin.metadata.generation.unwrap_or(0);
        let selector = object::selector(&plugin.data).ok();
        let objects = self.wasmlet_nodes.state();
        let by_name: HashMap<&str, &Entries> = objects
            .iter()
            .filter_map(|o| Some((o.metadata.name.as_deref()?, &o.status)))
            .collect();
        let old = legacy::entries(name, &plugin.data["status"]);
        let mut names: BTreeSet<String> = by_name.keys().map(|n| (*n).to_owned()).collect();
        for p in self.plugins.state() {
            let status = &p.data["status"];
            if status["nodes"].is_array() {
                names.extend(legacy::entries("", status).into_keys());
            }
        }
        let labels: Vec<(String, Option<Arc<PartialObjectMeta<k8s::Node>>>)> = names
            .into_iter()
            .map(|n| {
                let node = self.nodes.get(&ObjectRef::new(&n));
                (n, node)
            })
            .collect();
        let empty = Default::default();
        count::count(
            generation,
            selector.as_ref(),
            labels.iter().filter_map(|(n, node)| {
                let node = node.as_ref()?;
                let entry = legacy::pick(by_name.get(n.as_str()).copied(), name, &old, n);
                Some(Seen {
                    name: n,
                    labels: node.metadata.labels.as_ref().unwrap_or(&empty),
                    entry,
                })
            }),
        )
    }

    /// `plugin`'s counts wait for nodes that have not said: how long until they are
    /// written anyway (`None`: now).
    fn waiting(&self, plugin: &str) -> Option<Duration> {
        let now = Instant::now();
        let mut unsettled = self.unsettled.lock().unwrap_or_else(|e| e.into_inner());
        let since = *unsettled.entry(plugin.to_owned()).or_insert(now);
        left(since + PROGRESS_PERIOD, now)
    }

    /// When only `plugin`'s monitored count changed: how long until it is written
    /// (`None`: now).
    fn count_wait(&self, plugin: &str) -> Option<Duration> {
        let written = self.written_at.lock().unwrap_or_else(|e| e.into_inner());
        left(*written.get(plugin)? + self.count_period, Instant::now())
    }

    /// `plugin`'s counts are written: settled, or the next progress waits a period.
    fn wrote(&self, plugin: &str, settled: bool) {
        let mut unsettled = self.unsettled.lock().unwrap_or_else(|e| e.into_inner());
        if settled {
            unsettled.remove(plugin);
        } else {
            unsettled.insert(plugin.to_owned(), Instant::now());
        }
    }
}

/// How long from `now` until `at` (`None`: it has come).
fn left(at: Instant, now: Instant) -> Option<Duration> {
    at.checked_duration_since(now).filter(|d| !d.is_zero())
}
