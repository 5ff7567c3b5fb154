//! computePodActions: from a pod's spec and what the runtime has for it, what to do —
//! create a sandbox, run the next init container, start, restart or kill containers,
//! or stop the whole pod. Pure: the sync applies the result through the CRI.

use k8s_openapi::api::core::v1 as k8s;

use crate::pod;
use crate::runtime::{ContainerInfo, PodRuntime, State, hash_matches};

/// Why a running container is killed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kill {
    /// The container's runtime id.
    pub id: String,
    /// Its name in the spec.
    pub name: String,
    /// Why, the kubelet's wording (`Container web failed liveness probe, will be
    /// restarted`).
    pub message: String,
    /// The failed probe's own `terminationGracePeriodSeconds`, which the kubelet uses
    /// instead of the pod's for a liveness or startup kill.
    pub grace: Option<i64>,
}

/// What a sync does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodActions {
    /// Stop every container and the sandbox first (the sandbox changed, or nothing is
    /// left to run).
    pub kill_pod: bool,
    /// Create a new sandbox (after killing the pod if it had one).
    pub create_sandbox: bool,
    /// The sandbox to use (the current one, or the one being replaced).
    pub sandbox_id: Option<String>,
    /// The new sandbox's attempt number.
    pub attempt: u32,
    /// The init container to run next (index into `spec.initContainers`).
    pub next_init: Option<usize>,
    /// App containers to start (indexes into `spec.containers`).
    pub start: Vec<usize>,
    /// Ephemeral containers to start (indexes into `spec.ephemeralContainers`): those
    /// that never ran; they are never restarted.
    pub ephemeral: Vec<usize>,
    /// Running containers to kill.
    pub kill: Vec<Kill>,
}

impl PodActions {
    /// Whether the pod has nothing left to run and will not restart anything: stop it.
    pub fn pod_finished(&self) -> bool {
        self.kill_pod && !self.create_sandbox
    }
}

/// Which probe failed for a running container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeFailure {
    /// Its liveness probe.
    Liveness,
    /// Its startup probe.
    Startup,
}

fn restart_on_failure(pod: &k8s::Pod) -> bool {
    pod::restart_policy(pod) != "Never"
}

fn init_failed(c: &ContainerInfo) -> bool {
    match c.state {
        State::Exited => c.exit_code != 0,
        State::Unknown => true,
        State::Created | State::Running => false,
    }
}

/// Whether `container` should be (re)started, the kubelet's `ShouldContainerBeRestarted`.
pub fn should_restart(container: &k8s::Container, pod: &k8s::Pod, rt: &PodRuntime) -> bool {
    let Some(status) = rt.latest(&container.name) else {
        return true;
    };
    match status.state {
        State::Running => false,
        State::Unknown | State::Created => true,
        State::Exited => match pod::restart_policy(pod) {
            "Never" => false,
            "OnFailure" => status.exit_code != 0,
            _ => true,
        },
    }
}

/// Whether the sandbox must be (re)created: `(create, attempt, sandbox id)`.
fn sandbox_changed(pod: &k8s::Pod, rt: &PodRuntime) -> (bool, u32, Option<String>) {
    let Some(latest) = rt.sandbox() else {
        return (true, 0, None);
    };
    let ready = rt.sandboxes.iter().filter(|s| s.ready).count();
    let next = latest.attempt + 1;
    let id = Some(latest.id.clone());
    if ready > 1 || !latest.ready {
        return (true, next, id);
    }
    let host = pod::host_network(pod);
    if latest.host_network != host {
        return (true, next, id);
    }
    if !host && latest.ips.is_empty() {
        return (true, next, id);
    }
    (false, latest.attempt, id)
}

/// The kubelet's `findNextInitContainerToRun`: `(failed init status, next, done)`.
fn next_init<'a>(
    pod: &k8s::Pod,
    rt: &'a PodRuntime,
) -> (Option<&'a ContainerInfo>, Option<usize>, bool) {
    let inits = pod::init_containers(pod);
    if inits.is_empty() {
        return (None, None, true);
    }
    // An app container that runs means initialization finished.
    if pod::containers(pod).iter().any(|c| {
        rt.latest(&c.name)
            .is_some_and(|s| s.state == State::Running)
    }) {
        return (None, None, true);
    }
    for (i, c) in inits.iter().enumerate().rev() {
        if let Some(s) = rt.latest(&c.name)
            && init_failed(s)
        {
            return (Some(s), Some(i), false);
        }
    }
    for (i, c) in inits.iter().enumerate().rev() {
        let Some(s) = rt.latest(&c.name) else {
            continue;
        };
        match s.state {
            State::Running | State::Created => return (None, None, false),
            State::Exited if i + 1 == inits.len() => return (None, None, true),
            State::Exited => return (None, Some(i + 1), false),
            State::Unknown => {}
        }
    }
    (None, Some(0), false)
}

