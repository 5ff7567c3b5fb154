//! Small helpers shared by CRI clients and servers: label selectors and times as the CRI
//! writes them (from `wasmlet-cri-api`, which has no clock), and the clock.

pub use wasmlet_cri_api::labels::selector_matches;
pub use wasmlet_cri_api::time::{parse_time, rfc3339_nanos, rfc3339_secs};

/// Current wall-clock time in Unix nanoseconds, the CRI's timestamp unit.
pub fn unix_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
