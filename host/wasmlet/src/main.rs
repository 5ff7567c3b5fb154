//! `wasmlet`: the node agent's binary. It wires the host crates together; each
//! subcommand lives in its own module under `commands/`.
//!
//! - `wasmlet up`: run the agent with its embedded defaults (its own containerd, the
//!   shipped plugins, static pods from a directory).
//! - `wasmlet run --config FILE …`: run the agent with the kubelet's command line and
//!   configuration file (a KubeletConfiguration). Run under the name `kubelet` (a
//!   symlink, as kubeadm's systemd unit calls it), the binary is `wasmlet run`.
//! - `wasmlet cri ...`: talk to a CRI runtime directly (version, pods, containers,
//!   images, reset) — the small crictl Debian does not package.
//! - `wasmlet plugin inspect|admit ...`: run and examine plugins offline.
//! - `wasmlet controller`: count the nodes' WasmletNodes into each WasmletPlugin's
//!   status (a Deployment in `wasmlet-system`; replicas elect a leader).

mod allocator;
mod commands;
mod config;
mod http;
mod plugins;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[global_allocator]
static ALLOCATOR: allocator::Switch = allocator::Switch;

/// wasmlet: a Kubernetes node agent extensible with WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "wasmlet", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the agent with its embedded defaults (own containerd, shipped plugins,
    /// static pods from a directory).
    Up(commands::agent::UpArgs),
    /// Run the agent with the kubelet's flags and configuration file.
    #[command(disable_version_flag = true)]
    Run(commands::agent::RunArgs),
    /// Talk to a CRI runtime directly.
    Cri(commands::cri::CriArgs),
    /// Run and examine plugins offline (inspect, admit, probe, source).
    Plugin(commands::plugin::PluginArgs),
    /// Count the nodes' WasmletNodes into each WasmletPlugin's status (cluster-wide;
    /// replicas elect a leader through a Lease).
    Controller(commands::controller::ControllerArgs),
}

/// Whether the binary was called as `kubelet` (a link of that name).
fn called_as_kubelet() -> bool {
    std::env::args_os()
        .next()
        .and_then(|a| std::path::Path::new(&a).file_name().map(|n| n == "kubelet"))
        .unwrap_or(false)
}

/// The command line; run as `kubelet`, `wasmlet run` with the same arguments.
fn arguments() -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if called_as_kubelet() {
        args.insert(1, "run".into());
    }
    args
}

/// The log filter: `RUST_LOG` when set, else the kubelet's `--v` level (0–2: info, 3–4:
/// debug, 5 and more: trace). Below debug, sigstore-rs says only its errors: what it
/// warns about (a component without signatures, a registry without the referrers API)
/// the agent says itself, naming the plugin. So does kube-runtime's watcher, which warns
/// at every failed list or watch (a node without the RBAC for WasmletPlugins, every few
/// seconds for good): each of the agent's watches says its first failure itself, naming
/// what failed and what to do, and retries quietly.
fn log_filter(cli: &Cli) -> tracing_subscriber::EnvFilter {
    if let Ok(f) = tracing_subscriber::EnvFilter::try_from_default_env() {
        return f;
    }
    let v = match &cli.command {
        Command::Run(args) => args.0.verbosity().ok().flatten().unwrap_or(0),
        _ => 0,
    };
    match v {
        0..=2 => "info,sigstore=error,kube_runtime::watcher=error",
        3..=4 => "debug",
        _ => "trace",
    }
    .into()
}

/// Allocator arenas at most, for the commands that run for good (the agent, the
/// controller): see [`wasmlet_plugin_host::memory::limit_arenas`]. With glibc's default
/// (eight per core) the idle agent at 30 pods held 1 MB more of freed memory spread over
/// its threads' arenas (bench/LOG.md, "Where a node's memory is now"). Not for `plugin`,
/// which compiles components (the agent's compiler process among them) and allocates
/// with mimalloc instead (see [`allocator`]).
const ALLOCATOR_ARENAS: i32 = 2;

/// How long tasks still running when a command returns are given before the process
/// exits without them.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

fn main() -> ExitCode {
    let mut cli = Cli::parse_from(arguments());
    if matches!(cli.command, Command::Plugin(_)) {
        allocator::use_mimalloc();
    } else {
        wasmlet_plugin_host::memory::limit_arenas(ALLOCATOR_ARENAS);
        wasmlet_plugin_host::memory::map_large_blocks();
    }
    if let Command::Run(args) = &mut cli.command {
        args.0.as_kubelet = called_as_kubelet();
    }
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => {
            let code = runtime.block_on(run(cli));
            // Tasks still in flight at the end (a plugin call, a blocking read of the
            // runtime) get a moment; the process does not wait on them.
            runtime.shutdown_timeout(SHUTDOWN_GRACE);
            code
        }
        Err(e) => {
            eprintln!("wasmlet: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> ExitCode {
    wasmlet_cluster::connect::install_crypto_provider();
    tracing_subscriber::fmt()
        .with_env_filter(log_filter(&cli))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let result = match cli.command {
        Command::Up(args) => commands::agent::up(args).await,
        Command::Run(args) => commands::agent::run(args).await,
        Command::Cri(args) => commands::cri::run(args).await,
        Command::Controller(args) => commands::controller::run(args).await,
        Command::Plugin(args) => match commands::plugin::run(args).await {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wasmlet: {e:#}");
            ExitCode::FAILURE
        }
    }
}
