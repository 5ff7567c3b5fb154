//! The `probe-handler` world: its bindings (its linker is in [`crate::backend`]).
#![allow(missing_docs)]

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