/// Whether every init container has completed successfully.
pub fn initialized(pod: &k8s::Pod, rt: &PodRuntime) -> bool {
    next_init(pod, rt).2
}

/// computePodActions. `probe` says which probe, if any, failed for a running container
/// (by runtime id).
pub fn compute(
    pod: &k8s::Pod,
    rt: &PodRuntime,
    probe: &dyn Fn(&str) -> Option<ProbeFailure>,
) -> PodActions {
    let (create, attempt, sandbox_id) = sandbox_changed(pod, rt);
    let mut actions = PodActions {
        kill_pod: create,
        create_sandbox: create,
        sandbox_id,
        attempt,
        ..Default::default()
    };
    if create {
        return new_sandbox(pod, rt, actions);
    }

    // Ephemeral containers start in the running sandbox, initialized or not, once.
    actions.ephemeral = pod
        .spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_deref())
        .unwrap_or(&[])
        .iter()
        .enumerate()
        .filter(|(_, c)| rt.latest(&c.name).is_none())
        .map(|(i, _)| i)
        .collect();

    let (failed, next, done) = next_init(pod, rt);
    if !done {
        if let Some(next) = next {
            if failed.is_some() && !restart_on_failure(pod) {
                actions.kill_pod = true;
            } else {
                actions.next_init = Some(next);
            }
        }
        return actions;
    }

    let mut keep = 0;
    for (i, c) in pod::containers(pod).iter().enumerate() {
        let status = rt.latest(&c.name);
        let Some(status) = status.filter(|s| s.state == State::Running) else {
            if should_restart(c, pod, rt) {
                if let Some(s) = status.filter(|s| s.state == State::Unknown) {
                    actions.kill.push(Kill {
                        id: s.id.clone(),
                        name: c.name.clone(),
                        message: format!("Container {} is in an unknown state", c.name),
                        grace: None,
                    });
                }
                actions.start.push(i);
            }
            continue;
        };
        match running(pod, c, status, probe) {
            Some((kill, restart)) => {
                if restart {
                    actions.start.push(i);
                }
                actions.kill.push(kill);
            }
            None => keep += 1,
        }
    }
    if keep == 0 && actions.start.is_empty() {
        actions.kill_pod = true;
    }
    actions
}

/// The actions in a new sandbox: none for a pod that must not restart and has run
/// before (it is finished), else the first init container or the app containers that
/// are to run.
fn new_sandbox(pod: &k8s::Pod, rt: &PodRuntime, mut actions: PodActions) -> PodActions {
    if !restart_on_failure(pod) && actions.attempt != 0 && !rt.containers.is_empty() {
        actions.create_sandbox = false;
        return actions;
    }
    let start: Vec<usize> = pod::containers(pod)
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            !(pod::restart_policy(pod) == "OnFailure"
                && rt
                    .latest(&c.name)
                    .is_some_and(|s| s.state == State::Exited && s.exit_code == 0))
        })
        .map(|(i, _)| i)
        .collect();
    if start.is_empty() && next_init(pod, rt).2 {
        actions.create_sandbox = false;
        return actions;
    }
    if !pod::init_containers(pod).is_empty() {
        actions.next_init = Some(0);
        return actions;
    }
    actions.start = start;
    actions
}

