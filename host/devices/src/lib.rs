//! wasmlet's device plugin manager (the device plugin API, v1beta1).
//!
//! - [`registration`]: the server plugins register on (`kubelet.sock` in the device
//!   plugin directory), dialing each plugin and following its devices' health.
//! - [`manager`]: the devices per resource, their allocation to a pod's containers at
//!   admission, and what a container needs to use them when it is created.
//! - [`state`]: the rules, without I/O (capacity, allocatable, the stop grace period,
//!   which devices a container gets).
//! - [`options`]: a plugin's Allocate answer and where it goes in the CRI configuration.
//! - [`checkpoint`]: the grants, kept across restarts.
//! - `testing` (feature): a device plugin for tests, served on a real socket.

pub mod checkpoint;
pub mod manager;
pub mod options;
pub mod registration;
pub mod state;
#[cfg(feature = "testing")]
pub mod testing;

/// The API's messages and both services' clients and servers.
#[allow(missing_docs, clippy::all)]
pub mod proto {
    tonic::include_proto!("v1beta1");
}

pub use manager::Manager;
pub use options::ContainerOptions;
pub use state::{AllocateError, Capacity};
