//! The kubelet server as the API server reaches it: an agent on the in-process CRI
//! simulator, its kubelet server trusting the API server double's client CA and asking
//! the double's TokenReview and SubjectAccessReview, and kube's client calling
//! `pods/log`, `pods/exec` and `pods/portforward` through the double — the path
//! `kubectl logs`, `exec` and `port-forward` take; logs over WebSocket as well, wrapped by
//! the double as the API server wraps them. Also the server's own answers:
//! 401, 403, 404, 400 and 422 in the kubelet's words, and no stream left behind when a
//! client goes away.

mod support;

use std::time::Duration;

use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, LogParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::{node, raw, run_pod};

/// A WebSocket upgrade of pods/log through the double, offering `protocol`: the answer's
/// status, and the messages (text ones as their bytes) until the close.
async fn websocket_log(n: &support::Node, query: &str, protocol: &str) -> (u16, Vec<Vec<u8>>) {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::{Error, Message, client::IntoClientRequest};
    let base = n.apiserver.as_ref().expect("the double serves").url();
    let mut request = format!(
        "{}/api/v1/namespaces/default/pods/{query}",
        base.replacen("http", "ws", 1)
    )
    .into_client_request()
    .expect("request");
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", protocol.parse().expect("header"));
    let tcp = tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .expect("connect");
    let mut ws = match tokio_tungstenite::client_async(request, tcp).await {
        Ok((ws, _)) => ws,
        Err(Error::Http(answer)) => return (answer.status().as_u16(), Vec::new()),
        Err(e) => panic!("{query}: {e}"),
    };
    let mut got = Vec::new();
    while let Some(m) = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .expect("messages in time")
    {
        match m.expect("a message") {
            Message::Binary(b) => got.push(b.to_vec()),
            Message::Text(t) => got.push(t.as_bytes().to_vec()),
            Message::Close(_) => break,
            _ => {}
        }
    }
    (101, got)
}

