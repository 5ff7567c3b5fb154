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

fn failed_if(yes: bool, failure: ProbeFailure) -> Probed {
    if yes {
        Probed::failed(failure)
    } else {
        Probed::default()
    }
}

fn no_probe(_: &str) -> Probed {
    Probed::default()
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
        (a.create_sandbox, a.init.clone(), a.start.len()),
        (true, vec![0], 0)
    );
    let rt = Rt::new(true).with(&p, "i1", State::Running, 0);
    let a = compute(&p, &rt.0, &no_probe);
    assert_eq!(
        (a.init.clone(), a.start.len(), a.kill_pod),
        (vec![], 0, false)
    );
    let rt = Rt::new(true).with(&p, "i1", State::Exited, 0);
    assert_eq!(compute(&p, &rt.0, &no_probe).init, [1]);
    let rt = rt.with(&p, "i2", State::Exited, 0);
    let a = compute(&p, &rt.0, &no_probe);
    assert_eq!((a.init.clone(), a.start.clone()), (vec![], vec![0]));
}

#[test]
fn a_failed_init_container_restarts_unless_never() {
    let p = pod("Always", &["i1"], &["app"]);
    let rt = Rt::new(true).with(&p, "i1", State::Exited, 1);
    let a = compute(&p, &rt.0, &no_probe);
    assert_eq!((a.init.clone(), a.kill_pod), (vec![0], false));
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
        let rt = Rt::new(true)
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
    let probe = |id: &str| failed_if(id == a_id, ProbeFailure::Liveness);
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
        failed_if(id == own_id, ProbeFailure::Liveness)
    });
    assert_eq!(a.kill[0].grace, Some(10));

    let never = pod("Never", &[], &["a"]);
    let rt = Rt::new(true).with(&never, "a", State::Running, 0);
    let id = rt.0.latest("a").expect("a").id.clone();
    let a = compute(&never, &rt.0, &|c: &str| {
        failed_if(c == id, ProbeFailure::Startup)
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

/// `p` with init container `name` a sidecar (`restartPolicy: Always`), with a startup
/// probe when `startup`.
fn sidecar(mut p: k8s::Pod, name: &str, startup: bool) -> k8s::Pod {
    let spec = p.spec.as_mut().expect("spec");
    for c in spec.init_containers.iter_mut().flatten() {
        if c.name == name {
            c.restart_policy = Some("Always".into());
            c.startup_probe = startup.then(k8s::Probe::default);
            c.liveness_probe = Some(k8s::Probe::default());
        }
    }
    p
}

fn started(_: &str) -> Probed {
    Probed {
        failure: None,
        started: true,
    }
}

#[test]
fn a_sidecar_lets_the_next_init_container_start_once_it_runs_and_keeps_running() {
    let p = sidecar(pod("Never", &["s", "i"], &["a"]), "s", false);
    let a = compute(&p, &PodRuntime::default(), &no_probe);
    assert_eq!((a.create_sandbox, a.init.clone()), (true, vec![0]));
    let rt = Rt::new(true).with(&p, "s", State::Running, 0);
    let a = compute(&p, &rt.0, &no_probe);
    assert_eq!((a.init.clone(), a.start.clone()), (vec![1], vec![]));
    let rt = rt.with(&p, "i", State::Exited, 0);
    let a = compute(&p, &rt.0, &no_probe);
    assert_eq!((a.init.clone(), a.start.clone()), (vec![], vec![0]));
    // A sidecar last among the init containers: the apps start once it runs.
    let p = sidecar(pod("Never", &["i", "s"], &["a"]), "s", false);
    let rt = Rt::new(true)
        .with(&p, "i", State::Exited, 0)
        .with(&p, "s", State::Running, 0);
    let a = compute(&p, &rt.0, &no_probe);
    assert_eq!((a.init.clone(), a.start.clone()), (vec![], vec![0]));
}

#[test]
fn a_sidecar_with_a_startup_probe_holds_the_next_one_until_started() {
    let p = sidecar(pod("Always", &["s", "i"], &["a"]), "s", true);
    let rt = Rt::new(true).with(&p, "s", State::Running, 0);
    let a = compute(&p, &rt.0, &no_probe);
    assert_eq!((a.init.clone(), a.kill.len()), (vec![], 0), "{a:?}");
    assert_eq!(compute(&p, &rt.0, &started).init, [1]);
    // A startup probe failed for good: killed and started again.
    let a = compute(&p, &rt.0, &|_| Probed::failed(ProbeFailure::Startup));
    assert_eq!(a.init, [0]);
    assert_eq!(a.kill[0].message, "Init container s failed startup probe");
}

#[test]
fn a_sidecar_restarts_whatever_the_pod_restart_policy() {
    for policy in ["Never", "OnFailure", "Always"] {
        let p = sidecar(pod(policy, &["s"], &["a"]), "s", false);
        for exit in [0, 1] {
            let rt =
                Rt::new(true)
                    .with(&p, "s", State::Exited, exit)
                    .with(&p, "a", State::Running, 0);
            let a = compute(&p, &rt.0, &no_probe);
            assert_eq!((a.init.clone(), a.kill_pod), (vec![0], false), "{policy}");
            assert!(a.start.is_empty(), "{policy}: the app runs");
        }
    }
    // Gone from the runtime after initialization: started again.
    let p = sidecar(pod("Never", &["s"], &["a"]), "s", false);
    let rt = Rt::new(true).with(&p, "a", State::Running, 0);
    assert_eq!(compute(&p, &rt.0, &no_probe).init, [0]);
}

#[test]
fn a_running_sidecar_is_replaced_on_liveness_failure_or_a_changed_definition() {
    let p = sidecar(pod("Never", &["s"], &["a"]), "s", false);
    let rt = Rt::new(true)
        .with(&p, "s", State::Running, 0)
        .with(&p, "a", State::Running, 0);
    let s_id = rt.0.latest("s").expect("s").id.clone();
    let a = compute(&p, &rt.0, &|id: &str| {
        failed_if(id == s_id, ProbeFailure::Liveness)
    });
    assert_eq!((a.init.clone(), a.start.clone()), (vec![0], vec![]));
    assert_eq!(a.kill[0].message, "Init container s failed liveness probe");
    let mut changed = p.clone();
    if let Some(s) = changed.spec.as_mut() {
        s.init_containers.as_mut().expect("inits")[0].image = Some("j".into());
    }
    let a = compute(&changed, &rt.0, &no_probe);
    assert_eq!(a.init, [0]);
    assert_eq!(a.kill[0].message, "Init container s definition changed");
    assert!(
        compute(&p, &rt.0, &no_probe).init.is_empty(),
        "kept running"
    );
}

#[test]
fn the_pod_ends_when_its_apps_are_done_whatever_its_sidecars_do() {
    let p = sidecar(pod("Never", &["s"], &["a"]), "s", false);
    let rt = Rt::new(true)
        .with(&p, "s", State::Running, 0)
        .with(&p, "a", State::Exited, 0);
    let a = compute(&p, &rt.0, &no_probe);
    assert!(a.pod_finished(), "{a:?}");
    assert!(a.init.is_empty(), "the sidecar is not restarted: {a:?}");
    // A failed regular init container under Never fails the pod, sidecar or not.
    let p = sidecar(pod("Never", &["s", "i"], &["a"]), "s", false);
    let rt = Rt::new(true)
        .with(&p, "s", State::Running, 0)
        .with(&p, "i", State::Exited, 1);
    let a = compute(&p, &rt.0, &no_probe);
    assert!(a.kill_pod && a.init.is_empty(), "{a:?}");
}

#[test]
fn a_new_sandbox_for_a_pod_that_ran_starts_from_the_first_init_container() {
    let p = sidecar(pod("Always", &["s", "i"], &["a"]), "s", false);
    let rt = Rt::new(false)
        .with(&p, "s", State::Exited, 137)
        .with(&p, "i", State::Exited, 0)
        .with(&p, "a", State::Exited, 137);
    let a = compute(&p, &rt.0, &no_probe);
    assert!(a.create_sandbox && a.kill_pod, "{a:?}");
    assert_eq!((a.init.clone(), a.start.clone()), (vec![0], vec![]));
}
