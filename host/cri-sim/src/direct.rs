//! The simulator as a [`CriRuntime`] in the same process, without gRPC: for unit tests
//! of the agent core and for benchmarks that measure the agent rather than the wire.

use std::time::Duration;

use tokio_stream::StreamExt;
use tokio_stream::wrappers::BroadcastStream;
use wasmlet_cri::listed::{ListedContainer, ListedSandbox};
use wasmlet_cri::proto::*;
use wasmlet_cri::runtime::Result;
use wasmlet_cri::{CriError, CriRuntime, EventStream};

use crate::sim::Simulator;

/// The endpoint named in errors from the in-process simulator.
pub const INPROC_ENDPOINT: &str = "inproc://wasmlet-cri-sim";

fn map<T>(call: &'static str, r: std::result::Result<T, tonic::Status>) -> Result<T> {
    r.map_err(|s| CriError::from_status(call, INPROC_ENDPOINT, s))
}

impl CriRuntime for Simulator {
    async fn version(&self) -> Result<VersionResponse> {
        map("Version", Simulator::version(self).await)
    }
    async fn status(&self, verbose: bool) -> Result<StatusResponse> {
        map("Status", Simulator::status(self, verbose).await)
    }
    async fn runtime_config(&self) -> Result<RuntimeConfigResponse> {
        map("RuntimeConfig", Simulator::runtime_config(self).await)
    }
    async fn run_pod_sandbox(
        &self,
        config: PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String> {
        map(
            "RunPodSandbox",
            Simulator::run_pod_sandbox(self, Some(config), runtime_handler).await,
        )
    }
    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        map(
            "StopPodSandbox",
            Simulator::stop_pod_sandbox(self, id).await,
        )
    }
    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        map(
            "RemovePodSandbox",
            Simulator::remove_pod_sandbox(self, id).await,
        )
    }
    async fn pod_sandbox_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> Result<PodSandboxStatusResponse> {
        map(
            "PodSandboxStatus",
            Simulator::pod_sandbox_status(self, id, verbose).await,
        )
    }
    async fn list_pod_sandbox(&self, filter: Option<PodSandboxFilter>) -> Result<Vec<PodSandbox>> {
        map(
            "ListPodSandbox",
            Simulator::list_pod_sandbox(self, filter).await,
        )
    }
    async fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: ContainerConfig,
        _sandbox_config: PodSandboxConfig,
    ) -> Result<String> {
        map(
            "CreateContainer",
            Simulator::create_container(self, pod_sandbox_id, Some(config)).await,
        )
    }
    async fn start_container(&self, id: &str) -> Result<()> {
        map("StartContainer", Simulator::start_container(self, id).await)
    }
    async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<()> {
        map(
            "StopContainer",
            Simulator::stop_container(self, id, timeout_secs).await,
        )
    }
    async fn remove_container(&self, id: &str) -> Result<()> {
        map(
            "RemoveContainer",
            Simulator::remove_container(self, id).await,
        )
    }
    async fn list_containers_lean(&self) -> Result<Vec<ListedContainer>> {
        map(
            "ListContainers",
            Simulator::list_containers_lean(self).await,
        )
    }
    async fn list_pod_sandbox_lean(&self) -> Result<Vec<ListedSandbox>> {
        map(
            "ListPodSandbox",
            Simulator::list_pod_sandbox_lean(self).await,
        )
    }
    async fn list_containers(&self, filter: Option<ContainerFilter>) -> Result<Vec<Container>> {
        map(
            "ListContainers",
            Simulator::list_containers(self, filter).await,
        )
    }
    async fn container_status(&self, id: &str, verbose: bool) -> Result<ContainerStatusResponse> {
        map(
            "ContainerStatus",
            Simulator::container_status(self, id, verbose).await,
        )
    }
    async fn update_container_resources(
        &self,
        id: &str,
        resources: LinuxContainerResources,
    ) -> Result<()> {
        map(
            "UpdateContainerResources",
            Simulator::update_container_resources(self, id, Some(resources)).await,
        )
    }
    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<ExecSyncResponse> {
        let secs = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
        map(
            "ExecSync",
            Simulator::exec_sync(self, id, &cmd, secs as i64).await,
        )
    }
    async fn exec(&self, request: ExecRequest) -> Result<String> {
        map("Exec", Simulator::exec(self, request).await)
    }
    async fn attach(&self, request: AttachRequest) -> Result<String> {
        map("Attach", Simulator::attach(self, request).await)
    }
    async fn port_forward(&self, sandbox_id: &str, ports: Vec<i32>) -> Result<String> {
        map(
            "PortForward",
            Simulator::port_forward(self, sandbox_id, ports).await,
        )
    }
    async fn reopen_container_log(&self, id: &str) -> Result<()> {
        map(
            "ReopenContainerLog",
            Simulator::reopen_container_log(self, id).await,
        )
    }
    async fn container_stats(&self, id: &str) -> Result<ContainerStats> {
        map("ContainerStats", Simulator::container_stats(self, id).await)
    }
    async fn list_container_stats(
        &self,
        filter: Option<ContainerStatsFilter>,
    ) -> Result<Vec<ContainerStats>> {
        map(
            "ListContainerStats",
            Simulator::list_container_stats(self, filter).await,
        )
    }
    async fn list_pod_sandbox_stats(
        &self,
        filter: Option<PodSandboxStatsFilter>,
    ) -> Result<Vec<PodSandboxStats>> {
        map(
            "ListPodSandboxStats",
            Simulator::list_pod_sandbox_stats(self, filter).await,
        )
    }
    async fn container_events(&self) -> Result<EventStream> {
        let rx = map(
            "GetContainerEvents",
            Simulator::container_events(self).await,
        )?;
        Ok(Box::pin(BroadcastStream::new(rx).map(|item| {
            item.map_err(|lagged| {
                CriError::from_status(
                    "GetContainerEvents",
                    INPROC_ENDPOINT,
                    tonic::Status::resource_exhausted(format!("{lagged}; relist")),
                )
            })
        })))
    }
    async fn list_images(&self, filter: Option<ImageFilter>) -> Result<Vec<Image>> {
        map("ListImages", Simulator::list_images(self, filter).await)
    }
    async fn image_status(&self, image: ImageSpec) -> Result<Option<Image>> {
        map(
            "ImageStatus",
            Simulator::image_status(self, Some(image)).await,
        )
    }
    async fn pull_image(
        &self,
        image: ImageSpec,
        _auth: Option<AuthConfig>,
        _sandbox_config: Option<PodSandboxConfig>,
    ) -> Result<String> {
        map("PullImage", Simulator::pull_image(self, Some(image)).await)
    }
    async fn remove_image(&self, image: ImageSpec) -> Result<()> {
        map(
            "RemoveImage",
            Simulator::remove_image(self, Some(image)).await,
        )
    }
    async fn image_fs_info(&self) -> Result<ImageFsInfoResponse> {
        map("ImageFsInfo", Simulator::image_fs_info(self).await)
    }
}
