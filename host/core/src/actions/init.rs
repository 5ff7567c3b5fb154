//! Init containers and sidecars: the kubelet 1.33's computeInitContainerActions. Init
//! containers run one at a time, in order; a sidecar (an init container with
//! `restartPolicy: Always`) lets the next one start once it has started (its startup
//! probe passed, if it has one) and is kept running — restarted whatever the pod's
//! restart policy, killed and restarted when its startup or liveness probe fails or its
//! definition changes — for as long as the pod runs.
//!
//! The runtime is read newest init container first: a completed init container may have
//! been removed, so the last one found decides how far initialization got.

use k8s_openapi::api::core::v1 as k8s;

use super::{Kill, PodActions, ProbeFailure, Probed, restart_on_failure};
use crate::pod;
use crate::runtime::{ContainerInfo, PodRuntime, State, hash_matches};

/// Whether an app container of the pod has been created in the runtime (created,
/// running or exited): initialization was done once.
pub(super) fn any_app_container_created(pod: &k8s::Pod, rt: &PodRuntime) -> bool {
    pod::containers(pod)
        .iter()
        .filter_map(|c| rt.latest(&c.name))
        .any(|s| matches!(s.state, State::Created | State::Running | State::Exited))
}

/// Whether an app container is created or running: initialization is over (an exited
/// one may be a previous sandbox's, from before a reboot).
fn app_container_active(pod: &k8s::Pod, rt: &PodRuntime) -> bool {
    pod::containers(pod)
        .iter()
        .filter_map(|c| rt.latest(&c.name))
        .any(|s| matches!(s.state, State::Created | State::Running))
}

/// The walk over the init containers, newest first.
struct Walk<'a> {
    probe: &'a dyn Fn(&str) -> Probed,
    actions: &'a mut PodActions,
    /// Init containers to start, newest first (reversed at the end).
    start: Vec<usize>,
    /// Every app container may run: the last init container is done or a sidecar
    /// started, or an app container is active.
    initialized: bool,
    /// An init container after the current one has run (so this one ran before).
    earlier_done: bool,
    last: usize,
}

/// The kubelet's computeInitContainerActions: fills `actions.init` (and `kill`, and
/// `kill_pod` when a failed init container must not restart) and returns whether the
/// pod is initialized, so that its app containers may run.
pub(super) fn actions(
    pod: &k8s::Pod,
    rt: &PodRuntime,
    probe: &dyn Fn(&str) -> Probed,
    actions: &mut PodActions,
) -> bool {
    let inits = pod::init_containers(pod);
    if inits.is_empty() {
        return true;
    }
    let active = app_container_active(pod, rt);
    let mut walk = Walk {
        probe,
        actions,
        start: Vec::new(),
        initialized: active,
        earlier_done: active,
        last: inits.len() - 1,
    };
    for (i, c) in inits.iter().enumerate().rev() {
        let sidecar = pod::is_restartable(c);
        let Some(status) = rt.latest(&c.name) else {
            // Gone from the runtime after initialization: a sidecar is started again.
            if walk.earlier_done && sidecar {
                walk.start.push(i);
            }
            continue;
        };
        if walk.earlier_done && !sidecar {
            // Initialized: only sidecars are kept running.
            continue;
        }
        let step = if sidecar {
            walk.sidecar(i, c, status)
        } else {
            walk.regular(i, c, status, restart_on_failure(pod))
        };
        if step == Step::PodFails {
            walk.actions.kill_pod = true;
            walk.actions.init.clear();
            return false;
        }
        walk.earlier_done = true;
    }
    if !walk.earlier_done {
        walk.start.push(0);
    }
    walk.start.reverse();
    walk.actions.init = walk.start;
    walk.initialized
}

#[derive(PartialEq, Eq)]
enum Step {
    Next,
    PodFails,
}

impl Walk<'_> {
    fn kill(
        &mut self,
        status: &ContainerInfo,
        c: &k8s::Container,
        message: String,
        grace: Option<i64>,
    ) {
        self.actions.kill.push(Kill {
            id: status.id.clone(),
            name: c.name.clone(),
            message,
            grace,
        });
    }

    /// This init container has done its part (exited well, or a sidecar started):
    /// the next one may start, or the pod is initialized.
    fn done(&mut self, i: usize) {
        if i == self.last {
            self.initialized = true;
        } else if !self.earlier_done {
            self.start.push(i + 1);
        }
    }

    /// A regular init container: wait for it, go on after it, or run it again after a
    /// failure (the pod fails instead under `restartPolicy: Never`).
    fn regular(
        &mut self,
        i: usize,
        c: &k8s::Container,
        status: &ContainerInfo,
        restart_on_failure: bool,
    ) -> Step {
        match status.state {
            // Created but never started (the runtime failed to): created again.
            State::Created => self.start.push(i),
            State::Running => {}
            State::Exited if status.exit_code == 0 => self.done(i),
            State::Exited | State::Unknown if !restart_on_failure => return Step::PodFails,
            State::Exited => self.start.push(i),
            State::Unknown => {
                let message =
                    "Init container is in \"unknown\" state, try killing it before restart";
                self.kill(status, c, message.to_owned(), None);
                self.start.push(i);
            }
        }
        Step::Next
    }

    /// A sidecar: restarted whenever it is not running, whatever the pod's policy.
    fn sidecar(&mut self, i: usize, c: &k8s::Container, status: &ContainerInfo) -> Step {
        match status.state {
            State::Created | State::Exited => self.start.push(i),
            State::Unknown => {
                let message =
                    "Init container is in \"unknown\" state, try killing it before restart";
                self.kill(status, c, message.to_owned(), None);
                self.start.push(i);
            }
            State::Running => self.running_sidecar(i, c, status),
        }
        Step::Next
    }

    /// A running sidecar: once started (its startup probe passed) the next init
    /// container may start; killed and started again when its startup or liveness probe
    /// fails for good or its definition changed.
    fn running_sidecar(&mut self, i: usize, c: &k8s::Container, status: &ContainerInfo) {
        let probed = (self.probe)(&status.id);
        let own_grace =
            |p: &Option<k8s::Probe>| p.as_ref().and_then(|p| p.termination_grace_period_seconds);
        if c.startup_probe.is_some() {
            if probed.failure == Some(ProbeFailure::Startup) {
                let message = format!("Init container {} failed startup probe", c.name);
                self.kill(status, c, message, own_grace(&c.startup_probe));
                self.start.push(i);
                return;
            }
            if !probed.started {
                return;
            }
        }
        self.done(i);
        if !status.hash.is_empty() && !hash_matches(&status.hash, c) {
            let message = format!("Init container {} definition changed", c.name);
            self.kill(status, c, message, None);
            self.start.push(i);
            return;
        }
        if c.liveness_probe.is_some() && probed.failure == Some(ProbeFailure::Liveness) {
            let message = format!("Init container {} failed liveness probe", c.name);
            self.kill(status, c, message, own_grace(&c.liveness_probe));
            self.start.push(i);
        }
    }
}
