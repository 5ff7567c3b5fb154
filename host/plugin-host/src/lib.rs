//! wasmlet's WebAssembly plugin runtime: loads `wasm32-wasip2` components that implement
//! the `wasmlet:plugin@0.1.0` worlds (`wit/plugin.wit`) and calls them with limits.
//!
//! - [`PluginEngine`]: one wasmtime engine for every plugin (component model, cranelift,
//!   pooling allocator, epoch interruption driven by a 10 ms ticker), optionally with
//!   the on-disk compiled-component cache ([`ComponentCache`]).
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

pub mod cache;
pub mod chain;
pub mod config;
pub mod convert;
#[doc(hidden)]
pub mod dev;
pub mod http;
pub mod inspect;
pub mod kinds;
pub mod metrics;
pub mod probe;
/// The kubelet's resource arithmetic, compiled from the plugin SDK's own source so that
/// the usage the host sums and the requests a policy computes never disagree.
#[path = "../../../plugins/sdk/src/resources.rs"]
pub mod resources;
pub mod source;
pub mod watch;

pub use cache::{CacheOutcome, ComponentCache};
pub use chain::{AdmissionChain, FailurePolicy, LinkSpec, ReplaceError};
pub use config::PluginsConfig;
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

/// What a node carries, as admission sees it: the usage summed over its active pods
/// and the host ports they hold. Cheap to clone.
#[derive(Debug, Clone)]
pub struct NodeLoad {
    /// Summed requests and pod count.
    pub usage: NodeUsage,
    /// Host ports held.
    pub host_ports: Arc<[HostPortInUse]>,
}

use bindings::wasmlet::plugin::admission_input::{NodeView, PodView};
use bindings::wasmlet::plugin::host::Level;

/// One pod's admission: the pod, the node it would join and what that node already
/// carries. A policy reads them field by field through the `pod-view` and `node-view`
/// resources (nothing is copied into a guest that it does not ask for). Made once per
/// pod and shared by every link of a chain: what a link works out for the pod (its
/// summed requests, its JSON) is worked out once.
pub struct Admission {
    pod: Arc<Pod>,
    node: Arc<Node>,
    load: NodeLoad,
    requests: std::sync::OnceLock<ResourceList>,
    json: std::sync::OnceLock<String>,
    make_json: Box<dyn Fn() -> String + Send + Sync>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("pod", &self.pod.name)
            .field("node", &self.node.name)
            .finish()
    }
}

impl Admission {
    /// The admission of `pod` to `node`, which carries `load`. `pod_json` makes the
    /// whole pod as Kubernetes JSON; it runs only if a policy asks, and once.
    pub fn new(
        pod: impl Into<Arc<Pod>>,
        node: impl Into<Arc<Node>>,
        load: NodeLoad,
        pod_json: impl Fn() -> String + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            pod: pod.into(),
            node: node.into(),
            load,
            requests: std::sync::OnceLock::new(),
            json: std::sync::OnceLock::new(),
            make_json: Box::new(pod_json),
        })
    }

    /// The pod under admission.
    pub fn pod(&self) -> &Arc<Pod> {
        &self.pod
    }

    /// The node it would join.
    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }

    /// What the node already carries.
    pub fn load(&self) -> &NodeLoad {
        &self.load
    }

    /// What the pod requests, summed the kubelet's way ([`resources::pod_requests`]).
    pub fn requests(&self) -> &ResourceList {
        self.requests
            .get_or_init(|| resources::pod_requests(&self.pod))
    }

    /// The pod as JSON, made on first use.
    pub fn json(&self) -> &str {
        self.json.get_or_init(|| (self.make_json)())
    }
}

/// A `pod-view` or `node-view` handle to lend the guest for one `admit` call. It stands
/// for the call's [`Admission`], which the store holds while the call runs, so the host
/// keeps no resource table for it (the handle's number is not looked at).
fn lent<T: 'static>() -> wasmtime::component::Resource<T> {
    wasmtime::component::Resource::new_borrow(0)
}

