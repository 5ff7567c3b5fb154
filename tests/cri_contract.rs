//! The CRI contract: one suite, run against both the simulator and a real containerd.
//!
//! Every case below runs twice, as `sim::<case>` and `containerd::<case>`. Where the
//! two disagree the simulator is wrong: these tests are what "faithful" means.
//!
//! containerd is found through `WASMLET_CRI_ENDPOINT` (`cargo xtask test` starts it with
//! `scripts/containerd.sh up` and sets it, with `WASMLET_REQUIRE_CONTAINERD=1` so that a
//! missing containerd fails instead of skipping).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use wasmlet_cri::proto::*;
use wasmlet_cri::{CriRuntime, ErrorKind};
use wasmlet_tests::*;

macro_rules! contract {
    ($($case:ident),* $(,)?) => {
        mod sim {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let rt = wasmlet_tests::Runtime::sim().await;
                    wasmlet_tests::run_and_clean_up(rt, |rt| Box::pin(async move { super::$case(&rt).await })).await;
                }
            )*
        }
        mod containerd {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let Some(rt) = wasmlet_tests::Runtime::containerd().await else { return };
                    wasmlet_tests::run_and_clean_up(rt, |rt| Box::pin(async move { super::$case(&rt).await })).await;
                }
            )*
        }
    };
}

contract!(
    version_and_status,
    images,
    pod_with_host_network,
    pod_with_cni_network,
    container_lifecycle,
    exit_codes,
    exec_sync,
    list_filters,
    idempotent_stop_and_remove,
    not_found,
    stop_pod_sandbox_stops_its_containers,
    metadata_conflicts,
    status_timestamps,
    stop_grace_period,
    remove_running_container,
    container_events,
    pod_sandbox_stats,
);

const SECOND: i64 = 1_000_000_000;
const SLEEP: &[&str] = &["sleep", "3600"];

fn now_nanos() -> i64 {
    wasmlet_cri::labels::unix_nanos()
}

