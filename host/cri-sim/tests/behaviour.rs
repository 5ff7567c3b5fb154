//! Scripted behaviour and faults, driven in-process with paused tokio time: every
//! "after 2 s" happens exactly when the test advances the clock, so these tests are
//! deterministic and take milliseconds.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_stream::StreamExt;
use wasmlet_cri::proto::*;
use wasmlet_cri::{CriRuntime, ErrorKind};
use wasmlet_cri_sim::script::{FAIL_RUN_SANDBOX_ANNOTATION, POD_SCRIPT_PREFIX, SCRIPT_ANNOTATION};
use wasmlet_cri_sim::{Script, Simulator, fixtures};

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn pod(name: &str, annotations: &[(&str, &str)]) -> PodSandboxConfig {
    PodSandboxConfig {
        annotations: map(annotations),
        ..fixtures::pod(name)
    }
}

fn container(name: &str, argv: &[&str], annotations: &[(&str, &str)]) -> ContainerConfig {
    ContainerConfig {
        annotations: map(annotations),
        ..fixtures::container(name, argv)
    }
}

async fn start(sim: &Simulator, sandbox: &str, config: ContainerConfig) -> String {
    let id = sim
        .create_container(sandbox, config, pod("unused", &[]))
        .await
        .expect("create");
    sim.start_container(&id).await.expect("start");
    id
}

async fn status(sim: &Simulator, id: &str) -> ContainerStatus {
    sim.container_status(id, false)
        .await
        .expect("status")
        .status
        .expect("status")
}

async fn advance(d: Duration) {
    tokio::time::advance(d).await;
    // Let timer tasks run.
    tokio::task::yield_now().await;
}

#[tokio::test(start_paused = true)]
async fn a_command_that_sleeps_then_fails_exits_on_time() {
    let sim = Simulator::new();
    let sandbox = sim
        .run_pod_sandbox(pod("crash", &[]), "")
        .await
        .expect("run");
    let id = start(
        &sim,
        &sandbox,
        container("app", &["sh", "-c", "sleep 2; exit 1"], &[]),
    )
    .await;
    advance(Duration::from_millis(1999)).await;
    assert_eq!(
        status(&sim, &id).await.state(),
        ContainerState::ContainerRunning
    );
    advance(Duration::from_millis(1)).await;
    let s = status(&sim, &id).await;
    assert_eq!(
        (s.state(), s.exit_code, s.reason.as_str()),
        (ContainerState::ContainerExited, 1, "Error")
    );
    assert_eq!(s.finished_at - s.started_at, 2_000_000_000);
}

#[tokio::test(start_paused = true)]
async fn scripts_override_the_command() {
    let sim = Simulator::new();
    let sandbox = sim
        .run_pod_sandbox(pod("scripted", &[]), "")
        .await
        .expect("run");
    let exit = container(
        "exit",
        &["httpd", "-f"],
        &[(SCRIPT_ANNOTATION, "exit-after=3s exit-code=2")],
    );
    let oom = container(
        "oom",
        &["sleep", "infinity"],
        &[(SCRIPT_ANNOTATION, "oom-after=1s")],
    );
    let forever = container("forever", &["true"], &[(SCRIPT_ANNOTATION, "run-forever")]);
    let (exit, oom, forever) = (
        start(&sim, &sandbox, exit).await,
        start(&sim, &sandbox, oom).await,
        start(&sim, &sandbox, forever).await,
    );
    advance(Duration::from_secs(1)).await;
    let s = status(&sim, &oom).await;
    assert_eq!((s.exit_code, s.reason.as_str()), (137, "OOMKilled"));
    advance(Duration::from_secs(2)).await;
    let s = status(&sim, &exit).await;
    assert_eq!(
        (s.state(), s.exit_code),
        (ContainerState::ContainerExited, 2)
    );
    advance(Duration::from_secs(3600)).await;
    assert_eq!(
        status(&sim, &forever).await.state(),
        ContainerState::ContainerRunning
    );
}

