//! The engine every plugin shares: wasmtime configured once (component model, pooling
//! allocator, epoch interruption) and loading; a call's clock and store are in `call`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::sync::OnceLock;

use wasmtime::component::Component;

use crate::backend::{Backend, Compiler, World};
use crate::cache;
use crate::cache::{CacheOutcome, ComponentCache};
use crate::call::Ticker;
use crate::error::{BoxError, EngineError, PluginError, read_component};
use crate::host::PluginState;
use crate::limits::Limits;
use crate::loaded::Loaded;
use crate::metrics::PluginMetrics;

/// Gives the allocator's free pages back to the kernel once the bytes of a large
/// component have been dropped. glibc raises its mmap threshold to the size of a large
/// block freed, so the next component read that size lands in an arena, where freeing
/// it keeps the pages: measured, a node that loaded a Python and a TypeScript policy
/// held their 18 and 12 MB of bytes for good.
fn release_freed_memory(size: usize) {
    if size >= 1 << 20 {
        crate::memory::return_free_pages();
    }
}

/// The wasmtime engine every plugin shares, with its epoch ticker.
#[derive(Clone)]
pub struct PluginEngine {
    backends: Arc<Backends>,
    cache: Option<ComponentCache>,
    metrics: PluginMetrics,
    ticker: Arc<Ticker>,
    /// Components under this directory load only as their signature allows.
    signed: Option<Arc<SignedFiles>>,
}

/// The components of a plugin directory and the signatures they must carry: each
/// `FILE.wasm` beside its `FILE.wasm.sig` (`wasmlet plugin sign FILE.wasm`, as
/// `cosign sign-blob` makes it).
#[derive(Debug)]
struct SignedFiles {
    directory: PathBuf,
    verifier: Arc<wasmlet_signing::Verifier>,
}

/// A component whose signature the node requires and does not have (the signing crate's
/// refusal kept as the source).
#[derive(Debug, thiserror::Error)]
#[error("signature refused: {0}")]
struct SignatureRefused(#[source] wasmlet_signing::VerifyError);

impl SignedFiles {
    /// Whether `wasm`, read from `path`, may load; the refusal says why.
    fn check(&self, path: &Path, wasm: &[u8]) -> Result<(), BoxError> {
        if !path.starts_with(&self.directory) {
            return Ok(());
        }
        let sig = PathBuf::from(format!("{}.sig", path.display()));
        let result = match std::fs::read_to_string(&sig) {
            Ok(signature) => self.verifier.verify_blob(wasm, &signature),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(
                wasmlet_signing::VerifyError::NotSigned(format!("no {} beside it", sig.display())),
            ),
            Err(e) => Err(wasmlet_signing::VerifyError::Malformed(format!(
                "{}: {e}",
                sig.display()
            ))),
        };
        match result {
            Ok(verified) => {
                tracing::debug!(path = %path.display(), signer = verified.signer, "plugin signature verified");
                Ok(())
            }
            Err(e) if self.verifier.required() => Err(Box::new(SignatureRefused(e))),
            Err(e) => {
                tracing::warn!(path = %path.display(), reason = %e, "a plugin's signature does not verify; loading it anyway (plugins.verification.required is false)");
                Ok(())
            }
        }
    }
}

/// The engines of both compilers: cranelift's made with the plugin engine, Winch's when
/// the first large component is loaded (a node with no such plugin never pays for it).
struct Backends {
    cranelift: Backend,
    winch: OnceLock<Option<Backend>>,
}

impl Backends {
    /// The engine that compiles `compiler`'s components: cranelift's when Winch's cannot
    /// be made (said once, in the log).
    fn get(&self, compiler: Compiler) -> &Backend {
        if compiler == Compiler::Cranelift {
            return &self.cranelift;
        }
        let winch = self.winch.get_or_init(|| match Backend::new(Compiler::Winch) {
            Ok(backend) => Some(backend),
            Err(e) => {
                tracing::warn!(error = %e, "cannot make the baseline compiler's engine; large plugins are compiled by cranelift");
                None
            }
        });
        winch.as_ref().unwrap_or(&self.cranelift)
    }

    /// Advances the epoch of every engine made so far.
    fn tick(&self) {
        self.cranelift.engine.increment_epoch();
        if let Some(Some(winch)) = self.winch.get() {
            winch.engine.increment_epoch();
        }
    }
}

impl std::fmt::Debug for PluginEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginEngine").finish_non_exhaustive()
    }
}

impl PluginEngine {
    /// A new engine (component model, async, epoch interruption) and its ticker thread.
    pub fn new() -> Result<Self, EngineError> {
        Self::build(None)
    }

    /// Like [`PluginEngine::new`], keeping compiled components in `cache_dir` so that a
    /// restart loads them without compiling (see [`ComponentCache`]).
    pub fn with_cache(cache_dir: &Path) -> Result<Self, EngineError> {
        Self::build(Some(cache_dir))
    }

    fn build(cache_dir: Option<&Path>) -> Result<Self, EngineError> {
        let backends = Arc::new(Backends {
            cranelift: Backend::new(Compiler::Cranelift).map_err(|e| EngineError::Engine {
                source: e.into_boxed_dyn_error(),
            })?,
            winch: OnceLock::new(),
        });
        let ticking = backends.clone();
        let ticker = Ticker::start(move || ticking.tick()).map_err(EngineError::Thread)?;
        let cache = match cache_dir {
            Some(dir) => Some(
                ComponentCache::new(dir).map_err(|source| EngineError::Cache {
                    dir: dir.to_owned(),
                    source,
                })?,
            ),
            None => None,
        };
        Ok(Self {
            backends,
            cache,
            metrics: PluginMetrics::default(),
            ticker: Arc::new(ticker),
            signed: None,
        })
    }

