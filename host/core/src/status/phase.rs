//! The pod's phase, as the kubelet's getPhase counts its containers: regular init
//! containers, sidecars (which count while they run or first wait) and app containers.

use k8s_openapi::api::core::v1 as k8s;

use crate::pod;

/// A container status's state, whether it has one or not.
fn state_of(s: &k8s::ContainerStatus) -> k8s::ContainerState {
    s.state.clone().unwrap_or_default()
}

/// Whether a waiting container has ended before (its last state is terminated).
fn ended_before_waiting(s: &k8s::ContainerStatus) -> Option<&k8s::ContainerStateTerminated> {
    s.last_state.as_ref().and_then(|l| l.terminated.as_ref())
}

/// What the phase counts of the regular init containers: `(pending, failed)`.
fn count_regular_inits(pod: &k8s::Pod, inits: &[k8s::ContainerStatus]) -> (usize, usize) {
    let (mut pending, mut failed) = (0, 0);
    let regular = pod::init_containers(pod)
        .iter()
        .filter(|c| !pod::is_restartable(c));
    for c in regular {
        let Some(s) = inits.iter().find(|s| s.name == c.name) else {
            pending += 1;
            continue;
        };
        let state = state_of(s);
        if let Some(t) = &state.terminated {
            failed += usize::from(t.exit_code != 0);
        } else if state.running.is_none()
            && state.waiting.is_some()
            && let Some(last) = ended_before_waiting(s)
        {
            failed += usize::from(last.exit_code != 0);
        } else {
            pending += 1;
        }
    }
    (pending, failed)
}

/// The phase's counts of running, waiting, stopped, succeeded and unknown containers.
#[derive(Default)]
struct Counts {
    running: usize,
    waiting: usize,
    stopped: usize,
    succeeded: usize,
    unknown: usize,
    /// Sidecars not yet started (running but not started, or waiting never having run).
    pending_sidecars: usize,
}

impl Counts {
    /// Sidecars count while they run or first wait; one that ended does not count.
    fn sidecar(&mut self, s: Option<&k8s::ContainerStatus>) {
        let Some(s) = s else {
            self.unknown += 1;
            return;
        };
        let state = state_of(s);
        if state.running.is_some() {
            self.pending_sidecars += usize::from(s.started != Some(true));
            self.running += 1;
        } else if state.terminated.is_some() || ended_before_waiting(s).is_some() {
            // A sidecar that ended does not count for the phase.
        } else if state.waiting.is_some() {
            self.pending_sidecars += 1;
            self.waiting += 1;
        } else {
            self.pending_sidecars += 1;
            self.unknown += 1;
        }
    }

    fn app(&mut self, s: Option<&k8s::ContainerStatus>) {
        let Some(s) = s else {
            self.unknown += 1;
            return;
        };
        let state = state_of(s);
        if state.running.is_some() {
            self.running += 1;
        } else if let Some(t) = &state.terminated {
            self.stopped += 1;
            self.succeeded += usize::from(t.exit_code == 0);
        } else if state.waiting.is_some() {
            if ended_before_waiting(s).is_some() {
                self.stopped += 1;
            } else {
                self.waiting += 1;
            }
        } else {
            self.unknown += 1;
        }
    }
}

/// The kubelet's getPhase over the computed container statuses; `initialized`: an app
/// container of the current sandbox has started (sidecars restarting then do not bring
/// the pod back to Pending).
pub(super) fn phase(
    pod: &k8s::Pod,
    inits: &[k8s::ContainerStatus],
    apps: &[k8s::ContainerStatus],
    initialized: bool,
) -> &'static str {
    let policy = pod::restart_policy(pod);
    let (pending_init, failed_init) = count_regular_inits(pod, inits);
    let mut n = Counts::default();
    for c in pod::init_containers(pod)
        .iter()
        .filter(|c| pod::is_restartable(c))
    {
        n.sidecar(inits.iter().find(|s| s.name == c.name));
    }
    for c in pod::containers(pod) {
        n.app(apps.iter().find(|s| s.name == c.name));
    }
    if failed_init > 0 && policy == "Never" {
        return "Failed";
    }
    if pending_init > 0 || (n.pending_sidecars > 0 && !initialized) || n.waiting > 0 {
        return "Pending";
    }
    if n.running > 0 && n.unknown == 0 {
        return "Running";
    }
    if n.running == 0 && n.stopped > 0 && n.unknown == 0 {
        return match policy {
            "Always" => "Running",
            _ if n.stopped == n.succeeded => "Succeeded",
            "Never" => "Failed",
            _ => "Running",
        };
    }
    "Pending"
}

/// A deleted pod's final phase: Succeeded when every app container ended with 0, else
/// Failed, whatever the restart policy.
pub(super) fn final_phase(apps: &[k8s::ContainerStatus]) -> &'static str {
    let succeeded = !apps.is_empty()
        && apps.iter().all(|s| {
            s.state
                .as_ref()
                .and_then(|st| st.terminated.as_ref())
                .is_some_and(|t| t.exit_code == 0)
        });
    if succeeded { "Succeeded" } else { "Failed" }
}
