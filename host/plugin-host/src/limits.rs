//! The limits a plugin's calls run under.

use std::time::Duration;

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
    /// of time is thrown away, one unused for [`crate::IDLE_INSTANCE_LIFETIME`] dropped. The
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
