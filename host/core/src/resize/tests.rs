//! Resize decisions and plans, case by case.

use super::*;
use crate::runtime::{ContainerInfo, PodRuntime, Sandbox, State};

fn resources(cpu: &str, memory: &str) -> k8s::ResourceRequirements {
    let list = |pairs: &[(&str, &str)]| -> List {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    (*k).to_owned(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity((*v).to_owned()),
                )
            })
            .collect()
    };
    k8s::ResourceRequirements {
        requests: Some(list(&[("cpu", cpu), ("memory", memory)])),
        limits: Some(list(&[("cpu", cpu), ("memory", memory)])),
        ..Default::default()
    }
}

fn pod(containers: &[(&str, &str, &str)]) -> k8s::Pod {
    k8s::Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            uid: Some("u".into()),
            ..Default::default()
        },
        spec: Some(k8s::PodSpec {
            containers: containers
                .iter()
                .map(|(name, cpu, memory)| k8s::Container {
                    name: (*name).into(),
                    resources: Some(resources(cpu, memory)),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn room(cpu: u64, memory: u64, cpu_used: u64, memory_used: u64) -> Room {
    Room {
        cpu,
        memory,
        cpu_used,
        memory_used,
    }
}

#[test]
fn a_spec_equal_to_its_allocation_is_unchanged_whatever_the_notation() {
    let p = pod(&[("c", "1", "1Gi")]);
    let a = allocation_of(&pod(&[("c", "1000m", "1073741824")]));
    assert_eq!(decide(&p, &a, Room::default()), Decision::Unchanged);
    assert!(allocated_pod(&p, &a).is_none());
}

#[test]
fn a_resize_is_allocated_when_it_fits_deferred_when_others_hold_the_room_infeasible_beyond_the_node()
 {
    let allocated = allocation_of(&pod(&[("c", "500m", "128Mi")]));
    let desired = pod(&[("c", "1", "256Mi")]);
    let gib = 1 << 30;
    assert_eq!(
        decide(&desired, &allocated, room(2000, gib, 500, 0)),
        Decision::Allocate
    );
    assert_eq!(
        decide(&desired, &allocated, room(2000, gib, 1500, 0)),
        Decision::Pending(Pending {
            reason: "Deferred",
            message:
                "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000"
                    .into()
        })
    );
    assert_eq!(
        decide(
            &pod(&[("c", "3", "256Mi")]),
            &allocated,
            room(2000, gib, 0, 0)
        ),
        Decision::Pending(Pending {
            reason: "Infeasible",
            message: "Node didn't have enough capacity: cpu, requested: 3000, capacity: 2000"
                .into()
        })
    );
    // The pod runs on its allocation meanwhile.
    let running = allocated_pod(&desired, &allocated).expect("differs");
    let c = &running.spec.as_ref().expect("spec").containers[0];
    assert!(same(
        c.resources.as_ref(),
        Some(&resources("500m", "128Mi"))
    ));
}

fn rt(names: &[&str]) -> PodRuntime {
    PodRuntime {
        sandboxes: vec![Sandbox {
            id: "s".into(),
            ready: true,
            ..Default::default()
        }],
        containers: names
            .iter()
            .map(|n| ContainerInfo {
                id: format!("id-{n}"),
                sandbox_id: "s".into(),
                name: (*n).into(),
                state: State::Running,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn decreases_go_before_increases_for_each_resource() {
    let p = pod(&[("up", "2", "512Mi"), ("down", "500m", "64Mi")]);
    let before = |name: &str| {
        Some(Amounts::of(Some(&match name {
            "up" => resources("1", "256Mi"),
            _ => resources("1", "128Mi"),
        })))
    };
    let plan = plan(&p, &rt(&["up", "down"]), &before);
    let names = |l: &[ContainerUpdate]| l.iter().map(|u| u.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&plan.memory), ["down", "up"]);
    assert_eq!(names(&plan.cpu), ["down", "up"]);
    assert!(plan.restart.is_empty());
    assert!(
        plan.memory_first && plan.update_pod,
        "the pod's memory grows: its cgroup first"
    );
    // Nothing to do once actuated.
    let now = |name: &str| {
        Some(Amounts::of(Some(&match name {
            "up" => resources("2", "512Mi"),
            _ => resources("500m", "64Mi"),
        })))
    };
    assert!(super::plan(&p, &rt(&["up", "down"]), &now).is_empty());
}

#[test]
fn a_restart_policy_for_the_changed_resource_restarts_the_container() {
    let mut p = pod(&[("c", "1", "256Mi")]);
    p.spec.as_mut().expect("spec").containers[0].resize_policy =
        Some(vec![k8s::ContainerResizePolicy {
            resource_name: "memory".into(),
            restart_policy: "RestartContainer".into(),
        }]);
    let before = |_: &str| Some(Amounts::of(Some(&resources("500m", "256Mi"))));
    let cpu_only = plan(&p, &rt(&["c"]), &before);
    assert_eq!(cpu_only.cpu.len(), 1, "a CPU resize needs no restart");
    assert!(cpu_only.restart.is_empty());
    let before = |_: &str| Some(Amounts::of(Some(&resources("1", "128Mi"))));
    let memory = plan(&p, &rt(&["c"]), &before);
    assert_eq!(memory.restart.len(), 1);
    assert_eq!(
        memory.restart[0].message,
        "Container c resize requires restart"
    );
    assert!(memory.memory.is_empty());
}

#[test]
fn a_pod_that_shrinks_sets_its_cgroup_after_its_containers() {
    let p = pod(&[("c", "500m", "64Mi")]);
    let before = |_: &str| Some(Amounts::of(Some(&resources("1", "128Mi"))));
    let plan = plan(&p, &rt(&["c"]), &before);
    assert!(plan.update_pod);
    assert!(!plan.memory_first && !plan.cpu_first, "{plan:?}");
    // CPU up, memory down: each resource in its own order.
    let p = pod(&[("c", "2", "64Mi")]);
    let plan = super::plan(&p, &rt(&["c"]), &before);
    assert!(plan.cpu_first && !plan.memory_first, "{plan:?}");
}
