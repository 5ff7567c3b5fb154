//! Label selectors as the CRI defines them.

use std::collections::BTreeMap;

/// Whether `labels` satisfy a CRI label selector: every selector pair present with the
/// same value (the CRI supports only equality, ANDed).
pub fn selector_matches(
    selector: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
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
