//! `wasmlet-logs`: container logs on a wasmlet node.
//!
//! - [`parse`] — the CRI log format the runtime writes (records, partial lines,
//!   timestamps).
//! - [`read`] — a log file read as `kubectl logs` prints it: `tailLines`, `sinceTime`,
//!   `limitBytes`, `timestamps`, and `follow` across rotations. The kubelet server
//!   serves it.
//! - [`rotate`] — the kubelet's container log manager: every running container's log
//!   rotated past `containerLogMaxSize`, at most `containerLogMaxFiles` kept, the older
//!   ones compressed, the runtime told to reopen the file.

pub mod parse;
pub mod read;
pub mod rotate;

pub use read::LogOptions;
pub use rotate::{LogManager, Policy, Rotation};
