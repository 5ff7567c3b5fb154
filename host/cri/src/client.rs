//! [`CriClient`]: the CRI over gRPC on a unix socket.
//!
//! - **Deadlines.** Every call has one: `request_timeout` (2 min, the kubelet's
//!   runtimeRequestTimeout) for calls that change things, `status_timeout` for reads.
//!   `StopContainer` and `ExecSync` add their own timeout on top, as the kubelet does.
//! - **Reconnection.** The channel redials on the next call after the connection
//!   breaks. Idempotent calls (reads, Stop*, Remove*) are retried with exponential
//!   back-off (50 ms doubling to 2 s) while the runtime answers UNAVAILABLE, until their
//!   deadline; calls that create something are not retried, the caller decides.
//! - **Negotiation.** [`CriClient::connect`] waits for the runtime, checks that it speaks
//!   `v1`, and probes whether it serves `GetContainerEvents`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tonic::transport::{Channel, Endpoint as TonicEndpoint, Uri};

use crate::endpoint::Endpoint;
use crate::error::{CriError, ErrorKind};
use crate::listed::{ListedContainer, ListedContainers, ListedSandbox, ListedSandboxes};
use crate::proto::image_service_client::ImageServiceClient;
use crate::proto::runtime_service_client::RuntimeServiceClient;
use crate::proto::*;
use crate::runtime::{CriRuntime, EventStream, Result};

/// The CRI version this crate speaks (sent in `Version`, expected back).
pub const CRI_API_VERSION: &str = "v1";

/// Largest message the client accepts: a list of thousands of containers exceeds tonic's
/// 4 MiB default. The kubelet allows 16 MiB.
const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// HTTP/2 flow-control window: a whole maximal message fits without waiting.
const WINDOW_BYTES: u32 = 16 << 20;

/// Largest HTTP/2 frame the client accepts: 1 MiB instead of 16 KiB cuts a large list
/// answer into a few frames instead of dozens.
const FRAME_BYTES: u32 = 1 << 20;

/// Timeouts and back-off of a [`CriClient`].
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Deadline of calls that change state (RunPodSandbox, CreateContainer, ...).
    pub request_timeout: Duration,
    /// Deadline of read-only calls (Version, Status, List*, *Status).
    pub status_timeout: Duration,
    /// How long [`CriClient::connect`] waits for the runtime to answer `Version`.
    pub connect_timeout: Duration,
    /// First retry delay for idempotent calls; doubles up to `max_backoff`.
    pub initial_backoff: Duration,
    /// Longest retry delay.
    pub max_backoff: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(120),
            status_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
        }
    }
}

/// Whether a call may be sent again after the runtime answered UNAVAILABLE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// Reads, Stop*, Remove*: repeating them is harmless.
    Idempotent,
    /// Run/Create/Start/Exec: a repeat could do the thing twice.
    Once,
}

/// What the runtime said about itself at connect.
#[derive(Debug, Clone)]
pub struct Negotiated {
    /// The runtime's `Version` answer.
    pub version: VersionResponse,
    /// Whether `GetContainerEvents` is served (containerd 1.6 answers UNIMPLEMENTED).
    pub container_events: bool,
}

/// A CRI client on a unix socket. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct CriClient {
    endpoint: Endpoint,
    channel: Channel,
    options: Arc<ClientOptions>,
    negotiated: Arc<Negotiated>,
}

impl std::fmt::Debug for CriClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CriClient")
            .field("endpoint", &self.endpoint)
            .field("runtime", &self.negotiated.version.runtime_name)
            .field("runtime_version", &self.negotiated.version.runtime_version)
            .finish()
    }
}

impl CriClient {
    /// Connects to `endpoint` with default options. See [`CriClient::connect_with`].
    pub async fn connect(endpoint: &str) -> Result<Self> {
        Self::connect_with(endpoint, ClientOptions::default()).await
    }

