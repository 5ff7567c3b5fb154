//! Where the Services come from, for the variables the kubelet makes of them
//! ([`wasmlet_core::criconfig::services`]: `KUBERNETES_SERVICE_HOST` and its kin).

use std::fmt;

use k8s_openapi::api::core::v1 as k8s;

use super::BoxFuture;

/// The Services the node knows of: a watch kept by the node (one for all pods, never a
/// request per pod).
pub trait ServiceSource: Send + Sync + fmt::Debug {
    /// The Services of `namespace` and the `default` namespace's `kubernetes`. With
    /// `wait`, once the first list has arrived (an error if it does not arrive in
    /// reasonable time: containers then wait, as with the kubelet); without, whatever is
    /// known now — what static pods get, as the kubelet does not make them wait for an
    /// API server that may be one of them.
    fn services<'a>(
        &'a self,
        namespace: &'a str,
        wait: bool,
    ) -> BoxFuture<'a, Result<Vec<k8s::Service>, crate::lookup::LookupError>>;
}

pub use wasmlet_core::criconfig::services::{env, for_pod};
