//! The pod status the kubelet would report, case by case.

use super::*;
use crate::runtime::Sandbox;

fn pod(policy: &str, inits: &[&str], apps: &[(&str, bool)]) -> k8s::Pod {
    let c = |n: &str, readiness: bool| k8s::Container {
        name: n.into(),
        image: Some("busybox".into()),
        readiness_probe: readiness.then(|| k8s::Probe {
            tcp_socket: Some(Default::default()),
            ..Default::default()
        }),
        ..Default::default()
    };
    k8s::Pod {
        spec: Some(k8s::PodSpec {
            restart_policy: Some(policy.into()),
            init_containers: (!inits.is_empty())
                .then(|| inits.iter().map(|n| c(n, false)).collect()),
            containers: apps.iter().map(|(n, r)| c(n, *r)).collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn info(name: &str, created: i64, state: State, exit: i32) -> ContainerInfo {
    ContainerInfo {
        id: format!("{name}{created}"),
        sandbox_id: "s".into(),
        name: name.into(),
        state,
        created_at: created,
        started_at: 1_795_000_000_000_000_000,
        finished_at: if state == State::Exited {
            1_795_000_001_000_000_000
        } else {
            0
        },
        exit_code: exit,
        reason: match (state, exit) {
            (State::Exited, 0) => "Completed".into(),
            (State::Exited, _) => "Error".into(),
            _ => String::new(),
        },
        message: String::new(),
        image: "busybox".into(),
        image_ref: "sha256:abc".into(),
        hash: String::new(),
        restart_count: i32::try_from(created).unwrap_or(0) - 1,
        init: false,
        detailed: true,
    }
}

fn runtime(containers: Vec<ContainerInfo>) -> PodRuntime {
    let mut rt = PodRuntime {
        sandboxes: vec![Sandbox {
            id: "s".into(),
            attempt: 0,
            ready: true,
            created_at: 0,
            ips: vec!["10.88.0.5".into()],
            host_network: false,
        }],
        containers,
        ..Default::default()
    };
    rt.sort();
    rt
}

/// The input of `pod` on `rt` as the tests give it, nothing ended by the node.
fn input<'a>(
    pod: &'a k8s::Pod,
    rt: &'a PodRuntime,
    waiting: &'a BTreeMap<String, Waiting>,
    probes: &'a dyn Fn(&str) -> ProbeView,
) -> Input<'a> {
    Input {
        pod,
        runtime: rt,
        runtime_name: "containerd",
        host_ip: "192.168.1.2",
        waiting,
        probes,
        start_time: Some("2026-11-22T10:00:00Z"),
        previous: None,
        now: "2026-11-22T10:00:01Z",
        evicted: None,
        disruption: false,
        terminal: false,
        allocated: None,
        resize: &Resize::NONE,
    }
}

fn status(
    pod: &k8s::Pod,
    rt: &PodRuntime,
    waiting: &BTreeMap<String, Waiting>,
    ready: bool,
) -> k8s::PodStatus {
    let probes = move |_: &str| ProbeView {
        ready: Some(ready),
        started: Some(true),
    };
    compute(&input(pod, rt, waiting, &probes))
}

fn cond(s: &k8s::PodStatus, kind: &str) -> (String, Option<String>) {
    let c = s
        .conditions
        .as_ref()
        .and_then(|cs| cs.iter().find(|c| c.type_ == kind))
        .expect("condition");
    (c.status.clone(), c.message.clone())
}

#[test]
fn a_running_pod_is_ready_when_its_probe_passes() {
    let p = pod("Always", &[], &[("web", true)]);
    let rt = runtime(vec![info("web", 1, State::Running, 0)]);
    let none = BTreeMap::new();
    let s = status(&p, &rt, &none, false);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(
        cond(&s, "Ready"),
        (
            "False".into(),
            Some("containers with unready status: [web]".into())
        )
    );
    assert_eq!(cond(&s, "PodReadyToStartContainers").0, "True");
    let s = status(&p, &rt, &none, true);
    assert_eq!(cond(&s, "Ready").0, "True");
    assert_eq!(cond(&s, "ContainersReady").0, "True");
    assert_eq!(s.pod_ip.as_deref(), Some("10.88.0.5"));
    assert_eq!(s.host_ip.as_deref(), Some("192.168.1.2"));
    assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    let c = &s.container_statuses.as_ref().expect("statuses")[0];
    assert!(c.ready);
    assert_eq!(c.container_id.as_deref(), Some("containerd://web1"));
    assert_eq!(c.image_id, "sha256:abc");
    assert!(c.state.as_ref().and_then(|s| s.running.as_ref()).is_some());
}

/// Readiness gates (`Pod readiness gate`): Ready waits for each gate's condition, set by
/// others through the API, to be True; ContainersReady does not; those conditions are
/// kept in the status.
#[test]
fn ready_waits_for_every_readiness_gate() {
    let mut p = pod("Always", &[], &[("web", false)]);
    let gate = |kind: &str| k8s::PodReadinessGate {
        condition_type: kind.into(),
    };
    p.spec.as_mut().expect("spec").readiness_gates =
        Some(vec![gate("example.com/one"), gate("example.com/two")]);
    let rt = runtime(vec![info("web", 1, State::Running, 0)]);
    let none = BTreeMap::new();
    let s = status(&p, &rt, &none, true);
    let ready = s
        .conditions
        .as_ref()
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .expect("Ready");
    assert_eq!(
        (
            ready.status.as_str(),
            ready.reason.as_deref(),
            ready.message.as_deref()
        ),
        (
            "False",
            Some("ReadinessGatesNotReady"),
            Some(
                "corresponding condition of pod readiness gate \"example.com/one\" does not exist., corresponding condition of pod readiness gate \"example.com/two\" does not exist."
            )
        )
    );
    assert_eq!(cond(&s, "ContainersReady").0, "True");
    let set = |one: &str, two: &str| k8s::PodStatus {
        conditions: Some(vec![
            k8s::PodCondition {
                type_: "example.com/one".into(),
                status: one.into(),
                ..Default::default()
            },
            k8s::PodCondition {
                type_: "example.com/two".into(),
                status: two.into(),
                ..Default::default()
            },
        ]),
        ..Default::default()
    };
    p.status = Some(set("True", "False"));
    let s = status(&p, &rt, &none, true);
    assert_eq!(
        cond(&s, "Ready"),
        (
            "False".into(),
            Some(
                "the status of pod readiness gate \"example.com/two\" is not \"True\", but False"
                    .into()
            )
        )
    );
    assert_eq!(cond(&s, "example.com/one").0, "True", "kept in the status");
    p.status = Some(set("True", "True"));
    assert_eq!(cond(&status(&p, &rt, &none, true), "Ready").0, "True");
}

/// A pod deleted through the API ends in a final phase once nothing of it runs (the
/// kubelet's terminal status, written before its final delete): Succeeded when every
/// container ended with 0, Failed otherwise — whatever the restart policy — and a
/// container that never ran (deleted while Pending) counts as failed.
#[test]
fn a_deleted_pod_ends_in_a_final_phase() {
    let none = BTreeMap::new();
    let probes = |_: &str| ProbeView::default();
    let ended = |p: &k8s::Pod, rt: &PodRuntime| {
        compute(&Input {
            terminal: true,
            ..input(p, rt, &none, &probes)
        })
    };
    let always = pod("Always", &[], &[("web", false)]);
    let failed = runtime(vec![info("web", 1, State::Exited, 137)]);
    assert_eq!(ended(&always, &failed).phase.as_deref(), Some("Failed"));
    let on_failure = pod("OnFailure", &[], &[("web", false)]);
    assert_eq!(ended(&on_failure, &failed).phase.as_deref(), Some("Failed"));
    let zero = runtime(vec![info("web", 1, State::Exited, 0)]);
    assert_eq!(ended(&always, &zero).phase.as_deref(), Some("Succeeded"));
    // Deleted while Pending: never ran.
    let s = ended(&always, &runtime(Vec::new()));
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    let c = &s.container_statuses.as_ref().expect("statuses")[0];
    let t = c
        .state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .expect("terminated");
    assert_eq!(
        (t.exit_code, t.reason.as_deref()),
        (137, Some("ContainerStatusUnknown"))
    );
}

#[test]
fn crash_loop_shows_waiting_with_the_last_termination() {
    let p = pod("Always", &[], &[("c", false)]);
    let rt = runtime(vec![info("c", 3, State::Exited, 1)]);
    let waiting = BTreeMap::from([(
        "c".to_string(),
        Waiting {
            reason: "CrashLoopBackOff".into(),
            message: "back-off 20s restarting failed container=c".into(),
        },
    )]);
    let s = status(&p, &rt, &waiting, true);
    assert_eq!(s.phase.as_deref(), Some("Running"), "Always restarts it");
    let c = &s.container_statuses.as_ref().expect("statuses")[0];
    let w = c
        .state
        .as_ref()
        .and_then(|s| s.waiting.as_ref())
        .expect("waiting");
    assert_eq!(w.reason.as_deref(), Some("CrashLoopBackOff"));
    let last = c
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("last state");
    assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
    assert_eq!(c.restart_count, 2);
    assert!(!c.ready);
}

#[test]
fn phases_follow_the_restart_policy() {
    let none = BTreeMap::new();
    for (policy, exits, phase) in [
        ("Never", vec![0, 0], "Succeeded"),
        ("Never", vec![0, 1], "Failed"),
        ("OnFailure", vec![0, 0], "Succeeded"),
        ("OnFailure", vec![0, 1], "Running"),
        ("Always", vec![0, 0], "Running"),
    ] {
        let p = pod(policy, &[], &[("a", false), ("b", false)]);
        let rt = runtime(vec![
            info("a", 1, State::Exited, exits[0]),
            info("b", 1, State::Exited, exits[1]),
        ]);
        let s = status(&p, &rt, &none, true);
        assert_eq!(s.phase.as_deref(), Some(phase), "{policy} {exits:?}");
        if phase == "Succeeded" || phase == "Failed" {
            let ready = s
                .conditions
                .as_ref()
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .and_then(|c| c.reason.clone());
            let want = if phase == "Failed" {
                "PodFailed"
            } else {
                "PodCompleted"
            };
            assert_eq!(ready.as_deref(), Some(want));
        }
    }
    let p = pod("Always", &[], &[("a", false)]);
    let s = status(&p, &PodRuntime::default(), &none, true);
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    let c = &s.container_statuses.as_ref().expect("statuses")[0];
    assert_eq!(
        c.state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.as_deref()),
        Some("ContainerCreating")
    );
}

#[test]
fn init_containers_gate_initialized_and_the_phase() {
    let none = BTreeMap::new();
    let p = pod("Always", &["setup"], &[("app", false)]);
    let rt = runtime(vec![info("setup", 1, State::Running, 0)]);
    let s = status(&p, &rt, &none, true);
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    assert_eq!(
        cond(&s, "Initialized"),
        (
            "False".into(),
            Some("containers with incomplete status: [setup]".into())
        )
    );
    let app = &s.container_statuses.as_ref().expect("statuses")[0];
    assert_eq!(
        app.state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.as_deref()),
        Some("PodInitializing")
    );
    let rt = runtime(vec![
        info("setup", 1, State::Exited, 0),
        info("app", 2, State::Running, 0),
    ]);
    let s = status(&p, &rt, &none, true);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(cond(&s, "Initialized").0, "True");
    let setup = &s.init_container_statuses.as_ref().expect("init statuses")[0];
    assert!(setup.ready, "an init container that exited 0 is ready");
    let never = pod("Never", &["setup"], &[("app", false)]);
    let rt = runtime(vec![info("setup", 1, State::Running, 0)]);
    let running = status(&never, &rt, &none, true);
    assert!(!running.init_container_statuses.expect("statuses")[0].ready);
    let rt = runtime(vec![info("setup", 1, State::Exited, 2)]);
    let failed = status(&never, &rt, &none, true);
    assert_eq!(failed.phase.as_deref(), Some("Failed"));
    assert!(
        !failed.init_container_statuses.expect("statuses")[0].ready,
        "a failed init container is not ready"
    );
}

