//! The pods' cgroups, as the kubelet makes them (`cgroupsPerQOS`): `kubepods` carrying
//! node allocatable, the `burstable` and `besteffort` tiers, and a cgroup per pod in
//! its QoS class's tier with the pod's CPU shares, CFS quota, memory limit and
//! `podPidsLimit` ([`values`]), named as the driver names them ([`tree`]) and made in the
//! cgroup filesystem ([`fs`]) or through systemd ([`systemd`]).
//!
//! The pod's cgroup is made before its sandbox, whose `cgroup_parent` it is: the runtime
//! (runc) makes its container cgroups below it. Pods that an earlier wasmlet started in
//! `<cgroupRoot>/wasmlet/pod<uid>` keep running there and are removed from there; new
//! sandboxes go into the tree. Housekeeping removes the cgroups of pods that are gone,
//! in both places.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;

use k8s_openapi::api::core::v1 as k8s;

pub mod fs;
mod private_bus;
pub mod systemd;
pub use wasmlet_core::cgroups::{hugetlb, tree, values};

use fs::CgroupFs;
use systemd::{Systemd, SystemdError};
use tree::{CgroupName, Driver, Qos};
use values::{Max, Settings};

/// Where wasmlet before the QoS tree put pods, under `cgroupRoot`.
pub const LEGACY_PARENT: &str = "wasmlet";

/// A reservation enforced on its own cgroup (`enforceNodeAllocatable: [system-reserved]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservedCgroup {
    /// The field that names the cgroup, for errors (`systemReservedCgroup`).
    pub field: &'static str,
    /// The cgroup as the driver names it (`/system.slice`).
    pub cgroup: String,
    /// CPU in millicores.
    pub cpu_milli: u64,
    /// Memory in bytes.
    pub memory: u64,
}

/// Why the tree could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// The configuration asks for what this node cannot do (a reserved cgroup that does
    /// not exist, systemd unreachable under the systemd driver): the kubelet refuses to
    /// start.
    #[error("{0}")]
    Refused(String),
    /// This process cannot make cgroups here (no cgroup filesystem, not root).
    #[error("{0}")]
    Unavailable(String),
}

/// A pod's cgroup (or its QoS tier) that could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// systemd refused the slice or its properties.
    #[error(transparent)]
    Systemd(#[from] SystemdError),
    /// Writing the cgroup filesystem failed.
    #[error(transparent)]
    Write(#[from] std::io::Error),
}

/// How the tree is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    /// `cgroupDriver`.
    pub driver: Driver,
    /// `cgroupRoot`.
    pub cgroup_root: String,
    /// `podPidsLimit`.
    pub pids_limit: Option<u64>,
    /// The node's CPU (millicores) and memory.
    pub capacity: (u64, u64),
    /// `kubeReserved` plus `systemReserved`: CPU (millicores) and memory.
    pub reserved: (u64, u64),
    /// `pods` in `enforceNodeAllocatable`: `kubepods` carries the capacity less
    /// `reserved` (else the capacity).
    pub enforce_pods: bool,
    /// Reservations enforced on cgroups of their own.
    pub reserved_cgroups: Vec<ReservedCgroup>,
    /// `kubepods`' pids limit: the node's pid capacity ([`values::node_pid_capacity`]),
    /// less the `pid` reservations when `pods` is enforced. `None`: not known, no limit.
    pub kubepods_pids: Option<u64>,
    /// The machine's huge page sizes: `kubepods` and the tiers are unbounded in each,
    /// each pod gets what it asks for.
    pub hugepages: Vec<hugetlb::PageSize>,
    /// The node's CPUs (`/sys/devices/system/cpu/online`, `0-3`): `kubepods`' cpuset on
    /// cgroup v2, as the kubelet writes it with the `none` CPU manager policy.
    pub cpus: Option<String>,
}

/// The node's pod cgroups.
#[derive(Debug)]
pub struct PodCgroups {
    fs: CgroupFs,
    driver: Driver,
    systemd: Option<Systemd>,
    kubepods: CgroupName,
    /// `<cgroupRoot>/wasmlet` (cgroupfs form): pods of an earlier wasmlet.
    legacy: String,
    pids_limit: Option<u64>,
    /// The machine's huge page sizes (each pod's cgroup gets a limit for each).
    hugepage_sizes: Vec<hugetlb::PageSize>,
    /// The Burstable pods' CPU requests (millicores) by UID: the burstable tier's shares.
    burstable: Mutex<BTreeMap<String, u64>>,
    /// The burstable tier's shares as last written.
    burstable_shares: tokio::sync::Mutex<Option<u64>>,
    /// Where each pod's cgroup is (cgroupfs path), once known.
    places: Mutex<HashMap<String, String>>,
    /// The pods that made their cgroup here and have not had it removed: each claims
    /// its UID before its cgroup is made. Held while housekeeping judges a cgroup an
    /// orphan and removes it ([`PodCgroups::remove_orphan`]): a pod that starts while
    /// its UID's old cgroup is being removed waits for the removal, then makes its own.
    claims: tokio::sync::Mutex<HashSet<String>>,
    /// When [`PodCgroups::reconcile`] last went through the pods.
    reconciled: Mutex<Option<std::time::Instant>>,
}

