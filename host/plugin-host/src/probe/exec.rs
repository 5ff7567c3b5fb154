//! What a handler granted `exec` runs its commands through: the probed container's
//! [`ContainerExec`], which the host state holds for the check.

use std::pin::Pin;
use std::time::Duration;

pub use crate::world::probe::wasmlet::plugin::exec::ExecOutput;

/// Runs a command in the probed container (the agent wires it to CRI ExecSync).
pub trait ContainerExec: Send + Sync + 'static {
    /// Runs `command` and waits at most `timeout`; an error is the runtime's.
    fn exec_sync(
        &self,
        command: Vec<String>,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<ExecOutput, String>> + Send + '_>>;
}
