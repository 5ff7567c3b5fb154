//! `wasmlet-apiserver-sim --listen ADDR --kubeconfig FILE`: serves the API server double
//! over HTTP until killed, and writes a kubeconfig naming it, so that cluster mode can be
//! tried on a machine without a cluster:
//!
//! ```text
//! wasmlet-apiserver-sim --listen 127.0.0.1:6443 --kubeconfig /tmp/sim.kubeconfig &
//! wasmlet run --config node.yaml --kubeconfig /tmp/sim.kubeconfig
//! curl -s 127.0.0.1:6443/api/v1/nodes
//! curl -s -XPOST -H 'content-type: application/json' 127.0.0.1:6443/api/v1/namespaces/default/pods -d @pod.json
//! ```
//!
//! The state is in memory only; it is gone when the process ends.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;

/// A Kubernetes API server double: the REST paths a node agent uses.
#[derive(Debug, Parser)]
#[command(name = "wasmlet-apiserver-sim", version)]
struct Args {
    /// Address to serve on.
    #[arg(long, default_value = "127.0.0.1:6443", value_name = "ADDR")]
    listen: SocketAddr,
    /// Write a kubeconfig naming the double here.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let sim = wasmlet_apiserver_sim::ApiServerSim::new();
    let served = sim
        .serve(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    if let Some(path) = &args.kubeconfig {
        wasmlet_apiserver_sim::write_kubeconfig(path, &served.url())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    tracing::info!(url = %served.url(), "API server double serving");
    tokio::signal::ctrl_c().await.ok();
    served.stop();
    Ok(())
}
