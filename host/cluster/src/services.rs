//! The cluster's Services, listed and watched once for the whole node (as the kubelet's
//! Service informer), for the containers' Service environment variables: a pod start
//! reads the local store and never asks the API server.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1 as k8s;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use tokio::task::JoinHandle;
use tracing::warn;
use wasmlet_agent::criconfig::services::ServiceSource;
use wasmlet_agent::lookup::LookupError;
use wasmlet_agent::volumes::BoxFuture;

/// How long a container start of a pod from the API server waits for the first list of
/// Services before it fails with the kubelet's error (and is tried again).
const FIRST_LIST_WAIT: Duration = Duration::from_secs(10);

/// The kubelet's words when Services were never listed.
const NOT_LISTED: &str = "services have not yet been read at least once, cannot construct envvars";

/// The node's view of the cluster's Services.
#[derive(Clone)]
pub struct ServiceWatch {
    store: Store<k8s::Service>,
}

impl std::fmt::Debug for ServiceWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceWatch")
            .field("services", &self.store.state().len())
            .finish()
    }
}

impl ServiceWatch {
    /// Starts listing and watching every Service through `client` (re-listing after a
    /// broken watch, with back-off), until the returned task is aborted.
    pub fn start(client: kube::Client) -> (Self, JoinHandle<()>) {
        let (store, writer) = reflector::store();
        let api: Api<k8s::Service> = Api::all(client);
        let stream = reflector::reflector(
            writer,
            watcher::watcher(api, watcher::Config::default()).default_backoff(),
        );
        let task = tokio::spawn(async move {
            let mut stream = stream.boxed();
            let mut failing = false;
            while let Some(item) = stream.next().await {
                match item {
                    Ok(_) => failing = false,
                    Err(e) if !failing => {
                        failing = true;
                        warn!("watching Services: {e} (retrying)");
                    }
                    Err(_) => {}
                }
            }
        });
        (ServiceWatch { store }, task)
    }
}

impl ServiceSource for ServiceWatch {
    fn services<'a>(
        &'a self,
        namespace: &'a str,
        wait: bool,
    ) -> BoxFuture<'a, Result<Vec<k8s::Service>, LookupError>> {
        Box::pin(async move {
            if wait {
                match tokio::time::timeout(FIRST_LIST_WAIT, self.store.wait_until_ready()).await {
                    Ok(Ok(())) => {}
                    _ => return Err(LookupError::Unavailable(NOT_LISTED.to_owned())),
                }
            }
            Ok(self
                .store
                .state_filter(|s| {
                    let ns = s.metadata.namespace.as_deref();
                    ns == Some(namespace)
                        || (ns == Some("default")
                            && s.metadata.name.as_deref() == Some("kubernetes"))
                })
                .into_iter()
                .map(|s| (*s).clone())
                .collect())
        })
    }
}