#[test]
fn qos_classes() {
    let with = |requests: &[(&str, &str)], limits: &[(&str, &str)]| {
        let q = |pairs: &[(&str, &str)]| {
            (!pairs.is_empty()).then(|| {
                pairs
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.to_string(),
                            k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.to_string()),
                        )
                    })
                    .collect()
            })
        };
        let mut p = pod("Always", &[], &[("a", false)]);
        if let Some(s) = p.spec.as_mut() {
            s.containers[0].resources = Some(k8s::ResourceRequirements {
                requests: q(requests),
                limits: q(limits),
                ..Default::default()
            });
        }
        qos_class(&p)
    };
    assert_eq!(with(&[], &[]), "BestEffort");
    assert_eq!(with(&[("cpu", "100m")], &[]), "Burstable");
    assert_eq!(with(&[], &[("cpu", "1"), ("memory", "64Mi")]), "Guaranteed");
    assert_eq!(
        with(
            &[("cpu", "1000m"), ("memory", "64Mi")],
            &[("cpu", "1"), ("memory", "64Mi")]
        ),
        "Guaranteed"
    );
    assert_eq!(
        with(
            &[("cpu", "500m"), ("memory", "64Mi")],
            &[("cpu", "1"), ("memory", "64Mi")]
        ),
        "Burstable"
    );
    assert_eq!(with(&[], &[("cpu", "1")]), "Burstable");
}

