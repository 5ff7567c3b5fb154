//! The worlds a plugin implements, as the host links them: the bindings wasmtime
//! generates from `wit/plugin.wit` and each world's linker. The plugin kinds
//! ([`crate::probe`], [`crate::source`]) run them; [`crate::backend`] links them.

pub(crate) mod probe;
pub(crate) mod source;

use wasmtime::Engine;
use wasmtime::component::Linker;

use crate::host::PluginState;

/// A linker of WASI and wasi:http (what a call reaches is checked per call against its
/// grants) with the world's own imports added by `world`.
fn with_wasi_http(
    engine: &Engine,
    world: impl FnOnce(&mut Linker<PluginState>) -> wasmtime::Result<()>,
) -> wasmtime::Result<Linker<PluginState>> {
    let mut linker = Linker::<PluginState>::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    world(&mut linker)?;
    Ok(linker)
}