    /// Loads the components under `directory` only when `verifier` accepts their
    /// signature (`FILE.wasm.sig` beside each); a refused one is a load error naming why
    /// (the version before keeps serving).
    #[must_use]
    pub fn verify_files(
        mut self,
        directory: PathBuf,
        verifier: Arc<wasmlet_signing::Verifier>,
    ) -> Self {
        self.signed = Some(Arc::new(SignedFiles {
            directory,
            verifier,
        }));
        self
    }

    /// Compiles components missing from the cache in a process of their own: `program`
    /// run as [`cache::COMPILER_ARGS`] (the `wasmlet` binary answers it with
    /// [`PluginEngine::precompile_into_cache`]). Without a cache, nothing changes.
    #[must_use]
    pub fn compile_with(mut self, program: PathBuf) -> Self {
        self.cache = self.cache.take().map(|c| c.compile_with(program));
        self
    }

    /// Also reads compiled components from `dir`, never writing there: the package's
    /// precompiled plugins (see [`ComponentCache::with_shipped`]). Without a cache,
    /// nothing changes.
    #[must_use]
    pub fn with_shipped_cache(mut self, dir: PathBuf) -> Self {
        self.cache = self.cache.take().map(|c| c.with_shipped(dir));
        self
    }

    /// Compiles `wasm` into the cache (what a compiler process does) and returns the
    /// entry's path; an error says why the component does not compile.
    pub fn precompile_into_cache(&self, wasm: &[u8]) -> Result<PathBuf, EngineError> {
        let cache = self.cache.as_ref().ok_or(EngineError::NoCache)?;
        let digest = cache::sha256_hex(wasm);
        let backend = self.backends.get(Compiler::for_size(wasm.len()));
        cache
            .compile_entry(&backend.engine, wasm, &digest)
            .map_err(|e| EngineError::Compile {
                source: e.into_boxed_dyn_error(),
            })
    }

    /// Reads and compiles (or loads from the cache) the component at `path`, with the
    /// engine of the compiler its size calls for.
    pub(crate) fn component(&self, name: &str, path: &Path) -> Result<Compiled<'_>, PluginError> {
        let load_err = |source: BoxError| PluginError::Load {
            plugin: name.to_owned(),
            path: path.to_owned(),
            source,
        };
        let wasm = read_component(path).map_err(load_err)?;
        if let Some(signed) = &self.signed {
            signed.check(path, &wasm).map_err(load_err)?;
        }
        let digest = cache::sha256_hex(&wasm);
        let bundle = crate::guest::BundleMap::find(&wasm);
        let backend = self.backends.get(Compiler::for_size(wasm.len()));
        let loaded = match &self.cache {
            Some(cache) => cache.load(&backend.engine, &wasm, &digest),
            None => Component::new(&backend.engine, &wasm).map(|c| (c, CacheOutcome::Miss)),
        };
        let size = wasm.len();
        drop(wasm);
        release_freed_memory(size);
        let (component, outcome) = loaded.map_err(|e| load_err(e.into_boxed_dyn_error()))?;
        Ok(Compiled {
            component,
            digest,
            outcome,
            backend,
            bundle,
        })
    }

    /// How often the epoch has advanced: every 10 ms while a plugin call is under way,
    /// never while none is.
    pub fn epoch_ticks(&self) -> u64 {
        self.ticker.clock().ticks()
    }

    /// The metrics of every plugin loaded on this engine.
    pub fn metrics(&self) -> &PluginMetrics {
        &self.metrics
    }

    /// Compiles (or takes from the cache) the component at `path` as plugin `name`, checks
    /// it against `world` with `prepare`, and counts the load.
    pub(crate) fn load_as<P>(
        &self,
        name: &str,
        path: &Path,
        world: World,
        config: BTreeMap<String, String>,
        limits: Limits,
        prepare: impl FnOnce(wasmtime::component::InstancePre<PluginState>) -> wasmtime::Result<P>,
    ) -> Result<(Loaded, P), PluginError> {
        let loaded = (|| {
            let Compiled {
                component,
                digest,
                outcome,
                backend,
                bundle,
            } = self.component(name, path)?;
            let pre = backend
                .linker(world)
                .instantiate_pre(&component)
                .and_then(prepare)
                .map_err(|source| PluginError::World {
                    plugin: name.to_owned(),
                    world: world.name(),
                    source: source.into_boxed_dyn_error(),
                })?;
            let loaded = Loaded {
                name: name.into(),
                digest,
                outcome,
                compiler: backend.compiler,
                engine: backend.engine.clone(),
                clock: self.ticker.clock().clone(),
                config: Arc::new(config),
                limits,
                metrics: self.metrics.for_plugin(name, world.label()),
                output_log: crate::guest::OutputLog::default(),
                bundle,
            };
            Ok((loaded, pre))
        })();
        self.metrics.loaded(name, world.label(), loaded.is_ok());
        loaded
    }
}

/// A component compiled (or taken from the cache) by one of the engines.
pub(crate) struct Compiled<'a> {
    pub(crate) component: Component,
    /// The component file's sha256.
    pub(crate) digest: String,
    pub(crate) outcome: CacheOutcome,
    /// The engine that compiled it, on which it is instantiated.
    pub(crate) backend: &'a Backend,
    /// The source map of its JavaScript bundle, when it carries one.
    pub(crate) bundle: Option<crate::guest::BundleMap>,
}
