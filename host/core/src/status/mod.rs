//! A pod's status computed the kubelet's way from its spec, what the runtime has for it,
//! the probe results and what the last sync could not do (back-off, pull errors):
//! phase (`phase.rs`), conditions (`conditions.rs`), container statuses, IPs, start time
//! and QoS class. Pure.

use std::collections::BTreeMap;

use crate::quantity::parse_quantity;
use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

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
    /// The node ended the pod for lack of a resource (node-pressure eviction): a
    /// `DisruptionTarget` condition says so too, reason `TerminationByKubelet` and the
    /// eviction's message (the kubelet's PodDisruptionConditions, on by default in 1.28).
    pub disruption: bool,
    /// The pod was deleted through the API and nothing of it runs any more: its phase is
    /// final (the kubelet's `podIsTerminal` and TerminatePod).
    pub terminal: bool,
    /// The pod as it runs when a resize made it differ from `pod` (its spec with the
    /// allocated resources): the containers' `allocatedResources` and `resources`.
    pub allocated: Option<&'a k8s::Pod>,
    /// Where its resize stands.
    pub resize: &'a Resize,
}

/// Where a pod's in-place resize stands: the `PodResizePending` and
/// `PodResizeInProgress` conditions, each a reason and a message when there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resize {
    /// A resize that waits: `Deferred` or `Infeasible`, and why.
    pub pending: Option<(String, String)>,
    /// A resize being applied (empty reason and message), or one that failed (`Error`).
    pub in_progress: Option<(String, String)>,
}

impl Resize {
    /// No resize pending or going on.
    pub const NONE: Resize = Resize {
        pending: None,
        in_progress: None,
    };
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
        volume_mounts: volume_mounts(spec),
        ..Default::default()
    };
    let waiting = input.waiting.get(&spec.name);
    let Some(c) = latest else {
        if let Some(ended) = ended_before(spec, input) {
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
    if c.detailed && !c.image.is_empty() {
        // The image the instance runs, as the runtime names it (the kubelet's `image`):
        // a spec updated to a new image shows the old one until the container is
        // created again.
        status.image.clone_from(&c.image);
    }
    allocated_resources(spec, input, &mut status);
    status.container_id = Some(format!("{}://{}", input.runtime_name, c.id));
    let last_terminated = |c: &ContainerInfo| {
        (c.state == State::Exited).then(|| k8s::ContainerState {
            terminated: Some(terminated(c, input.runtime_name)),
            ..Default::default()
        })
    };
    match c.state {
        State::Running => {
            running(spec, c, input, &mut status);
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
        State::Unknown => status.state = Some(unknown(status.container_id.clone())),
    }
    if status.last_state.is_none() {
        status.last_state = Some(k8s::ContainerState::default());
    }
    status
}

/// The container's mounts as the kubelet 1.33 reports them (RecursiveReadOnlyMounts,
/// on): each one's name, path and read-only flag, a read-only one's recursive mode
/// `Disabled` (this runtime has no recursive read-only mounts).
fn volume_mounts(spec: &k8s::Container) -> Option<Vec<k8s::VolumeMountStatus>> {
    let mounts = spec.volume_mounts.as_ref()?;
    Some(
        mounts
            .iter()
            .map(|m| {
                let read_only = m.read_only.unwrap_or(false);
                k8s::VolumeMountStatus {
                    name: m.name.clone(),
                    mount_path: m.mount_path.clone(),
                    read_only: read_only.then_some(true),
                    recursive_read_only: read_only.then(|| "Disabled".to_owned()),
                    ..Default::default()
                }
            })
            .collect(),
    )
    .filter(|v: &Vec<_>| !v.is_empty())
}

/// A container the runtime has: its `allocatedResources` (the requests granted) and
/// `resources` (what it runs with), from the allocated spec, as the kubelet 1.33
/// reports them for every container it has a runtime status of.
fn allocated_resources(
    spec: &k8s::Container,
    input: &Input<'_>,
    status: &mut k8s::ContainerStatus,
) {
    let allocated = input
        .allocated
        .and_then(|p| pod::container_named(p, &spec.name))
        .unwrap_or(spec);
    let resources = allocated.resources.clone().unwrap_or_default();
    status.allocated_resources = resources.requests.clone();
    status.resources = Some(resources);
}

/// A container gone from the runtime after it ended (a finished pod's containers
/// removed to free the disk): what it ended with stays its status, as the kubelet
/// keeps it.
fn ended_before<'a>(spec: &k8s::Container, input: &Input<'a>) -> Option<&'a k8s::ContainerStatus> {
    let p = input.previous?;
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
}

