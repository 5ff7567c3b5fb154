//! The edge the agent core is written against: one method per CRI call the agent makes.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio_stream::Stream;

use crate::error::CriError;
use crate::listed::{ListedContainer, ListedSandbox};
use crate::proto::{
    AttachRequest, AuthConfig, Container, ContainerConfig, ContainerEventResponse, ContainerFilter,
    ContainerStats, ContainerStatsFilter, ContainerStatusResponse, ExecRequest, ExecSyncResponse,
    Image, ImageFilter, ImageFsInfoResponse, ImageSpec, LinuxContainerResources, PodSandbox,
    PodSandboxConfig, PodSandboxFilter, PodSandboxStats, PodSandboxStatsFilter,
    PodSandboxStatusResponse, RuntimeConfigResponse, StatusResponse, VersionResponse,
};

/// Result of a CRI call.
pub type Result<T> = std::result::Result<T, CriError>;

/// The runtime's container event stream (`GetContainerEvents`). It ends, or yields an
/// error, when the runtime goes away or the consumer falls too far behind; the consumer
/// then relists.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<ContainerEventResponse>> + Send>>;

/// A container runtime as the agent sees it: RuntimeService and ImageService.
///
/// Arguments and results follow the CRI messages; wrapper messages that carry a single
/// field are unwrapped (`run_pod_sandbox` returns the id, `list_containers` the list).
/// Implementations: [`crate::CriClient`] (gRPC), the simulator's in-process runtime,
/// and [`crate::Recorder`] around either.
pub trait CriRuntime: Send + Sync {
    /// `Version`: the runtime's name and versions.
    fn version(&self) -> impl Future<Output = Result<VersionResponse>> + Send;
    /// `Status`: the RuntimeReady / NetworkReady conditions.
    fn status(&self, verbose: bool) -> impl Future<Output = Result<StatusResponse>> + Send;
    /// `RuntimeConfig`: the cgroup driver.
    fn runtime_config(&self) -> impl Future<Output = Result<RuntimeConfigResponse>> + Send;

    /// `RunPodSandbox`: returns the new sandbox's id.
    fn run_pod_sandbox(
        &self,
        config: PodSandboxConfig,
        runtime_handler: &str,
    ) -> impl Future<Output = Result<String>> + Send;
    /// `StopPodSandbox` (idempotent).
    fn stop_pod_sandbox(&self, id: &str) -> impl Future<Output = Result<()>> + Send;
    /// `RemovePodSandbox` (idempotent).
    fn remove_pod_sandbox(&self, id: &str) -> impl Future<Output = Result<()>> + Send;
    /// `PodSandboxStatus`.
    fn pod_sandbox_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> impl Future<Output = Result<PodSandboxStatusResponse>> + Send;
    /// `ListPodSandbox`.
    fn list_pod_sandbox(
        &self,
        filter: Option<PodSandboxFilter>,
    ) -> impl Future<Output = Result<Vec<PodSandbox>>> + Send;

    /// `ListPodSandbox` with no filter, read leanly (id, state, creation, labels): what a
    /// relist needs. The default reads the full list; clients override it.
    fn list_pod_sandbox_lean(&self) -> impl Future<Output = Result<Vec<ListedSandbox>>> + Send {
        async move {
            Ok(self
                .list_pod_sandbox(None)
                .await?
                .iter()
                .map(ListedSandbox::from)
                .collect())
        }
    }

