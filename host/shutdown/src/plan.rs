//! Which pods stop when, and with what grace period: the kubelet's priority groups.
//!
//! `shutdownGracePeriod` and `shutdownGracePeriodCriticalPods` are two groups: every pod
//! below the system-critical priority gets the difference, critical pods the rest.
//! `shutdownGracePeriodByPodPriority` gives the groups directly. A pod belongs to the group
//! of the highest priority not above its own (the lowest group when it is below all);
//! groups stop one after another from the lowest priority up, and a pod's grace period is
//! its group's, or its own `terminationGracePeriodSeconds` when that is shorter.

use std::time::Duration;

/// The priority of a pod without one (`DefaultPriorityWhenNoDefaultClassExists`).
pub const DEFAULT_PRIORITY: i32 = 0;

/// `system-cluster-critical`'s priority (`SystemCriticalPriority`: twice the highest a
/// user may define).
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// Pods from this priority up stop together, within this many seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// The lowest priority of the group.
    pub priority: i32,
    /// How long its pods have.
    pub grace_seconds: i64,
}

/// A pod as the plan sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    /// Its UID.
    pub uid: String,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
    /// `spec.terminationGracePeriodSeconds`, when set.
    pub grace_seconds: Option<i64>,
}

/// The groups of `shutdownGracePeriod` and `shutdownGracePeriodCriticalPods` (the
/// kubelet's migration of the two fields): none when the period is zero or shorter than
/// the critical pods' share.
pub fn migrate(grace: Duration, critical: Duration) -> Vec<Group> {
    if grace.is_zero() || critical > grace {
        return Vec::new();
    }
    let seconds = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    vec![
        Group {
            priority: DEFAULT_PRIORITY,
            grace_seconds: seconds(grace - critical),
        },
        Group {
            priority: SYSTEM_CRITICAL_PRIORITY,
            grace_seconds: seconds(critical),
        },
    ]
}

/// How long a shutdown may be held back: every group's period together.
pub fn requested(groups: &[Group]) -> Duration {
    Duration::from_secs(
        groups
            .iter()
            .map(|g| u64::try_from(g.grace_seconds).unwrap_or(0))
            .sum(),
    )
}

/// The groups in the order they stop (lowest priority first), each with its pods and
/// their grace periods (seconds). Empty groups are kept: they take no time.
pub fn assign(groups: &[Group], pods: &[PodInfo]) -> Vec<(Group, Vec<(String, i64)>)> {
    let mut sorted = groups.to_vec();
    sorted.sort_by_key(|g| g.priority);
    let mut out: Vec<(Group, Vec<(String, i64)>)> =
        sorted.iter().map(|g| (*g, Vec::new())).collect();
    if out.is_empty() {
        return out;
    }
    for pod in pods {
        let index = sorted
            .iter()
            .rposition(|g| g.priority <= pod.priority)
            .unwrap_or(0);
        let group = &mut out[index];
        let grace = match pod.grace_seconds {
            Some(own) if own <= group.0.grace_seconds => own,
            _ => group.0.grace_seconds,
        };
        group.1.push((pod.uid.clone(), grace));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, priority: i32, grace: Option<i64>) -> PodInfo {
        PodInfo {
            uid: uid.into(),
            priority,
            grace_seconds: grace,
        }
    }

    #[test]
    fn the_two_periods_are_a_regular_and_a_critical_group() {
        let groups = migrate(Duration::from_secs(30), Duration::from_secs(10));
        assert_eq!(
            groups,
            [
                Group {
                    priority: 0,
                    grace_seconds: 20
                },
                Group {
                    priority: SYSTEM_CRITICAL_PRIORITY,
                    grace_seconds: 10
                }
            ]
        );
        assert_eq!(requested(&groups), Duration::from_secs(30));
        assert!(migrate(Duration::ZERO, Duration::ZERO).is_empty());
        assert!(migrate(Duration::from_secs(5), Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn each_pod_goes_to_the_highest_group_not_above_it_with_the_shorter_grace() {
        let groups = [
            Group {
                priority: 100_000,
                grace_seconds: 20,
            },
            Group {
                priority: SYSTEM_CRITICAL_PRIORITY,
                grace_seconds: 10,
            },
            Group {
                priority: 0,
                grace_seconds: 30,
            },
        ];
        let pods = [
            pod("none", 0, None),
            pod("low", -5, Some(60)),
            pod("quick", 10, Some(3)),
            pod("mid", 100_000, None),
            pod("mid-plus", 150_000, None),
            pod("critical", SYSTEM_CRITICAL_PRIORITY + 1000, None),
        ];
        let plan = assign(&groups, &pods);
        let order: Vec<i32> = plan.iter().map(|(g, _)| g.priority).collect();
        assert_eq!(order, [0, 100_000, SYSTEM_CRITICAL_PRIORITY]);
        let uids = |i: usize| -> Vec<(&str, i64)> {
            plan[i].1.iter().map(|(u, g)| (u.as_str(), *g)).collect()
        };
        assert_eq!(uids(0), [("none", 30), ("low", 30), ("quick", 3)]);
        assert_eq!(uids(1), [("mid", 20), ("mid-plus", 20)]);
        assert_eq!(uids(2), [("critical", 10)]);
    }

    #[test]
    fn without_groups_nothing_is_planned() {
        assert!(assign(&[], &[pod("a", 0, None)]).is_empty());
    }
}