#[test]
fn rejected_pods_fail_with_the_plugins_reason() {
    let s = rejected(
        "OutOfcpu",
        "Node didn't have enough resource: cpu, requested: 2000, used: 500, capacity: 2000",
        "10.0.0.1",
    );
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(s.reason.as_deref(), Some("OutOfcpu"));
    assert!(
        s.message
            .as_deref()
            .is_some_and(|m| m.starts_with("Pod was rejected: Node didn't"))
    );
}

#[test]
fn a_pod_evicted_for_pressure_is_a_disruption_target_and_a_deadline_is_not() {
    let p = pod("Always", &[], &[("c", false)]);
    let rt = runtime(vec![info("c", 1, State::Running, 0)]);
    let none = BTreeMap::new();
    let probes = |_: &str| ProbeView {
        ready: Some(true),
        started: Some(true),
    };
    let message =
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 90Mi. ";
    let ended = |reason: &'static str, disruption: bool| {
        compute(&Input {
            evicted: Some((reason, message)),
            disruption,
            ..input(&p, &rt, &none, &probes)
        })
    };
    let s = ended("Evicted", true);
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(s.reason.as_deref(), Some("Evicted"));
    let target = s
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("DisruptionTarget");
    assert_eq!(
        (target.status.as_str(), target.reason.as_deref()),
        ("True", Some("TerminationByKubelet"))
    );
    assert_eq!(target.message.as_deref(), Some(message));
    let s = ended("DeadlineExceeded", false);
    assert!(
        s.conditions
            .iter()
            .flatten()
            .all(|c| c.type_ != "DisruptionTarget"),
        "activeDeadlineSeconds is not a disruption"
    );
}