/// How often the epoch advances: a running guest yields to the async runtime and its
/// deadline is checked at this period.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Instances that may exist at once, across all plugins (calls in flight plus reused
/// instances kept idle). A call beyond it fails with a clear error.
const POOL_SLOTS: u32 = 1000;

/// Idle instances kept per plugin in [`InstanceMode::Reused`].
const IDLE_PER_PLUGIN: usize = 8;

/// The error a call's epoch callback raises when its deadline has passed.
#[derive(Debug)]
struct DeadlinePassed;

impl std::fmt::Display for DeadlinePassed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline passed")
    }
}

impl std::error::Error for DeadlinePassed {}

/// Largest guest memory any plugin may be given (the pooling allocator's slot size).
pub const MAX_MEMORY_BYTES: usize = 256 << 20;

/// Core instances a component may create: a Rust `wasm32-wasip2` component has its
/// own module plus the adapter's few; a guest that makes more is refused.
pub const MAX_CORE_INSTANCES: usize = 8;

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
    /// of time is thrown away. The admission default: a decision must depend on the pod
    /// and node only, so reuse is safe for policies and several times faster.
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
    /// The guest trapped (a panic, an unreachable, memory exhausted) or the host failed
    /// to run it.
    #[error("plugin {plugin}: {call} failed: {}", chain(source))]
    Call {
        /// The plugin's name.
        plugin: String,
        /// The export called.
        call: &'static str,
        /// The trap or error.
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

/// A failed call as a [`PluginError`]: a deadline when the epoch callback cut it off,
/// else the trap or host error.
pub(crate) fn call_error(
    plugin: &str,
    call: &'static str,
    deadline: Duration,
    source: wasmtime::Error,
) -> PluginError {
    let interrupted = source.downcast_ref::<DeadlinePassed>().is_some()
        || matches!(
            source.downcast_ref::<wasmtime::Trap>(),
            Some(wasmtime::Trap::Interrupt)
        );
    if interrupted {
        PluginError::Deadline {
            plugin: plugin.to_owned(),
            call,
            deadline,
        }
    } else {
        PluginError::Call {
            plugin: plugin.to_owned(),
            call,
            source: source.into_boxed_dyn_error(),
        }
    }
}

/// A store for one plugin call (or a reused instance): memory and instance limits, and
/// the deadline callback — every epoch tick the guest yields to the async runtime (a
/// long call never starves other tasks) and is cut off once `deadline_at` has passed.
pub(crate) fn plugin_store(engine: &Engine, state: PluginState) -> Store<PluginState> {
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limits);
    store.epoch_deadline_callback(|ctx| {
        if std::time::Instant::now() >= ctx.data().deadline_at {
            Err(DeadlinePassed.into())
        } else {
            Ok(wasmtime::UpdateDeadline::Yield(1))
        }
    });
    store.set_epoch_deadline(1);
    store
}

/// The wasmtime engine every plugin shares, with its epoch ticker.
#[derive(Clone)]
pub struct PluginEngine {
    pub(crate) engine: Engine,
    linker: Arc<Linker<PluginState>>,
    probe_linker: Arc<Linker<PluginState>>,
    source_linker: Arc<Linker<PluginState>>,
    cache: Option<ComponentCache>,
    metrics: PluginMetrics,
    _ticker: Arc<Ticker>,
}