#[tokio::test(start_paused = true)]
async fn pod_annotations_script_their_containers_and_images_script_theirs() {
    let sim = Simulator::new();
    sim.add_image(
        "localhost/crasher:1",
        &["sh"],
        Some(Script::parse("exit-after=5s exit-code=42").expect("valid")),
    );
    let key = format!("{POD_SCRIPT_PREFIX}app");
    let sandbox = sim
        .run_pod_sandbox(pod("annotated", &[(&key, "exit-after=1s exit-code=7")]), "")
        .await
        .expect("run");
    let app = start(
        &sim,
        &sandbox,
        container("app", &["sleep", "infinity"], &[]),
    )
    .await;
    let mut from_image = container("img", &[], &[]);
    from_image.image = Some(ImageSpec {
        image: "localhost/crasher:1".into(),
        ..Default::default()
    });
    let img = start(&sim, &sandbox, from_image).await;
    advance(Duration::from_secs(1)).await;
    assert_eq!(status(&sim, &app).await.exit_code, 7);
    assert_eq!(
        status(&sim, &img).await.state(),
        ContainerState::ContainerRunning
    );
    advance(Duration::from_secs(4)).await;
    assert_eq!(status(&sim, &img).await.exit_code, 42);
}

#[tokio::test(start_paused = true)]
async fn stop_waits_the_grace_period_unless_the_process_traps_term() {
    let sim = Simulator::new();
    let sandbox = sim
        .run_pod_sandbox(pod("grace", &[]), "")
        .await
        .expect("run");
    let stubborn = start(
        &sim,
        &sandbox,
        container("stubborn", &["sleep", "3600"], &[]),
    )
    .await;
    let t = tokio::time::Instant::now();
    sim.stop_container(&stubborn, 30).await.expect("stop");
    assert_eq!(t.elapsed(), Duration::from_secs(30));
    assert_eq!(status(&sim, &stubborn).await.exit_code, 137);

    let polite = container(
        "polite",
        &["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"],
        &[],
    );
    let polite = start(&sim, &sandbox, polite).await;
    let t = tokio::time::Instant::now();
    sim.stop_container(&polite, 30).await.expect("stop");
    assert_eq!(t.elapsed(), Duration::ZERO);
    assert_eq!(status(&sim, &polite).await.reason, "Completed");

    // A container that exits on its own during the grace period ends the wait.
    let soon = start(&sim, &sandbox, container("soon", &["sleep", "5"], &[])).await;
    let t = tokio::time::Instant::now();
    sim.stop_container(&soon, 30).await.expect("stop");
    assert_eq!(t.elapsed(), Duration::from_secs(5));
    assert_eq!(status(&sim, &soon).await.exit_code, 0);
}

#[tokio::test(start_paused = true)]
async fn hang_stop_never_answers() {
    let sim = Simulator::new();
    let sandbox = sim
        .run_pod_sandbox(pod("hang", &[]), "")
        .await
        .expect("run");
    let id = start(
        &sim,
        &sandbox,
        container("app", &["sleep", "1"], &[(SCRIPT_ANNOTATION, "hang-stop")]),
    )
    .await;
    let stop = tokio::time::timeout(Duration::from_secs(600), sim.stop_container(&id, 0)).await;
    assert!(stop.is_err(), "StopContainer answered");
}