#[test]
fn the_api_servers_disruption_target_is_kept_unless_the_agent_evicts() {
    let mut p = pod("Never", &[], &[("c", false)]);
    let api_says: k8s::PodCondition = serde_json::from_value(serde_json::json!({
        "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting"
    }))
    .expect("condition");
    p.status.get_or_insert_default().conditions = Some(vec![api_says]);
    let rt = runtime(vec![info("c", 1, State::Exited, 137)]);
    let none = BTreeMap::new();
    let probes = |_: &str| ProbeView::default();
    let targets = |s: &k8s::PodStatus| -> Vec<(String, Option<String>)> {
        s.conditions
            .iter()
            .flatten()
            .filter(|c| c.type_ == "DisruptionTarget")
            .map(|c| (c.status.clone(), c.reason.clone()))
            .collect()
    };
    let s = compute(&input(&p, &rt, &none, &probes));
    assert_eq!(
        targets(&s),
        [(
            "True".to_string(),
            Some("EvictionByEvictionAPI".to_string())
        )],
        "the Eviction API's condition stays: a Job's podFailurePolicy reads it"
    );
    let message = "The node was low on resource: memory. ";
    let s = compute(&Input {
        evicted: Some(("Evicted", message)),
        disruption: true,
        ..input(&p, &rt, &none, &probes)
    });
    assert_eq!(
        targets(&s),
        [("True".to_string(), Some("TerminationByKubelet".to_string()))],
        "the agent's own replaces it"
    );
}

