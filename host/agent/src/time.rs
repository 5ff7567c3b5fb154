//! Time as the API prints it and as the runtime reports it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

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

/// A CRI timestamp (Unix nanoseconds) in RFC 3339; `None` for 0 (unset).
pub fn nanos_rfc3339(nanos: i64) -> Option<String> {
    (nanos > 0).then(|| rfc3339(nanos / 1_000_000_000))
}

/// An RFC 3339 timestamp as Unix seconds (`None` if it is not one).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    wasmlet_logs::parse::parse_time(s.as_bytes()).map(|n| n.div_euclid(1_000_000_000))
}

/// Unix seconds as `2026-11-22T10:00:00Z`.
pub fn rfc3339(unix_secs: i64) -> String {
    wasmlet_cri::labels::rfc3339_secs(unix_secs)
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

    #[test]
    fn timestamps_print_as_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_000_000), "2026-11-18T11:06:40Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(nanos_rfc3339(0), None);
        assert_eq!(parse_rfc3339("2026-11-18T11:06:40Z"), Some(1_795_000_000));
        assert_eq!(parse_rfc3339("yesterday"), None);
        assert_eq!(
            nanos_rfc3339(1_795_000_000_500_000_000).as_deref(),
            Some("2026-11-18T11:06:40Z")
        );
    }
}
