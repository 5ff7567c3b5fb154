//! `pods/log` over WebSocket, as the API server serves it: the kubelet is asked with a
//! plain GET (it never sees the upgrade) and, once it answers with the log, the API
//! server's stream reader carries the body to the client as WebSocket messages — an
//! empty one first, then the bytes as they come, in messages of at most 2 KiB: binary for
//! `binary.k8s.io` (or when the client asks for no protocol), base64 text for
//! `base64.binary.k8s.io`; a client offering only other protocols is refused with 403.
//! The connection closes when the log ends or the client goes away. A log the kubelet
//! refuses is answered before any upgrade, as a Status (the caller's job).

use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::{Request, Response, StatusCode, header, request::Parts};
use axum::response::IntoResponse;
use base64::Engine;
use tokio_stream::StreamExt;

/// The protocols the API server's log reader speaks: whether each is base64 text.
const PROTOCOLS: [(&str, bool); 2] = [("binary.k8s.io", false), ("base64.binary.k8s.io", true)];

/// The largest message the reader sends (its read buffer).
const MESSAGE: usize = 2048;

/// Whether `request` asks to switch to WebSocket.
pub(crate) fn wanted(request: &Request<Body>) -> bool {
    request
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// A log request that will be answered over WebSocket.
pub(crate) struct Upgrade {
    ws: WebSocketUpgrade,
    base64: bool,
}

/// Takes the upgrade out of `request`: the request left is the plain GET to send the
/// kubelet; `Err` is the answer for a handshake the API server refuses.
pub(crate) async fn take(
    request: Request<Body>,
) -> Result<(Upgrade, Request<Body>), Response<Body>> {
    let (mut parts, body) = request.into_parts();
    let offered: Vec<String> = parts
        .headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect();
    let base64 = if offered.is_empty() {
        false
    } else {
        let chosen = offered
            .iter()
            .find_map(|o| PROTOCOLS.iter().find(|(p, _)| p == o));
        match chosen {
            Some((_, base64)) => *base64,
            None => return Err(forbidden()),
        }
    };
    let ws = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(ws) => ws.protocols(PROTOCOLS.map(|(p, _)| p)),
        Err(rejection) => return Err(rejection.into_response()),
    };
    strip(&mut parts);
    Ok((Upgrade { ws, base64 }, Request::from_parts(parts, body)))
}

/// What the handshake refusal of the API server's WebSocket server looks like.
fn forbidden() -> Response<Body> {
    Response::builder()
        .status(StatusCode::FORBIDDEN)
        .body(Body::empty())
        .unwrap_or_default()
}

/// The upgrade headers off, so that the kubelet answers a plain GET.
fn strip(parts: &mut Parts) {
    for h in [
        header::CONNECTION,
        header::UPGRADE,
        header::SEC_WEBSOCKET_KEY,
        header::SEC_WEBSOCKET_VERSION,
        header::SEC_WEBSOCKET_PROTOCOL,
        header::SEC_WEBSOCKET_EXTENSIONS,
    ] {
        parts.headers.remove(h);
    }
}

impl Upgrade {
    /// Switches the client to WebSocket and streams the kubelet's `log` body into it.
    pub(crate) fn answer(self, log: Body) -> Response<Body> {
        let base64 = self.base64;
        self.ws
            .on_upgrade(move |socket| carry(socket, log, base64))
            .into_response()
    }
}

fn message(bytes: &[u8], base64: bool) -> Message {
    if base64 {
        Message::Text(
            base64::engine::general_purpose::STANDARD
                .encode(bytes)
                .into(),
        )
    } else {
        Message::Binary(bytes.to_vec().into())
    }
}

async fn carry(mut socket: WebSocket, log: Body, base64: bool) {
    if socket.send(message(&[], base64)).await.is_err() {
        return;
    }
    let mut body = log.into_data_stream();
    loop {
        tokio::select! {
            chunk = body.next() => {
                let Some(Ok(bytes)) = chunk else { break };
                for piece in bytes.chunks(MESSAGE) {
                    if socket.send(message(piece, base64)).await.is_err() {
                        return;
                    }
                }
            }
            // The client sends nothing but its close; when it goes, so does the log.
            incoming = socket.recv() => {
                if matches!(incoming, None | Some(Err(_)) | Some(Ok(Message::Close(_)))) {
                    return;
                }
            }
        }
    }
    let _ = socket.send(Message::Close(None)).await;
}
