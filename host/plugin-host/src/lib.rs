//! wasmlet's WebAssembly plugin runtime: loads `wasm32-wasip2` components that implement
//! the `wasmlet:plugin@0.1.0` worlds (`wit/plugin.wit`) and calls them with limits.
//!
//! - [`PluginEngine`]: one wasmtime engine for every plugin (component model, cranelift,
//!   pooling allocator, epoch interruption driven by a 10 ms ticker that runs only
//!   while a call is under way), optionally with the on-disk compiled-component cache
//!   ([`ComponentCache`]).
//! - [`PluginEngine::load_admission`] → [`AdmissionPlugin`]: a policy checked against
//!   its world; [`AdmissionPlugin::admit`] decides on one [`Admission`] (a pod, the node,
//!   its usage: lent to the guest as `pod-view` and `node-view`, read field by field,
//!   nothing copied in that the policy does not ask for) on a reused or fresh
//!   instance ([`InstanceMode`]; a fresh one is made ahead, between calls) with a
//!   deadline and a memory cap. A long call yields to tokio every tick; every failure
//!   is a [`PluginError`] naming the plugin and the call, and a guest that traps,
//!   loops or exhausts its memory never takes the host down.
//! - [`AdmissionChain`]: the ordered links, each hot-swappable; [`AdmissionDirectory`]
//!   keeps a chain in step with a plugin directory and the `plugins:` configuration
//!   ([`PluginsConfig`]).
//! - [`convert`]: Kubernetes objects to the plugin types, and the node's load.
//! - [`PluginMetrics`]: calls by result, latency and instantiation histograms, loads,
//!   per plugin.
//!
//! Plugins get no filesystem, network or environment: WASI is linked (Rust's std needs
//! it) with nothing granted, and for an admission policy its context is built only if
//! the guest makes a WASI call.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use wasmtime::Engine;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

mod admission;
pub mod backend;
pub mod cache;
pub mod chain;
pub mod config;
pub mod convert;
#[doc(hidden)]
pub mod dev;
mod engine;
pub mod guest;
pub mod http;
pub mod inspect;
pub mod kinds;
pub mod memory;
pub mod metrics;
pub mod network;
pub mod probe;
/// The kubelet's resource arithmetic, compiled from the plugin SDK's own source so that
/// the usage the host sums and the requests a policy computes never disagree.
#[path = "../../../plugins/sdk/src/resources.rs"]
pub mod resources;
pub mod source;
pub mod watch;
mod world;

pub use admission::{Admission, AdmissionPlugin, IDLE_INSTANCE_LIFETIME, NodeLoad};
pub use cache::{CacheOutcome, ComponentCache};
pub use chain::{AdmissionChain, FailurePolicy, LinkSpec, ReplaceError};
pub use config::PluginsConfig;
pub use engine::PluginEngine;
pub(crate) use engine::{LoadKind, call_error, plugin_store};
pub use kinds::{PodSources, ProbeHandlers};
use metrics::CallMetrics;
pub use metrics::PluginMetrics;
pub use watch::{AdmissionDirectory, PluginDirectory, PluginSet};

#[allow(missing_docs)]
pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "admission-policy",
        exports: { default: async },
        // A view read outside the call it was lent for traps instead of answering.
        imports: { "wasmlet:plugin/admission-input": trappable },
    });
}

pub use bindings::exports::wasmlet::plugin::admission::{Rejection, Verdict};
pub use bindings::wasmlet::plugin::types::{
    Container, ContainerPort, HostPortInUse, Node, NodeSelectorRequirement, NodeSelectorTerm,
    NodeUsage, Pod, Protocol, ResourceList, SelectorOperator, Taint, TaintEffect, Toleration,
    TolerationOperator,
};

use bindings::wasmlet::plugin::host::Level;

/// Largest guest memory any plugin may be given (the pooling allocator's slot size).
pub const MAX_MEMORY_BYTES: usize = 256 << 20;

/// Core instances a component may create: a Rust `wasm32-wasip2` component has its
/// own module plus the adapter's few; a Python one (componentize-py) links CPython and
/// its C extensions as shared libraries, 14 modules; a guest that makes more than this
/// is refused.
pub const MAX_CORE_INSTANCES: usize = 32;

