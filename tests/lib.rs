//! Shared harness for wasmlet's integration and end-to-end tests.
//!
//! - [`Runtime`]: a CRI runtime under test — the in-process simulator on a private
//!   socket, or the real containerd named by `WASMLET_CRI_ENDPOINT` (started by
//!   `scripts/containerd.sh up`, which `cargo xtask test` runs first).
//! - Builders for the sandbox and container configs the tests send, labelled with a
//!   per-test run id so that cleanup removes exactly what the test made.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use wasmlet_cri::proto::*;
use wasmlet_cri::{ClientOptions, CriClient, CriRuntime};
use wasmlet_cri_sim::{SimServer, Simulator};

/// Environment variable naming the real runtime's endpoint (`unix:///...`).
pub const ENDPOINT_ENV: &str = "WASMLET_CRI_ENDPOINT";
/// When set to `1`, a missing real runtime fails the test instead of skipping it.
pub const REQUIRE_ENV: &str = "WASMLET_REQUIRE_CONTAINERD";
/// Label put on every sandbox a test creates, valued with the test's run id.
pub const RUN_LABEL: &str = "test.wasmlet.io/run";
/// The general-purpose image both runtimes hold.
pub const BUSYBOX: &str = "localhost/busybox:latest";
/// Namespace of every pod the tests create.
pub const NAMESPACE: &str = "wasmlet-test";

static SEQ: AtomicU32 = AtomicU32::new(0);

/// Which runtime a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `wasmlet-cri-sim`, served in-process on a socket of its own.
    Sim,
    /// The containerd named by `WASMLET_CRI_ENDPOINT`.
    Containerd,
}

/// A CRI runtime under test, reached through the real gRPC client.
pub struct Runtime {
    /// Which runtime this is.
    pub kind: Kind,
    /// The client the test drives.
    pub client: CriClient,
    /// Unique per test: labels its sandboxes and prefixes its pod names.
    pub run_id: String,
    /// Where the test's pods write their logs.
    pub log_root: PathBuf,
    _server: Option<SimServer>,
    _dir: Option<TempDir>,
}

impl Runtime {
    /// The simulator, served on a fresh socket in a temporary directory.
    pub async fn sim() -> Self {
        let dir = TempDir::new("sim");
        let sock = dir.path.join("cri.sock");
        let server = SimServer::serve(Simulator::new(), &sock)
            .await
            .expect("serve simulator");
        let client = CriClient::connect_with(&format!("unix://{}", sock.display()), fast_options())
            .await
            .expect("connect to simulator");
        let log_root = dir.path.join("pods");
        Self::new(Kind::Sim, client, Some(server), log_root, Some(dir))
    }