async fn version_and_status(rt: &Runtime) {
    let v = rt.client.version().await.expect("Version");
    assert_eq!(v.runtime_api_version, "v1");
    assert!(
        !v.runtime_name.is_empty() && !v.runtime_version.is_empty(),
        "{v:?}"
    );

    let status = rt.client.status(false).await.expect("Status");
    let conditions = status.status.expect("status").conditions;
    for wanted in ["RuntimeReady", "NetworkReady"] {
        let c = conditions
            .iter()
            .find(|c| c.r#type == wanted)
            .unwrap_or_else(|| panic!("no {wanted}"));
        assert!(c.status, "{wanted} is false: {c:?}");
    }
}

async fn images(rt: &Runtime) {
    let spec = |name: &str| ImageSpec {
        image: name.into(),
        ..Default::default()
    };
    let image = rt
        .client
        .image_status(spec(BUSYBOX))
        .await
        .expect("ImageStatus")
        .expect("busybox present");
    assert!(image.id.starts_with("sha256:"), "{}", image.id);
    assert!(
        image.repo_tags.iter().any(|t| t == BUSYBOX),
        "{:?}",
        image.repo_tags
    );
    assert!(image.size > 0);

    // Absent is an answer, not an error.
    let absent = rt
        .client
        .image_status(spec("localhost/not-here:1"))
        .await
        .expect("ImageStatus");
    assert!(absent.is_none());

    // By id as well as by name.
    let by_id = rt
        .client
        .image_status(spec(&image.id))
        .await
        .expect("ImageStatus by id");
    assert_eq!(by_id.map(|i| i.id), Some(image.id.clone()));

    let all = rt.client.list_images(None).await.expect("ListImages");
    assert!(all.iter().any(|i| i.id == image.id));

    let fs = rt.client.image_fs_info().await.expect("ImageFsInfo");
    assert!(!fs.image_filesystems.is_empty());
}

async fn pod_with_host_network(rt: &Runtime) {
    let pod = rt.run_pod("hostnet", true).await;
    let resp = rt
        .client
        .pod_sandbox_status(&pod.0, false)
        .await
        .expect("PodSandboxStatus");
    let status = resp.status.expect("status");
    assert_eq!(status.id, pod.0);
    assert_eq!(status.state(), PodSandboxState::SandboxReady);
    assert_eq!(status.metadata, pod.1.metadata);
    // On the node's network the runtime reports no pod IP.
    let ip = status.network.map(|n| n.ip).unwrap_or_default();
    assert_eq!(ip, "", "host-network pod got an IP");
    let ns = status
        .linux
        .and_then(|l| l.namespaces)
        .and_then(|n| n.options)
        .expect("namespace options");
    assert_eq!(ns.network(), NamespaceMode::Node);
    // Labels and annotations come back as sent (the runtime may add its own labels).
    for (k, v) in &pod.1.labels {
        assert_eq!(status.labels.get(k), Some(v), "label {k}");
    }
    assert_eq!(status.annotations, pod.1.annotations);
}

async fn pod_with_cni_network(rt: &Runtime) {
    let a = rt.run_pod("cni-a", false).await;
    let b = rt.run_pod("cni-b", false).await;
    let ip_of = |s: PodSandboxStatusResponse| -> Ipv4Addr {
        let ip = s
            .status
            .and_then(|s| s.network)
            .map(|n| n.ip)
            .unwrap_or_default();
        ip.parse()
            .unwrap_or_else(|_| panic!("pod IP {ip:?} is not IPv4"))
    };
    let ip_a = ip_of(
        rt.client
            .pod_sandbox_status(&a.0, false)
            .await
            .expect("status a"),
    );
    let ip_b = ip_of(
        rt.client
            .pod_sandbox_status(&b.0, false)
            .await
            .expect("status b"),
    );
    assert_ne!(ip_a, ip_b, "two pods share an IP");
    for ip in [ip_a, ip_b] {
        assert_eq!(
            ip.octets()[..2],
            [10, 88],
            "{ip} is outside the pod CIDR 10.88.0.0/16"
        );
    }
    let ns = rt
        .client
        .pod_sandbox_status(&a.0, false)
        .await
        .expect("status")
        .status
        .and_then(|s| s.linux)
        .and_then(|l| l.namespaces)
        .and_then(|n| n.options)
        .expect("namespace options");
    assert_eq!(ns.network(), NamespaceMode::Pod);
}

async fn container_lifecycle(rt: &Runtime) {
    let pod = rt.run_pod("life", false).await;
    let id = rt.create(&pod, "main", SLEEP).await;

    let created = rt
        .client
        .container_status(&id, false)
        .await
        .expect("status")
        .status
        .expect("status");
    assert_eq!(created.state(), ContainerState::ContainerCreated);
    assert_eq!(
        created.metadata,
        Some(ContainerMetadata {
            name: "main".into(),
            attempt: 0
        })
    );
    assert!(created.created_at > 0);
    assert_eq!(created.started_at, 0);
    assert_eq!(created.finished_at, 0);
    let image = created.image.as_ref().map(|i| i.image.as_str());
    assert_eq!(image, Some(BUSYBOX));
    assert!(
        created.image_ref.starts_with("sha256:") || created.image_ref.contains('@'),
        "{}",
        created.image_ref
    );
    assert_eq!(
        created.labels.get("container").map(String::as_str),
        Some("main")
    );
    assert_eq!(
        created
            .annotations
            .get("test.wasmlet.io/container")
            .map(String::as_str),
        Some("main")
    );
    assert!(
        created.log_path.ends_with("main/0.log"),
        "{}",
        created.log_path
    );

    rt.client
        .start_container(&id)
        .await
        .expect("StartContainer");
    let running = rt
        .client
        .container_status(&id, false)
        .await
        .expect("status")
        .status
        .expect("status");
    assert_eq!(running.state(), ContainerState::ContainerRunning);
    assert!(running.started_at >= running.created_at);

    let listed = rt
        .client
        .list_containers(None)
        .await
        .expect("ListContainers");
    let c = listed.iter().find(|c| c.id == id).expect("listed");
    assert_eq!(c.pod_sandbox_id, pod.0);
    assert_eq!(c.state(), ContainerState::ContainerRunning);
    assert_eq!(c.metadata.as_ref().map(|m| m.name.as_str()), Some("main"));

    // sleep as PID 1 ignores SIGTERM: a zero grace period kills it.
    rt.client
        .stop_container(&id, 0)
        .await
        .expect("StopContainer");
    let exited = rt
        .client
        .container_status(&id, false)
        .await
        .expect("status")
        .status
        .expect("status");
    assert_eq!(exited.state(), ContainerState::ContainerExited);
    assert_eq!(exited.exit_code, 137);
    assert_eq!(exited.reason, "Error");
    assert!(exited.finished_at >= exited.started_at);

    rt.client
        .remove_container(&id)
        .await
        .expect("RemoveContainer");
    let gone = rt
        .client
        .container_status(&id, false)
        .await
        .expect_err("status of removed container");
    assert_eq!(gone.kind(), ErrorKind::NotFound, "{gone}");
}

async fn exit_codes(rt: &Runtime) {
    let pod = rt.run_pod("exits", true).await;
    let cases: &[(&str, &[&str], i32, &str)] = &[
        ("zero", &["true"], 0, "Completed"),
        ("one", &["false"], 1, "Error"),
        ("three", &["sh", "-c", "sleep 0.2; exit 3"], 3, "Error"),
        (
            "done",
            &["sh", "-c", "echo hello && sleep 0.1"],
            0,
            "Completed",
        ),
    ];
    let mut ids = Vec::new();
    for (name, argv, _, _) in cases {
        ids.push(rt.start(&pod, name, argv).await);
    }
    for ((name, _, code, reason), id) in cases.iter().zip(&ids) {
        let s = rt
            .wait_state(id, ContainerState::ContainerExited, Duration::from_secs(10))
            .await;
        assert_eq!(
            (s.exit_code, s.reason.as_str()),
            (*code, *reason),
            "container {name}"
        );
        // Both set; no order is promised: for a process that exits at once containerd
        // records finished_at a little before started_at.
        assert!(
            s.started_at > 0 && s.finished_at > 0,
            "container {name}: {s:?}"
        );
    }
}

async fn exec_sync(rt: &Runtime) {
    let pod = rt.run_pod("exec", true).await;
    let id = rt.start(&pod, "main", SLEEP).await;
    let run = |cmd: &[&str]| {
        let cmd = cmd.iter().map(|s| s.to_string()).collect();
        rt.client.exec_sync(&id, cmd, Duration::from_secs(5))
    };
    let out = run(&["sh", "-c", "echo out; echo err >&2; exit 7"])
        .await
        .expect("ExecSync");
    assert_eq!(out.exit_code, 7);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");

    let ok = run(&["true"]).await.expect("ExecSync true");
    assert_eq!(ok.exit_code, 0);
    assert!(ok.stdout.is_empty() && ok.stderr.is_empty());
    assert_eq!(run(&["false"]).await.expect("ExecSync false").exit_code, 1);
    let echo = run(&["echo", "a", "b"]).await.expect("ExecSync echo");
    assert_eq!(String::from_utf8_lossy(&echo.stdout), "a b\n");

    // The runtime enforces the exec timeout.
    let slow = rt.client.exec_sync(
        &id,
        vec!["sleep".into(), "5".into()],
        Duration::from_secs(1),
    );
    let err = slow.await.expect_err("exec past its timeout");
    assert_eq!(err.kind(), ErrorKind::DeadlineExceeded, "{err}");

    // Exec in a container that is not running is refused (containerd: UNKNOWN, "failed to
    // exec in container: container is in CONTAINER_EXITED state").
    rt.client
        .stop_container(&id, 0)
        .await
        .expect("StopContainer");
    let err = run(&["true"])
        .await
        .expect_err("exec in an exited container");
    assert_eq!(err.kind(), ErrorKind::Unknown, "{err}");
    assert!(err.message().contains("CONTAINER_EXITED"), "{err}");
}

async fn list_filters(rt: &Runtime) {
    let a = rt.run_pod("filter-a", true).await;
    let b = rt.run_pod("filter-b", true).await;
    let a1 = rt.start(&a, "one", SLEEP).await;
    let a2 = rt.create(&a, "two", SLEEP).await;
    let b1 = rt.start(&b, "one", SLEEP).await;
    let mine = |cs: Vec<Container>| -> Vec<String> {
        let mut ids: Vec<String> = cs
            .into_iter()
            .map(|c| c.id)
            .filter(|id| [&a1, &a2, &b1].contains(&id))
            .collect();
        ids.sort();
        ids
    };
    let sorted = |mut v: Vec<&String>| -> Vec<String> {
        v.sort();
        v.into_iter().cloned().collect()
    };
    let list = |f: ContainerFilter| rt.client.list_containers(Some(f));

    let all = mine(rt.client.list_containers(None).await.expect("list"));
    assert_eq!(all, sorted(vec![&a1, &a2, &b1]));
    let by_id = list(ContainerFilter {
        id: a2.clone(),
        ..Default::default()
    })
    .await
    .expect("by id");
    assert_eq!(by_id.iter().map(|c| &c.id).collect::<Vec<_>>(), vec![&a2]);
    let by_pod = mine(
        list(ContainerFilter {
            pod_sandbox_id: a.0.clone(),
            ..Default::default()
        })
        .await
        .expect("by pod"),
    );
    assert_eq!(by_pod, sorted(vec![&a1, &a2]));
    let running = ContainerStateValue {
        state: ContainerState::ContainerRunning as i32,
    };
    let by_state = mine(
        list(ContainerFilter {
            state: Some(running),
            ..Default::default()
        })
        .await
        .expect("by state"),
    );
    assert_eq!(by_state, sorted(vec![&a1, &b1]));
    let created = ContainerStateValue {
        state: ContainerState::ContainerCreated as i32,
    };
    let by_state = mine(
        list(ContainerFilter {
            state: Some(created),
            ..Default::default()
        })
        .await
        .expect("created"),
    );
    assert_eq!(by_state, vec![a2.clone()]);
    let one = BTreeMap::from([("container".to_string(), "one".to_string())]);
    let by_label = mine(
        list(ContainerFilter {
            label_selector: one.clone(),
            ..Default::default()
        })
        .await
        .expect("labels"),
    );
    assert_eq!(by_label, sorted(vec![&a1, &b1]));
    let and = ContainerFilter {
        pod_sandbox_id: b.0.clone(),
        label_selector: one,
        ..Default::default()
    };
    assert_eq!(mine(list(and).await.expect("and")), vec![b1.clone()]);
    let none = BTreeMap::from([("container".to_string(), "three".to_string())]);
    assert!(
        mine(
            list(ContainerFilter {
                label_selector: none,
                ..Default::default()
            })
            .await
            .expect("none")
        )
        .is_empty()
    );
    let unknown = ContainerFilter {
        pod_sandbox_id: "0".repeat(64),
        ..Default::default()
    };
    assert!(list(unknown).await.expect("unknown pod").is_empty());

    // Sandboxes: by id, by state, by label.
    let pods = |f: PodSandboxFilter| rt.client.list_pod_sandbox(Some(f));
    let mine_pods = |ps: Vec<PodSandbox>| -> Vec<String> {
        let mut ids: Vec<String> = ps
            .into_iter()
            .map(|p| p.id)
            .filter(|id| *id == a.0 || *id == b.0)
            .collect();
        ids.sort();
        ids
    };
    let run = BTreeMap::from([(RUN_LABEL.to_string(), rt.run_id.clone())]);
    let by_run = mine_pods(
        pods(PodSandboxFilter {
            label_selector: run.clone(),
            ..Default::default()
        })
        .await
        .expect("run"),
    );
    assert_eq!(by_run, sorted(vec![&a.0, &b.0]));
    let app_a = BTreeMap::from([("app".to_string(), "filter-a".to_string())]);
    let by_app = pods(PodSandboxFilter {
        label_selector: app_a,
        ..Default::default()
    })
    .await
    .expect("app");
    assert_eq!(by_app.iter().map(|p| &p.id).collect::<Vec<_>>(), vec![&a.0]);
    let by_id = pods(PodSandboxFilter {
        id: b.0.clone(),
        ..Default::default()
    })
    .await
    .expect("pod id");
    assert_eq!(by_id.len(), 1);
    assert_eq!(by_id[0].metadata, b.1.metadata);

    rt.client
        .stop_pod_sandbox(&b.0)
        .await
        .expect("StopPodSandbox");
    let ready = PodSandboxStateValue {
        state: PodSandboxState::SandboxReady as i32,
    };
    let ready = PodSandboxFilter {
        state: Some(ready),
        label_selector: run.clone(),
        ..Default::default()
    };
    assert_eq!(
        mine_pods(pods(ready).await.expect("ready")),
        vec![a.0.clone()]
    );
    let notready = PodSandboxStateValue {
        state: PodSandboxState::SandboxNotready as i32,
    };
    let notready = PodSandboxFilter {
        state: Some(notready),
        label_selector: run,
        ..Default::default()
    };
    assert_eq!(
        mine_pods(pods(notready).await.expect("notready")),
        vec![b.0.clone()]
    );
}

async fn idempotent_stop_and_remove(rt: &Runtime) {
    let pod = rt.run_pod("idem", true).await;
    let id = rt.start(&pod, "main", SLEEP).await;

    rt.client
        .stop_container(&id, 0)
        .await
        .expect("StopContainer");
    rt.client
        .stop_container(&id, 0)
        .await
        .expect("StopContainer again");
    rt.client
        .remove_container(&id)
        .await
        .expect("RemoveContainer");
    rt.client
        .remove_container(&id)
        .await
        .expect("RemoveContainer again");

    rt.client
        .stop_pod_sandbox(&pod.0)
        .await
        .expect("StopPodSandbox");
    rt.client
        .stop_pod_sandbox(&pod.0)
        .await
        .expect("StopPodSandbox again");
    rt.client
        .remove_pod_sandbox(&pod.0)
        .await
        .expect("RemovePodSandbox");
    rt.client
        .remove_pod_sandbox(&pod.0)
        .await
        .expect("RemovePodSandbox again");

    let err = rt
        .client
        .pod_sandbox_status(&pod.0, false)
        .await
        .expect_err("status of removed pod");
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    let listed = rt
        .client
        .list_pod_sandbox(None)
        .await
        .expect("ListPodSandbox");
    assert!(listed.iter().all(|p| p.id != pod.0));
}

async fn not_found(rt: &Runtime) {
    let ghost = "f".repeat(64);
    let c = &rt.client;
    let kind = |r: Result<(), wasmlet_cri::CriError>| r.map_err(|e| e.kind());
    assert_eq!(
        kind(c.container_status(&ghost, false).await.map(drop)),
        Err(ErrorKind::NotFound)
    );
    assert_eq!(
        kind(c.pod_sandbox_status(&ghost, false).await.map(drop)),
        Err(ErrorKind::NotFound)
    );
    assert_eq!(
        kind(c.start_container(&ghost).await),
        Err(ErrorKind::NotFound)
    );
    assert_eq!(
        kind(c.stop_container(&ghost, 0).await),
        Err(ErrorKind::NotFound)
    );
    assert_eq!(
        kind(c.stop_pod_sandbox(&ghost).await),
        Err(ErrorKind::NotFound)
    );
    assert_eq!(
        kind(
            c.exec_sync(&ghost, vec!["true".into()], Duration::from_secs(1))
                .await
                .map(drop)
        ),
        Err(ErrorKind::NotFound)
    );
    let err = c.container_status(&ghost, false).await.expect_err("ghost");
    assert!(err.to_string().contains(c.endpoint().as_str()), "{err}");
    assert!(err.to_string().contains("ContainerStatus"), "{err}");
    // Removal of what is not there succeeds: the runtime's state already is the goal.
    assert_eq!(kind(c.remove_container(&ghost).await), Ok(()));
    assert_eq!(kind(c.remove_pod_sandbox(&ghost).await), Ok(()));
    // A container cannot be created in a sandbox that does not exist.
    let pod_config = rt.sandbox_config("ghost", true);
    let err = c
        .create_container(&ghost, container_config("x", SLEEP), pod_config)
        .await
        .expect_err("create");
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
}

async fn stop_pod_sandbox_stops_its_containers(rt: &Runtime) {
    let pod = rt.run_pod("stoppod", false).await;
    let running = rt.start(&pod, "running", SLEEP).await;
    let created = rt.create(&pod, "created", SLEEP).await;
    rt.client
        .stop_pod_sandbox(&pod.0)
        .await
        .expect("StopPodSandbox");

    let status = rt
        .client
        .pod_sandbox_status(&pod.0, false)
        .await
        .expect("status")
        .status
        .expect("status");
    assert_eq!(status.state(), PodSandboxState::SandboxNotready);
    let s = rt
        .client
        .container_status(&running, false)
        .await
        .expect("status")
        .status
        .expect("status");
    assert_eq!(s.state(), ContainerState::ContainerExited);
    assert_eq!(s.exit_code, 137, "{s:?}");
    assert!(s.finished_at > 0);
    // A container that never started stays CREATED.
    let s = rt
        .client
        .container_status(&created, false)
        .await
        .expect("status")
        .status
        .expect("status");
    assert_eq!(s.state(), ContainerState::ContainerCreated);
    assert_eq!(s.finished_at, 0);
    // A stopped sandbox gives its IP back.
    let network = status.network.map(|n| n.ip).unwrap_or_default();
    assert_eq!(network, "");

    // Nothing can start or be created in a stopped sandbox.
    let err = rt
        .client
        .start_container(&created)
        .await
        .expect_err("start in a stopped sandbox");
    assert_eq!(err.kind(), ErrorKind::Unknown, "{err}");
    assert!(err.message().contains("is not running"), "{err}");
    let err = rt
        .client
        .create_container(&pod.0, container_config("late", SLEEP), pod.1.clone())
        .await
        .expect_err("create in a stopped sandbox");
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");

    // Removing the sandbox removes its containers.
    rt.client
        .remove_pod_sandbox(&pod.0)
        .await
        .expect("RemovePodSandbox");
    for id in [&running, &created] {
        let err = rt
            .client
            .container_status(id, false)
            .await
            .expect_err("container of removed pod");
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    }
}

async fn metadata_conflicts(rt: &Runtime) {
    let pod = rt.run_pod("conflict", true).await;
    // The same (name, uid, namespace, attempt) again is refused while the first exists.
    let err = rt
        .client
        .run_pod_sandbox(pod.1.clone(), "")
        .await
        .expect_err("duplicate sandbox");
    let m = pod.1.metadata.clone().expect("metadata");
    let name = format!("{}_{}_{}_0", m.name, m.namespace, m.uid);
    assert_eq!(err.kind(), ErrorKind::Unknown, "{err}");
    assert_eq!(
        err.message(),
        format!(
            "failed to reserve sandbox name \"{name}\": name \"{name}\" is reserved for \"{}\"",
            pod.0
        )
    );
    // A new attempt is a new sandbox.
    let mut next = pod.1.clone();
    if let Some(m) = next.metadata.as_mut() {
        m.attempt = 1;
    }
    let second = rt
        .client
        .run_pod_sandbox(next, "")
        .await
        .expect("attempt 1");
    assert_ne!(second, pod.0);

    let first = rt.create(&pod, "app", SLEEP).await;
    let err = rt
        .client
        .create_container(&pod.0, container_config("app", SLEEP), pod.1.clone())
        .await
        .expect_err("duplicate container");
    let cname = format!("app_{name}");
    assert_eq!(err.kind(), ErrorKind::Unknown, "{err}");
    assert_eq!(
        err.message(),
        format!(
            "failed to reserve container name \"{cname}\": name \"{cname}\" is reserved for \"{first}\""
        )
    );

    // Starting twice is refused.
    rt.client
        .start_container(&first)
        .await
        .expect("StartContainer");
    let err = rt
        .client
        .start_container(&first)
        .await
        .expect_err("second start");
    assert_eq!(err.kind(), ErrorKind::Unknown, "{err}");
    assert!(err.message().contains("CONTAINER_RUNNING"), "{err}");
    let mut retry = container_config("app", SLEEP);
    if let Some(m) = retry.metadata.as_mut() {
        m.attempt = 1;
    }
    let again = rt
        .client
        .create_container(&pod.0, retry, pod.1.clone())
        .await
        .expect("attempt 1");
    assert_ne!(again, first);
    // Once the first is removed its name is free again.
    rt.client
        .remove_container(&first)
        .await
        .expect("RemoveContainer");
    rt.create(&pod, "app", SLEEP).await;
}

async fn status_timestamps(rt: &Runtime) {
    let before = now_nanos();
    let pod = rt.run_pod("times", true).await;
    let sandbox = rt
        .client
        .pod_sandbox_status(&pod.0, false)
        .await
        .expect("status")
        .status
        .expect("status");
    assert!(sandbox.created_at >= before - SECOND && sandbox.created_at <= now_nanos() + SECOND);

    let id = rt.start(&pod, "main", &["sh", "-c", "sleep 0.3"]).await;
    let s = rt
        .wait_state(
            &id,
            ContainerState::ContainerExited,
            Duration::from_secs(10),
        )
        .await;
    assert!(s.created_at >= sandbox.created_at, "{s:?}");
    assert!(s.started_at >= s.created_at, "{s:?}");
    assert!(
        s.finished_at - s.started_at >= SECOND / 5,
        "ran {} ns",
        s.finished_at - s.started_at
    );
    assert!(s.finished_at <= now_nanos() + SECOND);
    let listed = rt.client.list_containers(None).await.expect("list");
    let c = listed.iter().find(|c| c.id == id).expect("listed");
    assert_eq!(c.created_at, s.created_at);
}

async fn stop_grace_period(rt: &Runtime) {
    let pod = rt.run_pod("grace", true).await;
    // A shell that traps TERM exits at once with the trap's code ...
    let polite = rt
        .start(
            &pod,
            "polite",
            &[
                "sh",
                "-c",
                "trap 'exit 0' TERM; while true; do sleep 0.1; done",
            ],
        )
        .await;
    // ... sleep as PID 1 ignores it and is killed when the grace period ends.
    let stubborn = rt.start(&pod, "stubborn", SLEEP).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let t = tokio::time::Instant::now();
    rt.client
        .stop_container(&polite, 10)
        .await
        .expect("StopContainer polite");
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "polite took {:?}",
        t.elapsed()
    );
    let s = rt
        .client
        .container_status(&polite, false)
        .await
        .expect("status")
        .status
        .expect("status");
    assert_eq!((s.exit_code, s.reason.as_str()), (0, "Completed"));

    let t = tokio::time::Instant::now();
    rt.client
        .stop_container(&stubborn, 1)
        .await
        .expect("StopContainer stubborn");
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "stubborn took {took:?}"
    );
    let s = rt
        .client
        .container_status(&stubborn, false)
        .await
        .expect("status")
        .status
        .expect("status");
    assert_eq!((s.exit_code, s.reason.as_str()), (137, "Error"));

    // In the sandbox's PID namespace the process is not PID 1: SIGTERM's default kills it.
    let config = container_config_in("shared", SLEEP, NamespaceMode::Pod);
    let shared = rt
        .client
        .create_container(&pod.0, config, pod.1.clone())
        .await
        .expect("create shared");
    rt.client
        .start_container(&shared)
        .await
        .expect("start shared");
    let t = tokio::time::Instant::now();
    rt.client
        .stop_container(&shared, 10)
        .await
        .expect("StopContainer shared");
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "shared took {:?}",
        t.elapsed()
    );
    let s = rt
        .client
        .container_status(&shared, false)
        .await
        .expect("status")
        .status
        .expect("status");
    assert_eq!((s.exit_code, s.reason.as_str()), (143, "Error"));
}