    /// `CreateContainer`: returns the new container's id.
    fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: ContainerConfig,
        sandbox_config: PodSandboxConfig,
    ) -> impl Future<Output = Result<String>> + Send;
    /// `StartContainer`.
    fn start_container(&self, id: &str) -> impl Future<Output = Result<()>> + Send;
    /// `StopContainer` with a grace period in seconds (0 kills at once).
    fn stop_container(
        &self,
        id: &str,
        timeout_secs: i64,
    ) -> impl Future<Output = Result<()>> + Send;
    /// `RemoveContainer` (idempotent).
    fn remove_container(&self, id: &str) -> impl Future<Output = Result<()>> + Send;
    /// `ListContainers`.
    fn list_containers(
        &self,
        filter: Option<ContainerFilter>,
    ) -> impl Future<Output = Result<Vec<Container>>> + Send;
    /// `ListContainers` with no filter, read leanly (id, sandbox, state, creation,
    /// labels): what a relist needs. The default reads the full list.
    fn list_containers_lean(&self) -> impl Future<Output = Result<Vec<ListedContainer>>> + Send {
        async move {
            Ok(self
                .list_containers(None)
                .await?
                .iter()
                .map(ListedContainer::from)
                .collect())
        }
    }
    /// `ContainerStatus`.
    fn container_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> impl Future<Output = Result<ContainerStatusResponse>> + Send;
    /// `UpdateContainerResources`.
    fn update_container_resources(
        &self,
        id: &str,
        resources: LinuxContainerResources,
    ) -> impl Future<Output = Result<()>> + Send;
    /// `ExecSync`: runs `cmd` in the container; `timeout` is enforced by the runtime
    /// (zero waits forever).
    fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> impl Future<Output = Result<ExecSyncResponse>> + Send;
    /// `Exec`: prepares an interactive command; returns the URL on the runtime's
    /// streaming server where the client upgrades.
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<String>> + Send;
    /// `Attach`: prepares a connection to the container's stdio; returns the URL.
    fn attach(&self, request: AttachRequest) -> impl Future<Output = Result<String>> + Send;
    /// `PortForward`: prepares forwarding to `ports` in the sandbox; returns the URL.
    fn port_forward(
        &self,
        sandbox_id: &str,
        ports: Vec<i32>,
    ) -> impl Future<Output = Result<String>> + Send;
    /// `ReopenContainerLog`: the runtime reopens the container's log file (after a
    /// rotation).
    fn reopen_container_log(&self, id: &str) -> impl Future<Output = Result<()>> + Send;
    /// `ContainerStats`.
    fn container_stats(&self, id: &str) -> impl Future<Output = Result<ContainerStats>> + Send;
    /// `ListContainerStats`.
    fn list_container_stats(
        &self,
        filter: Option<ContainerStatsFilter>,
    ) -> impl Future<Output = Result<Vec<ContainerStats>>> + Send;
    /// `ListPodSandboxStats`: each sandbox's cgroup, network and process count as the
    /// runtime measures them.
    fn list_pod_sandbox_stats(
        &self,
        filter: Option<PodSandboxStatsFilter>,
    ) -> impl Future<Output = Result<Vec<PodSandboxStats>>> + Send;
    /// `GetContainerEvents`. [`crate::ErrorKind::Unimplemented`] where the runtime has
    /// no event stream (containerd 1.6).
    fn container_events(&self) -> impl Future<Output = Result<EventStream>> + Send;

    /// `ListImages`.
    fn list_images(
        &self,
        filter: Option<ImageFilter>,
    ) -> impl Future<Output = Result<Vec<Image>>> + Send;
    /// `ImageStatus`: `None` when the image is not present.
    fn image_status(&self, image: ImageSpec) -> impl Future<Output = Result<Option<Image>>> + Send;
    /// `PullImage`: returns the image reference the runtime resolved.
    fn pull_image(
        &self,
        image: ImageSpec,
        auth: Option<AuthConfig>,
        sandbox_config: Option<PodSandboxConfig>,
    ) -> impl Future<Output = Result<String>> + Send;
    /// `RemoveImage` (idempotent).
    fn remove_image(&self, image: ImageSpec) -> impl Future<Output = Result<()>> + Send;
    /// `ImageFsInfo`.
    fn image_fs_info(&self) -> impl Future<Output = Result<ImageFsInfoResponse>> + Send;
}
