//! The two compilers a plugin may be compiled by, each a wasmtime engine of its own with
//! the linkers of the three worlds: cranelift (what every plugin written in a compiled
//! language gets) and wasmtime's baseline compiler, Winch, for components large enough
//! that cranelift would take seconds — a Python or JavaScript plugin carries its whole
//! interpreter, 12 to 18 MB of code. Measured on this project's `restricted-pods`
//! (bench/LOG.md, "Plugins in Python and TypeScript"): cranelift 3.5 s (Python) and
//! 4.1 s (TypeScript), Winch 1.1 and 1.0 s, for decisions 1.3–1.7× slower and still
//! well under a millisecond.

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, Strategy};

use crate::bindings;
use crate::host::PluginState;
use crate::limits::{MAX_CORE_INSTANCES, MAX_MEMORY_BYTES};
use crate::world::{probe, source};

/// Instances that may exist at once on one engine, across all its plugins (calls in
/// flight plus reused instances kept idle). A call beyond it fails with a clear error.
const POOL_SLOTS: u32 = 1000;

/// Components of this many bytes or more are compiled by Winch. Cranelift at the
/// engine's settings compiles about 5 MB a second here (a Rust plugin is 0.1–1 MB and
/// takes tens of milliseconds), so below this a load stays within a second.
pub const BASELINE_FROM_BYTES: usize = 4 << 20;

/// Which compiler turns a component into machine code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compiler {
    /// Cranelift, without optimisations: what most plugins get.
    Cranelift,
    /// Winch, wasmtime's baseline compiler: single pass, for large components.
    Winch,
}

impl Compiler {
    /// The compiler for a component of `size` bytes.
    pub fn for_size(size: usize) -> Self {
        if size >= BASELINE_FROM_BYTES && cfg!(any(target_arch = "x86_64", target_arch = "aarch64"))
        {
            Self::Winch
        } else {
            Self::Cranelift
        }
    }

    /// Its name, as `wasmlet plugin inspect` and the logs say it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cranelift => "cranelift",
            Self::Winch => "winch",
        }
    }
}

/// A plugin world: its linker, its name in the WIT and its metrics label.
#[derive(Debug, Clone, Copy)]
pub(crate) enum World {
    Admission,
    Probe,
    Source,
}

impl World {
    /// The world's name in `wit/plugin.wit`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Admission => "admission-policy",
            Self::Probe => "probe-handler",
            Self::Source => "pod-source",
        }
    }

    /// The plugin kind's metrics label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Admission => "admission",
            Self::Probe => "probe",
            Self::Source => "source",
        }
    }
}

/// One compiler's engine and the linkers of the three worlds for it.
pub(crate) struct Backend {
    pub(crate) compiler: Compiler,
    pub(crate) engine: Engine,
    admission: Linker<PluginState>,
    probe: Linker<PluginState>,
    source: Linker<PluginState>,
}

impl Backend {
    pub(crate) fn new(compiler: Compiler) -> wasmtime::Result<Self> {
        let engine = Engine::new(&config(compiler))?;
        let mut admission = Linker::<PluginState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut admission)?;
        bindings::AdmissionPolicy::add_to_linker::<PluginState, HasSelf<PluginState>>(
            &mut admission,
            |s| s,
        )?;
        Ok(Self {
            compiler,
            probe: with_wasi_http(&engine, |l| {
                probe::ProbeHandler::add_to_linker::<PluginState, HasSelf<PluginState>>(l, |s| s)
            })?,
            source: with_wasi_http(&engine, |l| {
                source::PodSource::add_to_linker::<PluginState, HasSelf<PluginState>>(l, |s| s)
            })?,
            admission,
            engine,
        })
    }

    pub(crate) fn linker(&self, world: World) -> &Linker<PluginState> {
        match world {
            World::Admission => &self.admission,
            World::Probe => &self.probe,
            World::Source => &self.source,
        }
    }
}

/// A linker of WASI and wasi:http (what a call reaches is checked per call against its
/// grants: a probe handler's network, a source's directory and URLs) with the world's
/// own imports added by `world`.
fn with_wasi_http(
    engine: &Engine,
    world: impl FnOnce(&mut Linker<PluginState>) -> wasmtime::Result<()>,
) -> wasmtime::Result<Linker<PluginState>> {
    let mut linker = Linker::<PluginState>::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    world(&mut linker)?;
    Ok(linker)
}

