//! Runs one pod through a CRI runtime with wasmlet's client, the way the agent will:
//! sandbox, container, exec, stop, remove — printing what the runtime answers.
//!
//! ```text
//! # against the project's containerd (as root):
//! scripts/containerd.sh up            # prints the endpoint
//! cargo run -p wasmlet-tests --example cri-pod -- unix:///var/lib/wasmlet/containerd/containerd.sock
//! # against the simulator:
//! cargo run -p wasmlet-cri-sim -- --socket /tmp/sim.sock &
//! cargo run -p wasmlet-tests --example cri-pod -- unix:///tmp/sim.sock
//! ```

use std::time::Duration;

use wasmlet_cri::proto::*;
use wasmlet_cri::{CriClient, CriError, CriRuntime};

#[tokio::main]
async fn main() -> Result<(), CriError> {
    let endpoint = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "unix:///var/lib/wasmlet/containerd/containerd.sock".into());
    let cri = CriClient::connect(&endpoint).await?;
    let v = &cri.negotiated().version;
    println!(
        "{} {} (CRI {}), event stream: {}",
        v.runtime_name,
        v.runtime_version,
        v.runtime_api_version,
        cri.negotiated().container_events
    );

    let log_dir = std::env::temp_dir().join("wasmlet-example-pod");
    std::fs::create_dir_all(&log_dir).map_err(|e| {
        CriError::new(
            "example",
            endpoint.as_str(),
            wasmlet_cri::ErrorKind::InvalidArgument,
            e.to_string(),
        )
    })?;
    let sandbox = sandbox_config(&log_dir);
    let pod = cri.run_pod_sandbox(sandbox.clone(), "").await?;
    let status = cri
        .pod_sandbox_status(&pod, false)
        .await?
        .status
        .unwrap_or_default();
    println!(
        "pod {} ready, IP {:?}",
        &pod[..12],
        status.network.map(|n| n.ip).unwrap_or_default()
    );

    let container = container_config();
    let id = cri.create_container(&pod, container, sandbox).await?;
    cri.start_container(&id).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let out = cri
        .exec_sync(
            &id,
            vec!["cat".into(), "/tmp/greeting".into()],
            Duration::from_secs(5),
        )
        .await?;
    println!(
        "exec cat /tmp/greeting -> exit {}, stdout {:?}",
        out.exit_code,
        String::from_utf8_lossy(&out.stdout)
    );

    cri.stop_container(&id, 0).await?;
    let s = cri
        .container_status(&id, false)
        .await?
        .status
        .unwrap_or_default();
    println!("stopped: exit code {}, reason {}", s.exit_code, s.reason);
    cri.stop_pod_sandbox(&pod).await?;
    cri.remove_pod_sandbox(&pod).await?;
    println!("pod removed");
    Ok(())
}

/// The example's sandbox, its logs under `log_dir`.
fn sandbox_config(log_dir: &std::path::Path) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: "example".into(),
            uid: format!("example-{}", std::process::id()),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: "example".into(),
        log_directory: log_dir.display().to_string(),
        ..Default::default()
    }
}

/// A busybox container that writes a greeting and sleeps.
fn container_config() -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "hello".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: "localhost/busybox:latest".into(),
            ..Default::default()
        }),
        command: vec![
            "sh".into(),
            "-c".into(),
            "echo hello > /tmp/greeting; sleep 3600".into(),
        ],
        log_path: "hello/0.log".into(),
        ..Default::default()
    }
}
