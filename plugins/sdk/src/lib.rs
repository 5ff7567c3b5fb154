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
//!     fn admit(pod: &Pod, _node: &Node) -> Verdict {
//!         match pod.containers().iter().find(|c| c.image.ends_with(":latest")) {
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
        path: "wit",
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
        path: "wit",
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
        path: "wit",
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
    use std::cell::OnceCell;

    pub use crate::bindings::exports::wasmlet::plugin::admission::{Rejection, Verdict};
    use crate::bindings::wasmlet::plugin::admission_input::{NodeView, PodView};
    pub use crate::bindings::wasmlet::plugin::types::{
        Container, ContainerPort, HostPortInUse, KeyValue, Node as NodeRecord,
        NodeSelectorRequirement, NodeSelectorTerm, NodeUsage, Pod as PodRecord, Protocol,
        ResourceList, SelectorOperator, Taint, TaintEffect, Toleration, TolerationOperator,
    };

    /// An admission policy: decides whether a pod may run on this node.
    pub trait AdmissionPolicy {
        /// Decides whether `pod` may run on `node`. Both are read on demand: a field
        /// the policy never reads is never copied into it.
        fn admit(pod: &Pod, node: &Node) -> Verdict;
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

    /// The pod under admission, for one decision. Each field is asked of the host the
    /// first time it is read, then kept until the decision is made.
    pub struct Pod<'a> {
        view: &'a PodView,
        uid: OnceCell<String>,
        name: OnceCell<String>,
        namespace: OnceCell<String>,
        labels: OnceCell<Vec<KeyValue>>,
        annotations: OnceCell<Vec<KeyValue>>,
        containers: OnceCell<Vec<Container>>,
        init_containers: OnceCell<Vec<Container>>,
        overhead: OnceCell<ResourceList>,
        requests: OnceCell<ResourceList>,
        node_selector: OnceCell<Vec<KeyValue>>,
        required_node_affinity: OnceCell<Vec<NodeSelectorTerm>>,
        tolerations: OnceCell<Vec<Toleration>>,
        source: OnceCell<String>,
    }

    impl<'a> Pod<'a> {
        #[doc(hidden)]
        pub fn new(view: &'a PodView) -> Self {
            Self {
                view,
                uid: OnceCell::new(),
                name: OnceCell::new(),
                namespace: OnceCell::new(),
                labels: OnceCell::new(),
                annotations: OnceCell::new(),
                containers: OnceCell::new(),
                init_containers: OnceCell::new(),
                overhead: OnceCell::new(),
                requests: OnceCell::new(),
                node_selector: OnceCell::new(),
                required_node_affinity: OnceCell::new(),
                tolerations: OnceCell::new(),
                source: OnceCell::new(),
            }
        }

        /// `metadata.uid`.
        pub fn uid(&self) -> &str {
            self.uid.get_or_init(|| self.view.uid())
        }

        /// `metadata.name`.
        pub fn name(&self) -> &str {
            self.name.get_or_init(|| self.view.name())
        }

        /// `metadata.namespace`.
        pub fn namespace(&self) -> &str {
            self.namespace.get_or_init(|| self.view.namespace())
        }

        /// `metadata.labels`, sorted by key.
        pub fn labels(&self) -> &[KeyValue] {
            self.labels.get_or_init(|| self.view.labels())
        }

        /// `metadata.annotations`, sorted by key.
        pub fn annotations(&self) -> &[KeyValue] {
            self.annotations.get_or_init(|| self.view.annotations())
        }

        /// `spec.containers`.
        pub fn containers(&self) -> &[Container] {
            self.containers.get_or_init(|| self.view.containers())
        }

        /// `spec.initContainers`, sidecars (`restartable`) among them.
        pub fn init_containers(&self) -> &[Container] {
            self.init_containers
                .get_or_init(|| self.view.init_containers())
        }

        /// `spec.overhead`.
        pub fn overhead(&self) -> &ResourceList {
            self.overhead.get_or_init(|| self.view.overhead())
        }

        /// What the pod requests, summed the kubelet's way (init containers, sidecars,
        /// overhead) by the host, with [`crate::resources::pod_requests`]'s arithmetic.
        pub fn requests(&self) -> &ResourceList {
            self.requests.get_or_init(|| self.view.requests())
        }

        /// `spec.nodeSelector`, sorted by key.
        pub fn node_selector(&self) -> &[KeyValue] {
            self.node_selector.get_or_init(|| self.view.node_selector())
        }

        /// The required node affinity's terms (ORed); empty when it has none.
        pub fn required_node_affinity(&self) -> &[NodeSelectorTerm] {
            self.required_node_affinity
                .get_or_init(|| self.view.required_node_affinity())
        }

        /// `spec.tolerations`.
        pub fn tolerations(&self) -> &[Toleration] {
            self.tolerations.get_or_init(|| self.view.tolerations())
        }

        /// `spec.hostNetwork`.
        pub fn host_network(&self) -> bool {
            self.view.host_network()
        }

        /// `spec.priority` (0 when unset).
        pub fn priority(&self) -> i32 {
            self.view.priority()
        }

        /// Whether it is a static pod (from a file or URL source).
        pub fn static_pod(&self) -> bool {
            self.view.static_pod()
        }

        /// The pod source's name (`file`, `http`, `api`).
        pub fn source(&self) -> &str {
            self.source.get_or_init(|| self.view.source())
        }

        /// Every typed field in one record (one call to the host).
        pub fn whole(&self) -> PodRecord {
            self.view.whole()
        }

        /// The whole pod as Kubernetes JSON (a v1 Pod), for fields the typed view leaves
        /// out (`hostPID`, security contexts, volumes, …).
        pub fn json(&self) -> String {
            self.view.json()
        }
    }

    /// The node the pod would join, for one decision; fields are fetched on first read.
    pub struct Node<'a> {
        view: &'a NodeView,
        name: OnceCell<String>,
        labels: OnceCell<Vec<KeyValue>>,
        taints: OnceCell<Vec<Taint>>,
        allocatable: OnceCell<ResourceList>,
        usage: OnceCell<NodeUsage>,
        host_ports_in_use: OnceCell<Vec<HostPortInUse>>,
    }

    impl<'a> Node<'a> {
        #[doc(hidden)]
        pub fn new(view: &'a NodeView) -> Self {
            Self {
                view,
                name: OnceCell::new(),
                labels: OnceCell::new(),
                taints: OnceCell::new(),
                allocatable: OnceCell::new(),
                usage: OnceCell::new(),
                host_ports_in_use: OnceCell::new(),
            }
        }

        /// The node's name.
        pub fn name(&self) -> &str {
            self.name.get_or_init(|| self.view.name())
        }

        /// Its labels, sorted by key.
        pub fn labels(&self) -> &[KeyValue] {
            self.labels.get_or_init(|| self.view.labels())
        }

        /// The value of label `key`, if the node has it.
        pub fn label(&self, key: &str) -> Option<&str> {
            self.labels()
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        }

        /// Its taints.
        pub fn taints(&self) -> &[Taint] {
            self.taints.get_or_init(|| self.view.taints())
        }

        /// `status.allocatable`, with `pods` = maxPods.
        pub fn allocatable(&self) -> &ResourceList {
            self.allocatable.get_or_init(|| self.view.allocatable())
        }

        /// What its active pods already request (summed by the host) and how many
        /// there are.
        pub fn usage(&self) -> &NodeUsage {
            self.usage.get_or_init(|| self.view.usage())
        }

        /// The host ports its active pods hold.
        pub fn host_ports_in_use(&self) -> &[HostPortInUse] {
            self.host_ports_in_use
                .get_or_init(|| self.view.host_ports_in_use())
        }

        /// Name, labels, taints and allocatable in one record (one call to the host).
        pub fn whole(&self) -> NodeRecord {
            self.view.whole()
        }
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
                    pod: &$crate::bindings::wasmlet::plugin::admission_input::PodView,
                    node: &$crate::bindings::wasmlet::plugin::admission_input::NodeView,
                ) -> $crate::admission::Verdict {
                    <$policy as $crate::admission::AdmissionPolicy>::admit(
                        &$crate::admission::Pod::new(pod),
                        &$crate::admission::Node::new(node),
                    )
                }
            }
            $crate::bindings::__export_admission_policy!(__WasmletAdmission with_types_in $crate::bindings);
        };
    };
}