async fn remove_running_container(rt: &Runtime) {
    let pod = rt.run_pod("rmrun", true).await;
    let id = rt.start(&pod, "main", SLEEP).await;
    // A running container is killed and removed.
    rt.client
        .remove_container(&id)
        .await
        .expect("RemoveContainer of a running container");
    let err = rt
        .client
        .container_status(&id, false)
        .await
        .expect_err("removed");
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

async fn container_events(rt: &Runtime) {
    let mut events = match rt.client.container_events().await {
        Ok(stream) => stream,
        Err(e) if e.is_unimplemented() => {
            // containerd 1.6 has no event stream: the client must have said so at connect.
            assert!(!rt.client.negotiated().container_events);
            assert_eq!(rt.kind, Kind::Containerd, "the simulator must serve events");
            return;
        }
        Err(e) => panic!("GetContainerEvents: {e}"),
    };
    assert!(rt.client.negotiated().container_events);
    let pod = rt.run_pod("events", true).await;
    let id = rt.start(&pod, "main", SLEEP).await;
    rt.client
        .stop_container(&id, 0)
        .await
        .expect("StopContainer");
    rt.client
        .remove_container(&id)
        .await
        .expect("RemoveContainer");

    use tokio_stream::StreamExt;
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while seen.len() < 4 {
        let next = tokio::time::timeout_at(deadline, events.next())
            .await
            .expect("events in time");
        let ev = next.expect("stream open").expect("event");
        if ev.container_id != id {
            continue;
        }
        if ev.container_event_type() != ContainerEventType::ContainerDeletedEvent {
            let sandbox = ev
                .pod_sandbox_status
                .as_ref()
                .expect("sandbox status in event");
            assert_eq!(sandbox.id, pod.0);
            assert!(ev.containers_statuses.iter().any(|c| c.id == id), "{ev:?}");
        }
        assert!(ev.created_at > 0);
        seen.push(ev.container_event_type());
    }
    assert_eq!(
        seen,
        [
            ContainerEventType::ContainerCreatedEvent,
            ContainerEventType::ContainerStartedEvent,
            ContainerEventType::ContainerStoppedEvent,
            ContainerEventType::ContainerDeletedEvent,
        ]
    );
}

/// containerd measures a sandbox through its cgroup parent: with one, its cgroup,
/// network namespace, process count and containers; without (a sandbox no kubelet would
/// make), the call fails naming the sandbox. Stopped sandboxes are not listed.
async fn pod_sandbox_stats(rt: &Runtime) {
    let mut config = rt.sandbox_config("sandbox-stats", false);
    let uid = config
        .metadata
        .as_ref()
        .map(|m| m.uid.clone())
        .unwrap_or_default();
    let parent = format!("/wasmlet-contract/pod{uid}");
    if let Some(linux) = config.linux.as_mut() {
        linux.cgroup_parent = parent.clone();
    }
    let sandbox = rt
        .client
        .run_pod_sandbox(config.clone(), "")
        .await
        .expect("RunPodSandbox");
    let pod = (sandbox, config);
    let id = rt.start(&pod, "main", SLEEP).await;
    let by_id = |id: &str| PodSandboxStatsFilter {
        id: id.to_owned(),
        ..Default::default()
    };
    let list = rt
        .client
        .list_pod_sandbox_stats(Some(by_id(&pod.0)))
        .await
        .expect("ListPodSandboxStats");
    assert_eq!(list.len(), 1, "{list:?}");
    let stats = &list[0];
    let attributes = stats.attributes.as_ref().expect("attributes");
    assert_eq!(attributes.id, pod.0);
    assert_eq!(
        attributes.metadata, pod.1.metadata,
        "the sandbox's own metadata"
    );
    let linux = stats.linux.as_ref().expect("linux stats");
    let cpu = linux.cpu.as_ref().expect("cpu");
    assert!(
        cpu.timestamp > 0 && cpu.usage_core_nano_seconds.is_some(),
        "{cpu:?}"
    );
    let memory = linux.memory.as_ref().expect("memory");
    assert!(
        memory
            .working_set_bytes
            .as_ref()
            .is_some_and(|v| v.value > 0),
        "{memory:?}"
    );
    assert!(
        linux
            .containers
            .iter()
            .any(|c| c.attributes.as_ref().is_some_and(|a| a.id == id)),
        "its container among its stats: {linux:?}"
    );
    let network = linux
        .network
        .as_ref()
        .expect("network of the pod's namespace");
    let eth0 = network
        .default_interface
        .as_ref()
        .expect("default interface");
    assert_eq!(eth0.name, "eth0");
    assert!(
        eth0.rx_bytes.is_some() && eth0.tx_bytes.is_some(),
        "{eth0:?}"
    );

    let bare = rt.run_pod("sandbox-stats-bare", false).await;
    let e = rt
        .client
        .list_pod_sandbox_stats(Some(by_id(&bare.0)))
        .await
        .expect_err("no cgroup parent, no stats");
    let text = e.to_string();
    assert!(
        text.contains(&bare.0) && text.contains("cgroupPath is empty"),
        "{text}"
    );

    rt.client
        .stop_pod_sandbox(&pod.0)
        .await
        .expect("StopPodSandbox");
    let after = rt
        .client
        .list_pod_sandbox_stats(Some(by_id(&pod.0)))
        .await
        .expect("ListPodSandboxStats");
    assert!(
        after.is_empty(),
        "a stopped sandbox has no stats: {after:?}"
    );
    if rt.kind == Kind::Containerd {
        // The parent runc made in each hierarchy, empty once the sandbox is gone.
        rt.client
            .remove_pod_sandbox(&pod.0)
            .await
            .expect("RemovePodSandbox");
        if let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") {
            for h in hierarchies.flatten() {
                let dir = h.path().join(parent.trim_start_matches('/'));
                let _ = std::fs::remove_dir(&dir);
                let _ = std::fs::remove_dir(h.path().join("wasmlet-contract"));
            }
        }
    }
}
