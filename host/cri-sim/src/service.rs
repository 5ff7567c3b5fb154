//! The tonic services: `runtime.v1.RuntimeService` and `runtime.v1.ImageService`, each
//! call forwarded to the [`Simulator`] method of the same name.

use std::pin::Pin;

use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};
use wasmlet_cri::proto::image_service_server::ImageService;
use wasmlet_cri::proto::runtime_service_server::RuntimeService;
use wasmlet_cri::proto::*;

use crate::sim::Simulator;

/// The gRPC face of a [`Simulator`].
#[derive(Debug, Clone)]
pub struct SimService {
    sim: Simulator,
}

impl SimService {
    /// Serves `sim`.
    pub fn new(sim: Simulator) -> Self {
        Self { sim }
    }
}

type Reply<T> = Result<Response<T>, Status>;

fn ok<T>(value: T) -> Reply<T> {
    Ok(Response::new(value))
}

#[tonic::async_trait]
impl RuntimeService for SimService {
    async fn version(&self, _: Request<VersionRequest>) -> Reply<VersionResponse> {
        ok(self.sim.version().await?)
    }

    async fn run_pod_sandbox(
        &self,
        r: Request<RunPodSandboxRequest>,
    ) -> Reply<RunPodSandboxResponse> {
        let r = r.into_inner();
        let pod_sandbox_id = self
            .sim
            .run_pod_sandbox(r.config, &r.runtime_handler)
            .await?;
        ok(RunPodSandboxResponse { pod_sandbox_id })
    }

    async fn stop_pod_sandbox(
        &self,
        r: Request<StopPodSandboxRequest>,
    ) -> Reply<StopPodSandboxResponse> {
        self.sim
            .stop_pod_sandbox(&r.into_inner().pod_sandbox_id)
            .await?;
        ok(StopPodSandboxResponse {})
    }

    async fn remove_pod_sandbox(
        &self,
        r: Request<RemovePodSandboxRequest>,
    ) -> Reply<RemovePodSandboxResponse> {
        self.sim
            .remove_pod_sandbox(&r.into_inner().pod_sandbox_id)
            .await?;
        ok(RemovePodSandboxResponse {})
    }

    async fn pod_sandbox_status(
        &self,
        r: Request<PodSandboxStatusRequest>,
    ) -> Reply<PodSandboxStatusResponse> {
        let r = r.into_inner();
        ok(self
            .sim
            .pod_sandbox_status(&r.pod_sandbox_id, r.verbose)
            .await?)
    }

    async fn list_pod_sandbox(
        &self,
        r: Request<ListPodSandboxRequest>,
    ) -> Reply<ListPodSandboxResponse> {
        ok(ListPodSandboxResponse {
            items: self.sim.list_pod_sandbox(r.into_inner().filter).await?,
        })
    }

    async fn create_container(
        &self,
        r: Request<CreateContainerRequest>,
    ) -> Reply<CreateContainerResponse> {
        let r = r.into_inner();
        let container_id = self
            .sim
            .create_container(&r.pod_sandbox_id, r.config)
            .await?;
        ok(CreateContainerResponse { container_id })
    }

    async fn start_container(
        &self,
        r: Request<StartContainerRequest>,
    ) -> Reply<StartContainerResponse> {
        self.sim
            .start_container(&r.into_inner().container_id)
            .await?;
        ok(StartContainerResponse {})
    }

    async fn stop_container(
        &self,
        r: Request<StopContainerRequest>,
    ) -> Reply<StopContainerResponse> {
        let r = r.into_inner();
        self.sim.stop_container(&r.container_id, r.timeout).await?;
        ok(StopContainerResponse {})
    }

    async fn remove_container(
        &self,
        r: Request<RemoveContainerRequest>,
    ) -> Reply<RemoveContainerResponse> {
        self.sim
            .remove_container(&r.into_inner().container_id)
            .await?;
        ok(RemoveContainerResponse {})
    }

    async fn list_containers(
        &self,
        r: Request<ListContainersRequest>,
    ) -> Reply<ListContainersResponse> {
        ok(ListContainersResponse {
            containers: self.sim.list_containers(r.into_inner().filter).await?,
        })
    }

    async fn container_status(
        &self,
        r: Request<ContainerStatusRequest>,
    ) -> Reply<ContainerStatusResponse> {
        let r = r.into_inner();
        ok(self
            .sim
            .container_status(&r.container_id, r.verbose)
            .await?)
    }

    async fn update_container_resources(
        &self,
        r: Request<UpdateContainerResourcesRequest>,
    ) -> Reply<UpdateContainerResourcesResponse> {
        let r = r.into_inner();
        self.sim
            .update_container_resources(&r.container_id, r.linux)
            .await?;
        ok(UpdateContainerResourcesResponse {})
    }