#[tokio::test(start_paused = true)]
async fn create_and_start_failures_follow_containerd() {
    let sim = Simulator::new();
    let sandbox = sim
        .run_pod_sandbox(pod("fails", &[]), "")
        .await
        .expect("run");
    let err = sim
        .create_container(
            &sandbox,
            container(
                "a",
                &["true"],
                &[(SCRIPT_ANNOTATION, "fail-create=\"no space left on device\"")],
            ),
            pod("x", &[]),
        )
        .await
        .expect_err("create fails");
    assert_eq!(err.kind(), ErrorKind::Unknown);
    assert!(err.message().contains("no space"), "{err}");

    let id = sim
        .create_container(
            &sandbox,
            container(
                "b",
                &["true"],
                &[(SCRIPT_ANNOTATION, "fail-start=\"exec format error\"")],
            ),
            pod("x", &[]),
        )
        .await
        .expect("create");
    let err = sim.start_container(&id).await.expect_err("start fails");
    assert!(err.message().contains("exec format error"), "{err}");
    let s = status(&sim, &id).await;
    assert_eq!(
        (s.state(), s.exit_code, s.reason.as_str()),
        (ContainerState::ContainerExited, 128, "StartError")
    );
    assert_eq!(s.message, "exec format error");

    // A script that does not parse is refused, naming the item.
    let err = sim
        .create_container(
            &sandbox,
            container("c", &["true"], &[(SCRIPT_ANNOTATION, "exit-after=soon")]),
            pod("x", &[]),
        )
        .await
        .expect_err("bad script");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("exit-after=soon"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn run_pod_sandbox_fails_the_scripted_number_of_times() {
    let sim = Simulator::new();
    let config = pod("flaky", &[(FAIL_RUN_SANDBOX_ANNOTATION, "2")]);
    for n in 1..=2 {
        let err = sim
            .run_pod_sandbox(config.clone(), "")
            .await
            .expect_err("scripted failure");
        assert_eq!(err.kind(), ErrorKind::Unknown);
        assert!(
            err.message()
                .contains(&format!("simulated failure {n} of 2")),
            "{err}"
        );
    }
    sim.run_pod_sandbox(config, "")
        .await
        .expect("third attempt succeeds");
    // A failed run reserves nothing.
    assert_eq!(sim.counts(), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn exec_sees_the_files_the_main_process_made_at_that_time() {
    // The Kubernetes docs' liveness example.
    let sim = Simulator::new();
    let sandbox = sim
        .run_pod_sandbox(pod("liveness", &[]), "")
        .await
        .expect("run");
    let argv = [
        "sh",
        "-c",
        "touch /tmp/healthy; sleep 30; rm -f /tmp/healthy; sleep 600",
    ];
    let id = start(&sim, &sandbox, container("app", &argv, &[])).await;
    let probe = || {
        sim.exec_sync(
            &id,
            vec!["cat".into(), "/tmp/healthy".into()],
            Duration::from_secs(1),
        )
    };
    assert_eq!(probe().await.expect("exec").exit_code, 0);
    advance(Duration::from_secs(29)).await;
    assert_eq!(probe().await.expect("exec").exit_code, 0);
    advance(Duration::from_secs(1)).await;
    let failed = probe().await.expect("exec");
    assert_eq!(failed.exit_code, 1);
    assert_eq!(
        String::from_utf8_lossy(&failed.stderr),
        "cat: can't open '/tmp/healthy': No such file or directory\n"
    );
}

#[tokio::test(start_paused = true)]
async fn exec_scripts_and_timeouts() {
    let sim = Simulator::new();
    let sandbox = sim
        .run_pod_sandbox(pod("exec", &[]), "")
        .await
        .expect("run");
    let script = [(SCRIPT_ANNOTATION, "exec-fail-after=10s exec-latency=200ms")];
    let id = start(
        &sim,
        &sandbox,
        container("app", &["sleep", "infinity"], &script),
    )
    .await;
    let t = tokio::time::Instant::now();
    assert_eq!(
        sim.exec_sync(&id, vec!["true".into()], Duration::from_secs(1))
            .await
            .expect("exec")
            .exit_code,
        0
    );
    assert_eq!(t.elapsed(), Duration::from_millis(200));
    advance(Duration::from_secs(10)).await;
    assert_eq!(
        sim.exec_sync(&id, vec!["true".into()], Duration::from_secs(1))
            .await
            .expect("exec")
            .exit_code,
        1
    );

    let t = tokio::time::Instant::now();
    let err = sim
        .exec_sync(
            &id,
            vec!["sleep".into(), "5".into()],
            Duration::from_secs(2),
        )
        .await
        .expect_err("past its timeout");
    assert_eq!(err.kind(), ErrorKind::DeadlineExceeded);
    assert_eq!(t.elapsed(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn events_follow_the_life_of_a_container() {
    let sim = Simulator::new();
    let mut events = sim.container_events().await.expect("events");
    let sandbox = sim.run_pod_sandbox(pod("ev", &[]), "").await.expect("run");
    let id = start(&sim, &sandbox, container("app", &["sleep", "1"], &[])).await;
    advance(Duration::from_secs(1)).await;
    sim.remove_container(&id).await.expect("remove");
    let mut seen = Vec::new();
    while let Ok(Some(Ok(ev))) =
        tokio::time::timeout(Duration::from_millis(10), events.next()).await
    {
        seen.push((ev.container_id == sandbox, ev.container_event_type()));
    }
    use ContainerEventType::*;
    assert_eq!(
        seen,
        [
            (true, ContainerCreatedEvent),
            (true, ContainerStartedEvent),
            (false, ContainerCreatedEvent),
            (false, ContainerStartedEvent),
            (false, ContainerStoppedEvent),
            (false, ContainerDeletedEvent),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn runtime_faults_latency_outage_and_pull_failures() {
    let sim = Simulator::new();
    sim.set_method_latency("RunPodSandbox", Duration::from_millis(100));
    let t = tokio::time::Instant::now();
    sim.run_pod_sandbox(pod("slow", &[]), "")
        .await
        .expect("run");
    assert_eq!(t.elapsed(), Duration::from_millis(100));

    sim.set_unavailable_for(Duration::from_secs(5));
    let err = sim.list_containers(None).await.expect_err("outage");
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    advance(Duration::from_secs(5)).await;
    sim.list_containers(None).await.expect("back");

    let bad = ImageSpec {
        image: "registry.invalid/app:1".into(),
        ..Default::default()
    };
    let err = sim
        .pull_image(bad, None, None)
        .await
        .expect_err("unresolvable registry");
    assert!(
        err.message().starts_with("failed to pull and unpack image"),
        "{err}"
    );
    let good = ImageSpec {
        image: "nginx".into(),
        ..Default::default()
    };
    let id = sim
        .pull_image(good.clone(), None, None)
        .await
        .expect("pull");
    let image = sim
        .image_status(good)
        .await
        .expect("status")
        .expect("present after pull");
    assert_eq!(
        (image.id, image.repo_tags),
        (id, vec!["docker.io/library/nginx:latest".to_string()])
    );
}

#[tokio::test]
async fn ten_thousand_containers_list_by_pod_and_label() {
    let sim = Simulator::new();
    for i in 0..10_000 {
        let sandbox = sim
            .run_pod_sandbox(pod(&format!("p{i}"), &[]), "")
            .await
            .expect("run");
        let mut c = container("app", &["sleep", "infinity"], &[]);
        c.labels = BTreeMap::from([("pod".to_string(), format!("p{i}"))]);
        sim.create_container(&sandbox, c, pod("x", &[]))
            .await
            .expect("create");
    }
    assert_eq!(sim.counts(), (10_000, 10_000));
    let by_label = ContainerFilter {
        label_selector: BTreeMap::from([("pod".to_string(), "p4321".to_string())]),
        ..Default::default()
    };
    let found = sim.list_containers(Some(by_label)).await.expect("list");
    assert_eq!(found.len(), 1);
    let by_pod = ContainerFilter {
        pod_sandbox_id: found[0].pod_sandbox_id.clone(),
        ..Default::default()
    };
    assert_eq!(
        sim.list_containers(Some(by_pod)).await.expect("list")[0].id,
        found[0].id
    );
}
