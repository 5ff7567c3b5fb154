//! The registration server on `<dir>/kubelet.sock`: a plugin registers its resource
//! and socket; the agent dials it (10 s), asks its options — a plugin whose options
//! cannot be read is not used, and its Register call fails saying why — then follows
//! its ListAndWatch stream until it ends. A stream that ends is not opened again: the
//! plugin registers again when it comes back, as with the kubelet.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Endpoint, Server, Uri};
use tonic::{Request, Response, Status};

use crate::manager::{Manager, rpc_error};
use crate::proto;
use crate::proto::device_plugin_client::DevicePluginClient;
use crate::proto::registration_server::{Registration, RegistrationServer};

/// The API version this agent speaks.
pub const VERSION: &str = "v1beta1";
/// The registration socket's name in the device plugin directory.
pub const SOCKET: &str = "kubelet.sock";
/// The directory the kubelet (and so every device plugin) uses.
pub const DEFAULT_DIR: &str = "/var/lib/kubelet/device-plugins";
/// How long dialing a plugin's socket may take.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the registration server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The directory could not be made or cleaned, or the socket bound.
    #[error("device plugin registration socket {path}: {source}")]
    Socket {
        /// The socket or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The server failed.
    #[error("device plugin registration server: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// Whether `name` is an extended resource a plugin may advertise: `domain/name`, the
/// domain not Kubernetes' own, both parts well formed (a qualified name).
pub fn is_extended_resource(name: &str) -> bool {
    let Some((domain, local)) = name.split_once('/') else {
        return false;
    };
    let domain_ok = !domain.is_empty()
        && domain.len() <= 253
        && domain.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    let edge = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    let local_ok = local.len() <= 63
        && edge(local.as_bytes().first())
        && edge(local.as_bytes().last())
        && local
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    domain_ok && local_ok && !domain.contains("kubernetes.io") && !name.starts_with("requests.")
}

/// Removes the sockets a previous run left in `dir` (plugins register again); the
/// checkpoint and anything that is not a socket stay.
fn clean(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type().is_ok_and(|t| t.is_socket()) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Binds `<dir>/kubelet.sock`, the directory made and cleaned first.
pub fn bind(dir: &Path) -> Result<UnixListener, ServeError> {
    let err = |path: &Path| {
        let path = path.to_owned();
        move |source| ServeError::Socket { path, source }
    };
    std::fs::create_dir_all(dir).map_err(err(dir))?;
    clean(dir).map_err(err(dir))?;
    let socket = dir.join(SOCKET);
    UnixListener::bind(&socket).map_err(err(&socket))
}

/// Serves registrations on `listener` (from [`bind`]) for `manager` until `shutdown`
/// resolves.
pub async fn serve(
    manager: Arc<Manager>,
    listener: UnixListener,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    tracing::info!(socket = %manager.dir().join(SOCKET).display(), "Serving device plugin registrations");
    Server::builder()
        .add_service(RegistrationServer::new(Registrar { manager }))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
        .await?;
    Ok(())
}

/// A plugin socket that does not answer.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// The connection failed.
    #[error("failed to dial device plugin: {0}")]
    Connect(#[source] tonic::transport::Error),
    /// Nothing answered within [`DIAL_TIMEOUT`].
    #[error("failed to dial device plugin: no answer within {DIAL_TIMEOUT:?}")]
    Timeout,
}

/// Dials the plugin socket `path`, waiting for it at most [`DIAL_TIMEOUT`].
pub async fn dial(path: PathBuf) -> Result<Channel, DialError> {
    let endpoint = Endpoint::from_static("http://localhost");
    let connect = endpoint.connect_with_connector(tower::service_fn(move |_: Uri| {
        let path = path.clone();
        async move { UnixStream::connect(path).await.map(TokioIo::new) }
    }));
    match tokio::time::timeout(DIAL_TIMEOUT, connect).await {
        Ok(Ok(channel)) => Ok(channel),
        Ok(Err(e)) => Err(DialError::Connect(e)),
        Err(_) => Err(DialError::Timeout),
    }
}

struct Registrar {
    manager: Arc<Manager>,
}

impl Registrar {
    /// Checks a registration, dials the plugin and reads its options.
    async fn connect(&self, r: &proto::RegisterRequest) -> Result<(), String> {
        if r.version != VERSION {
            return Err(format!(
                "requested API version {:?} is not supported by kubelet. Supported version is {:?}",
                r.version,
                [VERSION]
            ));
        }
        if !is_extended_resource(&r.resource_name) {
            return Err(format!("the ResourceName {:?} is invalid", r.resource_name));
        }
        if r.endpoint.contains('/') {
            return Err(format!(
                "the endpoint {:?} is not a socket name in the device plugin directory",
                r.endpoint
            ));
        }
        let channel = dial(self.manager.dir().join(&r.endpoint))
            .await
            .map_err(|e| e.to_string())?;
        let mut client = DevicePluginClient::new(channel);
        let options = client
            .get_device_plugin_options(proto::Empty {})
            .await
            .map_err(|s| format!("failed to get device plugin options: {}", rpc_error(&s)))?
            .into_inner();
        let generation = self
            .manager
            .connected(&r.resource_name, &options, client.clone());
        tokio::spawn(watch(
            self.manager.clone(),
            r.resource_name.clone(),
            generation,
            client,
        ));
        Ok(())
    }
}

#[tonic::async_trait]
impl Registration for Registrar {
    async fn register(
        &self,
        request: Request<proto::RegisterRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let r = request.into_inner();
        tracing::info!(resource = %r.resource_name, endpoint = %r.endpoint, "Got registration request from device plugin");
        match self.connect(&r).await {
            Ok(()) => Ok(Response::new(proto::Empty {})),
            Err(e) => {
                tracing::error!(resource = %r.resource_name, error = %e, "Device plugin registration failed");
                Err(Status::unknown(e))
            }
        }
    }
}

/// Follows the plugin's ListAndWatch stream until it ends; then its devices are
/// unhealthy.
async fn watch(
    manager: Arc<Manager>,
    resource: String,
    generation: u64,
    mut client: DevicePluginClient<Channel>,
) {
    match client.list_and_watch(proto::Empty {}).await {
        Ok(response) => {
            let mut stream = response.into_inner();
            loop {
                match stream.message().await {
                    Ok(Some(list)) => manager.listed(&resource, &list.devices),
                    Ok(None) => {
                        tracing::warn!(%resource, "ListAndWatch ended for device plugin");
                        break;
                    }
                    Err(s) => {
                        tracing::error!(%resource, error = %rpc_error(&s), "ListAndWatch ended unexpectedly for device plugin");
                        break;
                    }
                }
            }
        }
        Err(s) => {
            tracing::error!(%resource, error = %rpc_error(&s), "ListAndWatch ended unexpectedly for device plugin");
        }
    }
    manager.disconnected(&resource, generation);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_resources_are_told_from_the_rest() {
        for good in [
            "example.com/gpu",
            "test.device/device-plugin-failures-123",
            "a.b/x_y.z",
        ] {
            assert!(is_extended_resource(good), "{good}");
        }
        for bad in [
            "gpu",
            "cpu",
            "kubernetes.io/gpu",
            "foo.kubernetes.io/x",
            "requests.example.com/gpu",
            "Example.com/gpu",
            "example.com/",
            "example.com/-x",
            "/x",
        ] {
            assert!(!is_extended_resource(bad), "{bad}");
        }
    }
}
