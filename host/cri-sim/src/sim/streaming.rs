//! Exec, Attach, PortForward and ReopenContainerLog, and the streaming server their
//! URLs point at.
//!
//! As in containerd, the three streaming calls only prepare a session: they answer with
//! a URL (`http://127.0.0.1:PORT/exec/TOKEN`) on the runtime's own streaming server,
//! where the client upgrades the connection. The simulator's server speaks the
//! WebSocket protocols (`v5.channel.k8s.io`, `v4.channel.k8s.io`, `channel.k8s.io`),
//! which is what tests need; a SPDY upgrade is refused with 400 naming the simulator.
//!
//! - exec runs the command through [`crate::shell`]: its output on channels 1 and 2,
//!   then the Status on channel 3 (`Success`, or `NonZeroExitCode` with the code). `cat`
//!   with stdin echoes what it reads until stdin is closed (a v5 close frame) or the
//!   connection ends, as a real `cat` does.
//! - attach waits for the container's main process to exit, then sends the Status.
//! - port-forward connects each forwarded port to `127.0.0.1:PORT` (a simulated pod
//!   shares the host's network), announcing the port first on its data and error
//!   channels, as the kubelet's protocol does.
//!
//! Sessions are used once and expire after a minute, like the streaming server's tokens.
//! A container's log file is written at start with what its command prints, in the CRI
//! log format, so logs can be read back through the agent.

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tonic::Status;
use wasmlet_cri::proto::{self, PodSandboxState};

use super::{NotRunning, Simulator, running_locked, unknown};
use crate::shell::{End, Program};

/// How long an unused session stays valid.
const SESSION_TTL: Duration = Duration::from_secs(60);

/// WebSocket subprotocols served, newest first.
const PROTOCOLS: [&str; 3] = ["v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io"];

/// What a token stands for.
#[derive(Debug, Clone)]
enum Session {
    /// The request, and what its command does (as ExecSync would run it) with the
    /// script's exec latency.
    Exec(proto::ExecRequest, Program, Duration),
    Attach(proto::AttachRequest),
    PortForward(Vec<i32>),
}

/// The streaming server's state: its address once started, and the open sessions.
#[derive(Default)]
pub(super) struct Streaming {
    addr: tokio::sync::OnceCell<SocketAddr>,
    sessions: std::sync::Mutex<HashMap<String, (Session, Instant)>>,
}

impl Simulator {
    /// `Exec`: a session for `request` on a running container.
    pub(crate) async fn exec(&self, request: proto::ExecRequest) -> Result<String, Status> {
        self.enter("Exec").await?;
        let (program, latency) = self
            .exec_program(&request.container_id, &request.cmd)
            .map_err(|e| e.status(""))?;
        check_streams(request.stdin, request.stdout, request.stderr, request.tty)?;
        if request.cmd.is_empty() {
            return Err(Status::invalid_argument("cmd must not be empty"));
        }
        self.session("exec", Session::Exec(request, program, latency))
            .await
    }

    /// `Attach`: a session on a running container's main process.
    pub(crate) async fn attach(&self, request: proto::AttachRequest) -> Result<String, Status> {
        self.enter("Attach").await?;
        running_locked(&self.inner.lock(), &request.container_id).map_err(|e| e.status(""))?;
        check_streams(request.stdin, request.stdout, request.stderr, request.tty)?;
        self.session("attach", Session::Attach(request)).await
    }

    /// `PortForward`: a session on a ready sandbox.
    pub(crate) async fn port_forward(
        &self,
        sandbox_id: &str,
        ports: Vec<i32>,
    ) -> Result<String, Status> {
        self.enter("PortForward").await?;
        {
            let st = self.inner.lock();
            let s = st.sandboxes.get(sandbox_id).ok_or_else(|| {
                Status::not_found(format!(
                    "failed to find sandbox {sandbox_id:?}: an error occurred when try to find sandbox: not found"
                ))
            })?;
            if s.state != PodSandboxState::SandboxReady {
                return Err(unknown(format!(
                    "failed to get sandbox ip: sandbox {sandbox_id:?} is not running"
                )));
            }
        }
        if let Some(p) = ports.iter().find(|p| !(1..=65535).contains(*p)) {
            return Err(Status::invalid_argument(format!("invalid port {p}")));
        }
        self.session("portforward", Session::PortForward(ports))
            .await
    }