impl std::fmt::Debug for PluginEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginEngine").finish_non_exhaustive()
    }
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until dropped.
struct Ticker {
    stop: Arc<AtomicBool>,
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl PluginEngine {
    /// A new engine (component model, async, epoch interruption) and its ticker thread.
    pub fn new() -> anyhow::Result<Self> {
        Self::build(None)
    }

    /// Like [`PluginEngine::new`], keeping compiled components in `cache_dir` so that a
    /// restart loads them without compiling (see [`ComponentCache`]).
    pub fn with_cache(cache_dir: &Path) -> anyhow::Result<Self> {
        Self::build(Some(cache_dir))
    }

    fn build(cache_dir: Option<&Path>) -> anyhow::Result<Self> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(true);
        // Plugins are small and their calls cost the boundary, not the code: measured,
        // cranelift's optimisations left decisions as fast (8.3 vs 8.8 µs p50 warm) and
        // made every compile — every hot swap of a new version — 20 ms slower.
        config.cranelift_opt_level(wasmtime::OptLevel::None);
        // Instances come from pre-reserved slots: a fresh instance per call costs
        // microseconds, not an mmap and page faults. The first 256 KiB of a memory are
        // reset with memset and stay resident (a small guest's whole working set);
        // beyond that, pages go back to the kernel in batches. Measured: with 64 KiB
        // resident and no batching a fresh-instance decision cost 49 µs, with these 19.
        let mut pool = wasmtime::PoolingAllocationConfig::new();
        pool.total_component_instances(POOL_SLOTS)
            .total_core_instances(POOL_SLOTS * 4)
            .total_memories(POOL_SLOTS * 2)
            .total_tables(POOL_SLOTS * 4)
            .total_stacks(POOL_SLOTS)
            .max_core_instances_per_component(MAX_CORE_INSTANCES as u32)
            .max_memory_size(MAX_MEMORY_BYTES)
            .linear_memory_keep_resident(256 << 10)
            .decommit_batch_size(8)
            .table_keep_resident(16 << 10);
        config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config)?;
        let mut linker = Linker::<PluginState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        bindings::AdmissionPolicy::add_to_linker::<PluginState, HasSelf<PluginState>>(
            &mut linker,
            |s| s,
        )?;

        let probe_linker = Arc::new(probe::linker(&engine)?);
        let source_linker = Arc::new(source::linker(&engine)?);
        let stop = Arc::new(AtomicBool::new(false));
        let (ticking, flag) = (engine.clone(), stop.clone());
        std::thread::Builder::new()
            .name("wasmlet-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    ticking.increment_epoch();
                }
            })?;
        let cache = match cache_dir {
            Some(dir) => Some(
                ComponentCache::new(dir, &engine)
                    .map_err(|e| anyhow::anyhow!("plugin cache {}: {e}", dir.display()))?,
            ),
            None => None,
        };
        Ok(Self {
            engine,
            linker: Arc::new(linker),
            probe_linker,
            source_linker,
            cache,
            metrics: PluginMetrics::default(),
            _ticker: Arc::new(Ticker { stop }),
        })
    }

    /// Compiles components missing from the cache in a process of their own: `program`
    /// run as [`cache::COMPILER_ARGS`] (the `wasmlet` binary answers it with
    /// [`PluginEngine::precompile_into_cache`]). Without a cache, nothing changes.
    #[must_use]
    pub fn compile_with(mut self, program: PathBuf) -> Self {
        self.cache = self.cache.take().map(|c| c.compile_with(program));
        self
    }

    /// Compiles `wasm` into the cache (what a compiler process does); an error says
    /// why the component does not compile.
    pub fn precompile_into_cache(&self, wasm: &[u8]) -> anyhow::Result<()> {
        let cache = self
            .cache
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("the engine has no cache to compile into"))?;
        let digest = cache::sha256_hex(wasm);
        cache.load(&self.engine, wasm, &digest)?;
        Ok(())
    }

    /// Reads and compiles (or loads from the cache) the component at `path`.
    pub(crate) fn component(
        &self,
        name: &str,
        path: &Path,
    ) -> Result<(Component, String, CacheOutcome), PluginError> {
        let load_err = |source: BoxError| PluginError::Load {
            plugin: name.to_owned(),
            path: path.to_owned(),
            source,
        };
        let wasm = read_component(path).map_err(load_err)?;
        let digest = cache::sha256_hex(&wasm);
        let (component, outcome) = match &self.cache {
            Some(cache) => cache.load(&self.engine, &wasm, &digest),
            None => Component::new(&self.engine, &wasm).map(|c| (c, CacheOutcome::Miss)),
        }
        .map_err(|e| load_err(e.into_boxed_dyn_error()))?;
        Ok((component, digest, outcome))
    }

    /// The metrics of every plugin loaded on this engine.
    pub fn metrics(&self) -> &PluginMetrics {
        &self.metrics
    }

    /// Compiles the component at `path` as admission policy `name`, checking that it
    /// implements the `admission-policy` world.
    pub fn load_admission(
        &self,
        name: &str,
        path: &Path,
        config: BTreeMap<String, String>,
        limits: Limits,
    ) -> Result<AdmissionPlugin, PluginError> {
        let kind = LoadKind {
            label: "admission",
            world: "admission-policy",
            linker: &self.linker,
        };
        let (loaded, pre) = self.load_as(
            name,
            path,
            kind,
            config,
            limits,
            bindings::AdmissionPolicyPre::new,
        )?;
        Ok(AdmissionPlugin {
            policy: Arc::new(Policy {
                loaded,
                pre,
                idle: std::sync::Mutex::new(Vec::new()),
                spares: std::sync::Mutex::new(Vec::new()),
                retiring: AtomicBool::new(false),
            }),
        })
    }

    /// Compiles (or takes from the cache) the component at `path` as plugin `name` of
    /// `kind`, checks it against the kind's world with `prepare`, and counts the load.
    pub(crate) fn load_as<P>(
        &self,
        name: &str,
        path: &Path,
        kind: LoadKind<'_>,
        config: BTreeMap<String, String>,
        limits: Limits,
        prepare: impl FnOnce(wasmtime::component::InstancePre<PluginState>) -> wasmtime::Result<P>,
    ) -> Result<(Loaded, P), PluginError> {
        let loaded = (|| {
            let (component, digest, outcome) = self.component(name, path)?;
            let pre = kind
                .linker
                .instantiate_pre(&component)
                .and_then(prepare)
                .map_err(|source| PluginError::World {
                    plugin: name.to_owned(),
                    world: kind.world,
                    source: source.into_boxed_dyn_error(),
                })?;
            let loaded = Loaded {
                name: name.into(),
                digest,
                outcome,
                engine: self.engine.clone(),
                config: Arc::new(config),
                limits,
                metrics: self.metrics.for_plugin(name, kind.label),
            };
            Ok((loaded, pre))
        })();
        self.metrics.loaded(name, kind.label, loaded.is_ok());
        loaded
    }
}

