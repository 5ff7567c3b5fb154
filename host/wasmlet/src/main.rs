//! `wasmlet`: the node agent's binary. It wires the host crates together; each
//! subcommand lives in its own module under `commands/`.
//!
//! - `wasmlet up`: run the agent with its embedded defaults (its own containerd, the
//!   shipped plugins, static pods from a directory).
//! - `wasmlet run --config FILE`: run the agent from a configuration file (a
//!   KubeletConfiguration is accepted).
//! - `wasmlet cri ...`: talk to a CRI runtime directly (version, pods, containers,
//!   images, reset) — the small crictl Debian does not package.
//! - `wasmlet plugin inspect|admit ...`: run and examine plugins offline.

mod commands;
mod config;
mod http;
mod plugins;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// Run the agent from a configuration file.
    Run(commands::agent::RunArgs),
    /// Talk to a CRI runtime directly.
    Cri(commands::cri::CriArgs),
    /// Run and examine plugins offline (inspect, admit, probe, source).
    Plugin(commands::plugin::PluginArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Up(args) => commands::agent::up(args).await,
        Command::Run(args) => commands::agent::run(args).await,
        Command::Cri(args) => commands::cri::run(args).await,
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
