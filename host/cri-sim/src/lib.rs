//! `wasmlet-cri-sim`: an in-memory CRI runtime that answers like containerd.
//!
//! It exists so that the agent's restart, back-off and fault handling can be tested
//! deterministically and at scale (10,000 containers), with no containers at all. It is
//! never used where a user would use a real runtime; end-to-end tests use containerd.
//!
//! Start at [`Simulator`]: every CRI call is a method on it. Then:
//! - [`SimServer`] serves it over gRPC on a unix socket (the `wasmlet-cri-sim` binary
//!   does that until killed); [`Simulator`] also implements
//!   [`wasmlet_cri::CriRuntime`] directly, for in-process use without gRPC.
//! - [`shell`] predicts what a container's command does (exit codes, sleeps, traps,
//!   files), so `sh -c 'sleep 1; exit 3'` behaves as on containerd.
//! - [`script`] is how tests script behaviour beyond the command: per container or pod
//!   annotation, or per image (exit after N s, OOM, hang on stop, fail N sandbox runs).
//! - Runtime-wide faults (latency, an outage, the next N calls failing) are methods on
//!   [`Simulator`]: [`Simulator::set_latency`], [`Simulator::set_unavailable_for`],
//!   [`Simulator::fail_next`].
//!
//! Faithfulness is defined by `tests/cri_contract.rs`, which runs the same cases
//! against this simulator and a real containerd.

pub mod authority;
pub mod direct;
pub mod fastlist;
pub mod fixtures;
pub mod image;
pub mod script;
pub mod server;
pub mod service;
pub mod shell;
mod sim;

pub use image::{BUSYBOX_IMAGE, PAUSE_IMAGE};
pub use script::Script;
pub use server::{ServeError, SimServer};
pub use sim::{EVENT_BUFFER, EncodedList, RUNTIME_NAME, Simulator};
