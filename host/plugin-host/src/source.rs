//! Pod sources: components of the `pod-source` world. Each poll runs in a fresh instance
//! (polls are seconds apart) and returns the source's whole desired set; the agent's pod
//! config diffs it into ADD / UPDATE / REMOVE.
//!
//! A source sees only what it is granted ([`SourceGrants`]): one host directory,
//! preopened read-only at [`MANIFEST_DIR`] in the guest, and URL prefixes it may fetch
//! over `wasi:http` (verified TLS). The host turns each pod's JSON into a Kubernetes
//! object here, so a manifest that is not a valid Pod becomes a [`Problem`] naming its
//! origin, and the other pods go on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1 as k8s;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use crate::backend::World;
use crate::call::plugin_store;
use crate::engine::PluginEngine;
use crate::error::PluginError;
use crate::host::PluginState;
use crate::http::{HttpAccess, TlsVerification};
use crate::limits::Limits;
use crate::loaded::{CallResult, Loaded, Plugin};
use crate::world::source as bindings;

/// Where the granted directory appears inside the guest.
pub const MANIFEST_DIR: &str = "/manifests";

/// What a source may read. Nothing by default.
#[derive(Debug, Clone, Default)]
pub struct SourceGrants {
    /// A host directory, readable at [`MANIFEST_DIR`].
    pub directory: Option<PathBuf>,
    /// URL prefixes it may fetch (`http://config.local/pods/`).
    pub urls: Vec<String>,
}

/// A pod the source wants (the agent's pod config takes it as it is).
pub use wasmlet_core::podconfig::SourcePod;

/// A manifest skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where it came from.
    pub origin: String,
    /// Why it was skipped.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.origin, self.message)
    }
}

/// One reading of a source: its whole desired set, and the manifests it skipped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// The pods, in the source's order.
    pub pods: Vec<SourcePod>,
    /// Manifests that could not be read; a pod from one of these origins that the
    /// source had before is best kept, not removed.
    pub problems: Vec<Problem>,
}

/// Why a poll gave no snapshot; the previous set stands.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    /// The source could not be read at all (its own words).
    #[error("pod source {plugin}: {message}")]
    Unavailable {
        /// The source's name.
        plugin: String,
        /// What it said.
        message: String,
    },
    /// The plugin failed (trap, deadline, …).
    #[error(transparent)]
    Plugin(#[from] PluginError),
}

/// A loaded pod source.
pub struct PodSource {
    loaded: Loaded,
    pre: bindings::PodSourcePre<PluginState>,
    grants: SourceGrants,
}

impl Plugin for PodSource {
    fn loaded(&self) -> &Loaded {
        &self.loaded
    }
}

impl std::fmt::Debug for PodSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodSource")
            .field("name", &self.name())
            .field("grants", &self.grants)
            .finish()
    }
}

impl PluginEngine {
    /// Compiles the component at `path` as pod source `name`, checking that it
    /// implements the `pod-source` world. A poll is cut off at `limits.deadline`.
    pub fn load_source(
        &self,
        name: &str,
        path: &Path,
        config: BTreeMap<String, String>,
        limits: Limits,
        grants: SourceGrants,
    ) -> Result<PodSource, PluginError> {
        let (loaded, pre) = self.load_as(
            name,
            path,
            World::Source,
            config,
            limits,
            bindings::PodSourcePre::new,
        )?;
        Ok(PodSource {
            loaded,
            pre,
            grants,
        })
    }
}

impl PodSource {
    /// What it is granted.
    pub fn grants(&self) -> &SourceGrants {
        &self.grants
    }

