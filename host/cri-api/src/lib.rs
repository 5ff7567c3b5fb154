//! The Container Runtime Interface's data, without a transport: the `runtime.v1`
//! messages, label selectors and the CRI's times. What code that only builds or reads
//! CRI messages needs — the agent's pure core among it — without tonic, tokio or a
//! clock; `wasmlet-cri` adds the gRPC client and server stubs around these messages.

pub mod labels;
pub mod time;

/// `runtime.v1`: the messages and enums (the services are `wasmlet_cri::proto`'s).
#[allow(missing_docs, clippy::all)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/runtime.v1.rs"));
}
