//! The pod's conditions as the kubelet 1.33 makes them: PodReadyToStartContainers,
//! Initialized, Ready, ContainersReady, PodScheduled, a disruption, the resize
//! conditions, then those others own (readiness gates' among them), kept as they are.

use k8s_openapi::api::core::v1 as k8s;

use super::{Input, Statuses, any_app_started, incomplete_inits, time};
use crate::pod;

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

/// The conditions the agent makes itself; the pod's other conditions are others' (a
/// readiness gate's, set through the API) and are kept as they are.
const OWN_CONDITIONS: [&str; 7] = [
    "PodResizePending",
    "PodResizeInProgress",
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
];

/// A condition the agent shares with others: `DisruptionTarget`, which the API server
/// sets on a pod evicted through the Eviction API (`EvictionByEvictionAPI`) and the
/// agent on a pod it evicts itself. The pod's own is kept unless the agent sets one.
const SHARED_CONDITION: &str = "DisruptionTarget";

/// The pod's conditions that others set (its readiness gates' among them, and a
/// `DisruptionTarget` the agent does not replace: `shared_set`), as the pod has them.
fn others_conditions(input: &Input<'_>, shared_set: bool) -> Vec<k8s::PodCondition> {
    input
        .pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| !OWN_CONDITIONS.contains(&c.type_.as_str()))
        .filter(|c| !(shared_set && c.type_ == SHARED_CONDITION))
        .cloned()
        .collect()
}

/// Ready: the containers' readiness, and then every readiness gate's condition True
/// (else `ReadinessGatesNotReady`, naming each gate as the kubelet does).
fn ready_condition(
    containers_ready: bool,
    (reason, message): (Option<&str>, Option<String>),
    input: &Input<'_>,
) -> k8s::PodCondition {
    if !containers_ready {
        return condition("Ready", false, reason, message, input);
    }
    let unready: Vec<String> = pod::gate_conditions(input.pod)
        .into_iter()
        .filter_map(|(kind, status)| match status.as_deref() {
            None => Some(format!(
                "corresponding condition of pod readiness gate \"{kind}\" does not exist."
            )),
            Some("True") => None,
            Some(status) => Some(format!(
                "the status of pod readiness gate \"{kind}\" is not \"True\", but {status}"
            )),
        })
        .collect();
    if unready.is_empty() {
        return condition("Ready", true, None, None, input);
    }
    condition(
        "Ready",
        false,
        Some("ReadinessGatesNotReady"),
        Some(unready.join(", ")),
        input,
    )
}

fn names(list: &[&str]) -> String {
    format!("[{}]", list.join(" "))
}

/// The containers whose readiness the pod's counts (sidecars and app containers) that
/// are not ready, by name.
fn unready<'a>(pod: &'a k8s::Pod, statuses: &Statuses) -> Vec<&'a str> {
    let sidecars = pod::init_containers(pod)
        .iter()
        .filter(|c| pod::is_restartable(c))
        .map(|c| (c, &statuses.init));
    let apps = pod::containers(pod).iter().map(|c| (c, &statuses.app));
    sidecars
        .chain(apps)
        .filter(|(c, list)| !list.iter().any(|s| s.name == c.name && s.ready))
        .map(|(c, _)| c.name.as_str())
        .collect()
}

/// Initialized: every init container done (a sidecar started, a regular one finished
/// well), or an app container started; `PodCompleted` once the pod succeeded.
fn initialized_condition(input: &Input<'_>, statuses: &Statuses, phase: &str) -> k8s::PodCondition {
    if phase == "Succeeded" {
        return condition("Initialized", true, Some("PodCompleted"), None, input);
    }
    let incomplete = incomplete_inits(input.pod, &statuses.init);
    if incomplete.is_empty() || any_app_started(&statuses.app) {
        return condition("Initialized", true, None, None, input);
    }
    let message = format!("containers with incomplete status: {}", names(&incomplete));
    condition(
        "Initialized",
        false,
        Some("ContainersNotInitialized"),
        Some(message),
        input,
    )
}

/// ContainersReady's truth, reason and message: `PodCompleted` / `PodFailed` once the
/// pod ended, else every sidecar and app container ready.
fn containers_ready(
    input: &Input<'_>,
    statuses: &Statuses,
    phase: &str,
) -> (bool, Option<&'static str>, Option<String>) {
    match phase {
        "Succeeded" => return (false, Some("PodCompleted"), None),
        "Failed" => return (false, Some("PodFailed"), None),
        _ => {}
    }
    let unready = unready(input.pod, statuses);
    if unready.is_empty() {
        return (true, None, None);
    }
    let message = format!("containers with unready status: {}", names(&unready));
    (false, Some("ContainersNotReady"), Some(message))
}

/// The pod's conditions, the kubelet's five first, then a disruption and the
/// conditions others own.
pub(super) fn conditions(
    input: &Input<'_>,
    statuses: &Statuses,
    phase: &str,
    sandbox_ready: bool,
) -> Vec<k8s::PodCondition> {
    let (ready, reason, message) = containers_ready(input, statuses, phase);
    let mut conditions = vec![
        condition(
            "PodReadyToStartContainers",
            sandbox_ready,
            None,
            None,
            input,
        ),
        initialized_condition(input, statuses, phase),
        ready_condition(ready, (reason, message.clone()), input),
        condition("ContainersReady", ready, reason, message, input),
        condition("PodScheduled", true, None, None, input),
    ];
    let disrupted = input.disruption && input.evicted.is_some();
    if input.disruption
        && let Some((_, message)) = input.evicted
    {
        conditions.push(condition(
            SHARED_CONDITION,
            true,
            Some("TerminationByKubelet"),
            Some(message.to_owned()),
            input,
        ));
    }
    if !matches!(phase, "Succeeded" | "Failed") {
        conditions.extend(resize_conditions(input));
    }
    conditions.extend(others_conditions(input, disrupted));
    conditions
}

/// `PodResizePending` and `PodResizeInProgress`, while there (none once the pod ended).
fn resize_conditions(input: &Input<'_>) -> Vec<k8s::PodCondition> {
    let r = input.resize;
    [
        ("PodResizePending", &r.pending),
        ("PodResizeInProgress", &r.in_progress),
    ]
    .into_iter()
    .filter_map(|(kind, c)| {
        let (reason, message) = c.as_ref()?;
        let some = |s: &String| (!s.is_empty()).then(|| s.clone());
        Some(condition(
            kind,
            true,
            some(reason).as_deref(),
            some(message),
            input,
        ))
    })
    .collect()
}
