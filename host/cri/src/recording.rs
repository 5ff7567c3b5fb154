//! [`Recorder`]: wraps a [`CriRuntime`] and records every call, for tests that assert on
//! what the agent asked the runtime to do (and in which order).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::proto::*;
use crate::runtime::{CriRuntime, EventStream, Result};

/// One recorded call: the CRI method and the id (or name) it was about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The CRI method, e.g. `"StartContainer"`.
    pub method: &'static str,
    /// The object the call was about: a sandbox or container id, an image name, the pod
    /// or container name for creations; empty for calls about the whole runtime.
    pub target: String,
    /// Whether the inner runtime answered with an error.
    pub failed: bool,
}

/// A [`CriRuntime`] that forwards to `inner` and records each call.
#[derive(Debug, Clone)]
pub struct Recorder<R> {
    inner: R,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl<R: CriRuntime> Recorder<R> {
    /// Wraps `inner`.
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            calls: Arc::default(),
        }
    }

    /// The wrapped runtime.
    pub fn inner(&self) -> &R {
        &self.inner
    }

    /// Every call so far, oldest first.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().clone()
    }

    /// The method names of every call so far, oldest first.
    pub fn methods(&self) -> Vec<&'static str> {
        self.lock().iter().map(|c| c.method).collect()
    }

    /// Calls of one method so far.
    pub fn count(&self, method: &str) -> usize {
        self.lock().iter().filter(|c| c.method == method).count()
    }

    /// Forgets the calls recorded so far.
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Call>> {
        // A panic while recording cannot leave the Vec inconsistent: keep using it.
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record<T>(
        &self,
        method: &'static str,
        target: impl Into<String>,
        result: Result<T>,
    ) -> Result<T> {
        self.lock().push(Call {
            method,
            target: target.into(),
            failed: result.is_err(),
        });
        result
    }
}

fn pod_name(config: &PodSandboxConfig) -> String {
    config
        .metadata
        .as_ref()
        .map(|m| m.name.clone())
        .unwrap_or_default()
}

