//! `wasmlet-stats`: what the node has left, measured and acted on.
//!
//! - [`cgroup`] and [`node`] read the counters: cgroup v1 and v2 CPU, memory and
//!   processes; the node's memory, CPU, filesystems, processes and network.
//! - [`collect`] takes one sample of the node and its pods ([`Collector`]) into the
//!   kubelet's stats [`Summary`] ([`summary`]), from the cgroups and
//!   the CRI; [`agent`] is the seam that lists the agent's pods for it.
//! - [`metrics`] renders a sample as `/metrics/resource` and `/metrics/cadvisor`.
//! - [`eviction`] is the kubelet's eviction manager: thresholds, pressure conditions,
//!   ranking, one eviction per period; [`eviction::run`] the housekeeping loop that
//!   samples and acts.
//! - [`imagegc`] removes unused images when the image filesystem fills.
//!
//! [`Stats`] holds the latest sample; [`Stats::spawn`] samples on the housekeeping
//! period (the kubelet's is 10 s), and everything that reads usage — the kubelet
//! server's endpoints, the eviction manager — reads that one sample.

pub mod agent;
pub mod cgroup;
pub mod collect;
mod error;
pub mod eviction;
pub mod files;
pub mod imagegc;
pub mod images;
pub mod latest;
pub mod metrics;
pub mod node;
pub mod summary;

pub use collect::{
    Collector, CollectorSettings, ContainerRef, PodInfo, PodLister, PodMeta, Sample,
    SystemContainer,
};
pub use error::FieldError;
pub use latest::{DEFAULT_PERIOD, Stats};
pub use summary::Summary;

#[cfg(test)]
pub(crate) mod testutil {
    use std::path::{Path, PathBuf};

    /// A temporary directory removed when dropped.
    pub(crate) struct TempDir(PathBuf);

    impl TempDir {
        pub(crate) fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub(crate) fn tempdir() -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "wasmlet-stats-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("tempdir");
        TempDir(p)
    }
}