impl wasmlet_core::criconfig::CgroupParent for PodCgroups {
    fn cgroup_parent(&self, pod: &k8s::Pod) -> String {
        PodCgroups::cgroup_parent(self, pod)
    }
}

/// How often the tiers are recomputed from every pod (the kubelet's periodic QoS update):
/// between times the pods' own starts and removals keep them.
pub const RECONCILE_PERIOD: std::time::Duration = std::time::Duration::from_secs(60);

impl PodCgroups {
    /// Makes the tree on `fs` as `setup` says: `kubepods` (with allocatable), the tiers,
    /// the reserved cgroups' limits (which must exist). Under the systemd driver systemd
    /// must answer on D-Bus. The error names what failed.
    pub async fn start(fs: CgroupFs, setup: Setup) -> Result<PodCgroups, StartError> {
        let systemd = match setup.driver {
            Driver::Systemd => Some(Systemd::connect().await.map_err(|e| {
                StartError::Refused(format!("cgroupDriver: systemd: cannot reach systemd over D-Bus ({e}); use cgroupDriver cgroupfs where systemd does not run"))
            })?),
            Driver::Cgroupfs => None,
        };
        Self::with(fs, setup, systemd).await
    }

    /// The tree `wasmlet run` makes with the kubelet's defaults (the cgroupfs driver,
    /// root `/`, nothing reserved; no pids limit on `kubepods`) on `/sys/fs/cgroup`, for
    /// a node of `cpus` CPUs and `memory` bytes: for benchmarks and tools.
    pub async fn node_default(cpus: u64, memory: u64) -> Result<PodCgroups, StartError> {
        let fs = CgroupFs::detect(std::path::Path::new("/sys/fs/cgroup"))
            .map_err(|e| StartError::Unavailable(e.to_string()))?;
        let setup = Setup {
            driver: Driver::Cgroupfs,
            cgroup_root: "/".into(),
            pids_limit: None,
            capacity: (cpus.saturating_mul(1000), memory),
            reserved: (0, 0),
            enforce_pods: true,
            reserved_cgroups: Vec::new(),
            kubepods_pids: None,
            hugepages: Vec::new(),
            cpus: None,
        };
        Self::with(fs, setup, None).await
    }

    /// [`PodCgroups::start`] with systemd reached over a connection of the caller's.
    pub async fn with(
        fs: CgroupFs,
        setup: Setup,
        systemd: Option<Systemd>,
    ) -> Result<PodCgroups, StartError> {
        let legacy = CgroupName::parse(Driver::Cgroupfs, &setup.cgroup_root)
            .child(LEGACY_PARENT)
            .to_cgroupfs();
        let cgroups = PodCgroups {
            fs,
            driver: setup.driver,
            systemd,
            kubepods: CgroupName::kubepods_in(setup.driver, &setup.cgroup_root),
            legacy,
            pids_limit: setup.pids_limit,
            hugepage_sizes: setup.hugepages.clone(),
            burstable: Mutex::default(),
            burstable_shares: tokio::sync::Mutex::default(),
            places: Mutex::default(),
            claims: tokio::sync::Mutex::default(),
            reconciled: Mutex::default(),
        };
        cgroups.make_tree(&setup).await?;
        Ok(cgroups)
    }

