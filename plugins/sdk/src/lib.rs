//! The wasmlet plugin SDK: write an admission policy, a probe handler or a pod source as
//! a plain Rust type, then export it with one macro ([`export_admission_policy!`],
//! [`export_probe_handler!`], [`export_pod_source!`]).
//!
//! ```ignore
//! use wasmlet_plugin_sdk::admission::*;
//!
//! struct DenyLatest;
//!
//! impl AdmissionPolicy for DenyLatest {
//!     fn admit(pod: Pod, _node: Node, _usage: NodeUsage) -> Verdict {
//!         match pod.containers.iter().find(|c| c.image.ends_with(":latest")) {
//!             Some(c) => reject("LatestTag", format!("container {} uses :latest", c.name)),
//!             None => Verdict::Admit,
//!         }
//!     }
//! }
//!
//! wasmlet_plugin_sdk::export_admission_policy!(DenyLatest);
//! ```
//!
//! The types are generated from `wit/plugin.wit` (package `wasmlet:plugin@0.1.0`); the
//! host functions every plugin may call are in [`host`].

/// Bindings generated from the WIT package, one module per world. Plugins use
/// [`admission`], [`probe`] and [`host`].
#[doc(hidden)]
#[allow(missing_docs, unsafe_code, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "admission-policy",
        pub_export_macro: true,
        export_macro_name: "__export_admission_policy",
        default_bindings_module: "wasmlet_plugin_sdk::bindings",
        generate_all,
    });
}

/// The probe-handler world's bindings; shared interfaces come from [`bindings`].
#[doc(hidden)]
#[allow(missing_docs, unsafe_code, clippy::all)]
pub mod probe_bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "probe-handler",
        pub_export_macro: true,
        export_macro_name: "__export_probe_handler",
        default_bindings_module: "wasmlet_plugin_sdk::probe_bindings",
        with: {
            "wasmlet:plugin/types@0.1.0": crate::bindings::wasmlet::plugin::types,
            "wasmlet:plugin/host@0.1.0": crate::bindings::wasmlet::plugin::host,
        },
        generate_all,
    });
}

/// The pod-source world's bindings; shared interfaces come from [`bindings`].
#[doc(hidden)]
#[allow(missing_docs, unsafe_code, clippy::all)]
pub mod source_bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "pod-source",
        pub_export_macro: true,
        export_macro_name: "__export_pod_source",
        default_bindings_module: "wasmlet_plugin_sdk::source_bindings",
        with: {
            "wasmlet:plugin/host@0.1.0": crate::bindings::wasmlet::plugin::host,
        },
        generate_all,
    });
}

#[cfg(feature = "http")]
pub mod http;
pub mod resources;
pub mod source;

use bindings::wasmlet::plugin::types::{Container, Pod, ResourceList};

/// Writing an admission policy.
pub mod admission {
    pub use crate::bindings::exports::wasmlet::plugin::admission::{Rejection, Verdict};
    pub use crate::bindings::wasmlet::plugin::node_state::host_ports_in_use;
    pub use crate::bindings::wasmlet::plugin::pod_document::pod_json;
    pub use crate::bindings::wasmlet::plugin::types::*;

    /// An admission policy: decides whether a pod may run on this node.
    pub trait AdmissionPolicy {
        /// Decides whether `pod` may run on `node`, which already carries `usage` (the
        /// requests, pod count and host ports of the pods admitted before it).
        fn admit(pod: Pod, node: Node, usage: NodeUsage) -> Verdict;
    }

    /// A rejection with a machine `reason` (CamelCase) and a human `message`.
    pub fn reject(reason: impl Into<String>, message: impl Into<String>) -> Verdict {
        Verdict::Reject(Rejection {
            reason: reason.into(),
            message: message.into(),
        })
    }

    /// The rejection the kubelet gives when one of its predicates fails:
    /// reason `name`, message `Predicate <name> failed: <description>`.
    pub fn predicate_failed(name: &str, description: &str) -> Verdict {
        reject(name, format!("Predicate {name} failed: {description}"))
    }
}

/// What the host offers every plugin: logging, configuration, a clock.
pub mod host {
    pub use crate::bindings::wasmlet::plugin::host::{Level, config, config_all, log, now};
}

/// Writing a probe handler.
pub mod probe {
    pub use crate::bindings::wasmlet::plugin::types::*;
    pub use crate::probe_bindings::exports::wasmlet::plugin::probe::{
        Action, GrpcAction, HttpGetAction, Outcome, ProbeKind, Target, TcpSocketAction,
    };
    pub use crate::probe_bindings::wasmlet::plugin::exec::{ExecOutput, exec_sync};

    impl Target {
        /// The probe's timeout (at least 1 ms).
        pub fn timeout(&self) -> std::time::Duration {
            std::time::Duration::from_millis(u64::from(self.timeout_ms.max(1)))
        }

        /// `host:port` to check: `host`, or the pod's IP when `host` is empty (as the
        /// kubelet does); an IPv6 address in brackets.
        pub fn address(&self, host: &str, port: u16) -> String {
            let host = if host.is_empty() { &self.pod_ip } else { host };
            if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            }
        }
    }

    /// A probe handler: checks one container.
    pub trait ProbeHandler {
        /// Makes the check `target` describes.
        fn check(target: Target) -> Outcome;
    }
}

/// Exports a type implementing [`probe::ProbeHandler`] as the component's
/// `wasmlet:plugin/probe` implementation.
#[macro_export]
macro_rules! export_probe_handler {
    ($handler:ty) => {
        const _: () = {
            struct __WasmletProbe;
            impl $crate::probe_bindings::exports::wasmlet::plugin::probe::Guest for __WasmletProbe {
                fn check(target: $crate::probe::Target) -> $crate::probe::Outcome {
                    <$handler as $crate::probe::ProbeHandler>::check(target)
                }
            }
            $crate::probe_bindings::__export_probe_handler!(__WasmletProbe with_types_in $crate::probe_bindings);
        };
    };
}

/// Exports a type implementing [`source::PodSource`] as the component's
/// `wasmlet:plugin/source` implementation.
#[macro_export]
macro_rules! export_pod_source {
    ($source:ty) => {
        const _: () = {
            struct __WasmletSource;
            impl $crate::source_bindings::exports::wasmlet::plugin::source::Guest for __WasmletSource {
                fn poll() -> Result<$crate::source::Snapshot, String> {
                    <$source as $crate::source::PodSource>::poll()
                }
            }
            $crate::source_bindings::__export_pod_source!(__WasmletSource with_types_in $crate::source_bindings);
        };
    };
}

/// Exports a type implementing [`admission::AdmissionPolicy`] as the component's
/// `wasmlet:plugin/admission` implementation.
#[macro_export]
macro_rules! export_admission_policy {
    ($policy:ty) => {
        const _: () = {
            struct __WasmletAdmission;
            impl $crate::bindings::exports::wasmlet::plugin::admission::Guest for __WasmletAdmission {
                fn admit(
                    pod: $crate::admission::Pod,
                    node: $crate::admission::Node,
                    usage: $crate::admission::NodeUsage,
                ) -> $crate::admission::Verdict {
                    <$policy as $crate::admission::AdmissionPolicy>::admit(pod, node, usage)
                }
            }
            $crate::bindings::__export_admission_policy!(__WasmletAdmission with_types_in $crate::bindings);
        };
    };
}
