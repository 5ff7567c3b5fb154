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
}