/// `pod` whose init container `name` is a sidecar with a startup and a readiness probe.
fn with_sidecar(mut p: k8s::Pod, name: &str) -> k8s::Pod {
    let spec = p.spec.as_mut().expect("spec");
    for c in spec.init_containers.iter_mut().flatten() {
        if c.name == name {
            c.restart_policy = Some("Always".into());
            c.startup_probe = Some(k8s::Probe::default());
            c.readiness_probe = Some(k8s::Probe::default());
        }
    }
    p
}

fn status_probed(pod: &k8s::Pod, rt: &PodRuntime, started: bool, ready: bool) -> k8s::PodStatus {
    let probes = move |_: &str| ProbeView {
        ready: Some(ready),
        started: Some(started),
    };
    compute(&input(pod, rt, &BTreeMap::new(), &probes))
}

#[test]
fn a_sidecar_counts_once_started_and_its_readiness_counts_for_the_pod() {
    let p = with_sidecar(pod("Never", &["proxy"], &[("app", false)]), "proxy");
    let rt = runtime(vec![info("proxy", 1, State::Running, 0)]);
    // Running, its startup probe not yet passed: the pod initializes.
    let s = status_probed(&p, &rt, false, false);
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    let (initialized, message) = cond(&s, "Initialized");
    assert_eq!(initialized, "False");
    assert_eq!(
        message.as_deref(),
        Some("containers with incomplete status: [proxy]")
    );
    let proxy = &s.init_container_statuses.as_ref().expect("inits")[0];
    assert_eq!((proxy.started, proxy.ready), (Some(false), false));
    // Started: initialized; the app waits to be created.
    let s = status_probed(&p, &rt, true, false);
    assert_eq!(cond(&s, "Initialized").0, "True");
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    // Both run: Running, ready only once the sidecar's readiness probe passes.
    let rt = runtime(vec![
        info("proxy", 1, State::Running, 0),
        info("app", 2, State::Running, 0),
    ]);
    let s = status_probed(&p, &rt, true, false);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(
        cond(&s, "ContainersReady"),
        (
            "False".into(),
            Some("containers with unready status: [proxy]".into())
        )
    );
    let s = status_probed(&p, &rt, true, true);
    assert_eq!(cond(&s, "Ready").0, "True");
    assert!(s.init_container_statuses.expect("inits")[0].ready);
}