/// A plugin kind, as [`PluginEngine::load_as`] loads it.
pub(crate) struct LoadKind<'a> {
    /// Its metrics label: `admission`, `probe`, `source`.
    pub(crate) label: &'static str,
    /// The world it must implement.
    pub(crate) world: &'static str,
    /// The linker of that world.
    pub(crate) linker: &'a Linker<PluginState>,
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
    http: WasiHttpCtx,
    http_hooks: http::HttpHooks,
    table: ResourceTable,
    limits: StoreLimits,
}

impl PluginState {
    /// The state of one call (or reused instance) of `plugin`, due within `deadline`,
    /// with `wasi` granting what the plugin may use (`None`: nothing).
    pub(crate) fn new(
        plugin: Arc<str>,
        config: Arc<BTreeMap<String, String>>,
        limits: &Limits,
        deadline: Duration,
        wasi: Option<WasiCtx>,
    ) -> Self {
        Self {
            plugin,
            deadline_at: std::time::Instant::now() + deadline,
            config,
            admission: None,
            exec: None,
            wasi,
            http: WasiHttpCtx::new(),
            http_hooks: http::HttpHooks::default(),
            table: ResourceTable::new(),
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.memory_bytes)
                .instances(MAX_CORE_INSTANCES)
                .build(),
        }
    }
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: self
                .wasi
                .get_or_insert_with(|| WasiCtxBuilder::new().build()),
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

impl PluginState {
    /// The admission the current call decides on. A guest holds a `pod-view` or
    /// `node-view` only while `admit` runs, when the host has set it; a read at any
    /// other time (which the component model's borrow rules prevent) traps.
    fn admission(&self) -> wasmtime::Result<&Admission> {
        self.admission
            .as_deref()
            .ok_or_else(|| wasmtime::format_err!("pod-view or node-view read outside admit"))
    }

