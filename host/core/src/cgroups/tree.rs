//! The kubelet's cgroup tree by name (`cgroupsPerQOS`): all pods under `kubepods`,
//! Guaranteed pods directly in it, Burstable and BestEffort pods under
//! `kubepods/burstable` and `kubepods/besteffort`, each pod in `pod<uid>` — written as
//! cgroupfs paths (`/kubepods/burstable/pod<uid>`) or as systemd slices
//! (`/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid, '-' as '_'>.slice`),
//! as the driver (`cgroupDriver`) says. The CRI's `cgroup_parent` is that name; containerd
//! with `SystemdCgroup = true` takes the last slice of it.

/// `cgroupDriver`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// Paths in the cgroup filesystem.
    Cgroupfs,
    /// systemd slices.
    Systemd,
}

/// A pod's QoS class, and so its tier of the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Qos {
    /// Every container limits cpu and memory, requests equal limits: directly in
    /// `kubepods`.
    Guaranteed,
    /// Something requested or limited, not Guaranteed: `kubepods/burstable`.
    Burstable,
    /// Nothing requested or limited: `kubepods/besteffort`.
    BestEffort,
}

impl Qos {
    /// From the pod status's class name (`Guaranteed`, `Burstable`, `BestEffort`).
    pub fn from_class(class: &str) -> Qos {
        match class {
            "Guaranteed" => Qos::Guaranteed,
            "BestEffort" => Qos::BestEffort,
            _ => Qos::Burstable,
        }
    }

    /// The tier's name under `kubepods` (none for Guaranteed).
    fn tier(self) -> Option<&'static str> {
        match self {
            Qos::Guaranteed => None,
            Qos::Burstable => Some("burstable"),
            Qos::BestEffort => Some("besteffort"),
        }
    }
}

/// A cgroup as the kubelet names it: its components from the root (`["kubepods",
/// "burstable", "pod1234"]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CgroupName(Vec<String>);

impl CgroupName {
    /// A cgroup as `driver` writes it, as the kubelet parses one: a cgroupfs path's
    /// components, or a slice path's last slice split at `-` with `_` read back as `-`
    /// (`/wasmlet.slice` → `wasmlet`); `/` and `-.slice` are the root.
    pub fn parse(driver: Driver, path: &str) -> CgroupName {
        let parts = match driver {
            Driver::Cgroupfs => path
                .split('/')
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect(),
            Driver::Systemd => {
                let last = path.trim_end_matches('/').rsplit('/').next();
                match last.and_then(|l| l.strip_suffix(".slice")) {
                    Some(stem) if stem != "-" => {
                        stem.split('-').map(|p| p.replace('_', "-")).collect()
                    }
                    _ => Vec::new(),
                }
            }
        };
        CgroupName(parts)
    }

    /// `kubepods` under `cgroupRoot` (`/` or a cgroupfs path such as `/nodes/a`).
    pub fn kubepods(cgroup_root: &str) -> CgroupName {
        CgroupName::kubepods_in(Driver::Cgroupfs, cgroup_root)
    }

    /// `kubepods` under `cgroupRoot` as `driver` writes it: a cgroupfs path, or a slice
    /// (`/wasmlet.slice` → `wasmlet-kubepods.slice`; `/` the root slice).
    pub fn kubepods_in(driver: Driver, cgroup_root: &str) -> CgroupName {
        CgroupName::parse(driver, cgroup_root).child("kubepods")
    }

    /// The cgroup `name` directly below this one.
    pub fn child(&self, name: &str) -> CgroupName {
        let mut parts = self.0.clone();
        parts.push(name.to_owned());
        CgroupName(parts)
    }

    /// The cgroup this one is in (the root's is the root).
    pub fn parent(&self) -> CgroupName {
        CgroupName(self.0[..self.0.len().saturating_sub(1)].to_vec())
    }

    /// The tier of `qos` (`kubepods` itself for Guaranteed).
    pub fn tier(&self, qos: Qos) -> CgroupName {
        let mut parts = self.0.clone();
        parts.extend(qos.tier().map(str::to_owned));
        CgroupName(parts)
    }

