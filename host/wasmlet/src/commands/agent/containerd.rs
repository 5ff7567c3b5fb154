//! `wasmlet up`'s own containerd: started (installed on first use) through the
//! project's `scripts/containerd.sh`, and started again when it stops answering.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tracing::{info, warn};
use wasmlet_agent::agent::Agent;
use wasmlet_cri::CriClient;

/// The project's containerd script.
fn containerd_script() -> PathBuf {
    std::env::var_os("WASMLET_CONTAINERD_SCRIPT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/containerd.sh")
        })
}

/// Starts (installing on first use) the containerd under `dir`; returns its endpoint.
pub(super) fn up(dir: &Path) -> Result<String> {
    let script = containerd_script();
    let out = Command::new("bash")
        .arg(&script)
        .arg("up")
        .arg(dir)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} up {} failed (see above)",
            script.display(),
            dir.display()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Restarts the agent's own containerd when the runtime stays unreachable.
pub(super) async fn supervise(agent: Arc<Agent<CriClient>>, dir: PathBuf) {
    let mut down_since: Option<tokio::time::Instant> = None;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        if agent.runtime_state.ready() {
            down_since = None;
            continue;
        }
        let since = *down_since.get_or_insert_with(tokio::time::Instant::now);
        if since.elapsed() >= Duration::from_secs(6) {
            warn!("own containerd is not answering; starting it again");
            let dir = dir.clone();
            match tokio::task::spawn_blocking(move || up(&dir)).await {
                Ok(Ok(_)) => info!("own containerd restarted"),
                Ok(Err(e)) => warn!("restarting containerd failed: {e:#}"),
                Err(e) => warn!("restarting containerd failed: {e}"),
            }
            down_since = None;
        }
    }
}