    /// The pod the current call decides on.
    fn pod(&self) -> wasmtime::Result<&Pod> {
        Ok(&self.admission()?.pod)
    }

    /// The node the current call decides on.
    fn node(&self) -> wasmtime::Result<&Node> {
        Ok(&self.admission()?.node)
    }
}

type Lent<T> = wasmtime::component::Resource<T>;

impl bindings::wasmlet::plugin::admission_input::Host for PluginState {}

impl bindings::wasmlet::plugin::admission_input::HostPodView for PluginState {
    fn uid(&mut self, _: Lent<PodView>) -> wasmtime::Result<String> {
        Ok(self.pod()?.uid.clone())
    }

    fn name(&mut self, _: Lent<PodView>) -> wasmtime::Result<String> {
        Ok(self.pod()?.name.clone())
    }

    fn namespace(&mut self, _: Lent<PodView>) -> wasmtime::Result<String> {
        Ok(self.pod()?.namespace.clone())
    }

    fn labels(&mut self, _: Lent<PodView>) -> wasmtime::Result<Vec<(String, String)>> {
        Ok(self.pod()?.labels.clone())
    }

    fn annotations(&mut self, _: Lent<PodView>) -> wasmtime::Result<Vec<(String, String)>> {
        Ok(self.pod()?.annotations.clone())
    }

    fn containers(&mut self, _: Lent<PodView>) -> wasmtime::Result<Vec<Container>> {
        Ok(self.pod()?.containers.clone())
    }

    fn init_containers(&mut self, _: Lent<PodView>) -> wasmtime::Result<Vec<Container>> {
        Ok(self.pod()?.init_containers.clone())
    }

    fn overhead(&mut self, _: Lent<PodView>) -> wasmtime::Result<ResourceList> {
        Ok(self.pod()?.overhead.clone())
    }

    fn requests(&mut self, _: Lent<PodView>) -> wasmtime::Result<ResourceList> {
        Ok(self.admission()?.requests().clone())
    }

    fn node_selector(&mut self, _: Lent<PodView>) -> wasmtime::Result<Vec<(String, String)>> {
        Ok(self.pod()?.node_selector.clone())
    }

    fn required_node_affinity(
        &mut self,
        _: Lent<PodView>,
    ) -> wasmtime::Result<Vec<NodeSelectorTerm>> {
        Ok(self.pod()?.required_node_affinity.clone())
    }

    fn tolerations(&mut self, _: Lent<PodView>) -> wasmtime::Result<Vec<Toleration>> {
        Ok(self.pod()?.tolerations.clone())
    }

    fn host_network(&mut self, _: Lent<PodView>) -> wasmtime::Result<bool> {
        Ok(self.pod()?.host_network)
    }

    fn priority(&mut self, _: Lent<PodView>) -> wasmtime::Result<i32> {
        Ok(self.pod()?.priority)
    }

    fn static_pod(&mut self, _: Lent<PodView>) -> wasmtime::Result<bool> {
        Ok(self.pod()?.static_pod)
    }

    fn source(&mut self, _: Lent<PodView>) -> wasmtime::Result<String> {
        Ok(self.pod()?.source.clone())
    }

    fn whole(&mut self, _: Lent<PodView>) -> wasmtime::Result<Pod> {
        Ok(self.pod()?.clone())
    }

    fn json(&mut self, _: Lent<PodView>) -> wasmtime::Result<String> {
        Ok(self.admission()?.json().to_owned())
    }

    fn drop(&mut self, _: Lent<PodView>) -> wasmtime::Result<()> {
        Ok(())
    }
}

impl bindings::wasmlet::plugin::admission_input::HostNodeView for PluginState {
    fn name(&mut self, _: Lent<NodeView>) -> wasmtime::Result<String> {
        Ok(self.node()?.name.clone())
    }