/// A running container to kill — its definition changed, or a liveness or startup
/// probe failed (with the probe's own grace period) — and whether it restarts; `None`
/// when it keeps running.
fn running(
    pod: &k8s::Pod,
    c: &k8s::Container,
    status: &ContainerInfo,
    probe: &dyn Fn(&str) -> Option<ProbeFailure>,
) -> Option<(Kill, bool)> {
    let own_grace =
        |p: &Option<k8s::Probe>| p.as_ref().and_then(|p| p.termination_grace_period_seconds);
    let changed = !status.hash.is_empty() && !hash_matches(&status.hash, c);
    let (message, grace) = if changed {
        (format!("Container {} definition changed", c.name), None)
    } else {
        match probe(&status.id)? {
            ProbeFailure::Liveness => (
                format!("Container {} failed liveness probe", c.name),
                own_grace(&c.liveness_probe),
            ),
            ProbeFailure::Startup => (
                format!("Container {} failed startup probe", c.name),
                own_grace(&c.startup_probe),
            ),
        }
    };
    let restart = changed || restart_on_failure(pod);
    let message = if restart {
        format!("{message}, will be restarted")
    } else {
        message
    };
    let kill = Kill {
        id: status.id.clone(),
        name: c.name.clone(),
        message,
        grace,
    };
    Some((kill, restart))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Sandbox;

    fn pod(policy: &str, inits: &[&str], apps: &[&str]) -> k8s::Pod {
        let c = |n: &&str| k8s::Container {
            name: (*n).into(),
            image: Some("i".into()),
            ..Default::default()
        };
        k8s::Pod {
            spec: Some(k8s::PodSpec {
                restart_policy: Some(policy.into()),
                init_containers: (!inits.is_empty()).then(|| inits.iter().map(c).collect()),
                containers: apps.iter().map(c).collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn sandbox(ready: bool) -> Sandbox {
        Sandbox {
            id: "s1".into(),
            attempt: 0,
            ready,
            created_at: 1,
            ips: vec!["10.88.0.2".into()],
            host_network: false,
        }
    }

    struct Rt(PodRuntime);

    impl Rt {
        fn new(ready: bool) -> Self {
            Rt(PodRuntime {
                sandboxes: vec![sandbox(ready)],
                ..Default::default()
            })
        }
        fn with(mut self, pod: &k8s::Pod, name: &str, state: State, exit: i32) -> Self {
            let spec = pod::containers(pod)
                .iter()
                .chain(pod::init_containers(pod))
                .find(|c| c.name == name)
                .expect("container in spec");
            let n = self.0.containers.len() as i64 + 10;
            self.0.containers.push(ContainerInfo {
                id: format!("{name}-{n}"),
                sandbox_id: "s1".into(),
                name: name.into(),
                state,
                created_at: n,
                started_at: n,
                finished_at: 0,
                exit_code: exit,
                reason: String::new(),
                message: String::new(),
                image: "i".into(),
                image_ref: String::new(),
                hash: crate::runtime::container_hash(spec),
                restart_count: 0,
                init: false,
                detailed: true,
            });
            self.0.sort();
            self
        }
    }

    fn no_probe(_: &str) -> Option<ProbeFailure> {
        None
    }

    #[test]
    fn a_new_pod_gets_a_sandbox_and_all_its_containers() {
        let p = pod("Always", &[], &["a", "b"]);
        let a = compute(&p, &PodRuntime::default(), &no_probe);
        assert!(a.create_sandbox && a.kill_pod);
        assert_eq!(a.attempt, 0);
        assert_eq!(a.start, [0, 1]);
    }

    #[test]
    fn init_containers_run_one_at_a_time_in_order() {
        let p = pod("Always", &["i1", "i2"], &["app"]);
        let a = compute(&p, &PodRuntime::default(), &no_probe);
        assert_eq!(
            (a.create_sandbox, a.next_init, a.start.len()),
            (true, Some(0), 0)
        );
        let rt = Rt::new(true).with(&p, "i1", State::Running, 0);
        let a = compute(&p, &rt.0, &no_probe);
        assert_eq!((a.next_init, a.start.len(), a.kill_pod), (None, 0, false));
        let rt = Rt::new(true).with(&p, "i1", State::Exited, 0);
        assert_eq!(compute(&p, &rt.0, &no_probe).next_init, Some(1));
        let rt = rt.with(&p, "i2", State::Exited, 0);
        let a = compute(&p, &rt.0, &no_probe);
        assert_eq!((a.next_init, a.start.clone()), (None, vec![0]));
        assert!(initialized(&p, &rt.0));
    }

    #[test]
    fn a_failed_init_container_restarts_unless_never() {
        let p = pod("Always", &["i1"], &["app"]);
        let rt = Rt::new(true).with(&p, "i1", State::Exited, 1);
        let a = compute(&p, &rt.0, &no_probe);
        assert_eq!((a.next_init, a.kill_pod), (Some(0), false));
        let p = pod("Never", &["i1"], &["app"]);
        let rt = Rt::new(true).with(&p, "i1", State::Exited, 1);
        let a = compute(&p, &rt.0, &no_probe);
        assert!(a.kill_pod && a.pod_finished());
    }

    #[test]
    fn exited_containers_follow_the_restart_policy() {
        for (policy, exit, restarts) in [
            ("Always", 0, true),
            ("Always", 1, true),
            ("OnFailure", 0, false),
            ("OnFailure", 2, true),
            ("Never", 0, false),
            ("Never", 2, false),
        ] {
            let p = pod(policy, &[], &["a", "b"]);
            let rt =
                Rt::new(true)
                    .with(&p, "a", State::Exited, exit)
                    .with(&p, "b", State::Running, 0);
            let a = compute(&p, &rt.0, &no_probe);
            assert_eq!(a.start == [0], restarts, "{policy} exit {exit}");
            assert!(!a.kill_pod, "b still runs");
        }
    }

    #[test]
    fn all_done_and_nothing_to_restart_finishes_the_pod() {
        let p = pod("OnFailure", &[], &["a"]);
        let rt = Rt::new(true).with(&p, "a", State::Exited, 0);
        let a = compute(&p, &rt.0, &no_probe);
        assert!(a.pod_finished(), "{a:?}");
        // Its sandbox gone too: still finished, no new sandbox.
        let rt = Rt::new(false).with(&p, "a", State::Exited, 0);
        let mut rt = rt.0;
        rt.sandboxes[0].attempt = 0;
        let a = compute(&p, &rt, &no_probe);
        assert!(!a.create_sandbox, "{a:?}");
    }

    #[test]
    fn a_dead_sandbox_is_replaced_and_the_pod_restarted() {
        let p = pod("Always", &[], &["a"]);
        let rt = Rt::new(false).with(&p, "a", State::Exited, 137);
        let a = compute(&p, &rt.0, &no_probe);
        assert!(a.kill_pod && a.create_sandbox);
        assert_eq!((a.attempt, a.start.clone()), (1, vec![0]));
        assert_eq!(a.sandbox_id.as_deref(), Some("s1"));
        // With Never, a pod that ran is not brought back.
        let p = pod("Never", &[], &["a"]);
        let rt = Rt::new(false).with(&p, "a", State::Exited, 137);
        let a = compute(&p, &rt.0, &no_probe);
        assert!(a.pod_finished());
        // A sandbox without an IP on the pod network is replaced too.
        let p = pod("Always", &[], &["a"]);
        let mut rt = Rt::new(true).with(&p, "a", State::Running, 0).0;
        rt.sandboxes[0].ips.clear();
        assert!(compute(&p, &rt, &no_probe).create_sandbox);
    }

    #[test]
    fn liveness_failure_and_spec_change_kill_and_restart() {
        let p = pod("Always", &[], &["a", "b"]);
        let rt = Rt::new(true)
            .with(&p, "a", State::Running, 0)
            .with(&p, "b", State::Running, 0);
        let a_id = rt.0.latest("a").expect("a").id.clone();
        let probe = |id: &str| (id == a_id).then_some(ProbeFailure::Liveness);
        let a = compute(&p, &rt.0, &probe);
        assert_eq!(a.start, [0]);
        assert_eq!(
            a.kill[0].message,
            "Container a failed liveness probe, will be restarted"
        );
        assert_eq!(a.kill[0].grace, None, "the pod's grace period");
        assert!(!a.kill_pod);
        // A probe with a grace period of its own: the kill uses it.
        let mut own = p.clone();
        if let Some(s) = own.spec.as_mut() {
            s.containers[0].liveness_probe = Some(k8s::Probe {
                termination_grace_period_seconds: Some(10),
                ..Default::default()
            });
        }
        let rt_own = Rt::new(true).with(&own, "a", State::Running, 0);
        let own_id = rt_own.0.latest("a").expect("a").id.clone();
        let a = compute(&own, &rt_own.0, &|id: &str| {
            (id == own_id).then_some(ProbeFailure::Liveness)
        });
        assert_eq!(a.kill[0].grace, Some(10));

        let never = pod("Never", &[], &["a"]);
        let rt = Rt::new(true).with(&never, "a", State::Running, 0);
        let id = rt.0.latest("a").expect("a").id.clone();
        let a = compute(&never, &rt.0, &|c: &str| {
            (c == id).then_some(ProbeFailure::Startup)
        });
        assert_eq!(a.kill[0].message, "Container a failed startup probe");
        assert!(a.start.is_empty() && a.kill_pod);

        let mut changed = p.clone();
        if let Some(s) = changed.spec.as_mut() {
            s.containers[1].image = Some("j".into());
        }
        let a = compute(&changed, &rt_for(&p), &no_probe);
        assert_eq!(a.start, [1]);
        assert_eq!(
            a.kill[0].message,
            "Container b definition changed, will be restarted"
        );
    }

    fn rt_for(p: &k8s::Pod) -> PodRuntime {
        Rt::new(true)
            .with(p, "a", State::Running, 0)
            .with(p, "b", State::Running, 0)
            .0
    }

    #[test]
    fn a_running_pod_needs_nothing() {
        let p = pod("Always", &["i"], &["a"]);
        let rt = Rt::new(true)
            .with(&p, "i", State::Exited, 0)
            .with(&p, "a", State::Running, 0);
        assert_eq!(
            compute(&p, &rt.0, &no_probe),
            PodActions {
                sandbox_id: Some("s1".into()),
                ..Default::default()
            }
        );
    }
}