    /// `ReopenContainerLog`: the log file is opened again (made if it was rotated away);
    /// an error for a container that does not run, as containerd answers.
    pub(crate) async fn reopen_container_log(&self, id: &str) -> Result<(), Status> {
        self.enter("ReopenContainerLog").await?;
        let path = match running_locked(&self.inner.lock(), id) {
            Ok(c) => c.log_path.clone(),
            Err(NotRunning::State(_)) => return Err(unknown("container is not running")),
            Err(NotRunning::Unknown(s)) => return Err(s),
        };
        if !path.is_empty() {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| unknown(format!("failed to create and open log file {path}: {e}")))?;
        }
        Ok(())
    }

    /// Writes what a container's command prints to its log file, as the runtime's log
    /// driver would (stdout first, then stderr; one CRI log line per line). Nothing is
    /// written when the pod's log directory does not exist (tests without an agent).
    pub(super) fn write_start_log(path: &str, stdout: &[u8], stderr: &[u8], at_nanos: i64) {
        if path.is_empty() {
            return;
        }
        // The runtime makes the container's own directory under the pod's log
        // directory, and the log file even when nothing is written to it, as containerd
        // does; a pod log directory that is not there means nobody reads logs.
        let file_path = std::path::Path::new(path);
        if let Some(dir) = file_path.parent()
            && dir.parent().is_some_and(std::path::Path::exists)
        {
            let _ = std::fs::create_dir_all(dir);
        }
        let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        else {
            return;
        };
        let stamp = wasmlet_cri::labels::rfc3339_nanos(at_nanos);
        let mut text = Vec::new();
        for (stream, data) in [("stdout", stdout), ("stderr", stderr)] {
            for line in data.split_inclusive(|b| *b == b'\n') {
                let (body, tag) = match line.strip_suffix(b"\n") {
                    Some(body) => (body, "F"),
                    None => (line, "P"),
                };
                text.extend_from_slice(format!("{stamp} {stream} {tag} ").as_bytes());
                text.extend_from_slice(body);
                text.push(b'\n');
            }
        }
        let _ = file.write_all(&text);
    }

    async fn session(&self, kind: &str, session: Session) -> Result<String, Status> {
        let addr = self.streaming_addr().await?;
        let streaming = &self.inner.streaming;
        // Unguessable, as the streaming server's tokens are: the URL is the credential.
        let token = self.inner.ids.next()[..24].to_owned();
        let mut sessions = streaming.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        sessions.retain(|_, (_, at)| now.duration_since(*at) < SESSION_TTL);
        sessions.insert(token.clone(), (session, now));
        Ok(format!("http://{addr}/{kind}/{token}"))
    }

    fn take_session(&self, token: &str) -> Option<Session> {
        let mut sessions = self
            .inner
            .streaming
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (session, at) = sessions.remove(token)?;
        (at.elapsed() < SESSION_TTL).then_some(session)
    }

    /// The streaming server's address, starting it on first use.
    async fn streaming_addr(&self) -> Result<SocketAddr, Status> {
        let sim = self.clone();
        self.inner
            .streaming
            .addr
            .get_or_try_init(|| async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .map_err(|e| unknown(format!("streaming server: {e}")))?;
                let addr = listener
                    .local_addr()
                    .map_err(|e| unknown(format!("streaming server: {e}")))?;
                let router = Router::new()
                    .route("/{kind}/{token}", any(serve_session))
                    .with_state(sim);
                tokio::spawn(async move {
                    let _ = axum::serve(listener, router).await;
                });
                Ok(addr)
            })
            .await
            .copied()
    }

    fn exited(&self, id: &str) -> Option<(tokio::sync::watch::Receiver<bool>, i32)> {
        let st = self.inner.lock();
        let c = st.containers.get(id)?;
        Some((c.exited.subscribe(), c.exit_code))
    }

    fn exit_code(&self, id: &str) -> i32 {
        self.inner
            .lock()
            .containers
            .get(id)
            .map_or(0, |c| c.exit_code)
    }
}

