//! What goes wrong with a plugin: [`PluginError`], naming the plugin and the call.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::guest;

/// An error from wasmtime, boxed so that it is a `std::error::Error`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error and its causes, `: `-separated.
fn chain(e: &BoxError) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = c.source();
    }
    out
}

/// Why a plugin could not be loaded or did not answer.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The file could not be read or is not a component wasmtime accepts.
    #[error("plugin {plugin}: cannot load {path}: {}", chain(source))]
    Load {
        /// The plugin's name.
        plugin: String,
        /// Its file.
        path: PathBuf,
        /// What wasmtime said.
        #[source]
        source: BoxError,
    },
    /// The component does not implement the world it was loaded as (wrong exports, or
    /// imports the host does not provide).
    #[error("plugin {plugin}: does not implement world {world}: {}", chain(source))]
    World {
        /// The plugin's name.
        plugin: String,
        /// The world it was expected to implement.
        world: &'static str,
        /// What wasmtime said.
        #[source]
        source: BoxError,
    },
    /// The call ran past its deadline and was cut off.
    #[error("plugin {plugin}: {call} exceeded its deadline of {deadline:?}")]
    Deadline {
        /// The plugin's name.
        plugin: String,
        /// The export called.
        call: &'static str,
        /// The deadline.
        deadline: Duration,
    },
    /// The guest trapped (an exception, a panic, its memory limit reached) or the host
    /// failed to run it. Said as the guest's exception, where it was raised and the limit
    /// it hit ([`guest::Failure`]); wasmtime's backtrace is the source.
    #[error("plugin {plugin}: {call} failed: {failure}")]
    Call {
        /// The plugin's name.
        plugin: String,
        /// The export called.
        call: &'static str,
        /// What the guest and its limits say of it.
        failure: Box<guest::Failure>,
        /// The trap or error, with wasmtime's backtrace.
        #[source]
        source: BoxError,
    },
}

/// Why the plugin engine could not start, or could not compile a component into its
/// cache.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// wasmtime refused the engine's configuration.
    #[error("the plugin engine: {}", chain(source))]
    Engine {
        /// What wasmtime said.
        #[source]
        source: BoxError,
    },
    /// The thread that advances the engine's epochs could not be started.
    #[error("the plugin engine's epoch thread: {0}")]
    Thread(#[source] std::io::Error),
    /// The compiled-component cache's folder could not be made or read.
    #[error("plugin cache {}: {source}", dir.display())]
    Cache {
        /// The folder.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A compile into the cache was asked of an engine without one.
    #[error("the engine has no cache to compile into")]
    NoCache,
    /// The component does not compile.
    #[error("{}", chain(source))]
    Compile {
        /// What wasmtime said.
        #[source]
        source: BoxError,
    },
}

/// Reads a component file, refusing with a plain sentence what is not one: a file that
/// is not WebAssembly at all, or a core module (built for `wasm32-wasip1` or
/// `wasm32-unknown-unknown` instead of `wasm32-wasip2`).
pub(crate) fn read_component(path: &Path) -> Result<Vec<u8>, BoxError> {
    let wasm = std::fs::read(path)?;
    match wasm.get(..8) {
        Some([0, b'a', b's', b'm', _, _, 0, 0]) => {
            Err("a core WebAssembly module, not a component (build it for wasm32-wasip2)".into())
        }
        Some([0, b'a', b's', b'm', _, _, 1, 0]) => Ok(wasm),
        _ => Err("not a WebAssembly file (no \\0asm header)".into()),
    }
}
