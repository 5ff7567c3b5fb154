//! The CRI client's behaviour when the runtime misbehaves: missing sockets, deadlines,
//! outages, a runtime restarted under a call, an unsupported version. Every failure
//! must be a typed error naming the call and the endpoint — never a panic or a hang.

use std::time::Duration;

use wasmlet_cri::proto::*;
use wasmlet_cri::{ClientOptions, CriClient, CriRuntime, ErrorKind, Recorder};
use wasmlet_cri_sim::fixtures::pod as sandbox;
use wasmlet_cri_sim::{SimServer, Simulator};
use wasmlet_tests::{TempDir, container_config};

fn options(status_timeout_ms: u64) -> ClientOptions {
    ClientOptions {
        request_timeout: Duration::from_secs(5),
        status_timeout: Duration::from_millis(status_timeout_ms),
        connect_timeout: Duration::from_millis(500),
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
    }
}

async fn serve(dir: &TempDir) -> (Simulator, SimServer, CriClient) {
    let sim = Simulator::new();
    let server = SimServer::serve(sim.clone(), &dir.path.join("cri.sock"))
        .await
        .expect("serve");
    let client = CriClient::connect_with(&server.endpoint(), options(2000))
        .await
        .expect("connect");
    (sim, server, client)
}

#[tokio::test]
async fn missing_socket_is_unavailable_and_names_the_endpoint() {
    let dir = TempDir::new("nosock");
    let endpoint = format!("unix://{}/absent.sock", dir.path.display());
    let started = tokio::time::Instant::now();
    let err = CriClient::connect_with(&endpoint, options(200))
        .await
        .expect_err("no runtime there");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert_eq!(err.call(), "Version");
    let text = err.to_string();
    assert!(text.contains(&endpoint), "{text}");
    assert!(text.contains("No such file or directory"), "{text}");
    // It gave up at its connect timeout instead of hanging.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn endpoints_it_cannot_dial_are_rejected_up_front() {
    for bad in ["tcp://127.0.0.1:10250", "run/containerd.sock", "unix://"] {
        let err = CriClient::connect(bad).await.expect_err(bad);
        assert_eq!(err.kind(), ErrorKind::InvalidEndpoint, "{bad}: {err}");
        assert!(err.to_string().contains(bad), "{err}");
    }
}

