//! A pod's status computed the kubelet's way from its spec, what the runtime has for it,
//! the probe results and what the last sync could not do (back-off, pull errors):
//! phase, conditions, container statuses, IPs, start time and QoS class. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use wasmlet_plugin_host::convert::parse_quantity;

use crate::actions;
use crate::pod;
use crate::runtime::{ContainerInfo, PodRuntime, State};
use crate::time::nanos_rfc3339;

/// Why a container waits, as the last sync found (`CrashLoopBackOff`, `ErrImagePull`,
/// `ImagePullBackOff`, `CreateContainerError`, …), with the kubelet's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The reason.
    pub reason: String,
    /// The message.
    pub message: String,
}

/// Probe results for one container instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProbeView {
    /// The readiness probe's result (`None`: no result yet).
    pub ready: Option<bool>,
    /// The startup probe's result (`None`: no result yet).
    pub started: Option<bool>,
}

/// Everything a pod's status is computed from.
pub struct Input<'a> {
    /// The pod.
    pub pod: &'a k8s::Pod,
    /// What the runtime has for it.
    pub runtime: &'a PodRuntime,
    /// The runtime's name, the prefix of container IDs (`containerd`).
    pub runtime_name: &'a str,
    /// The node's IP.
    pub host_ip: &'a str,
    /// Why containers wait, by container name.
    pub waiting: &'a BTreeMap<String, Waiting>,
    /// Probe results, by container runtime id.
    pub probes: &'a dyn Fn(&str) -> ProbeView,
    /// When the agent first started working on the pod.
    pub start_time: Option<&'a str>,
    /// The status computed last time (keeps transition times and a terminal phase).
    pub previous: Option<&'a k8s::PodStatus>,
    /// Now, RFC 3339.
    pub now: &'a str,
    /// Why the node ended the pod (`DeadlineExceeded`, the kubelet's message): `Failed`
    /// with that reason and message.
    pub evicted: Option<(&'a str, &'a str)>,
}

fn time(s: Option<String>) -> Option<Time> {
    s.and_then(|s| serde_json::from_value(serde_json::Value::String(s)).ok())
}

fn terminated(c: &ContainerInfo, runtime: &str) -> k8s::ContainerStateTerminated {
    k8s::ContainerStateTerminated {
        exit_code: c.exit_code,
        reason: (!c.reason.is_empty()).then(|| c.reason.clone()),
        message: (!c.message.is_empty()).then(|| c.message.clone()),
        started_at: time(nanos_rfc3339(c.started_at)),
        finished_at: time(nanos_rfc3339(c.finished_at)),
        container_id: Some(format!("{runtime}://{}", c.id)),
        signal: None,
    }
}

fn waiting_state(reason: &str, message: Option<&str>) -> k8s::ContainerState {
    k8s::ContainerState {
        waiting: Some(k8s::ContainerStateWaiting {
            reason: Some(reason.to_owned()),
            message: message.filter(|m| !m.is_empty()).map(str::to_owned),
        }),
        ..Default::default()
    }
}

