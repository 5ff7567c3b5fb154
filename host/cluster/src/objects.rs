//! The ConfigMaps and Secrets the node's pods project, each watched while a pod refers to
//! it — the kubelet's `configMapAndSecretChangeDetectionStrategy: Watch`: a list and
//! watch of the one object (`fieldSelector=metadata.name=<name>`, which the Node
//! authorizer grants for objects of the node's pods), so that a volume sync reads memory,
//! not the API server, and a change is seen the moment it is made. Where the kubelet
//! waits for the pod's next periodic sync (up to a minute), the pods referring to a
//! changed object are named on [`Objects::changes`] and synced at once.
//!
//! An object no pod refers to any more stops being watched. A read of an object that is
//! not registered, or whose watch has not listed it successfully, asks the API server
//! directly (the precise error, if any, is then the API server's).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1 as k8s;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tracing::debug;
use wasmlet_agent::volumes::{Data, ObjectRef};

/// How long a read waits for a new watch's first list before asking directly.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(5);

/// What a watch knows of its object: `None` until listed; then the data, or why the
/// last list failed.
type State = Option<Result<Data, String>>;

struct Watched {
    pods: BTreeSet<String>,
    state: watch::Receiver<State>,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct Inner {
    pods: HashMap<String, BTreeSet<ObjectRef>>,
    watched: HashMap<ObjectRef, Watched>,
}

/// The watched objects of the node's pods.
pub struct Objects {
    client: kube::Client,
    inner: Mutex<Inner>,
    changes: broadcast::Sender<String>,
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("Objects")
            .field("pods", &inner.pods.len())
            .field("watched", &inner.watched.len())
            .finish()
    }
}

impl Drop for Objects {
    fn drop(&mut self) {
        for w in self.lock().watched.values() {
            w.task.abort();
        }
    }
}

impl Objects {
    /// Watches through `client`.
    pub fn new(client: kube::Client) -> Arc<Self> {
        Arc::new(Objects {
            client,
            inner: Mutex::default(),
            changes: broadcast::channel(1024).0,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pod `uid` refers to `refs` now: new objects are watched, those no pod refers to
    /// any more are not.
    pub fn register(self: &Arc<Self>, uid: &str, refs: BTreeSet<ObjectRef>) {
        let mut inner = self.lock();
        let old = inner.pods.get(uid).cloned().unwrap_or_default();
        if old == refs {
            return;
        }
        for gone in old.difference(&refs) {
            self.release(&mut inner, uid, gone);
        }
        for new in refs.difference(&old) {
            let watched = inner
                .watched
                .entry(new.clone())
                .or_insert_with(|| self.start(new.clone()));
            watched.pods.insert(uid.to_owned());
        }
        if refs.is_empty() {
            inner.pods.remove(uid);
        } else {
            inner.pods.insert(uid.to_owned(), refs);
        }
    }

    /// Pod `uid` is gone.
    pub fn unregister(self: &Arc<Self>, uid: &str) {
        self.register(uid, BTreeSet::new());
    }

    fn release(&self, inner: &mut Inner, uid: &str, object: &ObjectRef) {
        if let Some(w) = inner.watched.get_mut(object) {
            w.pods.remove(uid);
            if w.pods.is_empty() {
                w.task.abort();
                inner.watched.remove(object);
                debug!(object = ?object, "no pod refers to it: not watched any more");
            }
        }
    }

    /// UIDs of pods one of whose objects changed after it was first listed.
    pub fn changes(&self) -> broadcast::Receiver<String> {
        self.changes.subscribe()
    }

    /// How many objects are watched.
    pub fn watched(&self) -> usize {
        self.lock().watched.len()
    }

    fn start(self: &Arc<Self>, object: ObjectRef) -> Watched {
        let (tx, state) = watch::channel(None);
        let objects = Arc::downgrade(self);
        let client = self.client.clone();
        let task = tokio::spawn(async move {
            if object.secret {
                let api: Api<k8s::Secret> = Api::namespaced(client, &object.namespace);
                follow(api, &object, tx, objects, secret_data).await;
            } else {
                let api: Api<k8s::ConfigMap> = Api::namespaced(client, &object.namespace);
                follow(api, &object, tx, objects, config_map_data).await;
            }
        });
        Watched {
            pods: BTreeSet::new(),
            state,
            task,
        }
    }

    fn notify(&self, object: &ObjectRef) {
        let pods = self
            .lock()
            .watched
            .get(object)
            .map(|w| w.pods.clone())
            .unwrap_or_default();
        for uid in pods {
            let _ = self.changes.send(uid);
        }
    }

    /// The object as its watch knows it; `None` when it is not watched or its watch
    /// cannot say (the caller then asks the API server).
    pub async fn read(&self, object: &ObjectRef) -> Option<Data> {
        let mut state = self.lock().watched.get(object)?.state.clone();
        let listed = tokio::time::timeout(FIRST_LIST_WAIT, state.wait_for(Option::is_some)).await;
        match listed {
            Ok(Ok(s)) => s.clone()?.ok(),
            _ => None,
        }
    }
}

/// Lists and watches `object` (re-listing with back-off after a failure), publishing each
/// new state and naming its pods when it changed after the first list.
async fn follow<K>(
    api: Api<K>,
    object: &ObjectRef,
    tx: watch::Sender<State>,
    objects: Weak<Objects>,
    data: fn(K) -> BTreeMap<String, Vec<u8>>,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={}", object.name));
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    let mut listing: Option<BTreeMap<String, Vec<u8>>> = None;
    while let Some(event) = events.next().await {
        let next: Data = match event {
            Ok(Event::Init) => {
                listing = None;
                continue;
            }
            Ok(Event::InitApply(o)) => {
                listing = Some(data(o));
                continue;
            }
            Ok(Event::InitDone) => listing.take(),
            Ok(Event::Apply(o)) => Some(data(o)),
            Ok(Event::Delete(_)) => None,
            Err(e) => {
                // Readers then ask directly; a state already listed stays.
                if tx.borrow().is_none() {
                    tx.send_replace(Some(Err(e.to_string())));
                }
                continue;
            }
        };
        let changed = match &*tx.borrow() {
            Some(Ok(before)) => before != &next,
            _ => false,
        };
        tx.send_replace(Some(Ok(next)));
        if changed && let Some(objects) = objects.upgrade() {
            debug!(object = ?object, "changed: syncing the pods that project it");
            objects.notify(object);
        }
    }
}

/// A ConfigMap's `data` and `binaryData`.
pub fn config_map_data(cm: k8s::ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = cm
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    out.extend(
        cm.binary_data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0)),
    );
    out
}

/// A Secret's `data` (and `stringData`, which only a client's own object carries).
pub fn secret_data(s: k8s::Secret) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = s
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    out.extend(
        s.string_data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes())),
    );
    out
}
