//! `wasmlet controller`: counts the nodes' WasmletNodes into each WasmletPlugin's
//! status (`wasmlet_fleet::controller`). Run as a Deployment in `wasmlet-system`
//! (`deploy/wasmlet-controller.yaml`, in-cluster credentials) or beside a cluster with
//! `--kubeconfig`; replicas elect a leader through a Lease, so two are safe.
//!
//! ```text
//! wasmlet controller [--kubeconfig FILE] [--namespace wasmlet-system]
//!                    [--lease-name wasmlet-controller] [--identity NAME]
//! ```

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use wasmlet_fleet::controller::{self, Options, lease::Timing};

/// Arguments of `wasmlet controller`.
#[derive(Debug, Args)]
pub struct ControllerArgs {
    /// The kubeconfig to use; without it, the pod's service account (in a cluster) or
    /// $KUBECONFIG / ~/.kube/config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The namespace of the Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = wasmlet_fleet::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// The Lease replicas elect a leader through.
    #[arg(long, default_value = "wasmlet-controller")]
    pub lease_name: String,
    /// This replica's name in the Lease (default: the host name — the pod's name — and
    /// the process id).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Seconds a Lease not renewed stays its holder's.
    #[arg(long, default_value_t = 15)]
    pub lease_duration: u64,
    /// Seconds the leader keeps trying to renew before it stops leading.
    #[arg(long, default_value_t = 10)]
    pub renew_deadline: u64,
    /// Seconds between attempts to take or renew the Lease.
    #[arg(long, default_value_t = 2)]
    pub retry_period: u64,
    /// Seconds between writes of a WasmletPlugin's status when only the count of what
    /// it would have rejected in Monitor mode changed (each write reaches every node).
    #[arg(long, default_value_t = 30)]
    pub count_period: u64,
}

/// Runs the controller until SIGTERM or SIGINT (which give the Lease up), or until it
/// no longer leads (an error: its Deployment starts it again, to wait for the Lease).
pub async fn run(args: ControllerArgs) -> Result<()> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("--kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("--kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer().await.context(
            "no credentials: not in a pod, no $KUBECONFIG or ~/.kube/config; give --kubeconfig",
        )?,
    };
    let client = kube::Client::try_from(config).context("building the API client")?;
    let identity = args.identity.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}_{}", host.trim(), std::process::id())
    });
    let options = Options {
        namespace: args.namespace.clone(),
        lease: args.lease_name.clone(),
        identity,
        timing: Timing {
            duration: Duration::from_secs(args.lease_duration),
            renew_deadline: Duration::from_secs(args.renew_deadline),
            retry: Duration::from_secs(args.retry_period),
        },
        count_period: Duration::from_secs(args.count_period),
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(async move {
        super::agent::shutdown_signal().await;
        stop.cancel();
    });
    controller::run(client, &options, stopped)
        .await
        .with_context(|| format!("Lease {}/{}", options.namespace, options.lease))
}
