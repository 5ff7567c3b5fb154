//! The `admission-policy` world's bindings (wasmtime's `bindgen!` of `wit/plugin.wit`);
//! the other worlds' are in `world/`.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "admission-policy",
    exports: { default: async },
    // A view read outside the call it was lent for traps instead of answering.
    imports: { "wasmlet:plugin/admission-input": trappable },
});
