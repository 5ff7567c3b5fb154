//! Per-key exponential back-off, the kubelet's way: CrashLoopBackOff for containers and
//! ImagePullBackOff for images.
//!
//! The first failure may be retried at once; each later one waits twice as long as the
//! previous wait (10 s, 20 s, 40 s … up to 300 s). A key whose last failure lies more
//! than twice the maximum (10 min) before the new one starts again from the beginning.
//! Times are passed in, so the rules are tested without a clock: any monotonic instant
//! will do ([`Moment`]: `std::time::Instant`, or the agent's tokio instant, which tests
//! pause and advance).

use std::collections::HashMap;
use std::ops::{Add, Sub};
use std::time::Duration;

/// A point on a monotonic clock: ordered, moved by a duration, and apart from another
/// by one.
pub trait Moment: Copy + Ord + Add<Duration, Output = Self> + Sub<Self, Output = Duration> {}

impl<T> Moment for T where T: Copy + Ord + Add<Duration, Output = T> + Sub<T, Output = Duration> {}

/// How long after `earlier` `later` is; zero if it is not after it.
fn since<I: Moment>(later: I, earlier: I) -> Duration {
    if later > earlier {
        later - earlier
    } else {
        Duration::ZERO
    }
}

/// The kubelet's container restart back-off: 10 s doubling to 300 s.
pub const CRASH_INITIAL: Duration = Duration::from_secs(10);
/// The longest back-off.
pub const CRASH_MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy)]
struct Entry<I> {
    /// The current wait.
    delay: Duration,
    /// The failure the wait counts from.
    since: I,
}

/// Back-off state for many keys, its times instants of `I`.
#[derive(Debug, Clone)]
pub struct Backoff<I = std::time::Instant> {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, Entry<I>>,
}

impl<I: Moment> Default for Backoff<I> {
    fn default() -> Self {
        Backoff::new(CRASH_INITIAL, CRASH_MAX)
    }
}

impl<I: Moment> Backoff<I> {
    /// Back-off from `initial`, doubling up to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            entries: HashMap::new(),
        }
    }

    fn expired(&self, entry: &Entry<I>, failed_at: I) -> bool {
        since(failed_at, entry.since) > self.max * 2
    }

    /// When `key`, which last failed at `failed_at`, may be retried: `None` if it may be
    /// now.
    pub fn retry_at(&self, key: &str, failed_at: I, now: I) -> Option<I> {
        let entry = self.entries.get(key)?;
        if self.expired(entry, failed_at) {
            return None;
        }
        let at = failed_at + entry.delay;
        (now < at).then_some(at)
    }

    /// Records a retry of `key` after its failure at `failed_at`: the next failure waits
    /// longer. Call it when the retry is made (the container restarted).
    pub fn next(&mut self, key: &str, failed_at: I) {
        let delay = match self.entries.get(key) {
            Some(e) if !self.expired(e, failed_at) => (e.delay * 2).min(self.max),
            _ => self.initial,
        };
        self.entries.insert(
            key.to_owned(),
            Entry {
                delay,
                since: failed_at,
            },
        );
    }

    /// For a key the state does not know (a restarted agent adopting a crash loop):
    /// takes up the back-off where `failures` earlier retries left it — the wait after
    /// failure `n` (n ≥ 1) is `initial · 2^(n-1)` — counted from `failed_at`. A known
    /// key, or no earlier retry, changes nothing.
    pub fn seed(&mut self, key: &str, failed_at: I, failures: u32) {
        if failures == 0 || self.entries.contains_key(key) {
            return;
        }
        let delay = self
            .initial
            .checked_mul(2u32.saturating_pow(failures.saturating_sub(1).min(16)))
            .unwrap_or(self.max)
            .min(self.max);
        self.entries.insert(
            key.to_owned(),
            Entry {
                delay,
                since: failed_at,
            },
        );
    }

    /// The current wait of `key`, if it has one.
    pub fn delay(&self, key: &str) -> Option<Duration> {
        self.entries.get(key).map(|e| e.delay)
    }

    /// Forgets `key` (its pod is gone, or its image is present).
    pub fn reset(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Forgets every key starting with `prefix` (all of a pod's containers).
    pub fn reset_prefix(&mut self, prefix: &str) {
        self.entries.retain(|k, _| !k.starts_with(prefix));
    }

    /// Forgets keys whose last failure is older than twice the maximum.
    pub fn gc(&mut self, now: I) {
        let limit = self.max * 2;
        self.entries.retain(|_, e| since(now, e.since) <= limit);
    }

    /// How many keys are backing off.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is backing off.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn crash_loop_waits_0_10_20_40_then_caps_at_300() {
        let mut b: Backoff = Backoff::default();
        let t0 = Instant::now();
        let mut failed = t0;
        let mut waits = Vec::new();
        for _ in 0..8 {
            let at = b.retry_at("c", failed, failed).unwrap_or(failed);
            waits.push((at - failed).as_secs());
            // Restarted at `at`; it crashes one second later.
            b.next("c", failed);
            failed = at + S(1);
        }
        assert_eq!(waits, [0, 10, 20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn a_retry_before_the_wait_is_refused_with_its_time() {
        let mut b: Backoff = Backoff::default();
        let t0 = Instant::now();
        b.next("c", t0);
        let crashed = t0 + S(2);
        assert_eq!(
            b.retry_at("c", crashed, crashed + S(3)),
            Some(crashed + S(10))
        );
        assert_eq!(b.retry_at("c", crashed, crashed + S(10)), None);
        assert_eq!(b.retry_at("other", crashed, crashed), None);
    }

    #[test]
    fn ten_minutes_of_running_well_resets_it() {
        let mut b: Backoff = Backoff::default();
        let t0 = Instant::now();
        b.next("c", t0);
        b.next("c", t0 + S(20));
        assert_eq!(b.delay("c"), Some(S(20)));
        // Ran for more than 600 s before failing again: back to the start.
        let failed = t0 + S(20) + S(601);
        assert_eq!(b.retry_at("c", failed, failed), None);
        b.next("c", failed);
        assert_eq!(b.delay("c"), Some(S(10)));
        b.gc(failed + S(601));
        assert!(b.is_empty());
    }

    #[test]
    fn a_restarted_agent_takes_up_the_back_off_from_the_restart_count() {
        let mut b: Backoff = Backoff::default();
        let failed = Instant::now();
        b.seed("c", failed, 0);
        assert_eq!(
            b.retry_at("c", failed, failed),
            None,
            "never restarted: at once"
        );
        b.seed("c", failed, 3);
        assert_eq!(b.retry_at("c", failed, failed), Some(failed + S(40)));
        b.seed("c", failed, 9);
        assert_eq!(b.delay("c"), Some(S(40)), "a known key is kept");
        b.seed("d", failed, 30);
        assert_eq!(b.delay("d"), Some(CRASH_MAX));
    }

    #[test]
    fn prefixes_reset_a_pods_keys() {
        let mut b: Backoff = Backoff::default();
        let now = Instant::now();
        b.next("uid1/a", now);
        b.next("uid1/b", now);
        b.next("uid2/a", now);
        b.reset_prefix("uid1/");
        assert_eq!(b.len(), 1);
        b.reset("uid2/a");
        assert!(b.is_empty());
    }
}
