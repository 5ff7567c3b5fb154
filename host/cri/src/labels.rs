//! Small helpers shared by CRI clients and servers.

use std::collections::BTreeMap;

/// Whether `labels` satisfy a CRI label selector: every selector pair present with the
/// same value (the CRI supports only equality, ANDed).
pub fn selector_matches(
    selector: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Current wall-clock time in Unix nanoseconds, the CRI's timestamp unit.
pub fn unix_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Unix seconds as `2026-11-22T10:00:00` (UTC, no zone): the civil date from days
/// since the epoch (Howard Hinnant's algorithm).
fn date_time(unix_secs: i64) -> String {
    let days = unix_secs.div_euclid(86_400);
    let rem = unix_secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Unix seconds as the API prints times: `2026-11-22T10:00:00Z`.
pub fn rfc3339_secs(unix_secs: i64) -> String {
    format!("{}Z", date_time(unix_secs))
}

/// Unix nanoseconds as a CRI log record's timestamp (and the kubelet's
/// `timestamps=true` prefix): `2026-11-22T10:00:00.000000042Z`, UTC, nine digits.
pub fn rfc3339_nanos(nanos: i64) -> String {
    format!(
        "{}.{:09}Z",
        date_time(nanos.div_euclid(1_000_000_000)),
        nanos.rem_euclid(1_000_000_000)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selector_is_an_and_of_equalities() {
        let labels = map(&[("app", "web"), ("tier", "front")]);
        assert!(selector_matches(&map(&[]), &labels));
        assert!(selector_matches(&map(&[("app", "web")]), &labels));
        assert!(selector_matches(
            &map(&[("app", "web"), ("tier", "front")]),
            &labels
        ));
        assert!(!selector_matches(&map(&[("app", "db")]), &labels));
        assert!(!selector_matches(
            &map(&[("app", "web"), ("zone", "a")]),
            &labels
        ));
    }

    #[test]
    fn times_print_as_rfc3339() {
        assert_eq!(rfc3339_secs(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_secs(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_nanos(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            rfc3339_nanos(1_700_000_000_123_456_789),
            "2023-11-14T22:13:20.123456789Z"
        );
        assert_eq!(rfc3339_nanos(-1), "1969-12-31T23:59:59.999999999Z");
    }
}