/// A running container: started once its startup probe succeeded (or it has none),
/// ready once started and its readiness probe succeeded (or it has none).
fn running(
    spec: &k8s::Container,
    c: &ContainerInfo,
    input: &Input<'_>,
    status: &mut k8s::ContainerStatus,
) {
    let probes = (input.probes)(&c.id);
    let started = spec.startup_probe.is_none() || probes.started == Some(true);
    status.started = Some(started);
    status.ready = started && (spec.readiness_probe.is_none() || probes.ready == Some(true));
    status.state = Some(k8s::ContainerState {
        running: Some(k8s::ContainerStateRunning {
            started_at: time(nanos_rfc3339(c.started_at)),
        }),
        ..Default::default()
    });
}

/// The state of a container the runtime cannot locate: terminated, 137, the kubelet's
/// ContainerStatusUnknown.
fn unknown(container_id: Option<String>) -> k8s::ContainerState {
    k8s::ContainerState {
        terminated: Some(k8s::ContainerStateTerminated {
            exit_code: 137,
            reason: Some("ContainerStatusUnknown".into()),
            message: Some("The container could not be located when the pod was terminated".into()),
            container_id,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A deleted pod's app containers that never reached a terminated state count as failed:
/// nothing says they succeeded (the kubelet's TerminatePod words).
fn end_unterminated(statuses: &mut [k8s::ContainerStatus]) {
    for s in statuses {
        if s.state.as_ref().is_some_and(|st| st.terminated.is_some()) {
            continue;
        }
        s.ready = false;
        s.started = Some(false);
        s.state = Some(k8s::ContainerState {
            terminated: Some(k8s::ContainerStateTerminated {
                exit_code: 137,
                reason: Some("ContainerStatusUnknown".into()),
                message: Some(
                    "The container could not be located when the pod was terminated".into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
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
    let statuses = Statuses::of(input);
    let phase = pod_phase(input, &statuses);
    let sandbox = input.runtime.sandbox();
    let host_network = pod::host_network(pod);
    let sandbox_ready = sandbox.is_some_and(|s| s.ready && (host_network || !s.ips.is_empty()));
    let conditions = conditions(input, &statuses, phase, sandbox_ready);
    let pod_ips = pod_ips(input, sandbox, host_network);
    let host_ip = (!input.host_ip.is_empty()).then(|| input.host_ip.to_owned());
    let Statuses {
        init,
        app,
        ephemeral,
    } = statuses;
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
        init_container_statuses: (!init.is_empty()).then_some(init),
        container_statuses: Some(app),
        ephemeral_container_statuses: (!ephemeral.is_empty()).then_some(ephemeral),
        reason: input.evicted.map(|(r, _)| r.to_owned()),
        message: input.evicted.map(|(_, m)| m.to_owned()),
        ..Default::default()
    }
}

/// The pod's container statuses, by kind of container.
struct Statuses {
    init: Vec<k8s::ContainerStatus>,
    app: Vec<k8s::ContainerStatus>,
    ephemeral: Vec<k8s::ContainerStatus>,
}

impl Statuses {
    fn of(input: &Input<'_>) -> Self {
        let pod = input.pod;
        let init: Vec<k8s::ContainerStatus> = pod::init_containers(pod)
            .iter()
            .map(|c| init_status(c, input))
            .collect();
        let app_default = if initialized(pod, &init) {
            "ContainerCreating"
        } else {
            "PodInitializing"
        };
        let mut app: Vec<k8s::ContainerStatus> = pod::containers(pod)
            .iter()
            .map(|c| container_status(c, input, app_default))
            .collect();
        if input.terminal {
            end_unterminated(&mut app);
        }
        // Ephemeral containers: never ready (no probes), never part of the phase.
        let ephemeral = pod::ephemeral_containers(pod)
            .iter()
            .map(|c| {
                let mut s = container_status(c, input, "ContainerCreating");
                s.ready = false;
                s
            })
            .collect();
        Statuses {
            init,
            app,
            ephemeral,
        }
    }
}

/// An init container's status. A regular one that finished with exit code 0 is ready
/// (the kubelet's prober manager says so of every init container it updates); a sidecar
/// is started and ready by its probes, as an app container.
fn init_status(c: &k8s::Container, input: &Input<'_>) -> k8s::ContainerStatus {
    let mut s = container_status(c, input, "PodInitializing");
    if !pod::is_restartable(c) {
        s.ready = s
            .state
            .as_ref()
            .and_then(|st| st.terminated.as_ref())
            .is_some_and(|t| t.exit_code == 0);
    }
    s
}

/// Whether an init container has done its part: a sidecar started, a regular one
/// finished well.
fn init_done(c: &k8s::Container, s: &k8s::ContainerStatus) -> bool {
    if pod::is_restartable(c) {
        s.started == Some(true)
    } else {
        s.ready
    }
}

/// The init containers that have not done their part yet, by name.
fn incomplete_inits<'a>(pod: &'a k8s::Pod, inits: &[k8s::ContainerStatus]) -> Vec<&'a str> {
    pod::init_containers(pod)
        .iter()
        .filter(|c| !inits.iter().any(|s| s.name == c.name && init_done(c, s)))
        .map(|c| c.name.as_str())
        .collect()
}

/// Whether every init container has done its part.
fn initialized(pod: &k8s::Pod, inits: &[k8s::ContainerStatus]) -> bool {
    incomplete_inits(pod, inits).is_empty()
}

/// Whether an app container has run or runs (the kubelet's HasAnyRegularContainerStarted):
/// the pod was initialized.
fn any_app_started(apps: &[k8s::ContainerStatus]) -> bool {
    apps.iter().any(|s| {
        s.state
            .as_ref()
            .is_some_and(|st| st.running.is_some() || st.terminated.is_some())
    })
}

/// Whether an app container of the current sandbox exists (the kubelet's
/// HasAnyActiveRegularContainerStarted).
fn active_app_started(input: &Input<'_>) -> bool {
    let Some(sandbox) = input.runtime.sandbox() else {
        return false;
    };
    pod::containers(input.pod).iter().any(|c| {
        input
            .runtime
            .containers
            .iter()
            .any(|r| r.name == c.name && r.sandbox_id == sandbox.id)
    })
}

/// The pod's phase: Failed once evicted, a terminal phase kept, else from its containers.
fn pod_phase(input: &Input<'_>, statuses: &Statuses) -> &'static str {
    match input.previous.and_then(|p| p.phase.as_deref()) {
        _ if input.evicted.is_some() => "Failed",
        // A terminal phase is final.
        Some("Succeeded") => "Succeeded",
        Some("Failed") => "Failed",
        _ if input.terminal => final_phase(&statuses.app),
        previous => {
            let now = phase(
                input.pod,
                &statuses.init,
                &statuses.app,
                active_app_started(input),
            );
            // The kubelet's status manager never reports a terminal phase while the pod
            // could still have running containers (sidecars still stopping after a
            // failed init container, say): the phase stays what it was until they stop.
            let terminal = now == "Failed" || now == "Succeeded";
            if terminal && input.runtime.running().next().is_some() {
                held_phase(previous)
            } else {
                now
            }
        }
    }
}

/// The phase a pod keeps while it waits to be reported terminal: the last one reported
/// (Pending before any).
fn held_phase(previous: Option<&str>) -> &'static str {
    match previous {
        Some("Running") => "Running",
        _ => "Pending",
    }
}

/// The pod's addresses: the node's on the host network, else its sandbox's — or, for a
/// stopped pod whose sandbox no longer reports one, those it had, as the kubelet's
/// status keeps them (its sandbox outlives it there).
fn pod_ips(
    input: &Input<'_>,
    sandbox: Option<&crate::runtime::Sandbox>,
    host_network: bool,
) -> Vec<String> {
    let ips: Vec<String> = match sandbox {
        _ if host_network => vec![input.host_ip.to_owned()],
        Some(s) => s.ips.clone(),
        None => Vec::new(),
    };
    if !ips.is_empty() {
        return ips;
    }
    input
        .previous
        .and_then(|p| p.pod_ips.as_ref())
        .map(|previous| previous.iter().map(|ip| ip.ip.clone()).collect())
        .unwrap_or_default()
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

mod conditions;
mod phase;

use conditions::conditions;
use phase::{final_phase, phase};

#[cfg(test)]
mod tests;
