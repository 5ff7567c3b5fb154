//! The shipped httpGet and grpc probe handlers against servers started here: a plain
//! HTTP/1.1 server, the same over TLS with a self-signed certificate (the kubelet does
//! not verify probe certificates), and a real gRPC health server (tonic-health).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{network, probe_target as target};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wasmlet_plugin_host::probe::*;
use wasmlet_plugin_host::*;

fn load(engine: &PluginEngine, name: &str, grants: &[&str]) -> ProbeHandler {
    common::load_probe(engine, name, network(grants))
}

fn get(scheme: &str, port: u16, path: &str, headers: &[(&str, &str)]) -> Action {
    Action::HttpGet(HttpGetAction {
        scheme: scheme.into(),
        host: String::new(),
        port,
        path: path.into(),
        headers: headers
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
    })
}

/// The answer of the test server to a path.
fn reply(path: &str, head: &str) -> Vec<u8> {
    let (status, extra, body): (&str, String, String) = match path {
        "/healthz" => ("200 OK", String::new(), "ok".into()),
        "/fail" => ("503 Service Unavailable", String::new(), "down".into()),
        "/moved" => ("302 Found", "Location: /healthz\r\n".into(), String::new()),
        "/away" => (
            "301 Moved Permanently",
            "Location: http://elsewhere.invalid/\r\n".into(),
            "gone".into(),
        ),
        "/loop" => ("302 Found", "Location: /loop\r\n".into(), String::new()),
        "/echo" => ("200 OK", String::new(), head.to_owned()),
        _ => ("404 Not Found", String::new(), String::new()),
    };
    format!(
        "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Serves one request per connection on `stream`; `/slow` never answers.
async fn serve<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut stream: S) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
    if path == "/slow" {
        tokio::time::sleep(Duration::from_secs(10)).await;
        return;
    }
    let _ = stream.write_all(&reply(&path, &head)).await;
    let _ = stream.shutdown().await;
}

async fn http_server() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listen");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(serve(conn));
        }
    });
    port
}