impl<R: CriRuntime> CriRuntime for Recorder<R> {
    async fn version(&self) -> Result<VersionResponse> {
        self.record("Version", "", self.inner.version().await)
    }
    async fn status(&self, verbose: bool) -> Result<StatusResponse> {
        self.record("Status", "", self.inner.status(verbose).await)
    }
    async fn runtime_config(&self) -> Result<RuntimeConfigResponse> {
        self.record("RuntimeConfig", "", self.inner.runtime_config().await)
    }
    async fn run_pod_sandbox(
        &self,
        config: PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String> {
        let name = pod_name(&config);
        self.record(
            "RunPodSandbox",
            name,
            self.inner.run_pod_sandbox(config, runtime_handler).await,
        )
    }
    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        self.record("StopPodSandbox", id, self.inner.stop_pod_sandbox(id).await)
    }
    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        self.record(
            "RemovePodSandbox",
            id,
            self.inner.remove_pod_sandbox(id).await,
        )
    }
    async fn pod_sandbox_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> Result<PodSandboxStatusResponse> {
        self.record(
            "PodSandboxStatus",
            id,
            self.inner.pod_sandbox_status(id, verbose).await,
        )
    }
    async fn list_pod_sandbox(&self, filter: Option<PodSandboxFilter>) -> Result<Vec<PodSandbox>> {
        self.record(
            "ListPodSandbox",
            "",
            self.inner.list_pod_sandbox(filter).await,
        )
    }
    async fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: ContainerConfig,
        sandbox_config: PodSandboxConfig,
    ) -> Result<String> {
        let name = config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let result = self
            .inner
            .create_container(pod_sandbox_id, config, sandbox_config)
            .await;
        self.record("CreateContainer", name, result)
    }
    async fn start_container(&self, id: &str) -> Result<()> {
        self.record("StartContainer", id, self.inner.start_container(id).await)
    }
    async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<()> {
        self.record(
            "StopContainer",
            id,
            self.inner.stop_container(id, timeout_secs).await,
        )
    }
    async fn remove_container(&self, id: &str) -> Result<()> {
        self.record("RemoveContainer", id, self.inner.remove_container(id).await)
    }
    async fn list_containers(&self, filter: Option<ContainerFilter>) -> Result<Vec<Container>> {
        self.record(
            "ListContainers",
            "",
            self.inner.list_containers(filter).await,
        )
    }
    async fn list_containers_lean(&self) -> Result<Vec<crate::listed::ListedContainer>> {
        self.record(
            "ListContainers",
            "",
            self.inner.list_containers_lean().await,
        )
    }
    async fn list_pod_sandbox_lean(&self) -> Result<Vec<crate::listed::ListedSandbox>> {
        self.record(
            "ListPodSandbox",
            "",
            self.inner.list_pod_sandbox_lean().await,
        )
    }
    async fn container_status(&self, id: &str, verbose: bool) -> Result<ContainerStatusResponse> {
        self.record(
            "ContainerStatus",
            id,
            self.inner.container_status(id, verbose).await,
        )
    }
    async fn update_container_resources(
        &self,
        id: &str,
        resources: LinuxContainerResources,
    ) -> Result<()> {
        let result = self.inner.update_container_resources(id, resources).await;
        self.record("UpdateContainerResources", id, result)
    }
    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<ExecSyncResponse> {
        self.record("ExecSync", id, self.inner.exec_sync(id, cmd, timeout).await)
    }
    async fn exec(&self, request: ExecRequest) -> Result<String> {
        let id = request.container_id.clone();
        self.record("Exec", &id, self.inner.exec(request).await)
    }
    async fn attach(&self, request: AttachRequest) -> Result<String> {
        let id = request.container_id.clone();
        self.record("Attach", &id, self.inner.attach(request).await)
    }
    async fn port_forward(&self, sandbox_id: &str, ports: Vec<i32>) -> Result<String> {
        self.record(
            "PortForward",
            sandbox_id,
            self.inner.port_forward(sandbox_id, ports).await,
        )
    }
    async fn reopen_container_log(&self, id: &str) -> Result<()> {
        self.record(
            "ReopenContainerLog",
            id,
            self.inner.reopen_container_log(id).await,
        )
    }
    async fn container_stats(&self, id: &str) -> Result<ContainerStats> {
        self.record("ContainerStats", id, self.inner.container_stats(id).await)
    }
    async fn list_container_stats(
        &self,
        filter: Option<ContainerStatsFilter>,
    ) -> Result<Vec<ContainerStats>> {
        self.record(
            "ListContainerStats",
            "",
            self.inner.list_container_stats(filter).await,
        )
    }
    async fn list_pod_sandbox_stats(
        &self,
        filter: Option<PodSandboxStatsFilter>,
    ) -> Result<Vec<PodSandboxStats>> {
        self.record(
            "ListPodSandboxStats",
            "",
            self.inner.list_pod_sandbox_stats(filter).await,
        )
    }
    async fn container_events(&self) -> Result<EventStream> {
        self.record(
            "GetContainerEvents",
            "",
            self.inner.container_events().await,
        )
    }
    async fn list_images(&self, filter: Option<ImageFilter>) -> Result<Vec<Image>> {
        self.record("ListImages", "", self.inner.list_images(filter).await)
    }
    async fn image_status(&self, image: ImageSpec) -> Result<Option<Image>> {
        let name = image.image.clone();
        self.record("ImageStatus", name, self.inner.image_status(image).await)
    }
    async fn pull_image(
        &self,
        image: ImageSpec,
        auth: Option<AuthConfig>,
        sandbox_config: Option<PodSandboxConfig>,
    ) -> Result<String> {
        let name = image.image.clone();
        self.record(
            "PullImage",
            name,
            self.inner.pull_image(image, auth, sandbox_config).await,
        )
    }
    async fn remove_image(&self, image: ImageSpec) -> Result<()> {
        let name = image.image.clone();
        self.record("RemoveImage", name, self.inner.remove_image(image).await)
    }
    async fn image_fs_info(&self) -> Result<ImageFsInfoResponse> {
        self.record("ImageFsInfo", "", self.inner.image_fs_info().await)
    }
}