    fn labels(&mut self, _: Lent<NodeView>) -> wasmtime::Result<Vec<(String, String)>> {
        Ok(self.node()?.labels.clone())
    }

    fn taints(&mut self, _: Lent<NodeView>) -> wasmtime::Result<Vec<Taint>> {
        Ok(self.node()?.taints.clone())
    }

    fn allocatable(&mut self, _: Lent<NodeView>) -> wasmtime::Result<ResourceList> {
        Ok(self.node()?.allocatable.clone())
    }

    fn usage(&mut self, _: Lent<NodeView>) -> wasmtime::Result<NodeUsage> {
        Ok(self.admission()?.load.usage.clone())
    }

    fn host_ports_in_use(&mut self, _: Lent<NodeView>) -> wasmtime::Result<Vec<HostPortInUse>> {
        Ok(self.admission()?.load.host_ports.to_vec())
    }

    fn whole(&mut self, _: Lent<NodeView>) -> wasmtime::Result<Node> {
        Ok(self.node()?.clone())
    }

    fn drop(&mut self, _: Lent<NodeView>) -> wasmtime::Result<()> {
        Ok(())
    }
}

/// What every loaded plugin is, whatever its kind: its name and version, its settings,
/// the engine it runs on and where its calls are counted.
pub struct Loaded {
    name: Arc<str>,
    digest: String,
    outcome: CacheOutcome,
    engine: Engine,
    config: Arc<BTreeMap<String, String>>,
    limits: Limits,
    metrics: CallMetrics,
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

    /// Counts the instantiation of a fresh instance begun at `started`.
    pub(crate) fn instantiated(&self, started: std::time::Instant) {
        self.metrics
            .instantiation
            .observe(started.elapsed().as_secs_f64());
    }

    /// The state of one call (or reused instance) due within `deadline`, with `wasi`
    /// granting what the plugin may use (`None`: nothing).
    pub(crate) fn state(&self, deadline: Duration, wasi: Option<WasiCtx>) -> PluginState {
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
}

/// A loaded admission policy.
pub struct AdmissionPlugin {
    policy: Arc<Policy>,
}

/// What an [`AdmissionPlugin`] is; shared with the background tasks that prepare its
/// next fresh instances.
struct Policy {
    loaded: Loaded,
    pre: bindings::AdmissionPolicyPre<PluginState>,
    /// Instances kept between calls ([`InstanceMode::Reused`]).
    idle: std::sync::Mutex<Vec<Warm>>,
    /// Instances made ahead of calls and never called yet ([`InstanceMode::PerCall`]).
    spares: std::sync::Mutex<Vec<Warm>>,
    /// Whether a background task is tearing down a used instance and making a spare.
    retiring: AtomicBool,
}

impl Plugin for AdmissionPlugin {
    fn loaded(&self) -> &Loaded {
        &self.policy.loaded
    }
}

/// An instance with its store: kept for reuse, or made ahead as a spare.
struct Warm {
    store: Store<PluginState>,
    bindings: bindings::AdmissionPolicy,
}

/// Fresh instances made ahead per [`InstanceMode::PerCall`] policy: decisions that come
/// one after another each find one ready; calls that overlap make their own.
const SPARES: usize = 1;

impl std::fmt::Debug for AdmissionPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionPlugin")
            .field("name", &self.name())
            .field("limits", self.limits())
            .finish()
    }
}

/// Takes an instance from `list`, if it has one.
fn take(list: &std::sync::Mutex<Vec<Warm>>) -> Option<Warm> {
    list.lock().unwrap_or_else(|e| e.into_inner()).pop()
}

/// Puts an instance into `list` unless it already holds `max`.
fn keep(list: &std::sync::Mutex<Vec<Warm>>, warm: Warm, max: usize) {
    let mut list = list.lock().unwrap_or_else(|e| e.into_inner());
    if list.len() < max {
        list.push(warm);
    }
}

