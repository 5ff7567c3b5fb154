//! The Container Runtime Interface, as wasmlet speaks it.
//!
//! This crate is the agent's only road to a container runtime (containerd, CRI-O, or
//! `wasmlet-cri-sim`). Start at [`CriRuntime`]: the trait the agent core is written
//! against. [`CriClient`] implements it over gRPC on a unix socket; [`Recorder`] wraps
//! any implementation and records the calls, for tests.
//!
//! # Layout
//! - [`proto`]: the `runtime.v1` messages (from `wasmlet-cri-api`) and the tonic client
//!   and server stubs, generated at build time from `proto/runtime/v1/api.proto`.
//! - [`client`]: [`CriClient`] — connect, version negotiation, per-call deadlines,
//!   retry with back-off for idempotent calls while the runtime restarts.
//! - [`error`]: [`CriError`], one type for every failure, with an [`ErrorKind`] to
//!   match on and the call and endpoint named in its message.
//! - [`runtime`]: the [`CriRuntime`] trait and the event stream type.
//! - [`recording`]: [`Recorder`], a call-recording wrapper for tests.
//! - [`labels`]: helpers for label selectors and the well-known state names.

pub mod client;
pub mod endpoint;
pub mod error;
pub mod labels;
pub mod listed;
pub mod recording;
pub mod runtime;

/// `runtime.v1`: messages and enums (`wasmlet_cri_api::proto`'s), and the
/// `RuntimeService` / `ImageService` stubs.
#[allow(missing_docs, clippy::all)]
pub mod proto {
    pub use wasmlet_cri_api::proto::*;
    tonic::include_proto!("runtime.v1");
}

pub use client::{CRI_API_VERSION, ClientOptions, CriClient};
pub use endpoint::Endpoint;
pub use error::{CriError, ErrorKind};
pub use recording::{Call, Recorder};
pub use runtime::{CriRuntime, EventStream};
