//! Carrying an upgraded connection to the runtime's streaming server.
//!
//! `Exec`, `Attach` and `PortForward` answer with a URL on the runtime's streaming
//! server. The request the client made (its `Upgrade: SPDY/3.1` or `websocket` headers,
//! its subprotocols) is sent there as it is, minus its credentials; when the runtime
//! switches protocols, so does the client, and from then on the bytes are carried both
//! ways without being read. The client is never redirected. Either side closing ends
//! the session: a client that goes away frees the runtime's stream at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, Uri, header};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// The streaming server could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The URL is not one this proxy can reach.
    #[error("the {runtime} streaming URL {url:?} is not usable: {why}")]
    Url {
        /// The runtime's name.
        runtime: String,
        /// The URL.
        url: String,
        /// Why.
        why: String,
    },
    /// The streaming server did not answer.
    #[error("the {runtime} streaming server at {addr} cannot be reached: {why}")]
    Unreachable {
        /// The runtime's name.
        runtime: String,
        /// Its address.
        addr: String,
        /// Why.
        why: String,
    },
}

/// Streams open through the proxy, for `/metrics` and for tests that check nothing
/// leaks.
#[derive(Debug, Default, Clone)]
pub struct OpenStreams(Arc<AtomicI64>);

impl OpenStreams {
    /// How many are open now.
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }

    /// The gauge shared with the metrics registry.
    pub fn shared(&self) -> Arc<AtomicI64> {
        self.0.clone()
    }
}

struct Open(Arc<AtomicI64>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Sends `req` to the streaming server at `url` (plain HTTP, as containerd serves it
/// unless told otherwise) and answers the client with what it answers; an upgrade is
/// carried both ways until either side closes.
pub async fn forward(
    req: Request<Body>,
    url: &str,
    runtime: &str,
    open: &OpenStreams,
) -> Result<Response<Body>, ProxyError> {
    let uri: Uri = url
        .parse()
        .map_err(|e: axum::http::uri::InvalidUri| ProxyError::Url {
            runtime: runtime.to_owned(),
            url: url.to_owned(),
            why: e.to_string(),
        })?;
    if uri.scheme_str() != Some("http") {
        return Err(ProxyError::Url {
            runtime: runtime.to_owned(),
            url: url.to_owned(),
            why: "only http:// streaming servers are supported (containerd's default; set enable_tls_streaming = false)".into(),
        });
    }
    let Some(authority) = uri.authority().cloned() else {
        return Err(ProxyError::Url {
            runtime: runtime.to_owned(),
            url: url.to_owned(),
            why: "no host".into(),
        });
    };
    let port = authority.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((authority.host(), port))
        .await
        .map_err(|e| ProxyError::Unreachable {
            runtime: runtime.to_owned(),
            addr: authority.to_string(),
            why: e.to_string(),
        })?;
    let _ = stream.set_nodelay(true);
    forward_on(req, stream, &uri, open)
        .await
        .map_err(|why| ProxyError::Unreachable {
            runtime: runtime.to_owned(),
            addr: authority.to_string(),
            why,
        })
}

/// [`forward`] over the connection made to `target`'s host.
async fn forward_on<IO>(
    mut req: Request<Body>,
    io: IO,
    target: &Uri,
    open: &OpenStreams,
) -> Result<Response<Body>, String>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    // The target's query wins; without one, the client's is passed on (the WebSocket
    // port-forward protocol names its ports there).
    let path = target.path();
    let query = target
        .query()
        .or(req.uri().query())
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let client_upgrade = hyper::upgrade::on(&mut req);
    let (parts, body) = req.into_parts();
    let mut backend = Request::builder()
        .method(parts.method.clone())
        .uri(format!("{path}{query}"))
        .body(body)
        .map_err(|e| e.to_string())?;
    for (name, value) in &parts.headers {
        if name == header::HOST || name == header::AUTHORIZATION {
            continue;
        }
        backend.headers_mut().append(name.clone(), value.clone());
    }
    if let Some(a) = target.authority()
        && let Ok(host) = HeaderValue::from_str(a.as_str())
    {
        backend.headers_mut().insert(header::HOST, host);
    }
    let mut answer = sender
        .send_request(backend)
        .await
        .map_err(|e| e.to_string())?;
    if answer.status() != StatusCode::SWITCHING_PROTOCOLS {
        let (parts, body) = answer.into_parts();
        return Ok(Response::from_parts(parts, Body::new(body)));
    }
    let backend_upgrade = hyper::upgrade::on(&mut answer);
    let mut reply = Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
    for (name, value) in answer.headers() {
        reply = reply.header(name, value);
    }
    let gauge = open.shared();
    gauge.fetch_add(1, Ordering::SeqCst);
    let guard = Open(gauge);
    tokio::spawn(async move {
        let _guard = guard;
        let (Ok(client), Ok(runtime)) = tokio::join!(client_upgrade, backend_upgrade) else {
            return;
        };
        splice(TokioIo::new(client), TokioIo::new(runtime)).await;
    });
    reply.body(Body::empty()).map_err(|e| e.to_string())
}

/// Copies both ways until either side ends; then both connections are dropped.
async fn splice<A, B>(client: A, runtime: B)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut runtime_read, mut runtime_write) = tokio::io::split(runtime);
    let up = tokio::io::copy(&mut client_read, &mut runtime_write);
    let down = async {
        let _ = tokio::io::copy(&mut runtime_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    };
    tokio::select! {
        _ = up => {}
        () = down => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request<Body> {
        Request::get("/exec/default/p/c?command=ls&stdout=1")
            .header(header::CONNECTION, "Upgrade")
            .header(header::UPGRADE, "SPDY/3.1")
            .body(Body::empty())
            .expect("request")
    }

    #[tokio::test]
    async fn a_streaming_server_that_is_gone_is_named() {
        let port = {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            l.local_addr().expect("addr").port()
        };
        let open = OpenStreams::default();
        let url = format!("http://127.0.0.1:{port}/exec/abc");
        let e = forward(request(), &url, "containerd", &open)
            .await
            .expect_err("nothing listens");
        assert!(matches!(e, ProxyError::Unreachable { .. }), "{e}");
        assert!(
            e.to_string().starts_with(&format!(
                "the containerd streaming server at 127.0.0.1:{port} cannot be reached"
            )),
            "{e}"
        );
        let e = forward(request(), "https://127.0.0.1:1/exec/abc", "cri-o", &open)
            .await
            .expect_err("TLS streaming is not supported");
        assert!(e.to_string().contains("the cri-o streaming URL"), "{e}");
        assert_eq!(open.get(), 0, "nothing left open");
    }
}