async fn https_server() -> u16 {
    let cert = rcgen::generate_simple_self_signed(vec!["pod.invalid".into()]).expect("cert");
    let key =
        rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).expect("key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(vec![cert.cert.der().clone()], key)
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listen");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(conn).await {
                    serve(tls).await;
                }
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_get_follows_the_kubelets_rules() {
    let engine = PluginEngine::new().expect("engine");
    let port = http_server().await;
    let handler = load(&engine, "probe-http-get", &["pod"]);
    let check = |action| {
        let handler = &handler;
        async move {
            handler
                .check(&target(action, 1000), None)
                .await
                .expect("check")
        }
    };

    assert_eq!(
        check(get("HTTP", port, "/healthz", &[])).await,
        Outcome::Success("ok".into())
    );
    assert_eq!(
        check(get("HTTP", port, "/fail", &[])).await,
        Outcome::Failure("HTTP probe failed with statuscode: 503".into())
    );
    assert_eq!(
        check(get("HTTP", port, "/moved", &[])).await,
        Outcome::Success("ok".into()),
        "a redirect to the same host is followed"
    );
    assert_eq!(
        check(get("HTTP", port, "/away", &[])).await,
        Outcome::Success("Probe terminated redirects, Response body: gone".into())
    );
    assert_eq!(
        check(get("HTTP", port, "/loop", &[])).await,
        Outcome::Failure(format!(
            "Get \"http://127.0.0.1:{port}/loop\": stopped after 10 redirects"
        ))
    );

    // The request carries the kubelet's defaults, the probe's headers and its Host.
    let Outcome::Success(head) = check(get(
        "HTTP",
        port,
        "/echo",
        &[("X-Probe", "yes"), ("Host", "web.example")],
    ))
    .await
    else {
        panic!("echo answers")
    };
    let head = head.to_ascii_lowercase();
    for line in [
        "get /echo http/1.1",
        "user-agent: kube-probe/1.34",
        "accept: */*",
        "x-probe: yes",
        "host: web.example",
    ] {
        assert!(head.contains(line), "{line:?} missing from:\n{head}");
    }

    let Outcome::Failure(why) = check(get("HTTP", 1, "/healthz", &[])).await else {
        panic!("a closed port fails")
    };
    assert_eq!(
        why,
        "Get \"http://127.0.0.1:1/healthz\": dial tcp 127.0.0.1:1: connect: connection refused"
    );

    let started = std::time::Instant::now();
    let out = handler
        .check(&target(get("HTTP", port, "/slow", &[]), 300), None)
        .await
        .expect("a slow server is a failed probe, not a failed call");
    let Outcome::Failure(why) = out else {
        panic!("a server slower than the timeout fails: {out:?}")
    };
    assert!(why.contains("Client.Timeout exceeded"), "{why}");
    assert!(started.elapsed() < Duration::from_millis(800));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_probes_do_not_verify_the_certificate() {
    let engine = PluginEngine::new().expect("engine");
    let port = https_server().await;
    let handler = load(&engine, "probe-http-get", &["pod"]);
    let out = handler
        .check(&target(get("HTTPS", port, "/healthz", &[]), 2000), None)
        .await
        .expect("check");
    assert_eq!(out, Outcome::Success("ok".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_to_an_address_not_granted_is_denied() {
    let engine = PluginEngine::new().expect("engine");
    let port = http_server().await;
    for grants in [&["10.0.0.0/8"][..], &[]] {
        let handler = load(&engine, "probe-http-get", grants);
        let out = handler
            .check(&target(get("HTTP", port, "/healthz", &[]), 1000), None)
            .await
            .expect("check");
        let Outcome::Failure(why) = out else {
            panic!("denied: {out:?}")
        };
        assert!(why.contains("access denied"), "{why}");
    }
}

/// A gRPC health server: the whole server and `db` report SERVING, `cache`
/// NOT_SERVING; others are unknown.
async fn grpc_health_server() -> u16 {
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("db", tonic_health::ServingStatus::Serving)
        .await;
    reporter
        .set_service_status("cache", tonic_health::ServingStatus::NotServing)
        .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listen");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let _keep = reporter;
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
    });
    port
}

/// A gRPC server without the health service.
async fn grpc_server_without_health() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listen");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_routes(tonic::service::Routes::default())
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    port
}

fn grpc(port: u16, service: Option<&str>) -> Action {
    Action::Grpc(GrpcAction {
        host: String::new(),
        port,
        service: service.map(str::to_owned),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_asks_the_health_service() {
    let engine = PluginEngine::new().expect("engine");
    let port = grpc_health_server().await;
    let bare = grpc_server_without_health().await;
    let handler = load(&engine, "probe-grpc", &["pod"]);
    for (action, expected) in [
        (grpc(port, None), Outcome::Success("SERVING".into())),
        (grpc(port, Some("db")), Outcome::Success("SERVING".into())),
        (
            grpc(port, Some("cache")),
            Outcome::Failure("service unhealthy (responded with \"NOT_SERVING\")".into()),
        ),
        (
            grpc(port, Some("mail")),
            Outcome::Failure(
                "error: health rpc probe failed: rpc error: code = NotFound desc = service not registered"
                    .into(),
            ),
        ),
    ] {
        let out = handler
            .check(&target(action.clone(), 2000), None)
            .await
            .expect("check");
        assert_eq!(out, expected, "{action:?}");
    }
    let out = handler
        .check(&target(grpc(bare, None), 2000), None)
        .await
        .expect("check");
    let Outcome::Failure(why) = out else {
        panic!("no health service: {out:?}")
    };
    assert!(
        why.starts_with(
            "this server does not implement the grpc health protocol (grpc.health.v1.Health)"
        ),
        "{why}"
    );
    let out = handler
        .check(&target(grpc(1, None), 1000), None)
        .await
        .expect("check");
    let Outcome::Failure(why) = out else {
        panic!("closed port: {out:?}")
    };
    assert!(
        why.starts_with("error: failed to connect service at \"127.0.0.1:1\""),
        "{why}"
    );
}