fn check_streams(stdin: bool, stdout: bool, stderr: bool, tty: bool) -> Result<(), Status> {
    if !(stdin || stdout || stderr) {
        return Err(Status::invalid_argument(
            "one of stdin, stdout, or stderr must be set",
        ));
    }
    if tty && stderr {
        return Err(Status::invalid_argument(
            "tty and stderr cannot both be true",
        ));
    }
    Ok(())
}

async fn serve_session(
    AxState(sim): AxState<Simulator>,
    Path((kind, token)): Path<(String, String)>,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let Ok(ws) = ws else {
        return (
            StatusCode::BAD_REQUEST,
            "wasmlet-cri-sim's streaming server speaks WebSocket (v4/v5.channel.k8s.io) only",
        )
            .into_response();
    };
    let Some(session) = sim.take_session(&token) else {
        return (StatusCode::NOT_FOUND, format!("unknown {kind} session")).into_response();
    };
    let ws = ws.protocols(PROTOCOLS);
    ws.on_upgrade(move |socket| async move {
        match session {
            Session::Exec(r, program, latency) => {
                exec_session(r, program, latency, socket).await;
            }
            Session::Attach(r) => attach_session(sim, r, socket).await,
            Session::PortForward(ports) => port_forward_session(ports, socket).await,
        }
    })
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(channel);
    v.extend_from_slice(data);
    Message::Binary(v.into())
}

/// The Status the exec protocol ends with on channel 3.
fn exit_status(cmd: &[String], code: i32) -> String {
    if code == 0 {
        return r#"{"metadata":{},"status":"Success"}"#.to_owned();
    }
    serde_json::json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "command terminated with non-zero exit code: error executing command {cmd:?}, exit code {code}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
    .to_string()
}

async fn exec_session(
    r: proto::ExecRequest,
    program: Program,
    latency: Duration,
    mut socket: WebSocket,
) {
    let echo = r.stdin && r.cmd.len() == 1 && r.cmd[0] == "cat";
    if echo {
        // Echo stdin to stdout until stdin closes (v5: [255, 0]) or the client goes.
        while let Some(Ok(msg)) = socket.recv().await {
            let data = match msg {
                Message::Binary(b) => b.to_vec(),
                Message::Close(_) => return,
                _ => continue,
            };
            match data.split_first() {
                Some((0, rest))
                    if !rest.is_empty() && socket.send(frame(1, rest)).await.is_err() =>
                {
                    return;
                }
                Some((255, [0])) => break,
                _ => {}
            }
        }
        let _ = socket
            .send(frame(3, exit_status(&r.cmd, 0).as_bytes()))
            .await;
        let _ = socket.send(Message::Close(None)).await;
        return;
    }
    let code = match program.end {
        End::Exit { after, code } => {
            tokio::time::sleep(after + latency).await;
            code
        }
        // A command that never ends runs until the client goes.
        End::Forever => {
            while let Some(Ok(msg)) = socket.recv().await {
                if matches!(msg, Message::Close(_)) {
                    break;
                }
            }
            return;
        }
    };
    if r.stdout && !program.stdout.is_empty() {
        let _ = socket.send(frame(1, &program.stdout)).await;
    }
    if !program.stderr.is_empty() {
        // With a tty, stderr goes to the terminal too.
        let channel = if r.tty { 1 } else { 2 };
        if r.stderr || r.tty {
            let _ = socket.send(frame(channel, &program.stderr)).await;
        }
    }
    let _ = socket
        .send(frame(3, exit_status(&r.cmd, code).as_bytes()))
        .await;
    let _ = socket.send(Message::Close(None)).await;
}

