//! `wasmlet up` and `wasmlet run`: the agent itself.
//!
//! The agent core (syncLoop, pod workers, PLEG, probes) is not built yet; these commands
//! parse their arguments and then say so plainly rather than pretend to run.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;

/// Arguments of `wasmlet up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// Directory of static pod manifests.
    #[arg(long, default_value = "examples/static-pods")]
    pub manifests: PathBuf,
    /// Where the agent and its own containerd keep their state.
    #[arg(long, default_value = "/var/lib/wasmlet")]
    pub state_dir: PathBuf,
}

/// Arguments of `wasmlet run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The configuration file (YAML; a KubeletConfiguration is accepted).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
}

const NOT_YET: &str = "agent not built yet: this build has the CRI layer, the simulator and the \
     containerd harness (try `wasmlet cri --help`); the syncLoop, pod workers and PLEG come next";

/// `wasmlet up`.
pub fn up(_args: UpArgs) -> Result<()> {
    bail!(NOT_YET)
}

/// `wasmlet run`.
pub fn run(_args: RunArgs) -> Result<()> {
    bail!(NOT_YET)
}
