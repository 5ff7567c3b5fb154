//! The host side of a plugin instance: [`PluginState`], the per-call state its imports
//! see (WASI, wasi:http, the `wasmlet:plugin/host` interface).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::admission::input::Admission;
use crate::bindings::wasmlet::plugin::host::Level;
use crate::limits::{Limits, MAX_CORE_INSTANCES};
use crate::probe::exec::ContainerExec;
use crate::{bindings, guest, http};

/// Per-call state a plugin instance sees through its imports.
pub struct PluginState {
    pub(crate) plugin: Arc<str>,
    /// When the current call must have finished.
    pub(crate) deadline_at: std::time::Instant,
    pub(crate) config: Arc<BTreeMap<String, String>>,
    /// The admission an admission policy's current call decides on.
    pub(crate) admission: Option<Arc<Admission>>,
    /// The probed container's exec, when the handler is granted it.
    pub(crate) exec: Option<Arc<dyn ContainerExec>>,
    /// What WASI grants; `None` grants nothing and is built on the guest's first WASI
    /// call (a policy that never makes one — most — never pays for building it).
    pub(crate) wasi: Option<WasiCtx>,
    /// What the guest writes to stdout and stderr.
    pub(crate) output: guest::GuestOutput,
    pub(crate) http: WasiHttpCtx,
    pub(crate) http_hooks: http::HttpHooks,
    pub(crate) table: ResourceTable,
    pub(crate) limits: guest::Limiter,
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