    async fn make_tree(&self, setup: &Setup) -> Result<(), StartError> {
        let (shares, memory) = values::kubepods(
            setup.capacity.0,
            setup.capacity.1,
            setup.reserved.0,
            setup.reserved.1,
            setup.enforce_pods,
        );
        let shares = Settings {
            cpu_shares: Some(shares),
            pids: setup.kubepods_pids.map(Max::Of),
            // Unbounded, as the tiers: `kubepods` is also the Guaranteed tier, which the
            // kubelet's QoS update sets so (over node allocatable's pages) within its
            // first minute and at every pod start.
            hugetlb: hugetlb::all_at(&self.hugepage_sizes, hugetlb::UNBOUNDED),
            cpuset: setup.cpus.clone().filter(|_| self.fs.v2()),
            ..Settings::default()
        };
        self.apply(&self.kubepods, &shares).await.map_err(|e| {
            StartError::Unavailable(format!("making {}: {e}", self.name(&self.kubepods)))
        })?;
        for line in self.skipped_limits(setup) {
            tracing::warn!("{line}");
        }
        // A limit below what the pods already use is refused by the kernel (an upgrade
        // with a larger reservation): said, and the pods keep running, as with the
        // kubelet (which retries; so does the next start).
        let limit = Settings {
            memory: Some(Max::from_option((memory > 0).then_some(memory))),
            ..Settings::default()
        };
        if let Err(e) = self.apply(&self.kubepods, &limit).await {
            tracing::warn!(
                cgroup = %self.name(&self.kubepods),
                "node allocatable memory not enforced: {e}"
            );
        }
        for (qos, shares) in [
            (Qos::Burstable, values::MIN_SHARES),
            (Qos::BestEffort, values::BESTEFFORT_SHARES),
        ] {
            let tier = self.kubepods.tier(qos);
            let settings = Settings {
                cpu_shares: Some(shares),
                hugetlb: hugetlb::all_at(&self.hugepage_sizes, hugetlb::UNBOUNDED),
                ..Settings::default()
            };
            self.apply(&tier, &settings).await.map_err(|e| {
                StartError::Unavailable(format!("making {}: {e}", self.name(&tier)))
            })?;
        }
        *self.burstable_shares.lock().await = Some(values::MIN_SHARES);
        for r in &setup.reserved_cgroups {
            self.enforce_reserved(r).map_err(StartError::Refused)?;
        }
        Ok(())
    }

    /// One line for each optional controller the tree is made without (said once, at
    /// start): the hierarchy, why, and the limits that are not applied. A controller
    /// with nothing to apply here (no huge page sizes; no pid limit, or systemd writing
    /// it) is only logged at debug.
    pub fn skipped_limits(&self, setup: &Setup) -> Vec<String> {
        let kubepods = self.name(&self.kubepods);
        let mut lines = Vec::new();
        for s in self.fs.skipped_at(&kubepods) {
            let limits = match s.controller {
                fs::HUGETLB if !self.hugepage_sizes.is_empty() => {
                    let sizes: Vec<String> = self
                        .hugepage_sizes
                        .iter()
                        .map(|p| p.cgroup_name())
                        .collect();
                    format!(
                        "the huge page limits ({}) of {kubepods}, its QoS tiers and every pod are not applied",
                        sizes.join(", ")
                    )
                }
                fs::PIDS
                    if self.systemd.is_none()
                        && (setup.pids_limit.is_some() || setup.kubepods_pids.is_some()) =>
                {
                    format!("podPidsLimit and the pid limit of {kubepods} are not applied")
                }
                _ => {
                    tracing::debug!(controller = s.controller, path = %s.path.display(), why = %s.why, "cgroup controller skipped: nothing of it to apply");
                    continue;
                }
            };
            lines.push(format!(
                "cgroup controller {} skipped ({}: {}): {limits}",
                s.controller,
                s.path.display(),
                s.why
            ));
        }
        lines
    }

    /// Limits an existing reserved cgroup, as the kubelet: one that does not exist is an
    /// error naming its field.
    fn enforce_reserved(&self, r: &ReservedCgroup) -> Result<(), String> {
        let path = CgroupName::parse(self.driver, &r.cgroup).to_driver(self.driver);
        if !self.fs.exists(&path) {
            return Err(format!(
                "{}: {:?}: the cgroup does not exist (the kubelet enforces reservations on existing cgroups only)",
                r.field, r.cgroup
            ));
        }
        let settings = Settings {
            cpu_shares: Some(values::milli_cpu_to_shares(r.cpu_milli)),
            memory: Some(Max::from_option((r.memory > 0).then_some(r.memory))),
            ..Settings::default()
        };
        self.fs
            .write(&path, &settings)
            .map_err(|e| format!("{}: {:?}: {e}", r.field, r.cgroup))
    }

    /// `kubepods`' path in the cgroup filesystem (the Summary's `pods` container).
    pub fn root_cgroup(&self) -> String {
        self.name(&self.kubepods)
    }

    /// The path of `name` in the cgroup filesystem (systemd's slices are directories
    /// named as their expanded slice path).
    fn name(&self, name: &CgroupName) -> String {
        name.to_driver(self.driver)
    }

