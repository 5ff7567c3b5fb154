//! A load: the component fetched (and verified), then swapped in where its kind goes.

use std::sync::Arc;

use wasmlet_plugin_host::Plugin;
use wasmlet_plugin_host::kinds::ClusterSource;

use super::Targets;
use crate::fetch::Fetcher;
use crate::object::Desired;
use crate::plan::Plan;

/// A version that loaded: the digest serving, and the key that signed it (when the node
/// verifies and one did).
pub(super) struct Loaded {
    pub(super) digest: String,
    pub(super) verified: Option<String>,
}

pub(super) type LoadResult = (String, u64, Result<Loaded, String>);

/// Fetches the component `desired` names and swaps it in as `plan` says; the serving
/// digest, or why it was refused (the old version keeps serving).
pub(super) async fn load(
    fetcher: Arc<Fetcher>,
    targets: Targets,
    desired: Desired,
    plan: Plan,
) -> Result<Loaded, String> {
    let verified = fetcher
        .fetch(&desired)
        .await
        .map_err(|e| e.to_string())?
        .verified;
    let digest = swap_in(targets, desired, plan).await?;
    Ok(Loaded { digest, verified })
}

/// Swaps the fetched component in as `plan` says; the digest serving.
async fn swap_in(targets: Targets, desired: Desired, plan: Plan) -> Result<String, String> {
    match plan {
        Plan::Admission(link, _) => targets
            .chain
            .install(&desired.name, link)
            .await
            .map(|p| format!("sha256:{}", p.digest()))
            .map_err(|e| e.to_string()),
        Plan::Probe(spec) => {
            let engine = targets.chain.engine().clone();
            let name = desired.name.clone();
            let kinds = spec.kinds.clone();
            let handler = tokio::task::spawn_blocking(move || {
                engine.load_probe(&name, &spec.path, spec.config, spec.limits, spec.grants)
            })
            .await
            .map_err(|e| format!("loading stopped: {e}"))?
            .map_err(|e| e.to_string())?;
            let digest = format!("sha256:{}", handler.digest());
            targets.probes.set_cluster(Arc::new(handler), &kinds);
            Ok(digest)
        }
        Plan::Source(spec) => {
            let engine = targets.chain.engine().clone();
            let name = desired.name.clone();
            let (period, directory) = (spec.period, spec.grants.directory.clone());
            let source = tokio::task::spawn_blocking(move || {
                engine.load_source(&name, &spec.path, spec.config, spec.limits, spec.grants)
            })
            .await
            .map_err(|e| format!("loading stopped: {e}"))?
            .map_err(|e| e.to_string())?;
            let digest = format!("sha256:{}", source.digest());
            targets.sources.set_cluster(ClusterSource {
                source: Arc::new(source),
                period,
                directory,
            });
            Ok(digest)
        }
    }
}
