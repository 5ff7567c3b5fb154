//! The least of SPDY/3.1 a `kubectl` of 1.28 speaks for `exec` (it upgrades to SPDY,
//! not WebSocket): control and data frames, and header blocks as one zlib stream per
//! connection — written with stored (uncompressed) deflate blocks, which a reader with
//! SPDY's dictionary reads as well.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub const SYN_STREAM: u16 = 1;
pub const PING: u16 = 6;
pub const FIN: u8 = 1;

/// A frame as read.
#[derive(Debug)]
pub enum Frame {
    Control {
        kind: u16,
        payload: Vec<u8>,
    },
    Data {
        stream: u32,
        flags: u8,
        data: Vec<u8>,
    },
}

pub fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x80, 3];
    f.extend_from_slice(&kind.to_be_bytes());
    f.push(flags);
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    f.extend_from_slice(payload);
    f
}

/// Header blocks of one connection.
pub struct Headers(flate2::Compress);

impl Headers {
    pub fn new() -> Self {
        Headers(flate2::Compress::new(flate2::Compression::none(), true))
    }

    fn block(&mut self, pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut plain = (pairs.len() as u32).to_be_bytes().to_vec();
        for (k, v) in pairs {
            for s in [k, v] {
                plain.extend_from_slice(&(s.len() as u32).to_be_bytes());
                plain.extend_from_slice(s.as_bytes());
            }
        }
        let mut out = Vec::with_capacity(plain.len() + 64);
        self.0
            .compress_vec(&plain, &mut out, flate2::FlushCompress::Sync)
            .expect("zlib");
        out
    }

    /// SYN_STREAM for a new client stream carrying `pairs`.
    pub fn syn_stream(&mut self, id: u32, flags: u8, pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut payload = id.to_be_bytes().to_vec();
        payload.extend_from_slice(&0u32.to_be_bytes());
        payload.extend_from_slice(&[0, 0]);
        payload.extend(self.block(pairs));
        control(SYN_STREAM, flags, &payload)
    }
}

pub async fn read(r: &mut (impl AsyncRead + Unpin)) -> std::io::Result<Frame> {
    let mut head = [0u8; 8];
    r.read_exact(&mut head).await?;
    let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    Ok(if head[0] & 0x80 != 0 {
        Frame::Control {
            kind: u16::from_be_bytes([head[2], head[3]]),
            payload: body,
        }
    } else {
        Frame::Data {
            stream: u32::from_be_bytes([head[0], head[1], head[2], head[3]]),
            flags: head[4],
            data: body,
        }
    })
}

/// A data frame of `stream`.
pub fn data(stream: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = stream.to_be_bytes().to_vec();
    f.push(flags);
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    f.extend_from_slice(payload);
    f
}

pub async fn write(w: &mut (impl AsyncWrite + Unpin), frame: &[u8]) {
    w.write_all(frame).await.expect("write a frame");
}

/// An upgrade to SPDY/3.1 through the API server at `api`, offering `protocols`:
/// the connection and the head of the 101 answer.
async fn upgrade(api: &str, path: &str, protocols: &[&str]) -> (tokio::net::TcpStream, String) {
    let mut s = tokio::net::TcpStream::connect(api.trim_start_matches("http://"))
        .await
        .expect("connect");
    let offered: String = protocols
        .iter()
        .map(|p| format!("X-Stream-Protocol-Version: {p}\r\n"))
        .collect();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: api\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
         {offered}Content-Length: 0\r\n\r\n"
    );
    s.write_all(request.as_bytes()).await.expect("request");
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        let n = s.read(&mut b).await.expect("read the answer");
        assert!(
            n > 0,
            "closed before answering: {:?}",
            String::from_utf8_lossy(&head)
        );
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    (s, head)
}

/// `kubectl exec` as kubectl 1.28 does it, through the API server's pods/exec: an
/// upgrade to SPDY/3.1 (protocol v4), a PING answered, an error and a stdout stream
/// made; returns (what the 101 said, stdout, the status on the error stream).
pub async fn exec(api: &str, pod: &str, command: &[&str]) -> (String, String, String) {
    exec_stdin(api, pod, command, None).await
}

