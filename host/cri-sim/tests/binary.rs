//! The `wasmlet-cri-sim` binary: serves until SIGTERM, then removes its socket; bad
//! arguments are refused with the offending item named.

use std::process::{Command, Stdio};
use std::time::Duration;

use wasmlet_cri::proto::*;
use wasmlet_cri::{CriClient, CriRuntime};

const BIN: &str = env!("CARGO_BIN_EXE_wasmlet-cri-sim");

#[tokio::test]
async fn serves_a_full_pod_lifecycle_and_stops_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("wasmlet-sim-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let sock = dir.join("cri.sock");
    let mut child = Command::new(BIN)
        .arg("--socket")
        .arg(&sock)
        .args(["--image", "localhost/crash:1=exit-after=1s exit-code=3"])
        .args(["--outage", "500ms"])
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn wasmlet-cri-sim");
    let client = CriClient::connect(&format!("unix://{}", sock.display()))
        .await
        .expect("connect");

    let config = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: "web".into(),
            uid: "uid-web".into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        ..Default::default()
    };
    let image = ImageSpec {
        image: "localhost/crash:1".into(),
        ..Default::default()
    };
    assert!(
        client
            .image_status(image.clone())
            .await
            .expect("ImageStatus")
            .is_some()
    );
    let pod = client
        .run_pod_sandbox(config.clone(), "")
        .await
        .expect("RunPodSandbox");
    let ip = client
        .pod_sandbox_status(&pod, false)
        .await
        .expect("status")
        .status
        .and_then(|s| s.network);
    assert!(ip.is_some_and(|n| n.ip.starts_with("10.88.")));
    let c = ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "app".into(),
            attempt: 0,
        }),
        image: Some(image),
        ..Default::default()
    };
    let id = client
        .create_container(&pod, c, config)
        .await
        .expect("CreateContainer");
    client.start_container(&id).await.expect("StartContainer");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let s = client
        .container_status(&id, false)
        .await
        .expect("status")
        .status
        .expect("status");
    assert_eq!(
        (s.state(), s.exit_code),
        (ContainerState::ContainerExited, 3)
    );
    client.remove_container(&id).await.expect("RemoveContainer");
    client.stop_pod_sandbox(&pod).await.expect("StopPodSandbox");
    client
        .stop_pod_sandbox(&pod)
        .await
        .expect("StopPodSandbox again");
    client
        .remove_pod_sandbox(&pod)
        .await
        .expect("RemovePodSandbox");
    client
        .remove_pod_sandbox(&pod)
        .await
        .expect("RemovePodSandbox again");
    assert!(
        client
            .pod_sandbox_status(&pod, false)
            .await
            .expect_err("removed")
            .is_not_found()
    );

    // SIGUSR1: an outage of --outage; the client rides it out for reads.
    let status = Command::new("kill")
        .arg("-USR1")
        .arg(child.id().to_string())
        .status()
        .expect("kill");
    assert!(status.success());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = tokio::time::Instant::now();
    client.version().await.expect("Version after the outage");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(200),
        "no outage seen: {waited:?}"
    );

    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = child.wait().expect("wait");
    assert!(exit.success(), "{exit}");
    assert!(!sock.exists(), "socket left behind");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_arguments_are_refused_by_name() {
    let out = Command::new(BIN)
        .args([
            "--socket",
            "/tmp/never.sock",
            "--image",
            "localhost/x:1=explode",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("explode"), "{err}");
    let out = Command::new(BIN)
        .args(["--socket", "/tmp/never.sock", "--latency", "soon"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("soon"));
}
