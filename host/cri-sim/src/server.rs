//! [`SimServer`]: a [`Simulator`] served over gRPC on a unix socket.

use std::path::{Path, PathBuf};

use tokio::net::UnixListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;
use wasmlet_cri::proto::image_service_server::ImageServiceServer;
use wasmlet_cri::proto::runtime_service_server::RuntimeServiceServer;

use crate::Simulator;
use crate::fastlist::FastLists;
use crate::service::SimService;

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

/// A running gRPC server for a [`Simulator`]. Dropping it stops the server (calls in
/// flight are cut off, as when a runtime dies) and removes the socket.
#[derive(Debug)]
pub struct SimServer {
    path: PathBuf,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), ServeError>>>,
}

impl SimServer {
    /// Binds `path` (replacing a stale socket file) and serves `sim` on it in the
    /// background.
    pub async fn serve(sim: Simulator, path: &Path) -> Result<Self, ServeError> {
        let listener = bind(path)?;
        let (tx, rx) = oneshot::channel::<()>();
        let owned = path.to_owned();
        let task = tokio::spawn(async move {
            serve_listener(sim, listener, async {
                let _ = rx.await;
            })
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

    /// Stops serving and waits until the server is gone.
    pub async fn stop(mut self) {
        self.signal();
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
        let _ = std::fs::remove_file(&self.path);
    }

    fn signal(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        self.signal();
        if let Some(task) = self.task.take() {
            task.abort();
        }
        let _ = std::fs::remove_file(&self.path);
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

/// Serves `sim` on `listener` until `shutdown` resolves.
pub async fn serve_listener(
    sim: Simulator,
    listener: UnixListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
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
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
        .await
}
