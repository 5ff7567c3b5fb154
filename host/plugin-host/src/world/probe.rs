//! The `probe-handler` world: its bindings and its linker.
#![allow(missing_docs)]

use wasmtime::Engine;
use wasmtime::component::{HasSelf, Linker};

use crate::host::PluginState;

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "probe-handler",
    exports: { default: async },
    imports: { "wasmlet:plugin/exec.exec-sync": async },
    additional_derives: [PartialEq, Eq],
    with: {
        "wasmlet:plugin/types": crate::bindings::wasmlet::plugin::types,
        "wasmlet:plugin/host": crate::bindings::wasmlet::plugin::host,
    },
});

/// The linker of the `probe-handler` world: WASI (nothing granted unless the call's
/// context grants it), the platform, `exec`.
pub(crate) fn linker(engine: &Engine) -> wasmtime::Result<Linker<PluginState>> {
    super::with_wasi_http(engine, |l| {
        ProbeHandler::add_to_linker::<PluginState, HasSelf<PluginState>>(l, |s| s)
    })
}
