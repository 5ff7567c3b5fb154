//! The `pod-source` world: its bindings and its linker.
#![allow(missing_docs)]

use wasmtime::Engine;
use wasmtime::component::{HasSelf, Linker};

use crate::host::PluginState;

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "pod-source",
    exports: { default: async },
    with: {
        "wasmlet:plugin/host": crate::bindings::wasmlet::plugin::host,
    },
});

/// The linker of the `pod-source` world: WASI (the granted directory only), wasi:http
/// (granted URLs only), the platform.
pub(crate) fn linker(engine: &Engine) -> wasmtime::Result<Linker<PluginState>> {
    super::with_wasi_http(engine, |l| {
        PodSource::add_to_linker::<PluginState, HasSelf<PluginState>>(l, |s| s)
    })
}
