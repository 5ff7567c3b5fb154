//! `wasmlet-cri-sim --socket PATH`: serves the in-memory CRI runtime on a unix socket
//! until killed (SIGINT or SIGTERM stop it cleanly and remove the socket).
//!
//! ```text
//! wasmlet-cri-sim --socket /tmp/cri.sock \
//!     --latency 2ms \
//!     --image 'localhost/crash:1=exit-after=2s exit-code=1'
//! kill -USR1 <pid>    # every call answers UNAVAILABLE for --outage (default 5 s)
//! ```

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use tokio::signal::unix::{SignalKind, signal};
use wasmlet_cri_sim::script::{Script, parse_duration};
use wasmlet_cri_sim::{Simulator, server};

/// An in-memory CRI runtime (runtime.v1) that answers like containerd, for tests,
/// benchmarks and fault injection.
#[derive(Debug, Parser)]
#[command(name = "wasmlet-cri-sim", version)]
struct Args {
    /// Unix socket to serve on (a stale socket file is replaced).
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,

    /// Latency added to every call, e.g. 2ms.
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    latency: Option<Duration>,

    /// Latency for one method, METHOD=DURATION (e.g. RunPodSandbox=100ms); repeatable.
    #[arg(long = "method-latency", value_parser = method_latency, value_name = "METHOD=DURATION")]
    method_latency: Vec<(String, Duration)>,

    /// An extra image, NAME or NAME=SCRIPT (see the crate docs for script keys); repeatable.
    #[arg(long = "image", value_parser = image, value_name = "NAME[=SCRIPT]")]
    images: Vec<(String, Option<Script>)>,

    /// How long the runtime is unavailable after each SIGUSR1 (an outage, as while a
    /// runtime restarts): every call answers UNAVAILABLE until it ends.
    #[arg(long, value_parser = duration, value_name = "DURATION", default_value = "5s")]
    outage: Duration,
}

fn duration(text: &str) -> Result<Duration, String> {
    parse_duration(text).ok_or_else(|| format!("{text:?} is not a duration (e.g. 2ms, 1.5s)"))
}

fn method_latency(text: &str) -> Result<(String, Duration), String> {
    let (method, d) = text.split_once('=').ok_or("expected METHOD=DURATION")?;
    Ok((method.to_owned(), duration(d)?))
}

fn image(text: &str) -> Result<(String, Option<Script>), String> {
    match text.split_once('=') {
        None => Ok((text.to_owned(), None)),
        Some((name, script)) => Ok((
            name.to_owned(),
            Some(Script::parse(script).map_err(|e| e.to_string())?),
        )),
    }
}

/// How long calls in flight may take to finish after SIGTERM.
const DRAIN: Duration = Duration::from_secs(2);

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let sim = Simulator::new();
    if let Some(latency) = args.latency {
        sim.set_latency(latency);
    }
    for (method, latency) in &args.method_latency {
        sim.set_method_latency(method, *latency);
    }
    for (name, script) in args.images {
        sim.add_image(&name, &["sh"], script);
    }
    let listener = server::bind(&args.socket)?;
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let outage_handle = sim.clone();
    let serving = tokio::spawn(server::serve_listener(sim, listener, async {
        let _ = stop_rx.await;
    }));
    tracing::info!(socket = %args.socket.display(), "wasmlet-cri-sim serving");
    let mut usr1 = signal(SignalKind::user_defined1()).context("installing the SIGUSR1 handler")?;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = usr1.recv() => {
                tracing::warn!(outage = ?args.outage, "SIGUSR1: simulating an outage");
                outage_handle.set_unavailable_for(args.outage);
            }
        }
    }
    // Stop accepting; give calls in flight a moment, then exit even if clients keep
    // their connections open (as a runtime does when it is stopped).
    let _ = stop_tx.send(());
    let drained = tokio::time::timeout(DRAIN, serving).await;
    let _ = std::fs::remove_file(&args.socket);
    if let Ok(joined) = drained {
        joined
            .context("the server task failed")?
            .with_context(|| format!("serving on {}", args.socket.display()))?;
    }
    tracing::info!("wasmlet-cri-sim stopped");
    Ok(())
}
