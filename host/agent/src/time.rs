//! The agent's clock, and time as the API prints it ([`wasmlet_core::time`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

pub use wasmlet_core::time::*;

/// The agent's clock: wall time derived from the monotonic (tokio) clock from one
/// reading at start, so that CRI timestamps and back-off deadlines agree, and tests with
/// paused time see both advance together (the simulator keeps its timestamps the same
/// way).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    wall: i64,
    base: Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

impl Clock {
    /// A clock reading the system time now.
    pub fn new() -> Self {
        Clock {
            wall: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
                .unwrap_or(0),
            base: Instant::now(),
        }
    }

    /// Now in Unix nanoseconds, the CRI's unit.
    pub fn unix_nanos(&self) -> i64 {
        let since = Instant::now().saturating_duration_since(self.base);
        self.wall
            .saturating_add(i64::try_from(since.as_nanos()).unwrap_or(i64::MAX))
    }

    /// The instant at which the runtime's timestamp `at` (Unix nanoseconds) was.
    pub fn instant_of(&self, at: i64) -> Instant {
        let delta = at.saturating_sub(self.wall);
        if delta >= 0 {
            self.base + Duration::from_nanos(delta.unsigned_abs())
        } else {
            self.base
                .checked_sub(Duration::from_nanos(delta.unsigned_abs()))
                .unwrap_or(self.base)
        }
    }

    /// Now, as the API's RFC 3339 timestamps print it.
    pub fn now_rfc3339(&self) -> String {
        rfc3339(self.unix_nanos() / 1_000_000_000)
    }
}

/// Now (system time), as the API's RFC 3339 timestamps print it.
pub fn now_rfc3339() -> String {
    Clock::new().now_rfc3339()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_clock_maps_runtime_timestamps_to_instants() {
        let clock = Clock::new();
        let t0 = clock.unix_nanos();
        tokio::time::advance(Duration::from_secs(5)).await;
        let t5 = clock.unix_nanos();
        assert_eq!(t5 - t0, 5_000_000_000);
        assert_eq!(clock.instant_of(t5), Instant::now());
        assert_eq!(
            clock.instant_of(t0),
            Instant::now() - Duration::from_secs(5)
        );
    }
}
