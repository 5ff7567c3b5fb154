//! A call's time: the epoch clock that interrupts guests (ticking only while a call is
//! under way), the store each call runs in with its deadline, and what a failed call
//! becomes ([`call_error`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use wasmtime::{Engine, Store};

use crate::error::PluginError;
use crate::host::PluginState;

/// How often the epoch advances: a running guest yields to the async runtime and its
/// deadline is checked at this period.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The error a call's epoch callback raises when its deadline has passed.
#[derive(Debug)]
struct DeadlinePassed;

impl std::fmt::Display for DeadlinePassed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline passed")
    }
}

impl std::error::Error for DeadlinePassed {}

/// A failed call as a [`PluginError`]: a deadline when the epoch callback cut it off,
/// else the trap or host error, read with what the guest left in `state` (the exception
/// it printed, the memory growth its limit refused). The guest's whole stderr goes to
/// the log: the author's full stack, where the error itself keeps one line.
pub(crate) fn call_error(
    plugin: &str,
    call: &'static str,
    deadline: Duration,
    source: wasmtime::Error,
    state: &mut PluginState,
    bundle: Option<&crate::guest::BundleMap>,
) -> PluginError {
    let interrupted = source.downcast_ref::<DeadlinePassed>().is_some()
        || matches!(
            source.downcast_ref::<wasmtime::Trap>(),
            Some(wasmtime::Trap::Interrupt)
        );
    if interrupted {
        return PluginError::Deadline {
            plugin: plugin.to_owned(),
            call,
            deadline,
        };
    }
    let failure = crate::guest::Failure::new(state.failure_context(), &source, bundle);
    if !failure.stderr.trim().is_empty() {
        tracing::warn!(target: "plugin", plugin, call, stderr = %failure.stderr.trim_end(), "{}", failure.summary());
    }
    tracing::debug!(plugin, call, "the call's trap: {source:?}");
    PluginError::Call {
        plugin: plugin.to_owned(),
        call,
        failure: Box::new(failure),
        source: source.into_boxed_dyn_error(),
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

/// The engine's epoch clock: a thread that advances the epoch every [`EPOCH_TICK`] —
/// only while some guest code may run. The epoch matters to a call under way alone (it
/// yields and has its deadline checked at every tick), so an agent with no call under
/// way has no thread waking a hundred times a second for nothing. Stops when dropped.
pub(crate) struct Ticker {
    clock: Arc<Clock>,
}

impl Ticker {
    /// Starts the ticking thread; `tick` advances the engines' epoch.
    pub(crate) fn start(tick: impl Fn() + Send + 'static) -> std::io::Result<Self> {
        let clock = Arc::new(Clock::default());
        let shared = clock.clone();
        let thread = std::thread::Builder::new()
            .name("wasmlet-epoch".into())
            .spawn(move || shared.run(tick))?;
        let _ = clock.thread.set(thread.thread().clone());
        Ok(Self { clock })
    }

    /// What the calls share with the thread.
    pub(crate) fn clock(&self) -> &Arc<Clock> {
        &self.clock
    }
}

/// What the ticking thread and the calls share.
#[derive(Default)]
pub(crate) struct Clock {
    /// Calls under way ([`Running`] guards alive).
    running: AtomicUsize,
    /// Ticks so far.
    ticks: AtomicU64,
    stop: AtomicBool,
    /// The ticking thread: woken when the first call starts, and to stop.
    thread: std::sync::OnceLock<std::thread::Thread>,
}

impl Clock {
    /// Marks a call under way until the guard is dropped; the first one wakes the
    /// ticking thread.
    pub(crate) fn running(self: &Arc<Self>) -> Running {
        if self.running.fetch_add(1, Ordering::AcqRel) == 0 {
            self.wake();
        }
        Running(self.clone())
    }

    fn wake(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }

    /// Ticks so far.
    pub(crate) fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }

    /// The ticking thread's loop: asleep (parked) while no call is under way.
    fn run(&self, tick: impl Fn()) {
        while !self.stop.load(Ordering::Acquire) {
            if self.running.load(Ordering::Acquire) == 0 {
                // A call starting between the check and here unparks first, and this
                // returns at once.
                std::thread::park();
                continue;
            }
            std::thread::sleep(EPOCH_TICK);
            tick();
            self.ticks.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A call under way: the epoch advances while one exists.
pub(crate) struct Running(Arc<Clock>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.clock.stop.store(true, Ordering::Release);
        self.clock.wake();
    }
}