/// [`exec`], with `stdin` (when given) sent on a stream of its own and closed after it,
/// as `kubectl cp` sends a tar stream: the command sees its input end.
pub async fn exec_stdin(
    api: &str,
    pod: &str,
    command: &[&str],
    stdin: Option<&[u8]>,
) -> (String, String, String) {
    let query: String = command
        .iter()
        .map(|c| format!("command={}&", c.replace(' ', "%20")))
        .collect::<String>()
        + if stdin.is_some() {
            "stdin=true&stdout=true"
        } else {
            "stdout=true"
        };
    let (mut s, head) = upgrade(
        api,
        &format!("/api/v1/namespaces/default/pods/{pod}/exec?{query}"),
        &["v4.channel.k8s.io", "v3.channel.k8s.io"],
    )
    .await;
    let mut headers = Headers::new();
    write(&mut s, &control(PING, 0, &1u32.to_be_bytes())).await;
    write(
        &mut s,
        &headers.syn_stream(1, FIN, &[("streamtype", "error")]),
    )
    .await;
    write(
        &mut s,
        &headers.syn_stream(3, FIN, &[("streamtype", "stdout")]),
    )
    .await;
    if let Some(input) = stdin {
        write(
            &mut s,
            &headers.syn_stream(5, 0, &[("streamtype", "stdin")]),
        )
        .await;
        let mut chunks = input.chunks(64 << 10).peekable();
        while let Some(chunk) = chunks.next() {
            let last = chunks.peek().is_none();
            write(&mut s, &data(5, if last { FIN } else { 0 }, chunk)).await;
        }
        if input.is_empty() {
            write(&mut s, &data(5, FIN, &[])).await;
        }
    }
    let (mut out, mut status, mut pinged) = (Vec::new(), Vec::new(), false);
    let (mut out_done, mut status_done) = (false, false);
    let frames = async {
        while !(out_done && status_done) {
            match read(&mut s).await {
                Ok(Frame::Control { kind, payload, .. }) => {
                    if kind == PING && payload == 1u32.to_be_bytes() {
                        pinged = true;
                    }
                }
                Ok(Frame::Data {
                    stream,
                    flags,
                    data,
                }) => {
                    let (buf, done) = match stream {
                        1 => (&mut status, &mut status_done),
                        3 => (&mut out, &mut out_done),
                        other => panic!("data on a stream never made: {other}"),
                    };
                    buf.extend_from_slice(&data);
                    *done |= flags & FIN != 0;
                }
                Err(_) => break,
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), frames)
        .await
        .expect("the exec ends in time");
    assert!(pinged, "the runtime's SPDY server answers a PING");
    (
        head,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&status).into_owned(),
    )
}

/// `kubectl port-forward` as kubectl 1.28 does it: SPDY/3.1 (`portforward.k8s.io`), an
/// error and a data stream for `port`, `request` written on the data stream; returns
/// what comes back once it contains `want`.
pub async fn port_forward(api: &str, pod: &str, port: u16, request: &[u8], want: &str) -> String {
    let (mut s, _) = upgrade(
        api,
        &format!("/api/v1/namespaces/default/pods/{pod}/portforward"),
        &["portforward.k8s.io"],
    )
    .await;
    let port = port.to_string();
    let mut headers = Headers::new();
    let pairs = |kind| {
        [
            ("streamtype", kind),
            ("port", port.as_str()),
            ("requestid", "0"),
        ]
    };
    write(&mut s, &headers.syn_stream(1, FIN, &pairs("error"))).await;
    write(&mut s, &headers.syn_stream(3, 0, &pairs("data"))).await;
    write(&mut s, &data(3, 0, request)).await;
    let mut got = Vec::new();
    let frames = async {
        while !String::from_utf8_lossy(&got).contains(want) {
            match read(&mut s).await.expect("a frame") {
                Frame::Data {
                    stream: 3, data, ..
                } => got.extend_from_slice(&data),
                Frame::Data {
                    stream: 1, data, ..
                } if !data.is_empty() => {
                    panic!("port-forward error: {}", String::from_utf8_lossy(&data))
                }
                _ => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), frames)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{want:?} not forwarded in time; got {:?}",
                String::from_utf8_lossy(&got)
            )
        });
    String::from_utf8_lossy(&got).into_owned()
}