    /// Pod `uid`'s cgroup in its tier.
    pub fn pod(&self, qos: Qos, uid: &str) -> CgroupName {
        self.tier(qos).child(&format!("pod{uid}"))
    }

    /// The components.
    pub fn parts(&self) -> &[String] {
        &self.0
    }

    /// The name the driver uses: a cgroupfs path, or the systemd slice path.
    pub fn to_driver(&self, driver: Driver) -> String {
        match driver {
            Driver::Cgroupfs => self.to_cgroupfs(),
            Driver::Systemd => self.to_systemd(),
        }
    }

    /// `/kubepods/burstable/pod<uid>`.
    pub fn to_cgroupfs(&self) -> String {
        format!("/{}", self.0.join("/"))
    }

    /// The slice path systemd gives the unit `kubepods-burstable-pod<uid>.slice`, each
    /// component's `-` written `_`: `/kubepods.slice/kubepods-burstable.slice/…`.
    pub fn to_systemd(&self) -> String {
        if self.0.is_empty() {
            return "/".into();
        }
        let escaped: Vec<String> = self.0.iter().map(|p| p.replace('-', "_")).collect();
        let mut path = String::new();
        for i in 1..=escaped.len() {
            path.push('/');
            path.push_str(&escaped[..i].join("-"));
            path.push_str(".slice");
        }
        path
    }

    /// The systemd unit (the last slice): `kubepods-burstable-pod<uid>.slice`.
    pub fn systemd_unit(&self) -> String {
        let escaped: Vec<String> = self.0.iter().map(|p| p.replace('-', "_")).collect();
        format!("{}.slice", escaped.join("-"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "4b1e0c9a-6f2d-4c1b-9a3e-0f5d2c7b8e11";

    #[test]
    fn the_tree_is_the_kubelets_in_both_drivers() {
        let kubepods = CgroupName::kubepods("/");
        assert_eq!(kubepods.to_cgroupfs(), "/kubepods");
        assert_eq!(kubepods.to_systemd(), "/kubepods.slice");
        let g = kubepods.pod(Qos::Guaranteed, UID);
        assert_eq!(g.to_cgroupfs(), format!("/kubepods/pod{UID}"));
        assert_eq!(
            g.to_systemd(),
            "/kubepods.slice/kubepods-pod4b1e0c9a_6f2d_4c1b_9a3e_0f5d2c7b8e11.slice"
        );
        let b = kubepods.pod(Qos::Burstable, UID);
        assert_eq!(b.to_cgroupfs(), format!("/kubepods/burstable/pod{UID}"));
        assert_eq!(
            b.to_systemd(),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod4b1e0c9a_6f2d_4c1b_9a3e_0f5d2c7b8e11.slice"
        );
        assert_eq!(
            b.systemd_unit(),
            "kubepods-burstable-pod4b1e0c9a_6f2d_4c1b_9a3e_0f5d2c7b8e11.slice"
        );
        let e = kubepods.tier(Qos::BestEffort);
        assert_eq!(e.to_driver(Driver::Cgroupfs), "/kubepods/besteffort");
        assert_eq!(
            e.to_driver(Driver::Systemd),
            "/kubepods.slice/kubepods-besteffort.slice"
        );
        let rooted = CgroupName::kubepods("/nodes/a/");
        assert_eq!(
            rooted.pod(Qos::BestEffort, "x").to_cgroupfs(),
            "/nodes/a/kubepods/besteffort/podx"
        );
        let sliced = CgroupName::kubepods_in(Driver::Systemd, "/wasmlet.slice/");
        assert_eq!(sliced.to_systemd(), "/wasmlet.slice/wasmlet-kubepods.slice");
        assert_eq!(
            CgroupName::kubepods_in(Driver::Systemd, "/"),
            CgroupName::kubepods("/")
        );
        assert_eq!(
            CgroupName::kubepods_in(Driver::Cgroupfs, "/nodes/a"),
            rooted
        );
        assert_eq!(Qos::from_class("Burstable"), Qos::Burstable);
        assert_eq!(Qos::from_class("BestEffort"), Qos::BestEffort);
    }
}