    /// Connects to `endpoint`, waiting up to `connect_timeout` for the runtime to answer
    /// `Version`; fails with [`ErrorKind::VersionMismatch`] unless it speaks `v1`, then
    /// probes the event stream.
    pub async fn connect_with(endpoint: &str, options: ClientOptions) -> Result<Self> {
        let endpoint = Endpoint::parse(endpoint)?;
        let path = Arc::new(endpoint.path().to_owned());
        // The URI is required by tonic but unused: the connector dials the socket.
        let channel = TonicEndpoint::from_static("http://cri.local")
            .connect_timeout(options.status_timeout)
            // A relist of thousands of containers is megabytes: with HTTP/2's default
            // 64 KiB windows it would stall on flow control many times per call.
            .initial_stream_window_size(WINDOW_BYTES)
            .initial_connection_window_size(WINDOW_BYTES)
            .max_frame_size(FRAME_BYTES)
            .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move { UnixStream::connect(&*path).await.map(TokioIo::new) }
            }));
        let mut client = Self {
            endpoint,
            channel,
            options: Arc::new(options),
            negotiated: Arc::new(Negotiated {
                version: VersionResponse::default(),
                container_events: false,
            }),
        };
        let version = client
            .unary(
                "Version",
                client.options.connect_timeout,
                Retry::Idempotent,
                VersionRequest {
                    version: CRI_API_VERSION.into(),
                },
                |c, r| async move { c.runtime().version(r).await },
            )
            .await?;
        if version.runtime_api_version != CRI_API_VERSION {
            return Err(CriError::new(
                "Version",
                client.endpoint.shared(),
                ErrorKind::VersionMismatch,
                format!(
                    "{} {} speaks CRI {:?}; wasmlet needs {:?}",
                    version.runtime_name,
                    version.runtime_version,
                    version.runtime_api_version,
                    CRI_API_VERSION
                ),
            ));
        }
        let container_events = match client.container_events().await {
            Ok(_stream) => true,
            Err(e) if e.is_unimplemented() => false,
            Err(e) => {
                tracing::warn!(error = %e, "probing GetContainerEvents failed; relisting only");
                false
            }
        };
        tracing::debug!(
            endpoint = %client.endpoint,
            runtime = %version.runtime_name,
            runtime_version = %version.runtime_version,
            container_events,
            "connected to CRI runtime"
        );
        client.negotiated = Arc::new(Negotiated {
            version,
            container_events,
        });
        Ok(client)
    }

    /// The endpoint this client dials.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// What the runtime said at connect.
    pub fn negotiated(&self) -> &Negotiated {
        &self.negotiated
    }

    /// The options in force.
    pub fn options(&self) -> &ClientOptions {
        &self.options
    }

    fn runtime(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// One RuntimeService unary call at `path` whose answer is decoded as `Resp`, a
    /// message reading the same wire format as the generated one (see [`crate::listed`]).
    async fn runtime_as<Req, Resp>(
        &self,
        path: &'static str,
        request: tonic::Request<Req>,
    ) -> std::result::Result<tonic::Response<Resp>, tonic::Status>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unavailable(format!("runtime not ready: {e}")))?;
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        grpc.unary(
            request,
            tonic::codegen::http::uri::PathAndQuery::from_static(path),
            codec,
        )
        .await
    }

    fn images(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// Sends one unary call with a deadline of `timeout`, retrying idempotent calls with
    /// back-off while the runtime is unavailable.
    async fn unary<Req, Resp, F, Fut>(
        &self,
        call: &'static str,
        timeout: Duration,
        retry: Retry,
        mut request: Req,
        send: F,
    ) -> Result<Resp>
    where
        Req: Clone + Default,
        F: Fn(Self, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let deadline = Instant::now() + timeout;
        let mut backoff = self.options.initial_backoff;
        loop {
            let body = match retry {
                Retry::Idempotent => request.clone(),
                Retry::Once => std::mem::take(&mut request),
            };
            let mut req = tonic::Request::new(body);
            req.set_timeout(deadline.saturating_duration_since(Instant::now()));
            let err = match tokio::time::timeout_at(deadline, send(self.clone(), req)).await {
                Ok(Ok(resp)) => return Ok(resp.into_inner()),
                // tonic enforces the grpc-timeout we sent as well, answering CANCELLED
                // ("Timeout expired"): whoever noticed first, the call ran out of time.
                Ok(Err(_)) if Instant::now() >= deadline => {
                    return Err(CriError::deadline(call, self.endpoint.shared(), timeout));
                }
                Ok(Err(status)) => CriError::from_status(call, self.endpoint.shared(), status),
                Err(_elapsed) => {
                    return Err(CriError::deadline(call, self.endpoint.shared(), timeout));
                }
            };
            let retryable = retry == Retry::Idempotent && err.kind() == ErrorKind::Unavailable;
            if !retryable || Instant::now() + backoff >= deadline {
                return Err(err);
            }
            tracing::debug!(call, error = %err, ?backoff, "runtime unavailable; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.options.max_backoff);
        }
    }

    fn read_timeout(&self) -> Duration {
        self.options.status_timeout
    }

    fn write_timeout(&self) -> Duration {
        self.options.request_timeout
    }
}

impl CriRuntime for CriClient {
    async fn version(&self) -> Result<VersionResponse> {
        let req = VersionRequest {
            version: CRI_API_VERSION.into(),
        };
        self.unary(
            "Version",
            self.read_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.runtime().version(r).await },
        )
        .await
    }

    async fn status(&self, verbose: bool) -> Result<StatusResponse> {
        let req = StatusRequest { verbose };
        self.unary(
            "Status",
            self.read_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.runtime().status(r).await },
        )
        .await
    }

    async fn runtime_config(&self) -> Result<RuntimeConfigResponse> {
        self.unary(
            "RuntimeConfig",
            self.read_timeout(),
            Retry::Idempotent,
            RuntimeConfigRequest {},
            |c, r| async move { c.runtime().runtime_config(r).await },
        )
        .await
    }

    async fn run_pod_sandbox(
        &self,
        config: PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String> {
        let req = RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: runtime_handler.into(),
        };
        self.unary(
            "RunPodSandbox",
            self.write_timeout(),
            Retry::Once,
            req,
            |c, r| async move { c.runtime().run_pod_sandbox(r).await },
        )
        .await
        .map(|r| r.pod_sandbox_id)
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        let req = StopPodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.unary(
            "StopPodSandbox",
            self.write_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.runtime().stop_pod_sandbox(r).await },
        )
        .await
        .map(drop)
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        let req = RemovePodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.unary(
            "RemovePodSandbox",
            self.write_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.runtime().remove_pod_sandbox(r).await },
        )
        .await
        .map(drop)
    }

    async fn pod_sandbox_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> Result<PodSandboxStatusResponse> {
        let req = PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose,
        };
        self.unary(
            "PodSandboxStatus",
            self.read_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.runtime().pod_sandbox_status(r).await },
        )
        .await
    }

    async fn list_pod_sandbox(&self, filter: Option<PodSandboxFilter>) -> Result<Vec<PodSandbox>> {
        let req = ListPodSandboxRequest { filter };
        self.unary(
            "ListPodSandbox",
            self.read_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.runtime().list_pod_sandbox(r).await },
        )
        .await
        .map(|r| r.items)
    }

    async fn list_pod_sandbox_lean(&self) -> Result<Vec<ListedSandbox>> {
        self.unary(
            "ListPodSandbox",
            self.read_timeout(),
            Retry::Idempotent,
            ListPodSandboxRequest::default(),
            |c, r| async move {
                c.runtime_as::<_, ListedSandboxes>("/runtime.v1.RuntimeService/ListPodSandbox", r)
                    .await
            },
        )
        .await
        .map(|r| r.items)
    }

    async fn list_containers_lean(&self) -> Result<Vec<ListedContainer>> {
        self.unary(
            "ListContainers",
            self.read_timeout(),
            Retry::Idempotent,
            ListContainersRequest::default(),
            |c, r| async move {
                c.runtime_as::<_, ListedContainers>("/runtime.v1.RuntimeService/ListContainers", r)
                    .await
            },
        )
        .await
        .map(|r| r.containers)
    }

    async fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: ContainerConfig,
        sandbox_config: PodSandboxConfig,
    ) -> Result<String> {
        let req = CreateContainerRequest {
            pod_sandbox_id: pod_sandbox_id.into(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        self.unary(
            "CreateContainer",
            self.write_timeout(),
            Retry::Once,
            req,
            |c, r| async move { c.runtime().create_container(r).await },
        )
        .await
        .map(|r| r.container_id)
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        let req = StartContainerRequest {
            container_id: id.into(),
        };
        self.unary(
            "StartContainer",
            self.write_timeout(),
            Retry::Once,
            req,
            |c, r| async move { c.runtime().start_container(r).await },
        )
        .await
        .map(drop)
    }

    async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<()> {
        let req = StopContainerRequest {
            container_id: id.into(),
            timeout: timeout_secs,
        };
        let grace = Duration::from_secs(timeout_secs.max(0).unsigned_abs());
        self.unary(
            "StopContainer",
            self.write_timeout() + grace,
            Retry::Idempotent,
            req,
            |c, r| async move { c.runtime().stop_container(r).await },
        )
        .await
        .map(drop)
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        let req = RemoveContainerRequest {
            container_id: id.into(),
        };
        self.unary(
            "RemoveContainer",
            self.write_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.runtime().remove_container(r).await },
        )
        .await
        .map(drop)
    }

    async fn list_containers(&self, filter: Option<ContainerFilter>) -> Result<Vec<Container>> {
        let req = ListContainersRequest { filter };
        self.unary(
            "ListContainers",
            self.read_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.runtime().list_containers(r).await },
        )
        .await
        .map(|r| r.containers)
    }

    async fn container_status(&self, id: &str, verbose: bool) -> Result<ContainerStatusResponse> {
        let req = ContainerStatusRequest {
            container_id: id.into(),
            verbose,
        };
        self.unary(
            "ContainerStatus",
            self.read_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.runtime().container_status(r).await },
        )
        .await
    }

    async fn update_container_resources(
        &self,
        id: &str,
        resources: LinuxContainerResources,
    ) -> Result<()> {
        let req = UpdateContainerResourcesRequest {
            container_id: id.into(),
            linux: Some(resources),
            annotations: Default::default(),
        };
        self.unary(
            "UpdateContainerResources",
            self.write_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.runtime().update_container_resources(r).await },
        )
        .await
        .map(drop)
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<ExecSyncResponse> {
        // The runtime enforces `timeout` (in whole seconds, rounded up); the client waits
        // a status deadline longer so that the runtime's answer, not ours, is seen.
        let secs = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
        let req = ExecSyncRequest {
            container_id: id.into(),
            cmd,
            timeout: secs as i64,
        };
        let deadline = if timeout.is_zero() {
            self.write_timeout()
        } else {
            timeout + self.read_timeout()
        };
        self.unary("ExecSync", deadline, Retry::Once, req, |c, r| async move {
            c.runtime().exec_sync(r).await
        })
        .await
    }

    async fn exec(&self, request: ExecRequest) -> Result<String> {
        // Preparing a stream changes nothing until a client connects to the URL: safe to
        // repeat while the runtime is away.
        self.unary(
            "Exec",
            self.write_timeout(),
            Retry::Idempotent,
            request,
            |c, r| async move { c.runtime().exec(r).await },
        )
        .await
        .map(|r| r.url)
    }

    async fn attach(&self, request: AttachRequest) -> Result<String> {
        self.unary(
            "Attach",
            self.write_timeout(),
            Retry::Idempotent,
            request,
            |c, r| async move { c.runtime().attach(r).await },
        )
        .await
        .map(|r| r.url)
    }

    async fn port_forward(&self, sandbox_id: &str, ports: Vec<i32>) -> Result<String> {
        let req = PortForwardRequest {
            pod_sandbox_id: sandbox_id.into(),
            port: ports,
        };
        self.unary(
            "PortForward",
            self.write_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.runtime().port_forward(r).await },
        )
        .await
        .map(|r| r.url)
    }

    async fn reopen_container_log(&self, id: &str) -> Result<()> {
        let req = ReopenContainerLogRequest {
            container_id: id.into(),
        };
        self.unary(
            "ReopenContainerLog",
            self.write_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.runtime().reopen_container_log(r).await },
        )
        .await
        .map(drop)
    }

    async fn container_stats(&self, id: &str) -> Result<ContainerStats> {
        let req = ContainerStatsRequest {
            container_id: id.into(),
        };
        self.unary(
            "ContainerStats",
            self.read_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.runtime().container_stats(r).await },
        )
        .await
        .map(|r| r.stats.unwrap_or_default())
    }

    async fn list_container_stats(
        &self,
        filter: Option<ContainerStatsFilter>,
    ) -> Result<Vec<ContainerStats>> {
        let req = ListContainerStatsRequest { filter };
        self.unary(
            "ListContainerStats",
            self.read_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.runtime().list_container_stats(r).await },
        )
        .await
        .map(|r| r.stats)
    }

    async fn list_pod_sandbox_stats(
        &self,
        filter: Option<PodSandboxStatsFilter>,
    ) -> Result<Vec<PodSandboxStats>> {
        let req = ListPodSandboxStatsRequest { filter };
        self.unary(
            "ListPodSandboxStats",
            self.read_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.runtime().list_pod_sandbox_stats(r).await },
        )
        .await
        .map(|r| r.stats)
    }

    async fn container_events(&self) -> Result<EventStream> {
        let endpoint = self.endpoint.shared();
        let stream = self
            .unary(
                "GetContainerEvents",
                self.read_timeout(),
                Retry::Once,
                GetEventsRequest {},
                |c, r| async move { c.runtime().get_container_events(r).await },
            )
            .await?;
        // The deadline above covered opening the stream; the stream itself is open-ended.
        Ok(Box::pin(stream.map(move |item| {
            item.map_err(|status| {
                CriError::from_status("GetContainerEvents", endpoint.clone(), status)
            })
        })))
    }

    async fn list_images(&self, filter: Option<ImageFilter>) -> Result<Vec<Image>> {
        let req = ListImagesRequest { filter };
        self.unary(
            "ListImages",
            self.read_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.images().list_images(r).await },
        )
        .await
        .map(|r| r.images)
    }

    async fn image_status(&self, image: ImageSpec) -> Result<Option<Image>> {
        let req = ImageStatusRequest {
            image: Some(image),
            verbose: false,
        };
        self.unary(
            "ImageStatus",
            self.read_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.images().image_status(r).await },
        )
        .await
        .map(|r| r.image)
    }

    async fn pull_image(
        &self,
        image: ImageSpec,
        auth: Option<AuthConfig>,
        sandbox_config: Option<PodSandboxConfig>,
    ) -> Result<String> {
        let req = PullImageRequest {
            image: Some(image),
            auth,
            sandbox_config,
        };
        self.unary(
            "PullImage",
            self.write_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.images().pull_image(r).await },
        )
        .await
        .map(|r| r.image_ref)
    }

    async fn remove_image(&self, image: ImageSpec) -> Result<()> {
        let req = RemoveImageRequest { image: Some(image) };
        self.unary(
            "RemoveImage",
            self.write_timeout(),
            Retry::Idempotent,
            req,
            |c, r| async move { c.images().remove_image(r).await },
        )
        .await
        .map(drop)
    }

    async fn image_fs_info(&self) -> Result<ImageFsInfoResponse> {
        self.unary(
            "ImageFsInfo",
            self.read_timeout(),
            Retry::Idempotent,
            ImageFsInfoRequest {},
            |c, r| async move { c.images().image_fs_info(r).await },
        )
        .await
    }
}
