//! The pods' cgroups as values: the kubelet's tree by name ([`tree`]) and what a pod's or
//! a tier's cgroup is set to ([`values`]). The agent makes them, in the cgroup
//! filesystem or through systemd.

pub mod hugetlb;
pub mod tree;
pub mod values;