/// The API server wraps a log in WebSocket messages for a client that asks (the kubelet
/// answers its plain GET): an empty message first, then the bytes — raw for
/// `binary.k8s.io`, base64 text for `base64.binary.k8s.io`; other protocols refused; a
/// log the kubelet refuses answered as a Status, never upgraded.
async fn log_over_websocket(n: &support::Node, pod: &str, all: &str) {
    use base64::Engine;
    let query = format!("{pod}/log?container=c");
    let (code, binary) = websocket_log(n, &query, "binary.k8s.io").await;
    assert_eq!(code, 101);
    assert_eq!(
        binary.first().map(Vec::len),
        Some(0),
        "the reader's first message"
    );
    assert_eq!(String::from_utf8(binary.concat()).expect("utf-8"), all);
    let (_, text) = websocket_log(n, &query, "base64.binary.k8s.io").await;
    let decoded: Vec<u8> = text
        .iter()
        .flat_map(|m| {
            base64::engine::general_purpose::STANDARD
                .decode(m)
                .expect("base64")
        })
        .collect();
    assert_eq!(String::from_utf8(decoded).expect("utf-8"), all);
    let (code, _) = websocket_log(n, &query, "v4.channel.k8s.io").await;
    assert_eq!(code, 403, "a protocol the log reader does not speak");
    let (code, _) = websocket_log(
        n,
        &format!("{pod}/log?container=c&previous=true"),
        "binary.k8s.io",
    )
    .await;
    assert_eq!(
        code, 400,
        "no previous instance: the kubelet's refusal, no upgrade"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_exec_and_port_forward_through_the_api_server() {
    let n = node("streams").await;
    let pods: Api<Pod> = Api::namespaced(n.client.clone(), "default");
    let web = run_pod(
        &n,
        "web",
        serde_json::json!([{"name": "c", "image": "localhost/busybox:latest",
            "command": ["sh", "-c", "echo first; echo second; echo third; sleep 3600"]}]),
    )
    .await;

    // Logs with every parameter the kubelet reads.
    let all = pods.logs(&web, &LogParams::default()).await.expect("logs");
    assert_eq!(all, "first\nsecond\nthird\n");
    let tail = pods
        .logs(
            &web,
            &LogParams {
                tail_lines: Some(1),
                ..Default::default()
            },
        )
        .await
        .expect("tail");
    assert_eq!(tail, "third\n");
    let limited = pods
        .logs(
            &web,
            &LogParams {
                limit_bytes: Some(8),
                ..Default::default()
            },
        )
        .await
        .expect("limit");
    assert_eq!(limited, "first\nse");
    let stamped = pods
        .logs(
            &web,
            &LogParams {
                timestamps: true,
                tail_lines: Some(1),
                ..Default::default()
            },
        )
        .await
        .expect("timestamps");
    assert!(
        stamped.ends_with("Z third\n") && stamped.len() > 31,
        "{stamped:?}"
    );
    let since = pods
        .logs(
            &web,
            &LogParams {
                since_seconds: Some(3600),
                ..Default::default()
            },
        )
        .await
        .expect("since");
    assert_eq!(since, all);
    log_over_websocket(&n, &web, &all).await;
    let previous = pods
        .logs(
            &web,
            &LogParams {
                previous: true,
                ..Default::default()
            },
        )
        .await
        .expect_err("no previous instance");
    let kube::Error::Api(previous) = previous else {
        panic!("a Status from the API server: {previous}");
    };
    assert_eq!(previous.code, 400);
    assert!(
        previous
            .message
            .contains("previous terminated container \"c\""),
        "{previous:?}"
    );

    // Follow: lines written while the stream is open arrive.
    let log_path = std::fs::read_dir(n.dir.join("logs"))
        .expect("logs dir")
        .flatten()
        .find(|e| e.file_name().to_string_lossy().contains("web"))
        .expect("pod log dir")
        .path()
        .join("c/0.log");
    let mut follow = pods
        .log_stream(
            &web,
            &LogParams {
                follow: true,
                tail_lines: Some(0),
                ..Default::default()
            },
        )
        .await
        .expect("follow")
        .lines();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&log_path)
        .expect("log");
    std::io::Write::write_all(&mut f, b"2026-11-23T10:00:00.000000000Z stdout F fourth\n")
        .expect("append");
    let line = tokio::time::timeout(Duration::from_secs(5), follow.try_next())
        .await
        .expect("a followed line in time")
        .expect("read")
        .expect("a line");
    assert_eq!(line, "fourth");
    drop(follow);

    // Exec: output, stderr and a non-zero exit status.
    let mut p = pods
        .exec(
            &web,
            ["sh", "-c", "echo out; echo err >&2; exit 3"],
            &AttachParams::default().stdout(true).stderr(true),
        )
        .await
        .expect("exec");
    let mut out = String::new();
    p.stdout()
        .expect("stdout")
        .read_to_string(&mut out)
        .await
        .expect("read");
    let mut err = String::new();
    p.stderr()
        .expect("stderr")
        .read_to_string(&mut err)
        .await
        .expect("read");
    let status = p.take_status().expect("status").await.expect("a status");
    assert_eq!((out.as_str(), err.as_str()), ("out\n", "err\n"));
    assert_eq!(
        status.reason.as_deref(),
        Some("NonZeroExitCode"),
        "{status:?}"
    );
    p.join().await.expect("join");

    // Exec with stdin: what goes in comes back.
    let mut cat = pods
        .exec(
            &web,
            ["cat"],
            &AttachParams::default()
                .stdin(true)
                .stdout(true)
                .stderr(false),
        )
        .await
        .expect("exec cat");
    let mut stdin = cat.stdin().expect("stdin");
    let mut stdout = cat.stdout().expect("stdout");
    stdin.write_all(b"ping\n").await.expect("write");
    let mut buf = [0u8; 5];
    tokio::time::timeout(Duration::from_secs(5), stdout.read_exact(&mut buf))
        .await
        .expect("echo in time")
        .expect("read");
    assert_eq!(&buf, b"ping\n");
    // The client goes away mid-stream: nothing stays open on the node.
    cat.abort();
    drop((stdin, stdout));
    for _ in 0..50 {
        if n.served.open_streams.get() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(n.served.open_streams.get(), 0, "no stream leaked");

    // Port-forward carries an HTTP request to a server in the pod's network.
    let http = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = http.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let (mut s, _) = http.accept().await.expect("accept");
        let mut req = vec![0u8; 1024];
        let _ = s.read(&mut req).await;
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello")
            .await;
    });
    let mut pf = pods.portforward(&web, &[port]).await.expect("portforward");
    let mut stream = pf.take_stream(port).expect("stream");
    stream
        .write_all(b"GET / HTTP/1.1\r\nhost: pod\r\nconnection: close\r\n\r\n")
        .await
        .expect("request");
    let mut answer = Vec::new();
    let mut chunk = [0u8; 1024];
    while !answer.ends_with(b"hello") {
        let k = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut chunk))
            .await
            .expect("answer in time")
            .expect("read");
        if k == 0 {
            break;
        }
        answer.extend_from_slice(&chunk[..k]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 200 OK") && answer.ends_with(b"hello"));
    drop(stream);
    pf.abort();
    let _ = std::fs::remove_dir_all(&n.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_authenticated_and_authorized_the_kubelets_way() {
    let mut n = node("auth").await;
    let web = run_pod(
        &n,
        "auth",
        serde_json::json!([{"name": "c", "image": "localhost/busybox:latest", "command": ["sleep", "3600"]}]),
    )
    .await;
    n.api.add_token("reader-token", "reader", &["readers"]);
    n.api.add_token("stats-token", "stats", &[]);
    n.api.allow("group:readers", "get", "proxy");
    n.api.allow("stats", "get", "stats");

    assert_eq!(raw(&n, "/pods", None).await.0, 401, "no credentials");
    assert_eq!(
        raw(&n, "/pods", Some("nobody")).await.0,
        401,
        "a token the API server rejects"
    );
    let (code, body) = raw(&n, "/pods", Some("stats-token")).await;
    assert_eq!(
        (code, body.trim()),
        (
            403,
            "Forbidden (user=stats, verb=get, resource=nodes, subresource=proxy)"
        )
    );
    let (code, body) = raw(&n, "/pods", Some("reader-token")).await;
    assert_eq!(code, 200);
    assert!(body.contains(&web), "{body}");
    assert_eq!(
        raw(&n, "/metrics", Some("reader-token")).await.0,
        403,
        "metrics is its own subresource"
    );

    // Each token and decision is asked once, then answered from the cache.
    let reviews = |kind: &str| {
        n.api
            .requests()
            .iter()
            .filter(|(_, p)| p.ends_with(kind))
            .count()
    };
    let (tokens, decisions) = (reviews("tokenreviews"), reviews("subjectaccessreviews"));
    for _ in 0..5 {
        assert_eq!(raw(&n, "/pods", Some("reader-token")).await.0, 200);
    }
    assert_eq!(reviews("tokenreviews"), tokens);
    assert_eq!(reviews("subjectaccessreviews"), decisions);

    // The server's own answers, in the kubelet's words.
    let t = Some("reader-token");
    let (code, body) = raw(&n, "/containerLogs/default/nosuch/c", t).await;
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("nosuch"), "{body}");
    let (code, body) = raw(&n, &format!("/containerLogs/default/{web}/other"), t).await;
    assert_eq!(code, 404);
    assert!(body.contains("container \"other\" not found"), "{body}");
    let (code, body) = raw(
        &n,
        &format!("/containerLogs/default/{web}/c?tailLines=ten"),
        t,
    )
    .await;
    assert_eq!(code, 400);
    assert!(body.starts_with("tailLines"), "{body}");
    let (code, body) = raw(
        &n,
        &format!("/containerLogs/default/{web}/c?limitBytes=0"),
        t,
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(raw(&n, "/configz", t).await.0, 200);
    assert_eq!(raw(&n, "/runningpods/", t).await.0, 200);
    let (code, body) = raw(&n, &format!("/exec/default/{web}/c?command=ls"), t).await;
    assert_eq!(code, 400, "no stream asked for: {body}");

    // The node's log directory: its own subresource, then listed and read.
    let var_log = n.dir.join("var-log");
    std::fs::create_dir_all(var_log.join("journal")).expect("var-log");
    std::fs::write(var_log.join("syslog"), "hello log\n").expect("syslog");
    n.api.allow("group:readers", "get", "log");
    let (code, body) = raw(&n, "/logs/", Some("stats-token")).await;
    assert_eq!(
        (code, body.trim()),
        (
            403,
            "Forbidden (user=stats, verb=get, resource=nodes, subresource=log)"
        )
    );
    let (code, body) = raw(&n, "/logs/", t).await;
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("<a href=\"journal/\">journal/</a>\n<a href=\"syslog\">syslog</a>"),
        "{body}"
    );
    assert_eq!(
        raw(&n, "/logs/syslog", t).await,
        (200, "hello log\n".into())
    );
    assert_eq!(raw(&n, "/logs/nosuch", t).await.0, 404);
    assert_eq!(
        raw(&n, "/logs/journal/../../kubeconfig", t).await.0,
        404,
        "never above the directory"
    );

    // A pod of two containers: the API server asks which one.
    let pair = run_pod(
        &n,
        "pair",
        serde_json::json!([
            {"name": "a", "image": "localhost/busybox:latest", "command": ["sleep", "3600"]},
            {"name": "b", "image": "localhost/busybox:latest", "command": ["sleep", "3600"]},
        ]),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(n.client.clone(), "default");
    match pods.logs(&pair, &LogParams::default()).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 400);
            assert_eq!(
                s.message,
                format!("a container name must be specified for pod {pair}, choose one of: [a b]")
            );
        }
        other => panic!("{other:?}"),
    }

    // The API server gone: tokens cannot be checked, and nothing gets in.
    n.api.add_token("late-token", "reader", &["readers"]);
    if let Some(a) = n.apiserver.take() {
        a.stop();
    }
    assert_eq!(
        raw(&n, "/pods", Some("late-token")).await.0,
        401,
        "fails closed"
    );
    let _ = std::fs::remove_dir_all(&n.dir);
}