/// The engine's settings: component model, async calls, epoch interruption, the pooling
/// allocator; `compiler` compiles.
fn config(compiler: Compiler) -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    match compiler {
        // Plugins are small and their calls cost the boundary, not the code: measured,
        // cranelift's optimisations left decisions as fast (8.3 vs 8.8 µs p50 warm) and
        // made every compile — every hot swap of a new version — 20 ms slower.
        Compiler::Cranelift => config.cranelift_opt_level(wasmtime::OptLevel::None),
        // What an interpreter's tens of thousands of functions need no more of: native
        // unwind tables (only for debuggers and profilers walking through guest frames;
        // wasmtime's own backtraces and traps do without them) and the map from machine
        // code to wasm offsets (a trap's backtrace names the function, not the offset).
        // Measured: 9 % of a Python policy's compile and 4 of its 45 MB.
        Compiler::Winch => config
            .strategy(Strategy::Winch)
            .cranelift_opt_level(wasmtime::OptLevel::None)
            .native_unwind_info(false)
            .generate_address_map(false),
    };
    if compiler == Compiler::Winch {
        // Winch compiles the functions; cranelift still compiles the trampolines between
        // host and guest beside them — one per exported or table function, a third of a
        // Python policy's compile. Those are a few moves and a call each: cranelift's
        // single-pass register allocator makes them as well, sooner. Measured: Python
        // 1.07–1.14 s → 0.99–1.03 s, TypeScript 0.94–0.99 → 0.89–0.92, decisions the
        // same. (Not for cranelift's own plugins: their functions' code got slower, a
        // Rust decision 5.6 → 10.3 µs.)
        // SAFETY: `regalloc_algorithm` is one of cranelift's documented settings and
        // `single_pass` one of its values; it changes how registers are allocated, not
        // what the code does, and every engine made here sets it alike.
        #[allow(unsafe_code)]
        unsafe {
            config.cranelift_flag_set("regalloc_algorithm", "single_pass");
        }
    }
    // Instances come from pre-reserved slots: a fresh instance per call costs
    // microseconds, not an mmap and page faults. The first 256 KiB of a memory are reset
    // with memset and stay resident (a small guest's whole working set); beyond that,
    // pages go back to the kernel in batches. Measured: with 64 KiB resident and no
    // batching a fresh-instance decision cost 49 µs, with these 19.
    let mut pool = wasmtime::PoolingAllocationConfig::new();
    pool.total_component_instances(POOL_SLOTS)
        .total_core_instances(POOL_SLOTS * 4)
        .total_memories(POOL_SLOTS * 2)
        .total_tables(POOL_SLOTS * 4)
        .total_stacks(POOL_SLOTS)
        .max_core_instances_per_component(MAX_CORE_INSTANCES as u32)
        .max_memory_size(MAX_MEMORY_BYTES)
        .linear_memory_keep_resident(256 << 10)
        .decommit_batch_size(match compiler {
            Compiler::Cranelift => 8,
            // An interpreter's instance leaves megabytes of its heap written: given back
            // when the instance goes, not once seven more have gone (measured, a node
            // that admitted 30 pods through a Python policy kept 7 MB of it for good).
            Compiler::Winch => 1,
        })
        .table_keep_resident(16 << 10);
    config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_components_go_to_the_baseline_compiler() {
        assert_eq!(Compiler::for_size(90_000), Compiler::Cranelift);
        assert_eq!(
            Compiler::for_size(BASELINE_FROM_BYTES - 1),
            Compiler::Cranelift
        );
        let large = Compiler::for_size(BASELINE_FROM_BYTES);
        if cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
            assert_eq!(large, Compiler::Winch);
        } else {
            assert_eq!(large, Compiler::Cranelift);
        }
    }

    #[test]
    fn each_compiler_has_an_engine_of_its_own() {
        let cranelift = Backend::new(Compiler::Cranelift).expect("cranelift");
        let winch = Backend::new(Compiler::Winch).expect("winch");
        // Artifacts of one are never taken for the other's: the cache keys differ.
        assert_ne!(
            crate::cache::engine_key(&cranelift.engine),
            crate::cache::engine_key(&winch.engine)
        );
    }
}
