//! Huge pages in the cgroup tree, as the kubelet limits them: every huge page size the
//! machine offers (`/sys/kernel/mm/hugepages/hugepages-<N>kB`) gets a limit in each pod's
//! cgroup and in each container's configuration — what the pod or container asks for
//! as `hugepages-<size>`, and 0 for every size it does not — so that a pod uses no huge
//! pages it did not ask for. The QoS tiers are left unbounded (2⁶²), `kubepods` holds
//! the node's allocatable huge pages.
//!
//! Sizes are named as runc names them in the cgroup files (`hugetlb.2MB.max`,
//! `hugetlb.1GB.limit_in_bytes`): powers of 1024 with `KB`, `MB`, `GB`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity::{BINARY_SUFFIXES, binary_scaled, parse_quantity};

/// What the QoS tiers are set to: unbounded, as the kubelet writes it.
pub const UNBOUNDED: u64 = 1 << 62;

/// One huge page size of the machine.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PageSize {
    /// Bytes per page.
    pub bytes: u64,
}

impl PageSize {
    /// From a sysfs directory name, `hugepages-2048kB`.
    pub fn from_sysfs(dir_name: &str) -> Option<PageSize> {
        let kb: u64 = dir_name
            .strip_prefix("hugepages-")?
            .strip_suffix("kB")?
            .parse()
            .ok()?;
        (kb > 0).then(|| PageSize { bytes: kb * 1024 })
    }

    /// The name in cgroup files: `2MB`, `1GB`, `64KB`.
    pub fn cgroup_name(&self) -> String {
        let (value, power) = binary_scaled(self.bytes);
        format!("{value}{}", ["B", "KB", "MB", "GB", "TB", "PB"][power])
    }

    /// The resource a pod asks for these pages by: `hugepages-2Mi`, `hugepages-1Gi`.
    pub fn resource_name(&self) -> String {
        let (value, power) = binary_scaled(self.bytes);
        format!("hugepages-{value}{}", BINARY_SUFFIXES[power])
    }
}

/// The machine's huge page sizes from the names under `/sys/kernel/mm/hugepages`,
/// smallest first.
pub fn page_sizes<'a>(dir_names: impl IntoIterator<Item = &'a str>) -> Vec<PageSize> {
    let mut sizes: Vec<PageSize> = dir_names
        .into_iter()
        .filter_map(PageSize::from_sysfs)
        .collect();
    sizes.sort();
    sizes.dedup();
    sizes
}

/// The limit of each of `sizes` from `amounts` (requests or limits of `hugepages-*`):
/// what is asked for, 0 for a size not asked for. Pairs of the cgroup name and bytes.
pub fn limits(
    sizes: &[PageSize],
    amounts: Option<&BTreeMap<String, Quantity>>,
) -> Vec<(String, u64)> {
    sizes
        .iter()
        .map(|size| {
            let asked = amounts
                .and_then(|a| a.get(&size.resource_name()))
                .and_then(|q| parse_quantity(&q.0, 0).ok())
                .unwrap_or(0);
            (size.cgroup_name(), asked)
        })
        .collect()
}

/// Every size at `value`.
pub fn all_at(sizes: &[PageSize], value: u64) -> Vec<(String, u64)> {
    sizes.iter().map(|s| (s.cgroup_name(), value)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_named_as_runc_and_the_api_name_them() {
        let sizes = page_sizes(["hugepages-1048576kB", "hugepages-2048kB", "other"]);
        let names: Vec<(String, String)> = sizes
            .iter()
            .map(|s| (s.cgroup_name(), s.resource_name()))
            .collect();
        assert_eq!(
            names,
            [
                ("2MB".to_owned(), "hugepages-2Mi".to_owned()),
                ("1GB".to_owned(), "hugepages-1Gi".to_owned())
            ]
        );
        assert_eq!(
            PageSize::from_sysfs("hugepages-64kB").map(|s| s.cgroup_name()),
            Some("64KB".to_owned())
        );
    }

    #[test]
    fn a_size_not_asked_for_is_limited_to_nothing() {
        let sizes = page_sizes(["hugepages-2048kB", "hugepages-1048576kB"]);
        let asked = BTreeMap::from([("hugepages-2Mi".to_owned(), Quantity("8Mi".into()))]);
        assert_eq!(
            limits(&sizes, Some(&asked)),
            [("2MB".to_owned(), 8 << 20), ("1GB".to_owned(), 0)]
        );
        assert_eq!(
            limits(&sizes, None),
            [("2MB".to_owned(), 0), ("1GB".to_owned(), 0)]
        );
        assert_eq!(
            all_at(&sizes[..1], UNBOUNDED),
            [("2MB".to_owned(), 1 << 62)]
        );
    }
}