    /// Pod `pod`'s cgroup in the tree.
    fn pod_name(&self, pod: &k8s::Pod) -> (CgroupName, Qos) {
        let qos = Qos::from_class(wasmlet_core::status::qos_class(pod));
        (self.kubepods.pod(qos, wasmlet_core::pod::uid(pod)), qos)
    }

    /// The sandbox's `cgroup_parent` for `pod`, as the driver names it
    /// (`/kubepods/burstable/pod<uid>`, `/kubepods.slice/kubepods-burstable.slice/…`).
    pub fn cgroup_parent(&self, pod: &k8s::Pod) -> String {
        self.name(&self.pod_name(pod).0)
    }

    /// Makes `pod`'s cgroup with its limits (before its sandbox), the burstable tier's
    /// shares first brought up to date for a Burstable pod. Idempotent.
    pub async fn ensure(&self, pod: &k8s::Pod) -> Result<(), CgroupError> {
        let (name, qos) = self.pod_name(pod);
        let resources = values::pod_resources(pod, qos);
        let uid = wasmlet_core::pod::uid(pod).to_owned();
        self.claims.lock().await.insert(uid.clone());
        lock(&self.places).insert(uid.clone(), self.name(&name));
        if qos == Qos::Burstable {
            lock(&self.burstable).insert(uid, resources.cpu_request_milli);
            self.update_burstable().await?;
        }
        let pages = values::pod_hugetlb(pod, &self.hugepage_sizes);
        self.apply(&name, &resources.settings(self.pids_limit, pages))
            .await
    }

    /// Writes one resource of `pod`'s cgroup as its spec now asks (an in-place resize:
    /// `cpu` the shares and quota, else the memory limit), the burstable tier's shares
    /// with the CPU. The pod's cgroup must exist.
    pub async fn resize(&self, pod: &k8s::Pod, cpu: bool) -> Result<(), CgroupError> {
        let (name, qos) = self.pod_name(pod);
        let all = values::pod_resources(pod, qos).settings(self.pids_limit, Vec::new());
        let settings = if cpu {
            if qos == Qos::Burstable {
                let request = values::pod_resources(pod, qos).cpu_request_milli;
                lock(&self.burstable).insert(wasmlet_core::pod::uid(pod).to_owned(), request);
                self.update_burstable().await?;
            }
            Settings {
                cpu_shares: all.cpu_shares,
                cpu_quota: all.cpu_quota,
                ..Settings::default()
            }
        } else {
            Settings {
                memory: all.memory,
                ..Settings::default()
            }
        };
        self.apply(&name, &settings).await
    }

    /// Writes the burstable tier's shares when its pods' requests changed them. One
    /// update at a time, the sum taken under the written value's lock: two pods starting
    /// together cannot leave the first one's smaller sum written last.
    async fn update_burstable(&self) -> Result<(), CgroupError> {
        let mut written = self.burstable_shares.lock().await;
        let shares = values::milli_cpu_to_shares(lock(&self.burstable).values().sum());
        if *written == Some(shares) {
            return Ok(());
        }
        let tier = self.kubepods.tier(Qos::Burstable);
        let settings = Settings {
            cpu_shares: Some(shares),
            ..Settings::default()
        };
        self.apply(&tier, &settings).await?;
        *written = Some(shares);
        Ok(())
    }

    /// The tiers as the active `pods` make them (the kubelet's periodic update): the
    /// burstable tier's shares from the Burstable pods among them. Goes through the
    /// pods at most once a [`RECONCILE_PERIOD`]: housekeeping calls it every pass.
    pub async fn reconcile(&self, pods: &[std::sync::Arc<k8s::Pod>]) -> Result<(), CgroupError> {
        {
            let mut last = lock(&self.reconciled);
            if last.is_some_and(|t| t.elapsed() < RECONCILE_PERIOD) {
                return Ok(());
            }
            *last = Some(std::time::Instant::now());
        }
        let burstable: BTreeMap<String, u64> = pods
            .iter()
            .filter(|p| Qos::from_class(wasmlet_core::status::qos_class(p)) == Qos::Burstable)
            .map(|p| {
                let r = values::pod_resources(p, Qos::Burstable);
                (wasmlet_core::pod::uid(p).to_owned(), r.cpu_request_milli)
            })
            .collect();
        *lock(&self.burstable) = burstable;
        self.update_burstable().await
    }

