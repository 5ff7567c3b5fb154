//! The `pod-view` and `node-view` resources: the call's [`Admission`] read field by
//! field by the guest, through the host state that holds it while `admit` runs.

use crate::bindings;
use crate::bindings::wasmlet::plugin::admission_input::{NodeView, PodView};
use crate::bindings::wasmlet::plugin::types::{
    Container, HostPortInUse, Node, NodeSelectorTerm, NodeUsage, Pod, ResourceList, Taint,
    Toleration,
};
use crate::host::PluginState;

use super::input::Admission;

/// A `pod-view` or `node-view` handle to lend the guest for one `admit` call. It stands
/// for the call's [`Admission`], which the store holds while the call runs, so the host
/// keeps no resource table for it (the handle's number is not looked at).
pub(super) fn lent<T: 'static>() -> wasmtime::component::Resource<T> {
    wasmtime::component::Resource::new_borrow(0)
}

impl PluginState {
    /// The admission the current call decides on. A guest holds a `pod-view` or
    /// `node-view` only while `admit` runs, when the host has set it; a read at any
    /// other time (which the component model's borrow rules prevent) traps.
    fn admission(&self) -> wasmtime::Result<&Admission> {
        self.admission
            .as_deref()
            .ok_or_else(|| wasmtime::format_err!("pod-view or node-view read outside admit"))
    }

    /// The pod the current call decides on.
    fn pod(&self) -> wasmtime::Result<&Pod> {
        Ok(self.admission()?.pod())
    }

    /// The node the current call decides on.
    fn node(&self) -> wasmtime::Result<&Node> {
        Ok(self.admission()?.node())
    }
}

type Lent<T> = wasmtime::component::Resource<T>;

impl bindings::wasmlet::plugin::admission_input::Host for PluginState {}

impl bindings::wasmlet::plugin::admission_input::HostPodView for PluginState {
    fn uid(&mut self, _: Lent<PodView>) -> wasmtime::Result<String> {
        Ok(self.pod()?.uid.clone())
    }

    fn name(&mut self, _: Lent<PodView>) -> wasmtime::Result<String> {
        Ok(self.pod()?.name.clone())
    }

    fn namespace(&mut self, _: Lent<PodView>) -> wasmtime::Result<String> {
        Ok(self.pod()?.namespace.clone())
    }

    fn labels(&mut self, _: Lent<PodView>) -> wasmtime::Result<Vec<(String, String)>> {
        Ok(self.pod()?.labels.clone())
    }

    fn annotations(&mut self, _: Lent<PodView>) -> wasmtime::Result<Vec<(String, String)>> {
        Ok(self.pod()?.annotations.clone())
    }

    fn containers(&mut self, _: Lent<PodView>) -> wasmtime::Result<Vec<Container>> {
        Ok(self.pod()?.containers.clone())
    }

    fn init_containers(&mut self, _: Lent<PodView>) -> wasmtime::Result<Vec<Container>> {
        Ok(self.pod()?.init_containers.clone())
    }

    fn overhead(&mut self, _: Lent<PodView>) -> wasmtime::Result<ResourceList> {
        Ok(self.pod()?.overhead.clone())
    }

    fn requests(&mut self, _: Lent<PodView>) -> wasmtime::Result<ResourceList> {
        Ok(self.admission()?.requests().clone())
    }

    fn node_selector(&mut self, _: Lent<PodView>) -> wasmtime::Result<Vec<(String, String)>> {
        Ok(self.pod()?.node_selector.clone())
    }

    fn required_node_affinity(
        &mut self,
        _: Lent<PodView>,
    ) -> wasmtime::Result<Vec<NodeSelectorTerm>> {
        Ok(self.pod()?.required_node_affinity.clone())
    }

    fn tolerations(&mut self, _: Lent<PodView>) -> wasmtime::Result<Vec<Toleration>> {
        Ok(self.pod()?.tolerations.clone())
    }

    fn host_network(&mut self, _: Lent<PodView>) -> wasmtime::Result<bool> {
        Ok(self.pod()?.host_network)
    }

    fn priority(&mut self, _: Lent<PodView>) -> wasmtime::Result<i32> {
        Ok(self.pod()?.priority)
    }

    fn static_pod(&mut self, _: Lent<PodView>) -> wasmtime::Result<bool> {
        Ok(self.pod()?.static_pod)
    }

    fn source(&mut self, _: Lent<PodView>) -> wasmtime::Result<String> {
        Ok(self.pod()?.source.clone())
    }

    fn whole(&mut self, _: Lent<PodView>) -> wasmtime::Result<Pod> {
        Ok(self.pod()?.clone())
    }

    fn json(&mut self, _: Lent<PodView>) -> wasmtime::Result<String> {
        Ok(self.admission()?.json().to_owned())
    }

    fn drop(&mut self, _: Lent<PodView>) -> wasmtime::Result<()> {
        Ok(())
    }
}

impl bindings::wasmlet::plugin::admission_input::HostNodeView for PluginState {
    fn name(&mut self, _: Lent<NodeView>) -> wasmtime::Result<String> {
        Ok(self.node()?.name.clone())
    }

    fn labels(&mut self, _: Lent<NodeView>) -> wasmtime::Result<Vec<(String, String)>> {
        Ok(self.node()?.labels.clone())
    }

    fn taints(&mut self, _: Lent<NodeView>) -> wasmtime::Result<Vec<Taint>> {
        Ok(self.node()?.taints.clone())
    }

    fn allocatable(&mut self, _: Lent<NodeView>) -> wasmtime::Result<ResourceList> {
        Ok(self.node()?.allocatable.clone())
    }

    fn usage(&mut self, _: Lent<NodeView>) -> wasmtime::Result<NodeUsage> {
        Ok(self.admission()?.load().usage.clone())
    }

    fn host_ports_in_use(&mut self, _: Lent<NodeView>) -> wasmtime::Result<Vec<HostPortInUse>> {
        Ok(self.admission()?.load().host_ports.to_vec())
    }

    fn whole(&mut self, _: Lent<NodeView>) -> wasmtime::Result<Node> {
        Ok(self.node()?.clone())
    }

    fn drop(&mut self, _: Lent<NodeView>) -> wasmtime::Result<()> {
        Ok(())
    }
}
