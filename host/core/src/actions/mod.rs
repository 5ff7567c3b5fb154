//! computePodActions: from a pod's spec and what the runtime has for it, what to do —
//! create a sandbox, run the next init container and keep sidecars running (`init`,
//! the kubelet 1.33's computeInitContainerActions), start, restart or kill containers,
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
    /// Init containers to start, in order (indexes into `spec.initContainers`): the
    /// next one to run, and sidecars to (re)start.
    pub init: Vec<usize>,
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

/// What the prober knows of one running container, as the actions need it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Probed {
    /// Which probe failed for good, if one did.
    pub failure: Option<ProbeFailure>,
    /// Whether its startup probe has succeeded (asked only of containers with one).
    pub started: bool,
}

impl Probed {
    /// A container whose `failure` probe failed.
    pub fn failed(failure: ProbeFailure) -> Self {
        Probed {
            failure: Some(failure),
            started: false,
        }
    }
}

fn restart_on_failure(pod: &k8s::Pod) -> bool {
    pod::restart_policy(pod) != "Never"
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

/// computePodActions. `probe` says what the prober knows of a running container (by
/// runtime id).
pub fn compute(pod: &k8s::Pod, rt: &PodRuntime, probe: &dyn Fn(&str) -> Probed) -> PodActions {
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

    let initialized = init::actions(pod, rt, probe, &mut actions);
    if actions.kill_pod || !initialized {
        // Initialization failed or goes on: the app containers wait.
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
                        message: "Container is in \"unknown\" state, try killing it before restart"
                            .to_owned(),
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
        // Nothing of the app runs or will: the pod ends, and its sidecars with it.
        actions.kill_pod = true;
        actions.init.clear();
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
    if start.is_empty() && init::any_app_container_created(pod, rt) {
        actions.create_sandbox = false;
        return actions;
    }
    if !pod::init_containers(pod).is_empty() {
        actions.init = vec![0];
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
    probe: &dyn Fn(&str) -> Probed,
) -> Option<(Kill, bool)> {
    let own_grace =
        |p: &Option<k8s::Probe>| p.as_ref().and_then(|p| p.termination_grace_period_seconds);
    let changed = !status.hash.is_empty() && !hash_matches(&status.hash, c);
    let (message, grace) = if changed {
        (format!("Container {} definition changed", c.name), None)
    } else {
        match probe(&status.id).failure? {
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

mod init;
pub mod order;

#[cfg(test)]
mod tests;