fn container_status(
    spec: &k8s::Container,
    input: &Input<'_>,
    default_waiting: &str,
) -> k8s::ContainerStatus {
    let rt = input.runtime;
    let latest = rt.latest(&spec.name);
    let mut status = k8s::ContainerStatus {
        name: spec.name.clone(),
        image: spec.image.clone().unwrap_or_default(),
        image_id: String::new(),
        ready: false,
        restart_count: 0,
        started: Some(false),
        ..Default::default()
    };
    let waiting = input.waiting.get(&spec.name);
    let Some(c) = latest else {
        // Gone from the runtime after it ended (a finished pod's containers removed to
        // free the disk): what it ended with stays its status, as the kubelet keeps it.
        let ended = input.previous.and_then(|p| {
            [
                &p.container_statuses,
                &p.init_container_statuses,
                &p.ephemeral_container_statuses,
            ]
            .into_iter()
            .flatten()
            .flatten()
            .find(|s| s.name == spec.name)
            .filter(|s| s.state.as_ref().is_some_and(|st| st.terminated.is_some()))
        });
        if let Some(ended) = ended {
            return ended.clone();
        }
        status.state = Some(match waiting {
            Some(w) => waiting_state(&w.reason, Some(&w.message)),
            None => waiting_state(default_waiting, None),
        });
        return status;
    };
    status.restart_count = c.restart_count;
    status.image_id = c.image_ref.clone();
    status.container_id = Some(format!("{}://{}", input.runtime_name, c.id));
    let last_terminated = |c: &ContainerInfo| {
        (c.state == State::Exited).then(|| k8s::ContainerState {
            terminated: Some(terminated(c, input.runtime_name)),
            ..Default::default()
        })
    };
    match c.state {
        State::Running => {
            let probes = (input.probes)(&c.id);
            let started = spec.startup_probe.is_none() || probes.started == Some(true);
            status.started = Some(started);
            status.ready = started
                && if spec.readiness_probe.is_some() {
                    probes.ready == Some(true)
                } else {
                    true
                };
            status.state = Some(k8s::ContainerState {
                running: Some(k8s::ContainerStateRunning {
                    started_at: time(nanos_rfc3339(c.started_at)),
                }),
                ..Default::default()
            });
            status.last_state = rt.previous(&spec.name).and_then(last_terminated);
        }
        State::Exited => match waiting {
            // Waiting to restart: the exited instance is the last state.
            Some(w) => {
                status.state = Some(waiting_state(&w.reason, Some(&w.message)));
                status.last_state = last_terminated(c);
            }
            None => {
                status.state = last_terminated(c);
                status.last_state = rt.previous(&spec.name).and_then(last_terminated);
            }
        },
        State::Created => {
            status.state = Some(match waiting {
                Some(w) => waiting_state(&w.reason, Some(&w.message)),
                None => waiting_state("ContainerCreating", None),
            });
        }
        State::Unknown => {
            status.state = Some(k8s::ContainerState {
                terminated: Some(k8s::ContainerStateTerminated {
                    exit_code: 137,
                    reason: Some("ContainerStatusUnknown".into()),
                    message: Some(
                        "The container could not be located when the pod was terminated".into(),
                    ),
                    container_id: status.container_id.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
    }
    if status.last_state.is_none() {
        status.last_state = Some(k8s::ContainerState::default());
    }
    status
}

/// The kubelet's getPhase over the computed container statuses.
fn phase(
    pod: &k8s::Pod,
    inits: &[k8s::ContainerStatus],
    apps: &[k8s::ContainerStatus],
) -> &'static str {
    let policy = pod::restart_policy(pod);
    let (mut pending_init, mut failed_init) = (0, 0);
    for s in inits {
        let state = s.state.clone().unwrap_or_default();
        let last_failed = s
            .last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .is_some_and(|t| t.exit_code != 0);
        if state.running.is_some() {
            pending_init += 1;
        } else if let Some(t) = &state.terminated {
            if t.exit_code != 0 {
                failed_init += 1;
            }
        } else if state.waiting.is_some() && last_failed {
            failed_init += 1;
        } else {
            pending_init += 1;
        }
    }
    let (mut running, mut waiting, mut stopped, mut succeeded, mut unknown) = (0, 0, 0, 0, 0);
    for s in apps {
        let state = s.state.clone().unwrap_or_default();
        if state.running.is_some() {
            running += 1;
        } else if let Some(t) = &state.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if state.waiting.is_some() {
            if s.last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .is_some()
            {
                stopped += 1;
            } else {
                waiting += 1;
            }
        } else {
            unknown += 1;
        }
    }
    if failed_init > 0 && policy == "Never" {
        return "Failed";
    }
    if pending_init > 0 || waiting > 0 {
        return "Pending";
    }
    if running > 0 && unknown == 0 {
        return "Running";
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        return match policy {
            "Always" => "Running",
            _ if stopped == succeeded => "Succeeded",
            "Never" => "Failed",
            _ => "Running",
        };
    }
    "Pending"
}

fn condition(
    kind: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    input: &Input<'_>,
) -> k8s::PodCondition {
    let status = if ok { "True" } else { "False" };
    let previous = input
        .previous
        .and_then(|p| p.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == kind));
    let transition = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => time(Some(input.now.to_owned())),
    };
    k8s::PodCondition {
        type_: kind.to_owned(),
        status: status.to_owned(),
        reason: reason.map(str::to_owned),
        message,
        last_transition_time: transition,
        last_probe_time: None,
        observed_generation: None,
    }
}

fn names(list: &[&str]) -> String {
    format!("[{}]", list.join(" "))
}

/// The pod's QoS class: `Guaranteed` when every container limits cpu and memory and
/// requests (if given) equal the limits, `BestEffort` when nothing requests or limits
/// cpu or memory, `Burstable` otherwise.
pub fn qos_class(pod: &k8s::Pod) -> &'static str {
    let all: Vec<&k8s::Container> = pod::init_containers(pod)
        .iter()
        .chain(pod::containers(pod))
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in all {
        let res = c.resources.clone().unwrap_or_default();
        let requests = res.requests.unwrap_or_default();
        let limits = res.limits.unwrap_or_default();
        for (resource, scale) in [("cpu", 3), ("memory", 0)] {
            let req = requests
                .get(resource)
                .and_then(|q| parse_quantity(&q.0, scale).ok());
            let lim = limits
                .get(resource)
                .and_then(|q| parse_quantity(&q.0, scale).ok());
            if req.is_some_and(|r| r > 0) || lim.is_some_and(|l| l > 0) {
                any = true;
            }
            match (req, lim) {
                (_, None) => guaranteed = false,
                (Some(r), Some(l)) if r != l => guaranteed = false,
                _ => {}
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// The pod's status.
pub fn compute(input: &Input<'_>) -> k8s::PodStatus {
    let pod = input.pod;
    let rt = input.runtime;
    let initialized = actions::initialized(pod, rt);
    // An init container that finished with exit code 0 is ready (the kubelet's prober
    // manager says so of every init container it updates).
    let init_statuses: Vec<k8s::ContainerStatus> = pod::init_containers(pod)
        .iter()
        .map(|c| {
            let mut s = container_status(c, input, "PodInitializing");
            s.ready = s
                .state
                .as_ref()
                .and_then(|st| st.terminated.as_ref())
                .is_some_and(|t| t.exit_code == 0);
            s
        })
        .collect();
    let app_default = if initialized {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let app_statuses: Vec<k8s::ContainerStatus> = pod::containers(pod)
        .iter()
        .map(|c| container_status(c, input, app_default))
        .collect();
    // Ephemeral containers: never ready (no probes), never part of the phase.
    let ephemeral_statuses: Vec<k8s::ContainerStatus> = pod::ephemeral_containers(pod)
        .iter()
        .map(|c| {
            let mut s = container_status(c, input, "ContainerCreating");
            s.ready = false;
            s
        })
        .collect();
    let previous_phase = input.previous.and_then(|p| p.phase.as_deref());
    let phase = match previous_phase {
        _ if input.evicted.is_some() => "Failed",
        // A terminal phase is final.
        Some(p @ ("Succeeded" | "Failed")) => {
            if p == "Succeeded" {
                "Succeeded"
            } else {
                "Failed"
            }
        }
        _ => phase(pod, &init_statuses, &app_statuses),
    };
    let terminal = matches!(phase, "Succeeded" | "Failed");

    let sandbox = rt.sandbox();
    let host_network = pod::host_network(pod);
    let sandbox_ready = sandbox.is_some_and(|s| s.ready && (host_network || !s.ips.is_empty()));
    let incomplete: Vec<&str> = init_statuses
        .iter()
        .filter(|s| {
            s.state
                .as_ref()
                .and_then(|st| st.terminated.as_ref())
                .is_none_or(|t| t.exit_code != 0)
        })
        .map(|s| s.name.as_str())
        .collect();
    let unready: Vec<&str> = app_statuses
        .iter()
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect();
    let init_ok = incomplete.is_empty() || initialized;
    let ready = unready.is_empty() && !terminal;
    let (ready_reason, ready_message) = if ready {
        (None, None)
    } else if terminal {
        (Some("PodCompleted"), None)
    } else {
        (
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: {}",
                names(&unready)
            )),
        )
    };
    let conditions = vec![
        condition(
            "PodReadyToStartContainers",
            sandbox_ready,
            None,
            None,
            input,
        ),
        condition(
            "Initialized",
            init_ok,
            (!init_ok).then_some("ContainersNotInitialized"),
            (!init_ok)
                .then(|| format!("containers with incomplete status: {}", names(&incomplete))),
            input,
        ),
        condition("Ready", ready, ready_reason, ready_message.clone(), input),
        condition("ContainersReady", ready, ready_reason, ready_message, input),
        condition("PodScheduled", true, None, None, input),
    ];
    let mut pod_ips: Vec<String> = match sandbox {
        _ if host_network => vec![input.host_ip.to_owned()],
        Some(s) => s.ips.clone(),
        None => Vec::new(),
    };
    // A stopped pod whose sandbox no longer reports an address keeps the one it had,
    // as the kubelet's status does (its sandbox outlives it there).
    if pod_ips.is_empty()
        && let Some(previous) = input.previous.and_then(|p| p.pod_ips.as_ref())
    {
        pod_ips = previous.iter().map(|ip| ip.ip.clone()).collect();
    }
    let host_ip = (!input.host_ip.is_empty()).then(|| input.host_ip.to_owned());
    k8s::PodStatus {
        phase: Some(phase.to_owned()),
        conditions: Some(conditions),
        host_ip: host_ip.clone(),
        host_ips: host_ip.map(|ip| vec![k8s::HostIP { ip }]),
        pod_ip: pod_ips.first().cloned(),
        pod_ips: (!pod_ips.is_empty())
            .then(|| pod_ips.into_iter().map(|ip| k8s::PodIP { ip }).collect()),
        start_time: time(input.start_time.map(str::to_owned)),
        qos_class: Some(qos_class(pod).to_owned()),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        container_statuses: Some(app_statuses),
        ephemeral_container_statuses: (!ephemeral_statuses.is_empty())
            .then_some(ephemeral_statuses),
        reason: input.evicted.map(|(r, _)| r.to_owned()),
        message: input.evicted.map(|(_, m)| m.to_owned()),
        ..Default::default()
    }
}

/// The status of a pod the admission chain refused: `Failed`, with the plugin's reason
/// and the kubelet's "Pod was rejected" message.
pub fn rejected(reason: &str, message: &str, host_ip: &str) -> k8s::PodStatus {
    let host_ip = (!host_ip.is_empty()).then(|| host_ip.to_owned());
    k8s::PodStatus {
        phase: Some("Failed".into()),
        reason: Some(reason.to_owned()),
        message: Some(format!("Pod was rejected: {message}")),
        host_ip: host_ip.clone(),
        host_ips: host_ip.map(|ip| vec![k8s::HostIP { ip }]),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
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
        compute(&Input {
            pod,
            runtime: rt,
            runtime_name: "containerd",
            host_ip: "192.168.1.2",
            waiting,
            probes: &probes,
            start_time: Some("2026-11-22T10:00:00Z"),
            previous: None,
            now: "2026-11-22T10:00:01Z",
            evicted: None,
        })
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
                assert_eq!(ready.as_deref(), Some("PodCompleted"));
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
                                k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                                    v.to_string(),
                                ),
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
}
