//! What a component file is: the wasmlet world it implements, what it imports and
//! exports, and which capabilities it could use if an operator granted them.

use std::path::Path;

use crate::engine::PluginEngine;
use crate::error::PluginError;

/// The export that makes a component one of wasmlet's plugin kinds, by world.
pub const WORLDS: &[(&str, &str)] = &[
    ("wasmlet:plugin/admission@0.1.0", "admission-policy"),
    ("wasmlet:plugin/probe@0.1.0", "probe-handler"),
    ("wasmlet:plugin/source@0.1.0", "pod-source"),
];

/// Capabilities, by the import that needs them. Every capability is denied unless the
/// plugin's configuration grants it; a Rust guest imports the filesystem interfaces
/// through std even when it never opens a file, and sees no directory unless one is
/// granted.
const CAPABILITIES: &[(&str, &str)] = &[
    ("wasi:filesystem/", "files"),
    ("wasi:sockets/", "network"),
    ("wasi:http/outgoing-handler", "http"),
    ("wasmlet:plugin/exec", "exec"),
];

/// The result of [`PluginEngine::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    /// The wasmlet world it implements, if any.
    pub world: Option<&'static str>,
    /// Its imports, by interface name.
    pub imports: Vec<String>,
    /// Its exports, by name.
    pub exports: Vec<String>,
    /// The capabilities its imports could use, each only if granted.
    pub capabilities: Vec<&'static str>,
    /// The component file's sha256.
    pub digest: String,
    /// The file's size in bytes.
    pub size: u64,
    /// The compiler its code comes from: Winch for a component of
    /// [`crate::backend::BASELINE_FROM_BYTES`] or more, else cranelift.
    pub compiler: crate::backend::Compiler,
}

impl PluginEngine {
    /// Compiles the component at `path` (or takes it from the cache) and reports what it
    /// is, without running it.
    pub fn inspect(&self, path: &Path) -> Result<Inspection, PluginError> {
        let compiled = self.component(&path.display().to_string(), path)?;
        let size = std::fs::metadata(path).map_or(0, |m| m.len());
        let engine = &compiled.backend.engine;
        let ty = compiled.component.component_type();
        let imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_owned()).collect();
        let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_owned()).collect();
        let world = WORLDS
            .iter()
            .find(|(export, _)| exports.iter().any(|e| e == export))
            .map(|(_, world)| *world);
        let mut capabilities: Vec<&str> = CAPABILITIES
            .iter()
            .filter(|(prefix, _)| imports.iter().any(|i| i.starts_with(prefix)))
            .map(|(_, cap)| *cap)
            .collect();
        capabilities.dedup();
        Ok(Inspection {
            world,
            imports,
            exports,
            capabilities,
            size,
            compiler: compiled.backend.compiler,
            digest: compiled.digest,
        })
    }
}