/// How a plugin's calls get their instance. Measured (bench/README.md): back to back, a
/// resource-fit decision costs 2–3 µs on a reused instance and 16–23 µs on a fresh one
/// made for it; with a fresh instance made ahead, between decisions, a decision that
/// arrives on an idle node waits as long as on a reused instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InstanceMode {
    /// A fresh instance for every call: nothing a call leaves behind reaches the next.
    /// For plugins that must not share state between calls, and for probes and pod
    /// sources, whose calls are seconds apart. An admission policy's next instance is
    /// made ahead, on a background task once a call is over (and the used one torn
    /// down there): the decision waits for neither.
    PerCall,
    /// Instances are kept (up to 8 per plugin) and reused; one that traps or runs out
    /// of time is thrown away, one unused for [`IDLE_INSTANCE_LIFETIME`] dropped. The
    /// admission default: a decision must depend on the pod and node only, so reuse is
    /// safe for policies and several times faster.
    #[default]
    Reused,
}

/// Limits of one plugin call.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Wall-clock budget of one call, instantiation included.
    pub deadline: Duration,
    /// Largest linear memory a guest may grow to, in bytes (at most
    /// [`MAX_MEMORY_BYTES`]).
    pub memory_bytes: usize,
    /// Whether calls share instances.
    pub instances: InstanceMode,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(1),
            memory_bytes: 64 << 20,
            instances: InstanceMode::Reused,
        }
    }
}

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

/// Per-call state a plugin instance sees through its imports.
pub struct PluginState {
    plugin: Arc<str>,
    /// When the current call must have finished.
    deadline_at: std::time::Instant,
    config: Arc<BTreeMap<String, String>>,
    /// The admission an admission policy's current call decides on.
    admission: Option<Arc<Admission>>,
    /// The probed container's exec, when the handler is granted it.
    exec: Option<Arc<dyn probe::ContainerExec>>,
    /// What WASI grants; `None` grants nothing and is built on the guest's first WASI
    /// call (a policy that never makes one — most — never pays for building it).
    wasi: Option<WasiCtx>,
    /// What the guest writes to stdout and stderr.
    output: guest::GuestOutput,
    http: WasiHttpCtx,
    http_hooks: http::HttpHooks,
    table: ResourceTable,
    limits: guest::Limiter,
}

impl PluginState {
    /// The state of one call (or reused instance) of `plugin`, due within `deadline`,
    /// with `wasi` granting what the plugin may use (`None`: nothing); the guest's
    /// stdout and stderr are captured either way.
    pub(crate) fn new(
        plugin: Arc<str>,
        config: Arc<BTreeMap<String, String>>,
        limits: &Limits,
        deadline: Duration,
        wasi: Option<WasiCtxBuilder>,
    ) -> Self {
        let output = guest::GuestOutput::default();
        Self {
            plugin,
            deadline_at: std::time::Instant::now() + deadline,
            config,
            admission: None,
            exec: None,
            wasi: wasi.map(|mut w| output.attach(&mut w).build()),
            output,
            http: WasiHttpCtx::new(),
            http_hooks: http::HttpHooks::default(),
            table: ResourceTable::new(),
            limits: guest::Limiter::new(limits.memory_bytes, MAX_CORE_INSTANCES),
        }
    }

    /// What the guest left behind for a failed call: its stderr and the memory growth
    /// its limit refused. Both are taken: the next call starts with neither.
    pub(crate) fn failure_context(&mut self) -> guest::Context {
        guest::Context {
            stderr: self.output.stderr.take().0,
            refused: self.limits.take_refused(),
        }
    }
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let output = &self.output;
        WasiCtxView {
            ctx: self
                .wasi
                .get_or_insert_with(|| output.attach(&mut WasiCtxBuilder::new()).build()),
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for PluginState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_hooks,
        }
    }
}

impl bindings::wasmlet::plugin::types::Host for PluginState {}

impl bindings::wasmlet::plugin::host::Host for PluginState {
    fn log(&mut self, level: Level, message: String, fields: Vec<(String, String)>) {
        let plugin = &*self.plugin;
        match level {
            Level::Trace => tracing::trace!(plugin, ?fields, "{message}"),
            Level::Debug => tracing::debug!(plugin, ?fields, "{message}"),
            Level::Info => tracing::info!(plugin, ?fields, "{message}"),
            Level::Warn => tracing::warn!(plugin, ?fields, "{message}"),
            Level::Error => tracing::error!(plugin, ?fields, "{message}"),
        }
    }

