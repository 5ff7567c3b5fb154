//! Graceful node shutdown (`shutdownGracePeriod`, `shutdownGracePeriodCriticalPods`,
//! `shutdownGracePeriodByPodPriority`): the priority groups the node's pods stop by, checked
//! as the kubelet checks them.

use std::time::Duration;

use anyhow::{Result, bail};
use wasmlet_shutdown::Group;
use wasmlet_shutdown::plan;

use super::file::File;

/// Graceful node shutdown as configured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shutdown {
    /// `shutdownGracePeriod`.
    pub grace: Duration,
    /// `shutdownGracePeriodCriticalPods`.
    pub critical: Duration,
    /// The priority groups (from the two periods, or `shutdownGracePeriodByPodPriority`);
    /// empty: graceful node shutdown is off.
    pub groups: Vec<Group>,
}

impl Shutdown {
    /// Whether the groups were given as `shutdownGracePeriodByPodPriority` (groups with
    /// no `shutdownGracePeriod`: the two are never given together).
    pub fn by_priority(&self) -> bool {
        !self.groups.is_empty() && self.grace.is_zero()
    }
}

/// The fields, checked.
pub(super) fn section(f: &mut File) -> Result<Shutdown> {
    Ok(Shutdown {
        grace: f.shutdown_grace_period.0,
        critical: f.shutdown_grace_period_critical_pods.0,
        groups: groups(f)?,
    })
}

/// The groups the fields ask for; none when graceful node shutdown is off.
fn groups(f: &mut File) -> Result<Vec<Group>> {
    let grace = f.shutdown_grace_period.0;
    let critical = f.shutdown_grace_period_critical_pods.0;
    let by_priority = std::mem::take(&mut f.shutdown_grace_period_by_pod_priority);
    if critical > grace {
        bail!(
            "shutdownGracePeriodCriticalPods: {critical:?} must be at most shutdownGracePeriod ({grace:?})"
        );
    }
    if by_priority.is_empty() {
        return Ok(plan::migrate(grace, critical));
    }
    if !grace.is_zero() || !critical.is_zero() {
        bail!(
            "shutdownGracePeriodByPodPriority: cannot be given with shutdownGracePeriod or shutdownGracePeriodCriticalPods"
        );
    }
    by_priority
        .into_iter()
        .enumerate()
        .map(|(i, g)| {
            if g.shutdown_grace_period_seconds < 0 {
                bail!(
                    "shutdownGracePeriodByPodPriority[{i}].shutdownGracePeriodSeconds: {} must be >= 0",
                    g.shutdown_grace_period_seconds
                );
            }
            Ok(Group {
                priority: g.priority,
                grace_seconds: g.shutdown_grace_period_seconds,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn parse(text: &str) -> anyhow::Result<Config> {
        Config::parse(text, std::path::Path::new("/c.yaml"))
    }

    #[test]
    fn the_fields_become_the_kubelets_priority_groups() {
        let c = parse("shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n")
            .expect("valid");
        let priorities: Vec<(i32, i64)> = c
            .shutdown
            .groups
            .iter()
            .map(|g| (g.priority, g.grace_seconds))
            .collect();
        assert_eq!(priorities, [(0, 20), (2_000_000_000, 10)]);
        let z = c.configz("n", 1);
        assert_eq!(z["shutdownGracePeriod"], "30s");
        assert_eq!(z["shutdownGracePeriodCriticalPods"], "10s");
        let c = parse(
            "shutdownGracePeriodByPodPriority:\n- {priority: 100000, shutdownGracePeriodSeconds: 20}\n- {priority: 0, shutdownGracePeriodSeconds: 5}\n",
        )
        .expect("valid");
        assert_eq!(c.shutdown.groups.len(), 2);
        assert_eq!(
            c.configz("n", 1)["shutdownGracePeriodByPodPriority"][0]["shutdownGracePeriodSeconds"],
            20
        );
        // kubeadm's file: off.
        let c =
            parse("shutdownGracePeriod: 0s\nshutdownGracePeriodCriticalPods: 0s\n").expect("valid");
        assert!(c.shutdown.groups.is_empty());
    }

    #[test]
    fn what_the_kubelet_refuses_is_refused_naming_the_field() {
        let e = parse("shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 20s\n")
            .expect_err("critical above the period");
        assert!(
            format!("{e:#}").contains("shutdownGracePeriodCriticalPods"),
            "{e:#}"
        );
        let e = parse(
            "shutdownGracePeriod: 10s\nshutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 5}]\n",
        )
        .expect_err("both");
        assert!(
            format!("{e:#}").contains("shutdownGracePeriodByPodPriority"),
            "{e:#}"
        );
        let e = parse(
            "shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: -1}]\n",
        )
        .expect_err("negative");
        assert!(
            format!("{e:#}")
                .contains("shutdownGracePeriodByPodPriority[0].shutdownGracePeriodSeconds"),
            "{e:#}"
        );
    }
}