impl Policy {
    /// A new instance in a new store with this plugin's limits and the deadline
    /// callback: every epoch tick the guest yields to the async runtime (a long call
    /// never starves the other tasks) and is cut off once its call's deadline has passed.
    async fn instantiate(&self) -> wasmtime::Result<Warm> {
        let started = std::time::Instant::now();
        let l = &self.loaded;
        let mut store = plugin_store(&l.engine, l.state(l.limits.deadline, None));
        let bindings = self.pre.instantiate_async(&mut store).await?;
        self.loaded.instantiated(started);
        Ok(Warm { store, bindings })
    }

    /// Makes a spare fresh instance for a later call, unless there are enough.
    async fn make_spare(&self) {
        if self.spares.lock().unwrap_or_else(|e| e.into_inner()).len() >= SPARES {
            return;
        }
        match self.instantiate().await {
            Ok(spare) => keep(&self.spares, spare, SPARES),
            // The next call instantiates for itself and reports the error.
            Err(e) => tracing::debug!(plugin = &*self.loaded.name, "spare instance: {e}"),
        }
    }
}

impl AdmissionPlugin {
    /// Fresh instances made ahead and not yet used ([`InstanceMode::PerCall`]: at most
    /// one, made on a background task after a call).
    pub fn spare_instances(&self) -> usize {
        self.policy
            .spares
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    fn error(&self, call: &'static str, source: wasmtime::Error) -> PluginError {
        call_error(self.name(), call, self.limits().deadline, source)
    }

    /// Decides on `admission`, in a fresh instance or a reused one as its limits say.
    pub async fn admit(&self, admission: &Arc<Admission>) -> Result<Verdict, PluginError> {
        let started = std::time::Instant::now();
        let result = self.decide(admission).await;
        self.policy.loaded.record(
            started,
            match &result {
                Ok(Verdict::Admit) => CallResult::Passed,
                Ok(Verdict::Reject(_)) => CallResult::Failed,
                Err(_) => CallResult::Error,
            },
        );
        result
    }

    /// One decision. A reused instance goes back to the idle list when its call
    /// succeeded. A fresh instance serves one call only: a spare made ahead of the call
    /// when there is one (instantiating is then off the decision's path), and once
    /// the call is over, the used instance is torn down and the next spare made on a
    /// background task.
    async fn decide(&self, admission: &Arc<Admission>) -> Result<Verdict, PluginError> {
        const CALL: &str = "admit";
        let policy = &self.policy;
        let limits = self.limits();
        let reuse = limits.instances == InstanceMode::Reused;
        let ready = take(if reuse { &policy.idle } else { &policy.spares });
        let mut warm = match ready {
            Some(mut warm) => {
                warm.store.data_mut().deadline_at = std::time::Instant::now() + limits.deadline;
                warm
            }
            None => policy
                .instantiate()
                .await
                .map_err(|e| self.error(CALL, e))?,
        };
        warm.store.set_epoch_deadline(1);
        warm.store.data_mut().admission = Some(admission.clone());
        let verdict = warm
            .bindings
            .wasmlet_plugin_admission()
            .call_admit(&mut warm.store, lent(), lent())
            .await
            .map_err(|e| self.error(CALL, e));
        warm.store.data_mut().admission = None;
        if reuse {
            // Only an instance whose call succeeded goes back; a trapped one is dropped.
            if verdict.is_ok() {
                keep(&policy.idle, warm, IDLE_PER_PLUGIN);
            }
        } else {
            self.retire(warm);
        }
        verdict
    }

    /// Tears down a used fresh instance and makes the next spare on a background task,
    /// so that the caller waits for neither. One such task at a time: when decisions
    /// come faster than it works (or there is no runtime to run it), the caller tears
    /// its instance down itself and the next call instantiates for itself — used
    /// instances never pile up.
    fn retire(&self, used: Warm) {
        let policy = &self.policy;
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(runtime) if !policy.retiring.swap(true, Ordering::AcqRel) => runtime,
            _ => return drop(used),
        };
        let policy = policy.clone();
        runtime.spawn(async move {
            drop(used);
            policy.make_spare().await;
            policy.retiring.store(false, Ordering::Release);
        });
    }
}