    /// The real containerd, or `None` (the test is skipped) when `WASMLET_CRI_ENDPOINT`
    /// is unset and `WASMLET_REQUIRE_CONTAINERD` is not `1`.
    pub async fn containerd() -> Option<Self> {
        let Ok(endpoint) = std::env::var(ENDPOINT_ENV) else {
            if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
                panic!(
                    "{REQUIRE_ENV}=1 but {ENDPOINT_ENV} is not set: run `scripts/containerd.sh up`"
                );
            }
            eprintln!(
                "skipped: {ENDPOINT_ENV} is not set (run `cargo xtask test` to start containerd)"
            );
            return None;
        };
        let client = CriClient::connect_with(&endpoint, fast_options())
            .await
            .unwrap_or_else(|e| panic!("{ENDPOINT_ENV}={endpoint}: {e}"));
        let dir = TempDir::new("containerd");
        let log_root = dir.path.join("pods");
        Some(Self::new(
            Kind::Containerd,
            client,
            None,
            log_root,
            Some(dir),
        ))
    }

    fn new(
        kind: Kind,
        client: CriClient,
        server: Option<SimServer>,
        log_root: PathBuf,
        dir: Option<TempDir>,
    ) -> Self {
        let run_id = format!(
            "{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        Self {
            kind,
            client,
            run_id,
            log_root,
            _server: server,
            _dir: dir,
        }
    }

    /// A sandbox config for pod `name` of this run; `host_network` selects the node's
    /// network namespace instead of a CNI pod network.
    pub fn sandbox_config(&self, name: &str, host_network: bool) -> PodSandboxConfig {
        let uid = format!("uid-{}-{name}", self.run_id);
        let log_directory = self.log_root.join(format!("{NAMESPACE}_{name}_{uid}"));
        std::fs::create_dir_all(&log_directory).expect("create pod log directory");
        let network = if host_network {
            NamespaceMode::Node
        } else {
            NamespaceMode::Pod
        };
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: format!("{name}-{}", self.run_id),
                uid,
                namespace: NAMESPACE.into(),
                attempt: 0,
            }),
            hostname: if host_network {
                String::new()
            } else {
                name.into()
            },
            log_directory: log_directory.display().to_string(),
            labels: BTreeMap::from([
                (RUN_LABEL.to_string(), self.run_id.clone()),
                ("app".to_string(), name.to_string()),
            ]),
            annotations: BTreeMap::from([(
                "test.wasmlet.io/note".to_string(),
                format!("pod {name}"),
            )]),
            linux: Some(LinuxPodSandboxConfig {
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(NamespaceOption {
                        network: network as i32,
                        pid: NamespaceMode::Container as i32,
                        ipc: NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Runs a sandbox for pod `name` and returns its id and config.
    pub async fn run_pod(&self, name: &str, host_network: bool) -> (String, PodSandboxConfig) {
        let config = self.sandbox_config(name, host_network);
        let id = self
            .client
            .run_pod_sandbox(config.clone(), "")
            .await
            .unwrap_or_else(|e| panic!("RunPodSandbox {name}: {e}"));
        (id, config)
    }

    /// Creates container `name` running `argv` in a sandbox; returns its id.
    pub async fn create(
        &self,
        pod: &(String, PodSandboxConfig),
        name: &str,
        argv: &[&str],
    ) -> String {
        self.client
            .create_container(&pod.0, container_config(name, argv), pod.1.clone())
            .await
            .unwrap_or_else(|e| panic!("CreateContainer {name}: {e}"))
    }

    /// Creates and starts container `name` running `argv`; returns its id.
    pub async fn start(
        &self,
        pod: &(String, PodSandboxConfig),
        name: &str,
        argv: &[&str],
    ) -> String {
        let id = self.create(pod, name, argv).await;
        self.client
            .start_container(&id)
            .await
            .unwrap_or_else(|e| panic!("StartContainer {name}: {e}"));
        id
    }

    /// Polls the container until it is in `state`, for at most `within`.
    pub async fn wait_state(
        &self,
        id: &str,
        state: ContainerState,
        within: Duration,
    ) -> ContainerStatus {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let status = self
                .client
                .container_status(id, false)
                .await
                .expect("ContainerStatus");
            let status = status.status.expect("status");
            if status.state == state as i32 {
                return status;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "container {id} still {:?} after {within:?}, wanted {state:?}",
                    status.state()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops and removes every sandbox this test created.
    pub async fn cleanup(&self) {
        let filter = PodSandboxFilter {
            label_selector: BTreeMap::from([(RUN_LABEL.to_string(), self.run_id.clone())]),
            ..Default::default()
        };
        let pods = self
            .client
            .list_pod_sandbox(Some(filter))
            .await
            .unwrap_or_default();
        for pod in pods {
            let _ = self.client.stop_pod_sandbox(&pod.id).await;
            let _ = self.client.remove_pod_sandbox(&pod.id).await;
        }
    }
}

/// Runs `case` against `rt`, then removes every sandbox it made — also when it panics,
/// so that a failing case never leaves pods behind on a real runtime.
pub async fn run_and_clean_up<F>(rt: Runtime, case: F)
where
    F: FnOnce(Arc<Runtime>) -> Pin<Box<dyn Future<Output = ()> + Send>>,
{
    let rt = Arc::new(rt);
    let outcome = tokio::spawn(case(rt.clone())).await;
    rt.cleanup().await;
    if let Err(e) = outcome {
        match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(e) => panic!("test task failed: {e}"),
        }
    }
}

/// A container config for `name` running `argv` in busybox, with its own PID namespace
/// as the kubelet asks for: `argv[0]` is PID 1 and, without a handler, ignores SIGTERM.
pub fn container_config(name: &str, argv: &[&str]) -> ContainerConfig {
    container_config_in(name, argv, NamespaceMode::Container)
}

/// [`container_config`] with the given PID namespace mode (`Pod` shares the sandbox's,
/// where the pause process is PID 1 and SIGTERM's default action kills `argv[0]`).
pub fn container_config_in(name: &str, argv: &[&str], pid: NamespaceMode) -> ContainerConfig {
    ContainerConfig {
        log_path: format!("{name}/0.log"),
        labels: BTreeMap::from([("container".to_string(), name.to_string())]),
        annotations: BTreeMap::from([("test.wasmlet.io/container".to_string(), name.to_string())]),
        ..wasmlet_cri_sim::fixtures::container_in(name, argv, pid)
    }
}

/// Client options with short deadlines, so that a broken runtime fails a test quickly.
pub fn fast_options() -> ClientOptions {
    ClientOptions {
        request_timeout: Duration::from_secs(30),
        status_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        ..ClientOptions::default()
    }
}

/// A directory under the system temp dir, removed on drop.
pub struct TempDir {
    /// Its path.
    pub path: PathBuf,
}

impl TempDir {
    /// Creates a fresh directory whose name starts with `prefix`.
    pub fn new(prefix: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "wasmlet-{prefix}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self { path }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
