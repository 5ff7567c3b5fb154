//! The worlds a plugin implements besides admission's ([`crate::bindings`]): the
//! bindings wasmtime generates from `wit/plugin.wit`, nothing else — the plugin kinds
//! ([`crate::probe`], [`crate::source`]) run them and [`crate::backend`] links them.

pub(crate) mod probe;
pub(crate) mod source;
