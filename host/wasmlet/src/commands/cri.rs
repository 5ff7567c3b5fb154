//! `wasmlet cri`: a small CRI client for operators and scripts.
//!
//! ```text
//! wasmlet cri --endpoint unix:///run/containerd/containerd.sock version
//! wasmlet cri pods | ps [-a] | images | inspect ID | reset
//! ```

use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use wasmlet_cri::proto::{ContainerState, PodSandboxState};
use wasmlet_cri::{ClientOptions, CriClient, CriRuntime};

/// Arguments of `wasmlet cri`.
#[derive(Debug, Args)]
pub struct CriArgs {
    /// The runtime's endpoint.
    #[arg(
        long,
        env = "WASMLET_CRI_ENDPOINT",
        default_value = "unix:///run/containerd/containerd.sock"
    )]
    pub endpoint: String,
    /// Seconds to wait for the runtime to answer at connect.
    #[arg(long, default_value_t = 5)]
    pub connect_timeout: u64,
    #[command(subcommand)]
    pub command: CriCommand,
}

/// What to ask the runtime.
#[derive(Debug, Subcommand)]
pub enum CriCommand {
    /// The runtime's name, version and CRI version, and whether it streams events.
    Version,
    /// The RuntimeReady / NetworkReady conditions.
    Info,
    /// List pod sandboxes.
    Pods,
    /// List containers (running ones unless --all).
    Ps {
        /// Include created and exited containers.
        #[arg(short, long)]
        all: bool,
    },
    /// List images.
    Images,
    /// Show one container's or sandbox's full status.
    Inspect {
        /// A container or sandbox id.
        id: String,
    },
    /// Stop and remove every pod sandbox and container the runtime holds.
    Reset,
}

/// Runs `wasmlet cri`.
pub async fn run(args: CriArgs) -> Result<()> {
    let options = ClientOptions {
        connect_timeout: Duration::from_secs(args.connect_timeout),
        ..ClientOptions::default()
    };
    let client = CriClient::connect_with(&args.endpoint, options).await?;
    match args.command {
        CriCommand::Version => version(&client),
        CriCommand::Info => {
            let status = client.status(false).await?;
            for c in status.status.map(|s| s.conditions).unwrap_or_default() {
                println!(
                    "{:<14} {:<5} {} {}",
                    c.r#type, c.status, c.reason, c.message
                );
            }
        }
        CriCommand::Pods => pods(&client).await?,
        CriCommand::Ps { all } => ps(&client, all).await?,
        CriCommand::Images => {
            println!("{:<20} {:>10}  TAGS", "IMAGE ID", "SIZE");
            for i in client.list_images(None).await? {
                let id = i.id.trim_start_matches("sha256:");
                println!(
                    "{:<20} {:>10}  {}",
                    short(id),
                    i.size,
                    i.repo_tags.join(", ")
                );
            }
        }
        CriCommand::Inspect { id } => match client.container_status(&id, true).await {
            Ok(status) => println!("{status:#?}"),
            Err(e) if e.is_not_found() => {
                println!("{:#?}", client.pod_sandbox_status(&id, true).await?)
            }
            Err(e) => return Err(e.into()),
        },
        CriCommand::Reset => reset(&client).await?,
    }
    Ok(())
}

/// `wasmlet cri version`: the runtime, the CRI version and whether events stream.
fn version(client: &CriClient) {
    let n = client.negotiated();
    println!(
        "runtime:            {} {}",
        n.version.runtime_name, n.version.runtime_version
    );
    println!("CRI version:        {}", n.version.runtime_api_version);
    let events = if n.container_events {
        "streamed"
    } else {
        "not served (relist)"
    };
    println!("container events:   {events}");
}

/// `wasmlet cri pods`: the sandboxes, as `crictl pods` lists them.
async fn pods(client: &CriClient) -> Result<()> {
    println!(
        "{:<13} {:<9} {:<40} {:<16} ATTEMPT",
        "POD ID", "STATE", "NAME", "NAMESPACE"
    );
    for p in client.list_pod_sandbox(None).await? {
        let m = p.metadata.clone().unwrap_or_default();
        let state = if p.state() == PodSandboxState::SandboxReady {
            "Ready"
        } else {
            "NotReady"
        };
        println!(
            "{:<13} {:<9} {:<40} {:<16} {}",
            short(&p.id),
            state,
            m.name,
            m.namespace,
            m.attempt
        );
    }
    Ok(())
}

/// `wasmlet cri ps [--all]`: the (running) containers, as `crictl ps` lists them.
async fn ps(client: &CriClient, all: bool) -> Result<()> {
    println!(
        "{:<13} {:<8} {:<24} {:<13} IMAGE",
        "CONTAINER", "STATE", "NAME", "POD ID"
    );
    for c in client.list_containers(None).await? {
        if !all && c.state() != ContainerState::ContainerRunning {
            continue;
        }
        let name = c
            .metadata
            .as_ref()
            .map(|m| m.name.as_str())
            .unwrap_or_default();
        let image = c
            .image
            .as_ref()
            .map(|i| i.image.as_str())
            .unwrap_or_default();
        let state = c.state().as_str_name().trim_start_matches("CONTAINER_");
        println!(
            "{:<13} {:<8} {:<24} {:<13} {}",
            short(&c.id),
            state,
            name,
            short(&c.pod_sandbox_id),
            image
        );
    }
    Ok(())
}

/// Stops and removes every sandbox, then any container left without one.
async fn reset(client: &CriClient) -> Result<()> {
    let pods = client.list_pod_sandbox(None).await?;
    for p in &pods {
        client
            .stop_pod_sandbox(&p.id)
            .await
            .with_context(|| format!("stopping pod {}", p.id))?;
        client
            .remove_pod_sandbox(&p.id)
            .await
            .with_context(|| format!("removing pod {}", p.id))?;
    }
    let containers = client.list_containers(None).await?;
    for c in &containers {
        client
            .remove_container(&c.id)
            .await
            .with_context(|| format!("removing container {}", c.id))?;
    }
    eprintln!(
        "removed {} pod sandboxes and {} stray containers from {}",
        pods.len(),
        containers.len(),
        client.endpoint()
    );
    Ok(())
}

fn short(id: &str) -> &str {
    &id[..id.len().min(13)]
}