    /// Makes `name` with `settings` through the driver.
    async fn apply(&self, name: &CgroupName, settings: &Settings) -> Result<(), CgroupError> {
        match &self.systemd {
            Some(sd) => {
                sd.ensure(name, settings, self.fs.v2()).await?;
                // What systemd has no property for, runc writes into the slice itself
                // after enabling every controller above it (systemd enables only its
                // own: not hugetlb): so does the agent.
                Ok(self.fs.write_unmanaged(&self.name(name), settings)?)
            }
            None => Ok(self.fs.apply(&name.to_cgroupfs(), settings)?),
        }
    }

    /// Every place pod `uid`'s cgroup can be: its tier's (any class: a pod's class can
    /// only be known from its spec) and the legacy one.
    fn places_of(&self, uid: &str) -> Vec<(Option<CgroupName>, String)> {
        let mut places: Vec<(Option<CgroupName>, String)> =
            [Qos::Guaranteed, Qos::Burstable, Qos::BestEffort]
                .into_iter()
                .map(|q| {
                    let name = self.kubepods.pod(q, uid);
                    let path = self.name(&name);
                    (Some(name), path)
                })
                .collect();
        places.push((None, format!("{}/pod{uid}", self.legacy)));
        places
    }

    /// Removes pod `uid`'s cgroup wherever it is (after its sandboxes are removed). What
    /// still holds processes stays: returns those directories.
    pub async fn remove(&self, uid: &str) -> Vec<PathBuf> {
        self.claims.lock().await.remove(uid);
        self.remove_cgroup(uid).await
    }

    /// Removes pod `uid`'s cgroup as [`PodCgroups::remove`] does, unless a pod has
    /// claimed it since housekeeping judged it an orphan (`None`): a static pod's UID is
    /// its manifest's, so a pod written again after it went (or found again after a
    /// restart) starts with its old UID while the old cgroup may still be there.
    pub async fn remove_orphan(&self, uid: &str) -> Option<Vec<PathBuf>> {
        let claims = self.claims.lock().await;
        if claims.contains(uid) {
            return None;
        }
        let left = self.remove_cgroup(uid).await;
        drop(claims);
        Some(left)
    }

    async fn remove_cgroup(&self, uid: &str) -> Vec<PathBuf> {
        let mut left = Vec::new();
        for (name, path) in self.places_of(uid) {
            if let (Some(sd), Some(name)) = (&self.systemd, &name)
                && self.fs.exists(&path)
                && let Err(e) = sd.stop(name).await
            {
                tracing::debug!(%uid, error = %e, "pod slice not stopped");
            }
            left.extend(self.fs.remove(&path));
        }
        lock(&self.places).remove(uid);
        let was_burstable = lock(&self.burstable).remove(uid).is_some();
        if was_burstable && let Err(e) = self.update_burstable().await {
            tracing::warn!(error = %e, "burstable tier not updated");
        }
        left
    }

    /// The UIDs of the pods that have a cgroup here, in the tree or the legacy place
    /// (for housekeeping).
    pub fn pods(&self) -> Vec<String> {
        let mut uids: Vec<String> = Vec::new();
        for qos in [Qos::Guaranteed, Qos::Burstable, Qos::BestEffort] {
            let tier = self.kubepods.tier(qos);
            // A pod's directory name with an empty UID: what comes before the UID.
            let empty = self.name(&self.kubepods.pod(qos, ""));
            let prefix = empty.rsplit('/').next().unwrap_or_default();
            let (prefix, suffix) = match self.driver {
                Driver::Cgroupfs => (prefix, ""),
                Driver::Systemd => (prefix.strip_suffix(".slice").unwrap_or(prefix), ".slice"),
            };
            uids.extend(
                self.fs
                    .children(&self.name(&tier))
                    .into_iter()
                    .filter_map(|c| {
                        let uid = c.strip_prefix(prefix)?.strip_suffix(suffix)?;
                        (!uid.is_empty()).then(|| match self.driver {
                            Driver::Systemd => uid.replace('_', "-"),
                            Driver::Cgroupfs => uid.to_owned(),
                        })
                    }),
            );
        }
        uids.extend(
            self.fs
                .children(&self.legacy)
                .into_iter()
                .filter_map(|c| c.strip_prefix("pod").map(str::to_owned)),
        );
        uids.sort();
        uids.dedup();
        uids
    }

    /// Where pod `uid`'s cgroup is in the cgroup filesystem, if it has one (for stats).
    pub fn pod_cgroup(&self, uid: &str) -> Option<String> {
        if let Some(path) = lock(&self.places).get(uid) {
            return Some(path.clone());
        }
        let found = self
            .places_of(uid)
            .into_iter()
            .map(|(_, path)| path)
            .find(|path| self.fs.exists(path))?;
        lock(&self.places).insert(uid.to_owned(), found.clone());
        Some(found)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