    /// Reads the source once, in a fresh instance.
    ///
    /// A source granted a directory reads it with plain blocking calls, on a thread set
    /// aside for the whole poll (`block_in_place`), rather than handing every file
    /// operation to tokio's blocking pool and back (WASI's default): a directory of 30
    /// manifests is a few hundred operations, each a round trip between two threads.
    pub async fn poll(&self) -> Result<Snapshot, PollError> {
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if self.grants.directory.is_some() && multi_thread {
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(self.poll_on(true))
            })
        } else {
            self.poll_on(false).await
        }
    }

    /// [`PodSource::poll`], with file operations blocking this thread or not.
    async fn poll_on(&self, blocking: bool) -> Result<Snapshot, PollError> {
        const CALL: &str = "poll";
        let started = Instant::now();
        let deadline = self.limits().deadline;
        let unavailable = |message| PollError::Unavailable {
            plugin: self.name().to_owned(),
            message,
        };
        let _running = self.loaded.running();
        let result = async {
            let state = self.state(blocking).map_err(unavailable)?;
            let mut store = plugin_store(&self.loaded.engine, state);
            let polled = async {
                let source = self.pre.instantiate_async(&mut store).await?;
                self.loaded.instantiated(started);
                source.wasmlet_plugin_source().call_poll(&mut store).await
            }
            .await;
            let snapshot = self
                .loaded
                .finish(&mut store, CALL, deadline, polled)?
                .map_err(|why| unavailable(self.loaded.in_authors_words(why)))?;
            Ok(decode(snapshot))
        }
        .await;
        self.loaded.record(
            started,
            match &result {
                Ok(s) if s.problems.is_empty() => CallResult::Passed,
                Ok(_) => CallResult::Failed,
                Err(_) => CallResult::Error,
            },
        );
        result
    }

    fn state(&self, blocking: bool) -> Result<PluginState, String> {
        let mut wasi = WasiCtxBuilder::new();
        wasi.allow_blocking_current_thread(blocking);
        if let Some(dir) = &self.grants.directory {
            wasi.preopened_dir(dir, MANIFEST_DIR, FsPerms::ReadOnly)
                .map_err(|e| format!("directory {}: {e:#}", dir.display()))?;
        }
        let mut state = self.loaded.state(self.limits().deadline, Some(wasi));
        if !self.grants.urls.is_empty() {
            state.http_hooks.access = Some(Arc::new(HttpAccess {
                network: Vec::new(),
                pod_ip: None,
                urls: self.grants.urls.clone(),
                tls: TlsVerification::System,
            }));
        }
        Ok(state)
    }
}

/// The guest's pods as Kubernetes objects; one that is not a Pod becomes a problem.
fn decode(snapshot: bindings::exports::wasmlet::plugin::source::Snapshot) -> Snapshot {
    let mut out = Snapshot {
        pods: Vec::with_capacity(snapshot.pods.len()),
        problems: snapshot
            .problems
            .into_iter()
            .map(|p| Problem {
                origin: p.origin,
                message: p.message,
            })
            .collect(),
    };
    for manifest in snapshot.pods {
        match pod_from_json(&manifest.pod_json) {
            Ok(pod) => out.pods.push(SourcePod {
                origin: manifest.origin,
                pod,
            }),
            Err(message) => out.problems.push(Problem {
                origin: manifest.origin,
                message,
            }),
        }
    }
    out
}

/// A v1 Pod from JSON, with the checks every source needs: the kind, and a name.
fn pod_from_json(json: &str) -> Result<k8s::Pod, String> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("not JSON: {e}"))?;
    match value.get("kind").and_then(|k| k.as_str()) {
        Some("Pod") | None => {}
        Some(other) => return Err(format!("a {other}, not a Pod")),
    }
    let pod: k8s::Pod = serde_json::from_value(value).map_err(|e| format!("invalid Pod: {e}"))?;
    if pod.metadata.name.as_deref().is_none_or(str::is_empty) {
        return Err("metadata.name: Required value: name or generateName is required".into());
    }
    Ok(pod)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_from_json_are_checked() {
        let ok = pod_from_json(
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"spec":{"containers":[{"name":"app","image":"nginx"}]}}"#,
        )
        .expect("pod");
        assert_eq!(ok.metadata.name.as_deref(), Some("web"));
        assert_eq!(
            pod_from_json(r#"{"kind":"Service","metadata":{"name":"x"}}"#),
            Err("a Service, not a Pod".into())
        );
        assert!(
            pod_from_json(r#"{"kind":"Pod","metadata":{}}"#)
                .expect_err("no name")
                .starts_with("metadata.name: Required value")
        );
        assert!(
            pod_from_json(r#"{"kind":"Pod","metadata":{"name":"x"},"spec":{"containers":"no"}}"#)
                .expect_err("bad spec")
                .starts_with("invalid Pod:")
        );
    }
}
