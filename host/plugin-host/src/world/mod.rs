//! The worlds a plugin implements, as the host links them: the bindings wasmtime
//! generates from `wit/plugin.wit` and each world's linker. The plugin kinds
//! ([`crate::probe`], [`crate::source`]) run them; [`crate::backend`] links them.

pub(crate) mod probe;
pub(crate) mod source;