    async fn exec_sync(&self, r: Request<ExecSyncRequest>) -> Reply<ExecSyncResponse> {
        let r = r.into_inner();
        ok(self
            .sim
            .exec_sync(&r.container_id, &r.cmd, r.timeout)
            .await?)
    }

    async fn exec(&self, r: Request<ExecRequest>) -> Reply<ExecResponse> {
        ok(ExecResponse {
            url: self.sim.exec(r.into_inner()).await?,
        })
    }

    async fn attach(&self, r: Request<AttachRequest>) -> Reply<AttachResponse> {
        ok(AttachResponse {
            url: self.sim.attach(r.into_inner()).await?,
        })
    }

    async fn port_forward(&self, r: Request<PortForwardRequest>) -> Reply<PortForwardResponse> {
        let r = r.into_inner();
        ok(PortForwardResponse {
            url: self.sim.port_forward(&r.pod_sandbox_id, r.port).await?,
        })
    }

    async fn reopen_container_log(
        &self,
        r: Request<ReopenContainerLogRequest>,
    ) -> Reply<ReopenContainerLogResponse> {
        self.sim
            .reopen_container_log(&r.into_inner().container_id)
            .await?;
        ok(ReopenContainerLogResponse {})
    }

    async fn container_stats(
        &self,
        r: Request<ContainerStatsRequest>,
    ) -> Reply<ContainerStatsResponse> {
        ok(ContainerStatsResponse {
            stats: Some(
                self.sim
                    .container_stats(&r.into_inner().container_id)
                    .await?,
            ),
        })
    }

    async fn list_container_stats(
        &self,
        r: Request<ListContainerStatsRequest>,
    ) -> Reply<ListContainerStatsResponse> {
        ok(ListContainerStatsResponse {
            stats: self.sim.list_container_stats(r.into_inner().filter).await?,
        })
    }

    async fn pod_sandbox_stats(
        &self,
        r: Request<PodSandboxStatsRequest>,
    ) -> Reply<PodSandboxStatsResponse> {
        ok(PodSandboxStatsResponse {
            stats: Some(
                self.sim
                    .pod_sandbox_stats(&r.into_inner().pod_sandbox_id)
                    .await?,
            ),
        })
    }

    async fn list_pod_sandbox_stats(
        &self,
        r: Request<ListPodSandboxStatsRequest>,
    ) -> Reply<ListPodSandboxStatsResponse> {
        ok(ListPodSandboxStatsResponse {
            stats: self
                .sim
                .list_pod_sandbox_stats(r.into_inner().filter)
                .await?,
        })
    }

    async fn status(&self, r: Request<StatusRequest>) -> Reply<StatusResponse> {
        ok(self.sim.status(r.into_inner().verbose).await?)
    }

    type GetContainerEventsStream =
        Pin<Box<dyn Stream<Item = Result<ContainerEventResponse, Status>> + Send>>;

    async fn get_container_events(
        &self,
        _: Request<GetEventsRequest>,
    ) -> Reply<Self::GetContainerEventsStream> {
        let rx = self.sim.container_events().await?;
        let stream = BroadcastStream::new(rx).map(|item| {
            item.map_err(|BroadcastStreamRecvError::Lagged(n)| {
                Status::resource_exhausted(format!("event consumer fell {n} events behind; relist"))
            })
        });
        // A lagged consumer gets one error and then the end of the stream.
        let mut failed = false;
        let stream = stream.take_while(move |item| {
            let keep = !failed;
            failed |= item.is_err();
            keep
        });
        ok(Box::pin(stream))
    }

    async fn runtime_config(
        &self,
        _: Request<RuntimeConfigRequest>,
    ) -> Reply<RuntimeConfigResponse> {
        ok(self.sim.runtime_config().await?)
    }
}

#[tonic::async_trait]
impl ImageService for SimService {
    async fn list_images(&self, r: Request<ListImagesRequest>) -> Reply<ListImagesResponse> {
        ok(ListImagesResponse {
            images: self.sim.list_images(r.into_inner().filter).await?,
        })
    }

    async fn image_status(&self, r: Request<ImageStatusRequest>) -> Reply<ImageStatusResponse> {
        let image = self.sim.image_status(r.into_inner().image).await?;
        ok(ImageStatusResponse {
            image,
            info: Default::default(),
        })
    }

    async fn pull_image(&self, r: Request<PullImageRequest>) -> Reply<PullImageResponse> {
        ok(PullImageResponse {
            image_ref: self.sim.pull_image(r.into_inner().image).await?,
        })
    }

    async fn remove_image(&self, r: Request<RemoveImageRequest>) -> Reply<RemoveImageResponse> {
        self.sim.remove_image(r.into_inner().image).await?;
        ok(RemoveImageResponse {})
    }

    async fn image_fs_info(&self, _: Request<ImageFsInfoRequest>) -> Reply<ImageFsInfoResponse> {
        ok(self.sim.image_fs_info().await?)
    }
}
