//! The `pod-source` world: its bindings (its linker is in [`crate::backend`]).
#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "pod-source",
    exports: { default: async },
    with: {
        "wasmlet:plugin/host": crate::bindings::wasmlet::plugin::host,
    },
});