    fn config(&mut self, key: String) -> Option<String> {
        self.config.get(&key).cloned()
    }

    fn config_all(&mut self) -> Vec<(String, String)> {
        self.config
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn now(&mut self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// What every loaded plugin is, whatever its kind: its name and version, its settings,
/// the engine it runs on and where its calls are counted.
pub struct Loaded {
    name: Arc<str>,
    digest: String,
    outcome: CacheOutcome,
    compiler: backend::Compiler,
    engine: Engine,
    clock: Arc<engine::Clock>,
    config: Arc<BTreeMap<String, String>>,
    limits: Limits,
    metrics: CallMetrics,
    /// How much of the guest's output the log still takes.
    output_log: guest::OutputLog,
    /// A JavaScript plugin's bundle's source map.
    bundle: Option<guest::BundleMap>,
}

/// How a call ended, for the plugin's metrics.
#[derive(Clone, Copy)]
pub(crate) enum CallResult {
    /// Admitted, succeeded, read whole.
    Passed,
    /// Rejected, failed, read with manifests skipped.
    Failed,
    /// The call erred.
    Error,
}

impl Loaded {
    /// Counts one call that started at `started` and ended as `result`.
    pub(crate) fn record(&self, started: std::time::Instant, result: CallResult) {
        self.metrics
            .duration
            .observe(started.elapsed().as_secs_f64());
        match result {
            CallResult::Passed => self.metrics.passed.inc(),
            CallResult::Failed => self.metrics.failed.inc(),
            CallResult::Error => self.metrics.errors.inc(),
        };
    }

    /// Marks a call (or an instantiation: guest code runs then too) under way until the
    /// guard is dropped: the epoch advances only while one is.
    pub(crate) fn running(&self) -> engine::Running {
        self.clock.running()
    }

    /// Counts the instantiation of a fresh instance begun at `started`.
    pub(crate) fn instantiated(&self, started: std::time::Instant) {
        self.metrics
            .instantiation
            .observe(started.elapsed().as_secs_f64());
    }

    /// The end of a call made in `store`: what the guest printed goes to the log under
    /// the plugin's name, and an error becomes a [`PluginError`] that says what the
    /// guest and its limits left of it.
    pub(crate) fn finish<T>(
        &self,
        store: &mut wasmtime::Store<PluginState>,
        call: &'static str,
        deadline: Duration,
        result: wasmtime::Result<T>,
    ) -> Result<T, PluginError> {
        // What it printed first: it came before the error.
        let output = store.data().output.clone();
        self.output_log
            .drain_stream(&self.name, "stdout", &output.stdout);
        let bundle = self.bundle.as_ref();
        let result =
            result.map_err(|e| call_error(&self.name, call, deadline, e, store.data_mut(), bundle));
        self.output_log
            .drain_stream(&self.name, "stderr", &output.stderr);
        result
    }

    /// `message`, a guest's own words of an error, with places in a JavaScript bundle
    /// read back as the author's file and line.
    pub(crate) fn in_authors_words(&self, message: String) -> String {
        match &self.bundle {
            Some(map) => map.rewrite(&message),
            None => message,
        }
    }

    /// The state of one call (or reused instance) due within `deadline`, with `wasi`
    /// granting what the plugin may use (`None`: nothing).
    pub(crate) fn state(&self, deadline: Duration, wasi: Option<WasiCtxBuilder>) -> PluginState {
        PluginState::new(
            self.name.clone(),
            self.config.clone(),
            &self.limits,
            deadline,
            wasi,
        )
    }
}

/// A loaded plugin of any kind: what it is called, which version it is, how it was
/// loaded, the limits its calls run under.
pub trait Plugin: Send + Sync + 'static {
    /// What every plugin carries.
    fn loaded(&self) -> &Loaded;

    /// The plugin's name.
    fn name(&self) -> &str {
        &self.loaded().name
    }

    /// The sha256 of the component file it was loaded from.
    fn digest(&self) -> &str {
        &self.loaded().digest
    }

    /// Whether it came from the compiled-component cache.
    fn load_outcome(&self) -> &CacheOutcome {
        &self.loaded().outcome
    }

    /// The limits its calls run under.
    fn limits(&self) -> &Limits {
        &self.loaded().limits
    }

    /// The compiler its code came from (Winch for a large component, else cranelift).
    fn compiler(&self) -> backend::Compiler {
        self.loaded().compiler
    }
}
