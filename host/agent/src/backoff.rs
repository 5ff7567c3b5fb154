//! The kubelet's back-off ([`wasmlet_core::backoff`]) on the agent's clock: tokio's
//! instants, which tests pause and advance.

pub use wasmlet_core::backoff::{CRASH_INITIAL, CRASH_MAX, Moment};

/// Back-off state for many keys, in the agent's instants.
pub type Backoff = wasmlet_core::backoff::Backoff<tokio::time::Instant>;
