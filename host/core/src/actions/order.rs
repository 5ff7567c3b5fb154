//! The order a pod's containers stop in when it has sidecars (the kubelet 1.33's
//! terminationOrdering): app containers first, all at once; each sidecar after every
//! app container and after the sidecar declared after it — so sidecars stop in the
//! reverse of their start order. Every container runs its preStop hook at once; only
//! the stop itself waits for its turn, and never past the grace period.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as k8s;

use crate::pod;

/// For each of the `running` containers, the running containers that must have stopped
/// before it is stopped (empty for app containers, and for every container of a pod
/// without sidecars).
pub fn stop_after(pod: &k8s::Pod, running: &[&str]) -> BTreeMap<String, Vec<String>> {
    let is_running = |name: &str| running.contains(&name);
    let mut after: BTreeMap<String, Vec<String>> = running
        .iter()
        .map(|name| ((*name).to_owned(), Vec::new()))
        .collect();
    if !pod::has_sidecars(pod) {
        return after;
    }
    let apps: Vec<String> = pod::containers(pod)
        .iter()
        .map(|c| c.name.clone())
        .filter(|name| is_running(name))
        .collect();
    // The sidecar declared after this one, newest first as the kubelet walks them.
    let mut later: Option<&str> = None;
    for c in pod::init_containers(pod).iter().rev() {
        if !pod::is_restartable(c) {
            continue;
        }
        if let Some(waits) = after.get_mut(&c.name) {
            waits.extend(apps.iter().cloned());
            waits.extend(later.filter(|l| is_running(l)).map(str::to_owned));
        }
        later = Some(&c.name);
    }
    after
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(inits: &[(&str, bool)], apps: &[&str]) -> k8s::Pod {
        let c = |name: &str, sidecar: bool| k8s::Container {
            name: name.into(),
            restart_policy: sidecar.then(|| "Always".into()),
            ..Default::default()
        };
        k8s::Pod {
            spec: Some(k8s::PodSpec {
                init_containers: Some(inits.iter().map(|(n, s)| c(n, *s)).collect()),
                containers: apps.iter().map(|n| c(n, false)).collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn apps_stop_first_then_sidecars_in_reverse_order() {
        let p = pod(
            &[("s1", true), ("init", false), ("s2", true), ("s3", true)],
            &["a", "b"],
        );
        let after = stop_after(&p, &["a", "b", "s1", "s2", "s3"]);
        assert!(after["a"].is_empty() && after["b"].is_empty());
        assert_eq!(after["s3"], ["a", "b"]);
        assert_eq!(after["s2"], ["a", "b", "s3"]);
        assert_eq!(after["s1"], ["a", "b", "s2"]);
    }

    #[test]
    fn only_running_containers_are_waited_for() {
        let p = pod(&[("s1", true), ("s2", true)], &["a", "b"]);
        let after = stop_after(&p, &["b", "s1"]);
        assert_eq!(after["s1"], ["b"], "s2 does not run, a has ended");
        assert!(!after.contains_key("s2"));
        // No sidecars: no order.
        let p = pod(&[("init", false)], &["a", "b"]);
        assert!(stop_after(&p, &["a", "b"]).values().all(Vec::is_empty));
    }
}