#[test]
fn a_sidecar_that_ended_or_restarts_does_not_hold_the_phase() {
    let p = with_sidecar(pod("Never", &["proxy"], &[("app", false)]), "proxy");
    // The app done, the sidecar still running: Running until it is stopped.
    let rt = runtime(vec![
        info("proxy", 1, State::Running, 0),
        info("app", 2, State::Exited, 0),
    ]);
    assert_eq!(
        status_probed(&p, &rt, true, true).phase.as_deref(),
        Some("Running")
    );
    // The sidecar stopped after the app: Succeeded whatever its exit code.
    let rt = runtime(vec![
        info("proxy", 1, State::Exited, 137),
        info("app", 2, State::Exited, 0),
    ]);
    let s = status_probed(&p, &rt, true, true);
    assert_eq!(s.phase.as_deref(), Some("Succeeded"));
    assert_eq!(cond(&s, "Initialized").0, "True");
    // A sidecar crashing and waiting to restart beside a running app: Running.
    let rt = runtime(vec![
        info("proxy", 1, State::Exited, 1),
        info("app", 2, State::Running, 0),
    ]);
    let mut waiting = BTreeMap::new();
    waiting.insert(
        "proxy".to_owned(),
        Waiting {
            reason: "CrashLoopBackOff".into(),
            message: "back-off 10s restarting failed container=proxy".into(),
        },
    );
    let probes = |_: &str| ProbeView {
        ready: Some(true),
        started: Some(true),
    };
    let s = compute(&input(&p, &rt, &waiting, &probes));
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(cond(&s, "Ready").0, "False", "the sidecar is not ready");
}

#[test]
fn a_failed_init_is_not_reported_failed_while_a_sidecar_still_stops() {
    // restartPolicy Never, a sidecar started, then the regular init container after it
    // failed: getPhase says Failed, but the kubelet's status manager keeps the phase it
    // had (Pending) until the sidecar has stopped.
    let p = with_sidecar(
        pod("Never", &["proxy", "setup"], &[("app", false)]),
        "proxy",
    );
    let rt = runtime(vec![
        info("proxy", 1, State::Running, 0),
        info("setup", 2, State::Exited, 1),
    ]);
    let s = status_probed(&p, &rt, true, true);
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    let rt = runtime(vec![
        info("proxy", 1, State::Exited, 137),
        info("setup", 2, State::Exited, 1),
    ]);
    assert_eq!(
        status_probed(&p, &rt, true, true).phase.as_deref(),
        Some("Failed"),
        "Failed once nothing runs"
    );
}

#[test]
fn container_statuses_carry_mounts_allocated_resources_and_the_resize_conditions() {
    let mut p = pod("Always", &[], &[("c", false)]);
    let c = &mut p.spec.as_mut().expect("spec").containers[0];
    c.volume_mounts = Some(vec![
        k8s::VolumeMount {
            name: "data".into(),
            mount_path: "/data".into(),
            ..Default::default()
        },
        k8s::VolumeMount {
            name: "conf".into(),
            mount_path: "/etc/conf".into(),
            read_only: Some(true),
            ..Default::default()
        },
    ]);
    let q = |v: &str| k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.into());
    c.resources = Some(k8s::ResourceRequirements {
        requests: Some([("cpu".to_owned(), q("100m"))].into()),
        ..Default::default()
    });
    let rt = runtime(vec![info("c", 1, State::Running, 0)]);
    // A resize allocated at 200m and being applied.
    let mut allocated = p.clone();
    allocated.spec.as_mut().expect("spec").containers[0].resources =
        Some(k8s::ResourceRequirements {
            requests: Some([("cpu".to_owned(), q("200m"))].into()),
            ..Default::default()
        });
    let resize = Resize {
        pending: None,
        in_progress: Some((String::new(), String::new())),
    };
    let probes = |_: &str| ProbeView::default();
    let none = BTreeMap::new();
    let mut i = input(&p, &rt, &none, &probes);
    i.allocated = Some(&allocated);
    i.resize = &resize;
    let s = compute(&i);
    let c = &s.container_statuses.as_ref().expect("statuses")[0];
    let mounts = c.volume_mounts.as_ref().expect("mounts");
    assert_eq!(mounts[0].read_only, None);
    assert_eq!(
        (
            mounts[1].read_only,
            mounts[1].recursive_read_only.as_deref()
        ),
        (Some(true), Some("Disabled"))
    );
    assert_eq!(
        c.allocated_resources.as_ref().and_then(|r| r.get("cpu")),
        Some(&q("200m"))
    );
    assert_eq!(cond(&s, "PodResizeInProgress").0, "True");
    assert!(
        s.conditions
            .iter()
            .flatten()
            .all(|c| c.type_ != "PodResizePending")
    );
}