async fn attach_session(sim: Simulator, r: proto::AttachRequest, mut socket: WebSocket) {
    let Some((mut exited, _)) = sim.exited(&r.container_id) else {
        return;
    };
    loop {
        tokio::select! {
            changed = async { exited.wait_for(|e| *e).await.is_ok() } => {
                if changed {
                    let code = sim.exit_code(&r.container_id);
                    let _ = socket.send(frame(3, exit_status(&[], code).as_bytes())).await;
                }
                let _ = socket.send(Message::Close(None)).await;
                return;
            }
            msg = socket.recv() => match msg {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                _ => {}
            },
        }
    }
}

async fn port_forward_session(ports: Vec<i32>, mut socket: WebSocket) {
    // Announce every port on its data and error channel.
    for (i, port) in ports.iter().enumerate() {
        let Ok(p) = u16::try_from(*port) else { return };
        for channel in [2 * i, 2 * i + 1] {
            let Ok(ch) = u8::try_from(channel) else {
                return;
            };
            if socket.send(frame(ch, &p.to_le_bytes())).await.is_err() {
                return;
            }
        }
    }
    let mut conns: HashMap<usize, tokio::net::tcp::OwnedWriteHalf> = HashMap::new();
    let (to_client, mut from_conns) = tokio::sync::mpsc::channel::<(u8, Vec<u8>)>(64);
    loop {
        tokio::select! {
            msg = socket.recv() => {
                let data = match msg {
                    Some(Ok(Message::Binary(b))) => b.to_vec(),
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                    Some(Ok(_)) => continue,
                };
                let Some((&ch, rest)) = data.split_first() else { continue };
                let index = usize::from(ch) / 2;
                if ch % 2 == 1 || index >= ports.len() || rest.is_empty() {
                    continue;
                }
                if let std::collections::hash_map::Entry::Vacant(e) = conns.entry(index) {
                    let port = ports[index];
                    match tokio::net::TcpStream::connect(("127.0.0.1", port as u16)).await {
                        Ok(stream) => {
                            let (mut read, write) = stream.into_split();
                            e.insert(write);
                            let tx = to_client.clone();
                            let data_ch = ch;
                            tokio::spawn(async move {
                                let mut buf = vec![0u8; 32 * 1024];
                                loop {
                                    match read.read(&mut buf).await {
                                        Ok(0) | Err(_) => break,
                                        Ok(n) => {
                                            if tx.send((data_ch, buf[..n].to_vec())).await.is_err() {
                                                break;
                                            }
                                        }
                                    }
                                }
                            });
                        }
                        Err(err) => {
                            let text = format!(
                                "an error occurred forwarding {port} -> {port}: error forwarding port {port} to pod: dial tcp4 127.0.0.1:{port}: {err}"
                            );
                            let _ = socket.send(frame(ch + 1, text.as_bytes())).await;
                            continue;
                        }
                    }
                }
                if let Some(w) = conns.get_mut(&index)
                    && w.write_all(rest).await.is_err()
                {
                    conns.remove(&index);
                }
            }
            Some((ch, data)) = from_conns.recv() => {
                if socket.send(frame(ch, &data)).await.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_written_as_cri_log_lines() {
        let dir = std::env::temp_dir().join(format!("sim-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("0.log");
        Simulator::write_start_log(path.to_str().expect("utf-8"), b"a\nb", b"oops\n", 0);
        let text = std::fs::read_to_string(&path).expect("log");
        assert_eq!(
            text,
            "1970-01-01T00:00:00.000000000Z stdout F a\n\
             1970-01-01T00:00:00.000000000Z stdout P b\n\
             1970-01-01T00:00:00.000000000Z stderr F oops\n"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