#[tokio::test]
async fn a_call_past_its_deadline_is_deadline_exceeded() {
    let dir = TempDir::new("deadline");
    let (sim, server, _) = serve(&dir).await;
    let client = CriClient::connect_with(&server.endpoint(), options(200))
        .await
        .expect("connect");
    sim.set_method_latency("ListContainers", Duration::from_secs(5));
    let started = tokio::time::Instant::now();
    let err = client.list_containers(None).await.expect_err("too slow");
    assert_eq!(err.kind(), ErrorKind::DeadlineExceeded, "{err}");
    assert_eq!(err.call(), "ListContainers");
    assert!(err.to_string().contains(&server.endpoint()), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // Other calls are unaffected.
    client.version().await.expect("Version still answers");
}

#[tokio::test]
async fn an_outage_is_retried_for_reads_but_not_for_creates() {
    let dir = TempDir::new("outage");
    let (sim, _server, client) = serve(&dir).await;
    sim.set_unavailable_for(Duration::from_millis(300));
    let err = client
        .run_pod_sandbox(sandbox("once"), "")
        .await
        .expect_err("not retried");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert_eq!(err.call(), "RunPodSandbox");
    // A read rides out the outage with back-off.
    let pods = client
        .list_pod_sandbox(None)
        .await
        .expect("retried until the runtime is back");
    assert!(pods.is_empty());
    client
        .run_pod_sandbox(sandbox("after"), "")
        .await
        .expect("runtime back");
}

#[tokio::test]
async fn scripted_failures_come_back_typed() {
    let dir = TempDir::new("scripted");
    let (sim, _server, client) = serve(&dir).await;
    sim.fail_next("StartContainer", 1, tonic::Code::Internal, "disk on fire");
    let pod = client.run_pod_sandbox(sandbox("p"), "").await.expect("run");
    let id = client
        .create_container(&pod, container_config("c", &["sleep", "9"]), sandbox("p"))
        .await
        .expect("create");
    let err = client
        .start_container(&id)
        .await
        .expect_err("scripted failure");
    assert_eq!(err.kind(), ErrorKind::Internal);
    assert_eq!(err.message(), "disk on fire");
    client
        .start_container(&id)
        .await
        .expect("only the first call fails");
}

#[tokio::test]
async fn a_runtime_restarted_under_a_call_fails_it_and_the_client_reconnects() {
    let dir = TempDir::new("restart");
    let (sim, server, client) = serve(&dir).await;
    let pod = client.run_pod_sandbox(sandbox("r"), "").await.expect("run");
    let id = client
        .create_container(
            &pod,
            container_config("c", &["sleep", "3600"]),
            sandbox("r"),
        )
        .await
        .expect("create");
    client.start_container(&id).await.expect("start");

    // An exec that takes 2 s is in flight when the runtime goes away.
    let exec = {
        let client = client.clone();
        let id = id.clone();
        tokio::spawn(async move {
            client
                .exec_sync(
                    &id,
                    vec!["sleep".into(), "2".into()],
                    Duration::from_secs(10),
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.stop().await;
    let err = exec
        .await
        .expect("task")
        .expect_err("the runtime died mid-call");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert_eq!(err.call(), "ExecSync");

    // The runtime comes back on the same socket (with its state, as containerd keeps it).
    let back = {
        let sim = sim.clone();
        let path = dir.path.join("cri.sock");
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            SimServer::serve(sim, &path).await.expect("serve again")
        })
    };
    // A read issued while it is down waits it out and succeeds on the new connection.
    let status = client
        .container_status(&id, false)
        .await
        .expect("reconnected");
    assert_eq!(
        status.status.expect("status").state(),
        ContainerState::ContainerRunning
    );
    let _server = back.await.expect("restarted");
    client.version().await.expect("still connected");
}

#[tokio::test]
async fn a_runtime_speaking_another_cri_version_is_refused() {
    let dir = TempDir::new("version");
    let sim = Simulator::new();
    sim.set_runtime_api_version("v1alpha2");
    let server = SimServer::serve(sim, &dir.path.join("cri.sock"))
        .await
        .expect("serve");
    let err = CriClient::connect_with(&server.endpoint(), options(500))
        .await
        .expect_err("old runtime");
    assert_eq!(err.kind(), ErrorKind::VersionMismatch, "{err}");
    assert!(err.message().contains("v1alpha2"), "{err}");
}

#[tokio::test]
async fn the_client_sees_events_where_the_runtime_streams_them() {
    let dir = TempDir::new("events");
    let (_sim, _server, client) = serve(&dir).await;
    assert!(client.negotiated().container_events);
    assert_eq!(
        client.negotiated().version.runtime_name,
        wasmlet_cri_sim::RUNTIME_NAME
    );
}

#[tokio::test]
async fn recorder_sees_every_call_in_order() {
    let rt = Recorder::new(Simulator::new());
    let pod = rt.run_pod_sandbox(sandbox("rec"), "").await.expect("run");
    let id = rt
        .create_container(&pod, container_config("app", &["true"]), sandbox("rec"))
        .await
        .expect("create");
    rt.start_container(&id).await.expect("start");
    let _ = rt.container_status("missing", false).await;
    rt.stop_pod_sandbox(&pod).await.expect("stop");
    assert_eq!(
        rt.methods(),
        [
            "RunPodSandbox",
            "CreateContainer",
            "StartContainer",
            "ContainerStatus",
            "StopPodSandbox"
        ]
    );
    let calls = rt.calls();
    assert_eq!(calls[0].target, "rec");
    assert_eq!(calls[1].target, "app");
    assert_eq!(calls[2].target, id);
    assert!(calls[3].failed && !calls[2].failed);
    assert_eq!(rt.count("StartContainer"), 1);
}

#[tokio::test]
async fn lists_of_ten_thousand_containers_fit_the_message_limits() {
    let dir = TempDir::new("scale");
    let (sim, _server, client) = serve(&dir).await;
    for i in 0..10_000 {
        let pod = sim
            .run_pod_sandbox(sandbox(&format!("p{i}")), "")
            .await
            .expect("run");
        let config = container_config("app", &["sleep", "infinity"]);
        sim.create_container(&pod, config, sandbox("unused"))
            .await
            .expect("create");
    }
    // Some 3.6 MB of answer: close to tonic's 4 MiB default, well inside the 16 MiB both
    // ends allow (a busy node with many dead containers gets there).
    let all = client.list_containers(None).await.expect("list 10,000");
    assert_eq!(all.len(), 10_000);
    assert_eq!(
        client.list_pod_sandbox(None).await.expect("pods").len(),
        10_000
    );
    let one = client
        .list_containers(Some(ContainerFilter {
            id: all[1234].id.clone(),
            ..Default::default()
        }))
        .await
        .expect("by id");
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].metadata, all[1234].metadata);
}

#[tokio::test]
async fn lean_lists_read_the_same_objects_as_full_lists() {
    use wasmlet_cri::listed::{ListedContainer, ListedSandbox};
    let dir = TempDir::new("lean");
    let (sim, _server, client) = serve(&dir).await;
    for i in 0..20 {
        let pod = sim
            .run_pod_sandbox(sandbox(&format!("p{i}")), "")
            .await
            .expect("run");
        let config = container_config("app", &["sleep", "infinity"]);
        let id = sim
            .create_container(&pod, config, sandbox("unused"))
            .await
            .expect("create");
        if i % 2 == 0 {
            sim.start_container(&id).await.expect("start");
        }
        if i % 5 == 0 {
            sim.stop_pod_sandbox(&pod).await.expect("stop");
        }
    }
    let sorted_c = |mut v: Vec<ListedContainer>| {
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    };
    let sorted_s = |mut v: Vec<ListedSandbox>| {
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    };
    let full = client.list_containers(None).await.expect("list");
    let expected = sorted_c(full.iter().map(ListedContainer::from).collect());
    assert_eq!(expected.len(), 20);
    // Over gRPC (the client's lean decoding) and in process (the simulator's own).
    let lean = sorted_c(client.list_containers_lean().await.expect("lean"));
    assert_eq!(lean, expected);
    assert_eq!(
        sorted_c(sim.list_containers_lean().await.expect("lean")),
        expected
    );
    let full = client.list_pod_sandbox(None).await.expect("list");
    let expected = sorted_s(full.iter().map(ListedSandbox::from).collect());
    let lean = sorted_s(client.list_pod_sandbox_lean().await.expect("lean"));
    assert_eq!(lean, expected);
    assert_eq!(
        sorted_s(sim.list_pod_sandbox_lean().await.expect("lean")),
        expected
    );
    // States came through: some running, some exited, some sandboxes not ready.
    assert!(
        lean.iter()
            .any(|s| s.state == PodSandboxState::SandboxNotready as i32)
    );
}
