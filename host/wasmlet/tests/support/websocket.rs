//! WebSocket requests to the API server as the sig-node conformance tests make them
//! (their `OpenWebSocketForURL`: a GET upgraded with one subprotocol), and their reading
//! of the messages: a pod's log over `binary.k8s.io`, a command's output over the
//! original `channel.k8s.io`.

use std::time::Duration;

use futures::StreamExt;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

/// Every message the server sends on `path` (with its query) of the API server at
/// `base` (`http://…`), asking for `protocol`, until it closes (within 30 s).
pub async fn messages(base: &str, path: &str, protocol: &str) -> Vec<Vec<u8>> {
    let authority = base.trim_start_matches("http://");
    let mut request = format!("ws://{authority}{path}")
        .into_client_request()
        .expect("request");
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_str(protocol).expect("protocol"),
    );
    let tcp = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connect");
    let (mut ws, answer) = tokio_tungstenite::client_async(request, tcp)
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(
        answer
            .headers()
            .get("Sec-WebSocket-Protocol")
            .and_then(|v| v.to_str().ok()),
        Some(protocol),
        "{path}: the protocol asked for"
    );
    let mut got = Vec::new();
    let read = async {
        while let Some(m) = ws.next().await {
            match m.unwrap_or_else(|e| panic!("{path}: {e}")) {
                Message::Binary(b) => got.push(b.to_vec()),
                Message::Text(t) => got.push(t.as_bytes().to_vec()),
                Message::Close(_) => break,
                _ => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .unwrap_or_else(|_| panic!("{path}: not closed in time"));
    got
}

/// A pod's log read as the conformance test "should support retrieving logs from the
/// container over websockets" reads it: the messages that are not blank, in order.
pub async fn logs(base: &str, pod: &str, container: &str) -> String {
    let path = format!("/api/v1/namespaces/default/pods/{pod}/log?container={container}");
    let mut out = String::new();
    for m in messages(base, &path, "binary.k8s.io").await {
        let text = String::from_utf8(m).expect("utf-8");
        if !text.trim().is_empty() {
            out.push_str(&text);
        }
    }
    out
}

/// What `command` prints in `pod`, as the conformance test "should support remote command
/// execution over websockets" reads it over `channel.k8s.io`: stdout's messages (channel
/// 1); an empty message on another channel is that channel opening, anything else on one
/// is a failure.
pub async fn exec_stdout(base: &str, pod: &str, container: &str, command: &[&str]) -> String {
    let mut path = format!(
        "/api/v1/namespaces/default/pods/{pod}/exec?stderr=1&stdout=1&container={container}"
    );
    for c in command {
        path.push_str("&command=");
        path.push_str(&c.replace(' ', "%20"));
    }
    let mut out = Vec::new();
    for m in messages(base, &path, "channel.k8s.io").await {
        match m.split_first() {
            Some((1, data)) => out.extend_from_slice(data),
            Some((_, [])) | None => {}
            Some((channel, data)) => {
                panic!("channel {channel}: {:?}", String::from_utf8_lossy(data))
            }
        }
    }
    String::from_utf8(out).expect("utf-8")
}
