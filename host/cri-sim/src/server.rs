//! [`SimServer`]: a [`Simulator`] served over gRPC on a unix socket.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;
use wasmlet_cri::proto::image_service_server::ImageServiceServer;
use wasmlet_cri::proto::runtime_service_server::RuntimeServiceServer;

use crate::authority::AuthorityFix;
use crate::fastlist::FastLists;
use crate::service::SimService;
use crate::sim::Simulator;

/// Largest message served, as for the client (16 MiB).
const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// HTTP/2 flow-control window, as large as the largest message.
const WINDOW_BYTES: u32 = 16 << 20;

/// Why the simulator could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The socket could not be bound.
    #[error("cannot listen on {path}: {source}")]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The gRPC server failed.
    #[error("serving on {path} failed: {source}")]
    Transport {
        /// The socket path.
        path: PathBuf,
        /// What tonic said.
        #[source]
        source: tonic::transport::Error,
    },
}

/// A running gRPC server for a [`Simulator`]. Stopping or dropping it kills the server
/// the way a crashing runtime dies: every open connection is severed, so calls in
/// flight fail, and the socket is removed. The [`Simulator`]'s state survives, so a new
/// server on the same socket is a restarted runtime.
#[derive(Debug)]
pub struct SimServer {
    path: PathBuf,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), ServeError>>>,
    connections: Connections,
}

/// Duplicates of every accepted connection's socket, to sever them on kill.
#[derive(Debug, Clone, Default)]
struct Connections(Arc<Mutex<Vec<std::os::unix::net::UnixStream>>>);

impl Connections {
    /// Keeps a duplicate of `stream`'s socket and hands `stream` on.
    fn track(&self, stream: UnixStream) -> std::io::Result<UnixStream> {
        let std = stream.into_std()?;
        let dup = std.try_clone()?;
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        // Forget connections whose peer has gone.
        all.retain(|s| s.peer_addr().is_ok() && s.take_error().ok().flatten().is_none());
        all.push(dup);
        UnixStream::from_std(std)
    }

    /// Shuts every tracked socket down in both directions.
    fn sever(&self) {
        let all = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        for s in all {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl SimServer {
    /// Binds `path` (replacing a stale socket file) and serves `sim` on it in the
    /// background.
    pub async fn serve(sim: Simulator, path: &Path) -> Result<Self, ServeError> {
        let listener = bind(path)?;
        let (tx, rx) = oneshot::channel::<()>();
        let owned = path.to_owned();
        let connections = Connections::default();
        let tracker = connections.clone();
        let incoming = UnixListenerStream::new(listener)
            .map(move |accepted| accepted.and_then(|s| tracker.track(s)));
        let shutdown = async {
            let _ = rx.await;
        };
        let task = tokio::spawn(async move {
            serve_incoming(sim, incoming, shutdown)
                .await
                .map_err(|source| ServeError::Transport {
                    path: owned,
                    source,
                })
        });
        Ok(Self {
            path: path.to_owned(),
            shutdown: Some(tx),
            task: Some(task),
            connections,
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The endpoint to give a client: `unix://<path>`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    /// Kills the server and waits until it is gone.
    pub async fn stop(mut self) {
        self.kill();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    fn kill(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.connections.sever();
        if let Some(task) = &self.task {
            task.abort();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Binds a unix socket at `path`, removing a stale socket file first.
pub fn bind(path: &Path) -> Result<UnixListener, ServeError> {
    let bind_err = |source| ServeError::Bind {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(bind_err)?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(bind_err(e)),
    }
    UnixListener::bind(path).map_err(bind_err)
}

/// Serves `sim` on `listener` until `shutdown` resolves; calls in flight then finish
/// (a graceful stop, as on SIGTERM).
pub async fn serve_listener(
    sim: Simulator,
    listener: UnixListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    serve_incoming(sim, UnixListenerStream::new(listener), shutdown).await
}

async fn serve_incoming(
    sim: Simulator,
    incoming: impl tokio_stream::Stream<Item = std::io::Result<UnixStream>> + Send + 'static,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    // Clients that send their socket path as :authority are answered, as containerd does.
    let incoming = incoming.map(|accepted| accepted.map(AuthorityFix::new));
    let service = SimService::new(sim.clone());
    Server::builder()
        .initial_stream_window_size(WINDOW_BYTES)
        .initial_connection_window_size(WINDOW_BYTES)
        .max_frame_size(1 << 20)
        .add_service(FastLists::new(
            sim,
            RuntimeServiceServer::new(service.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            MAX_MESSAGE_BYTES,
        ))
        .add_service(
            ImageServiceServer::new(service)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        )
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
