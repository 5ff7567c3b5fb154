//! Helpers shared by wasmlet's benchmarks: timing loops, percentiles, table output.
//!
//! Each benchmark is a `harness = false` binary under `benches/` that prints a table.
//! `--smoke` runs every case a few times only (CI checks that benchmarks still run);
//! without it, enough iterations for stable percentiles.

use std::time::{Duration, Instant};

pub mod floor;
pub mod process;

/// How long to measure each case.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Untimed iterations first.
    pub warmup: usize,
    /// Timed iterations.
    pub iterations: usize,
}

impl Budget {
    /// `--smoke` on the command line selects a token budget.
    pub fn from_args(full_iterations: usize) -> Self {
        if std::env::args().any(|a| a == "--smoke") {
            Self {
                warmup: 1,
                iterations: 3,
            }
        } else {
            Self {
                warmup: full_iterations / 10 + 1,
                iterations: full_iterations,
            }
        }
    }
}

/// Latency samples of one case.
#[derive(Debug, Clone)]
pub struct Samples {
    sorted: Vec<Duration>,
    total: Duration,
}

impl Samples {
    /// Summarizes raw samples.
    pub fn new(mut samples: Vec<Duration>) -> Self {
        samples.sort();
        let total = samples.iter().sum();
        Self {
            sorted: samples,
            total,
        }
    }

    /// The `p`-th percentile (0..=100).
    pub fn percentile(&self, p: f64) -> Duration {
        if self.sorted.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * (self.sorted.len() - 1) as f64).round() as usize;
        self.sorted[rank.min(self.sorted.len() - 1)]
    }

    /// Calls per second, from the mean.
    pub fn per_second(&self) -> f64 {
        if self.total.is_zero() {
            0.0
        } else {
            self.sorted.len() as f64 / self.total.as_secs_f64()
        }
    }
}

/// Times `iterations` sequential runs of `f` after `warmup` untimed ones, back to back.
pub async fn time_async<F, Fut>(budget: Budget, f: F) -> Samples
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    time_paced(budget, Gap::None, f).await
}

/// What the caller does between two calls of [`time_paced`].
#[derive(Debug, Clone, Copy)]
pub enum Gap {
    /// Nothing: the next call starts the moment one ends (what a call costs).
    None,
    /// Yields to the async runtime once, as a loop that awaits its next event does:
    /// tasks the call spawned run, and the next call starts right after.
    Yield,
    /// Sleeps on the runtime's timer: work that arrives now and then, each call
    /// starting from an idle thread.
    Sleep(Duration),
}

/// Like [`time_async`], with a [`Gap`] before each call (not timed): what the calls leave
/// to background tasks gets the time between them, as it would in the agent.
pub async fn time_paced<F, Fut>(budget: Budget, gap: Gap, mut f: F) -> Samples
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut samples = Vec::with_capacity(budget.iterations);
    for i in 0..budget.warmup + budget.iterations {
        match gap {
            Gap::None => {}
            Gap::Yield => tokio::task::yield_now().await,
            Gap::Sleep(pause) => tokio::time::sleep(pause).await,
        }
        let t = Instant::now();
        f().await;
        if i >= budget.warmup {
            samples.push(t.elapsed());
        }
    }
    Samples::new(samples)
}

/// CPU time (user + system) of this process, every thread's, to the nanosecond
/// (`CLOCK_PROCESS_CPUTIME_ID`; `/proc/self/stat`'s 10 ms ticks if that clock fails).
pub fn cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to write.
    #[allow(unsafe_code)]
    let failed = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) } != 0;
    if failed {
        return cpu_time_of("self");
    }
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

/// CPU time (user + system) of process `pid` (a number, or `self`), from its
/// `/proc/PID/stat` (10 ms ticks; zero when it cannot be read).
pub fn cpu_time_of(pid: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    Duration::from_millis(ticks * 10)
}

/// The `p`-th percentile (0..=100) of `values`, the nearest rank as [`Samples::percentile`]
/// takes it; the default of `T` when there are none.
pub fn pct<T: Ord + Copy + Default>(mut values: Vec<T>, p: f64) -> T {
    values.sort();
    let i = ((values.len() as f64 - 1.0) * p / 100.0).round() as usize;
    values.get(i).copied().unwrap_or_default()
}

/// Formats a duration compactly (µs below 10 ms).
pub fn fmt(d: Duration) -> String {
    if d < Duration::from_millis(10) {
        format!("{:.1} µs", d.as_secs_f64() * 1e6)
    } else {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    }
}

/// Prints a markdown table row for a case.
pub fn row(case: &str, s: &Samples) {
    println!(
        "| {case} | {} | {} | {} | {:.0} |",
        fmt(s.percentile(50.0)),
        fmt(s.percentile(99.0)),
        fmt(s.percentile(100.0)),
        s.per_second()
    );
}

/// Prints the table header that [`row`] fills.
pub fn header(title: &str) {
    println!("\n### {title}\n");
    println!("| case | p50 | p99 | max | calls/s |");
    println!("|---|---|---|---|---|");
}

/// A probe checker for pods without probes (every check passes).
pub use wasmlet_agent::testing::NoProbes;

/// `wasm` with a custom section holding `tag`: the same component, another digest.
pub fn variant(wasm: &[u8], tag: &str) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"wasmlet-bench";
    let mut content = Vec::new();
    leb(name.len(), &mut content);
    content.extend_from_slice(name);
    content.extend_from_slice(tag.as_bytes());
    let mut out = wasm.to_vec();
    out.push(0);
    leb(content.len(), &mut out);
    out.extend_from_slice(&content);
    out
}
