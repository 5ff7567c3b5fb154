//! Time as the API prints it and as the runtime reports it (Unix seconds and
//! nanoseconds in, RFC 3339 out, and back). The clock itself is the agent's.

/// A CRI timestamp (Unix nanoseconds) in RFC 3339; `None` for 0 (unset).
pub fn nanos_rfc3339(nanos: i64) -> Option<String> {
    (nanos > 0).then(|| rfc3339(nanos / 1_000_000_000))
}

/// An RFC 3339 timestamp as Unix seconds (`None` if it is not one).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    wasmlet_cri_api::time::parse_time(s.as_bytes()).map(|n| n.div_euclid(1_000_000_000))
}

/// Unix seconds as `2026-11-22T10:00:00Z`.
pub fn rfc3339(unix_secs: i64) -> String {
    wasmlet_cri_api::time::rfc3339_secs(unix_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

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
