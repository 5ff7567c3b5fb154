//! [`Loaded`], what every loaded plugin is whatever its kind, and the [`Plugin`] trait
//! over the kinds.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::Engine;
use wasmtime_wasi::WasiCtxBuilder;

use crate::cache::CacheOutcome;
use crate::call::{Clock, Running, call_error};
use crate::error::PluginError;
use crate::host::PluginState;
use crate::limits::Limits;
use crate::metrics::CallMetrics;
use crate::{backend, guest};

/// What every loaded plugin is, whatever its kind: its name and version, its settings,
/// the engine it runs on and where its calls are counted.
pub struct Loaded {
    pub(crate) name: Arc<str>,
    pub(crate) digest: String,
    pub(crate) outcome: CacheOutcome,
    pub(crate) compiler: backend::Compiler,
    pub(crate) engine: Engine,
    pub(crate) clock: Arc<Clock>,
    pub(crate) config: Arc<BTreeMap<String, String>>,
    pub(crate) limits: Limits,
    pub(crate) metrics: CallMetrics,
    /// How much of the guest's output the log still takes.
    pub(crate) output_log: guest::OutputLog,
    /// A JavaScript plugin's bundle's source map.
    pub(crate) bundle: Option<guest::BundleMap>,
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
    pub(crate) fn running(&self) -> Running {
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
