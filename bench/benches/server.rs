//! The kubelet server (`host/server`) and container logs (`host/logs`), against agents
//! on the in-process CRI simulator.
//!
//! - `kubectl logs` of a large log: throughput next to reading the file raw and to the
//!   parser alone, and the node's memory while it streams (a node of its own in a child
//!   process, so that its RSS is the node's alone).
//! - 100 `logs -f` followers on one node (the child): its CPU and RSS idle, followed,
//!   and followed while every container writes.
//! - exec `echo` through the kubelet server, next to the bare CRI `ExecSync` and to the
//!   same WebSocket exec straight to the runtime's streaming server.
//! - What authentication and authorization add to a request once their caches are
//!   warm, and how often the API server is asked.
//!
//! `--smoke` shrinks every case (CI checks that it still runs).

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::{AsyncBufReadExt, AsyncReadExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use wasmlet_agent::agent::{Agent, AgentOptions};
use wasmlet_agent::node::NodeFacts;
use wasmlet_agent::syncloop::SourceSet;
use wasmlet_apiserver_sim::ApiServerSim;
use wasmlet_bench::{Budget, NoProbes, Samples, fmt, header, row, time_async};
use wasmlet_cri::CriRuntime;
use wasmlet_cri::proto::ExecRequest;
use wasmlet_cri_sim::Simulator;
use wasmlet_plugin_host::source::SourcePod;
use wasmlet_server::authn::{Authenticator, AuthnSettings};
use wasmlet_server::authz::{self, Authorizer, AuthzSettings, Mode};
use wasmlet_server::review::ApiReviews;

const NODE: &str = "bench-node";

fn smoke() -> bool {
    std::env::args().any(|a| a == "--smoke")
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "wasmlet-bench-server-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    d
}

/// An agent on the simulator with the pods `names` running (`c` in each, having
/// written one line), and their log files.
struct Node {
    sim: Arc<Simulator>,
    agent: Arc<Agent<Simulator>>,
    logs: BTreeMap<String, PathBuf>,
    dir: PathBuf,
}

async fn node(dir: PathBuf, names: &[String]) -> Node {
    let sim = Arc::new(Simulator::new());
    let agent = Arc::new(Agent::start(
        sim.clone(),
        AgentOptions {
            pod_logs_dir: dir.join("logs"),
            ..wasmlet_agent::testing::options(
                NodeFacts {
                    max_pods: 1000,
                    ..NodeFacts::read(Some(NODE), Some("127.0.0.1"), &dir, 1000)
                },
                &dir.join("root"),
            )
        },
        Arc::new(NoProbes),
        None,
        None,
    ));
    agent
        .sources()
        .send(file_pods(names))
        .await
        .expect("sources");
    let logs = running_logs(&agent, &dir, names).await;
    // The relist that saw them running also fed the pod cache.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    Node {
        sim,
        agent,
        logs,
        dir,
    }
}

/// Pods `names` as the file source gives them: one container each, saying `started`.
fn file_pods(names: &[String]) -> SourceSet {
    let pods = names
        .iter()
        .map(|name| {
            let manifest = serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "localhost/busybox:latest",
                    "command": ["sh", "-c", "echo started; sleep 3600"]}]},
            });
            SourcePod {
                origin: format!("{name}.yaml"),
                pod: serde_json::from_value(manifest).expect("pod"),
            }
        })
        .collect();
    SourceSet {
        source: "file".into(),
        pods,
        ..SourceSet::default()
    }
}

/// Waits until each of pods `names` runs; their containers' log files, by pod.
async fn running_logs(
    agent: &Agent<Simulator>,
    dir: &Path,
    names: &[String],
) -> BTreeMap<String, PathBuf> {
    let started = Instant::now();
    let mut logs = BTreeMap::new();
    while logs.len() < names.len() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "pods did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        for name in names {
            let full = format!("{name}-{NODE}");
            let running = agent.ctx.statuses.find("default", &full).is_some_and(|e| {
                e.status
                    .container_statuses
                    .iter()
                    .flatten()
                    .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
            });
            if !running || logs.contains_key(name) {
                continue;
            }
            let prefix = format!("default_{full}_");
            if let Some(d) = std::fs::read_dir(dir.join("logs"))
                .into_iter()
                .flatten()
                .flatten()
                .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            {
                logs.insert(name.clone(), d.path().join("c/0.log"));
            }
        }
    }
    logs
}

/// The node's kubelet server with `authn` / `authz`, asking `reviews` when given.
async fn serve(
    n: &Node,
    name: &str,
    authn: AuthnSettings,
    authz: AuthzSettings,
    reviews: Option<Arc<ApiReviews>>,
) -> wasmlet_server::Served {
    wasmlet_server::start(
        wasmlet_server::Settings {
            addr: "127.0.0.1:0".parse().expect("addr"),
            node_name: NODE.into(),
            tls: Default::default(),
            self_signed: wasmlet_server::tls::SelfSigned {
                dir: n.dir.join(format!("pki-{name}")),
                names: vec![NODE.into()],
                ips: vec!["127.0.0.1".parse().expect("ip")],
            },
            authn,
            authz,
            node_log_dir: n.dir.clone(),
        },
        wasmlet_server::Parts {
            agent: n.agent.clone(),
            metrics: Arc::new(String::new),
            probe_metrics: Arc::new(String::new),
            configz: serde_json::json!({}),
            tokens: reviews.clone().map(|r| r as _),
            access: reviews.map(|r| r as _),
            stats: None,
        },
    )
    .await
    .expect("server")
}

fn open_access() -> (AuthnSettings, AuthzSettings) {
    (
        AuthnSettings {
            anonymous: true,
            webhook: false,
            ..Default::default()
        },
        AuthzSettings {
            mode: Mode::AlwaysAllow,
            ..Default::default()
        },
    )
}

/// kube's client as an HTTPS client of the kubelet server at `port`.
fn https(port: u16, token: Option<&str>) -> kube::Client {
    let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse().expect("url"));
    config.accept_invalid_certs = true;
    config.auth_info.token = token.map(|t| t.to_owned().into());
    wasmlet_cluster::connect::install_crypto_provider();
    kube::Client::try_from(config).expect("client")
}

fn get(path: &str) -> http::Request<Vec<u8>> {
    http::Request::get(path).body(Vec::new()).expect("request")
}

// ---- the child: a node alone in its process ----

/// `--child N`: a node with `big` and N pods `f0…`, anonymous and AlwaysAllow; prints
/// `{"port": …, "logs": {…}}` on one line, then runs until stdin closes.
fn child(pods: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut names = vec!["big".to_owned()];
        names.extend((0..pods).map(|i| format!("f{i}")));
        let n = node(dir("child"), &names).await;
        let (authn, authz) = open_access();
        let served = serve(&n, "open", authn, authz, None).await;
        println!(
            "{}",
            serde_json::json!({"port": served.addr.port(), "logs": n.logs})
        );
        std::io::stdout().flush().expect("flush");
        tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        })
        .await
        .expect("stdin");
        let _ = std::fs::remove_dir_all(&n.dir);
    });
}

struct Child {
    process: std::process::Child,
    port: u16,
    logs: BTreeMap<String, PathBuf>,
}

impl Child {
    fn start(pods: usize) -> Child {
        let mut process = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args(["--child", &pods.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("child");
        let mut line = String::new();
        std::io::BufReader::new(process.stdout.as_mut().expect("stdout"))
            .read_line(&mut line)
            .expect("child's answer");
        let v: serde_json::Value = serde_json::from_str(&line).expect("child's JSON");
        Child {
            port: u16::try_from(v["port"].as_u64().expect("port")).expect("port"),
            logs: serde_json::from_value(v["logs"].clone()).expect("logs"),
            process,
        }
    }

    fn pid(&self) -> u32 {
        self.process.id()
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        drop(self.process.stdin.take());
        let _ = self.process.wait();
    }
}

/// (RSS bytes, CPU seconds) of process `pid`.
fn usage(pid: u32) -> (u64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024;
    let cpu = wasmlet_bench::cpu_time_of(&pid.to_string());
    (rss, cpu.as_secs_f64())
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// A CRI log of about `bytes`: 100-byte records of 70 characters of text.
fn write_log(path: &Path, bytes: usize) -> usize {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("log"));
    let mut written = 0;
    let mut i = 0u64;
    while written < bytes {
        let line = format!(
            "2026-11-23T10:00:00.{:09}Z stdout F {:>8} the quick brown fox jumps over the lazy dog 0123456789\n",
            i % 1_000_000_000,
            i
        );
        f.write_all(line.as_bytes()).expect("write");
        written += line.len();
        i += 1;
    }
    f.flush().expect("flush");
    written
}

// ---- logs ----

async fn logs_throughput(c: &Child) {
    println!("\n### `kubectl logs` of a large log (the node in a process of its own)\n");
    println!("| case | log file | time | MB/s of file | node RSS before → peak while streaming |");
    println!("|---|---|---|---|---|");
    let path = c.logs["big"].clone();
    let sizes: &[usize] = if smoke() {
        &[1 << 20]
    } else {
        &[10 << 20, 100 << 20]
    };
    let client = https(c.port, None);
    for &size in sizes {
        let written = write_log(&path, size);
        raw_and_parsed(&path, written);
        through_the_server(c, &client, written).await;
    }
    // Leave a small log behind for the followers' part.
    write_log(&path, 1024);
}

/// The floors: log `path` (`written` bytes) read raw, and parsed with no HTTP.
fn raw_and_parsed(path: &Path, written: usize) {
    let mb = written as f64 / 1e6;
    // Raw: the file read in 64 KiB chunks (page cache warm): the floor.
    let raw = {
        let t = Instant::now();
        let mut f = std::fs::File::open(path).expect("open");
        let mut buf = vec![0u8; 64 * 1024];
        while f.read(&mut buf).expect("read") > 0 {}
        t.elapsed()
    };
    println!(
        "| the file read raw, 64 KiB at a time | {} | {} | {:.0} | |",
        mib(written as u64),
        fmt(raw),
        mb / raw.as_secs_f64()
    );
    // The parser alone (wasmlet_logs::read into a sink that counts).
    struct Count(u64);
    impl wasmlet_logs::read::Sink for Count {
        fn write(&mut self, chunk: Vec<u8>) -> bool {
            self.0 += chunk.len() as u64;
            true
        }
        fn closed(&self) -> bool {
            false
        }
        fn running(&self) -> bool {
            false
        }
    }
    let parse = {
        let t = Instant::now();
        let mut sink = Count(0);
        wasmlet_logs::read::read(
            path,
            std::fs::File::open(path).expect("open"),
            &wasmlet_logs::LogOptions::default(),
            &mut sink,
        )
        .expect("read");
        assert!(sink.0 > 0);
        t.elapsed()
    };
    println!(
        "| parsed into output (`wasmlet_logs::read`, no HTTP) | {} | {} | {:.0} | |",
        mib(written as u64),
        fmt(parse),
        mb / parse.as_secs_f64()
    );
}

/// The big log (`written` bytes) through the kubelet server over TLS, best of 3, the
/// node's RSS sampled every 5 ms.
async fn through_the_server(c: &Child, client: &kube::Client, written: usize) {
    let mb = written as f64 / 1e6;
    let mut best = Duration::MAX;
    let (before, _) = usage(c.pid());
    let peak = Arc::new(AtomicU64::new(before));
    for _ in 0..if smoke() { 1 } else { 3 } {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let (peak, done, pid) = (peak.clone(), done.clone(), c.pid());
            std::thread::spawn(move || {
                while !done.load(Ordering::SeqCst) {
                    peak.fetch_max(usage(pid).0, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        };
        let t = Instant::now();
        let mut body = client
            .request_stream(get(&format!("/containerLogs/default/big-{NODE}/c")))
            .await
            .expect("logs");
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = 0u64;
        loop {
            let k = body.read(&mut buf).await.expect("read");
            if k == 0 {
                break;
            }
            got += k as u64;
        }
        best = best.min(t.elapsed());
        done.store(true, Ordering::SeqCst);
        sampler.join().expect("sampler");
        assert!(got > written as u64 / 2, "the whole log came back");
    }
    println!(
        "| **through the kubelet server** (TLS, kube's client, best of 3) | {} | {} | **{:.0}** | {} → {} |",
        mib(written as u64),
        fmt(best),
        mb / best.as_secs_f64(),
        mib(before),
        mib(peak.load(Ordering::SeqCst))
    );
}

async fn followers(c: &Child, count: usize, pods: usize) {
    let window = if smoke() {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(10)
    };
    println!(
        "\n### {count} `logs -f` followers on one node ({pods} containers, the node in a process of its own)\n"
    );
    println!(
        "| phase ({}s each) | node CPU | node RSS | lines delivered |",
        window.as_secs()
    );
    println!("|---|---|---|---|");
    let measure = |pid: u32, window: Duration| async move {
        let (_, cpu0) = usage(pid);
        let t = Instant::now();
        tokio::time::sleep(window).await;
        let (rss, cpu1) = usage(pid);
        ((cpu1 - cpu0) / t.elapsed().as_secs_f64() * 100.0, rss)
    };
    let (cpu, rss) = measure(c.pid(), window).await;
    println!("| idle, no followers | {cpu:.1} % | {} | |", mib(rss));

    let delivered = Arc::new(AtomicU64::new(0));
    let streams = follow(c, count, pods, &delivered).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (cpu, rss) = measure(c.pid(), window).await;
    println!(
        "| {count} followers, nothing written | {cpu:.1} % | {} | 0 |",
        mib(rss)
    );

    // Every container writes 10 lines a second.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let paths: Vec<PathBuf> = (0..pods)
        .map(|i| c.logs[&format!("f{i}")].clone())
        .collect();
    let writer = write_lines(paths, stop.clone());
    let before = delivered.load(Ordering::Relaxed);
    let (cpu, rss) = measure(c.pid(), window).await;
    stop.store(true, Ordering::SeqCst);
    let written = writer.join().expect("writer");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = delivered.load(Ordering::Relaxed) - before;
    let per_follower = count / pods;
    println!(
        "| {count} followers, each container writing 10 lines/s | {cpu:.1} % | {} | {got} of {} |",
        mib(rss),
        written * per_follower as u64
    );
    for s in streams {
        s.abort();
    }
}

/// `count` followers (`logs -f`) of pods `f0`…, spread over `pods`, each line counted
/// into `delivered`.
async fn follow(
    c: &Child,
    count: usize,
    pods: usize,
    delivered: &Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let client = https(c.port, None);
    let mut streams = Vec::new();
    for i in 0..count {
        let pod = format!("f{}", i % pods);
        let stream = client
            .request_stream(get(&format!(
                "/containerLogs/default/{pod}-{NODE}/c?follow=true&tailLines=0"
            )))
            .await
            .expect("follow");
        let delivered = delivered.clone();
        streams.push(tokio::spawn(async move {
            let mut lines = stream.lines();
            while let Some(Ok(_)) = lines.next().await {
                delivered.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    streams
}

/// A thread appending a line to each of `paths` ten times a second until `stop`; the
/// lines it wrote.
fn write_lines(
    paths: Vec<PathBuf>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut files: Vec<std::fs::File> = paths
            .iter()
            .map(|p| {
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(p)
                    .expect("log")
            })
            .collect();
        let mut written = 0u64;
        while !stop.load(Ordering::SeqCst) {
            for f in &mut files {
                f.write_all(b"2026-11-23T10:00:00.000000000Z stdout F a line of a followed log\n")
                    .expect("append");
                written += 1;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        written
    })
}

// ---- exec and auth, in this process ----

/// Reads an exec's WebSocket messages to the end: (stdout, whether a status came).
async fn ws_exec(client: &kube::Client, path: &str) -> (Vec<u8>, bool) {
    let conn = client
        .connect(get(path))
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut ws = conn.into_stream();
    let (mut out, mut status) = (Vec::new(), false);
    while let Some(Ok(m)) = ws.next().await {
        match m {
            Message::Binary(b) if b.first() == Some(&1) => out.extend_from_slice(&b[1..]),
            Message::Binary(b) if b.first() == Some(&3) && b.len() > 1 => status = true,
            Message::Close(_) => break,
            _ => {}
        }
    }
    (out, status)
}

async fn exec_round_trip(n: &Node, port: u16) {
    let budget = Budget::from_args(300);
    header("exec `echo hi`: the bare CRI call, the runtime's streaming server, the kubelet server");
    let id = n
        .sim
        .list_containers(None)
        .await
        .expect("list")
        .into_iter()
        .find(|c| c.metadata.as_ref().is_some_and(|m| m.name == "c"))
        .expect("a container")
        .id;
    let s = time_async(budget, || async {
        let r = n
            .sim
            .exec_sync(&id, vec!["echo".into(), "hi".into()], Duration::ZERO)
            .await
            .expect("exec sync");
        assert_eq!(r.stdout, b"hi\n");
    })
    .await;
    row("CRI ExecSync, in-process (no streams)", &s);
    let direct = straight_to_the_streaming_server(n, budget, &id).await;
    let client = https(port, None);
    let path = format!("/exec/default/sh-{NODE}/c?command=echo&command=hi&stdout=true");
    let through = time_async(budget, || async {
        let (out, _) = ws_exec(&client, &path).await;
        assert_eq!(out, b"hi\n");
    })
    .await;
    row(
        "**through the kubelet server** (new TLS connection, CRI Exec, upgrade carried)",
        &through,
    );
    let (fresh, reused) = healthz_for_scale(&client, budget).await;
    let added = through
        .percentile(50.0)
        .saturating_sub(direct.percentile(50.0));
    let tls = fresh
        .percentile(50.0)
        .saturating_sub(reused.percentile(50.0));
    println!(
        "\nThrough the server, exec takes {} more at p50 than straight to the runtime; a new TLS connection accounts for {} of it, leaving {} for authentication, the pod lookup, the proxy hop and the extra connection to the runtime.",
        fmt(added),
        fmt(tls),
        fmt(added.saturating_sub(tls))
    );
}

/// `echo hi` in container `id` through CRI Exec and a WebSocket straight to the
/// runtime's streaming server.
async fn straight_to_the_streaming_server(n: &Node, budget: Budget, id: &str) -> Samples {
    // One client per target: each exec's upgrade takes a connection of its own anyway.
    let streaming = {
        let url = n
            .sim
            .exec(ExecRequest {
                container_id: id.to_owned(),
                cmd: vec!["true".into()],
                stdout: true,
                ..Default::default()
            })
            .await
            .expect("exec");
        let base = &url[..url.find("/exec/").expect("an exec URL")];
        wasmlet_cluster::connect::install_crypto_provider();
        kube::Client::try_from(kube::Config::new(base.parse().expect("url"))).expect("client")
    };
    let direct = time_async(budget, || async {
        let url = n
            .sim
            .exec(ExecRequest {
                container_id: id.to_owned(),
                cmd: vec!["echo".into(), "hi".into()],
                stdout: true,
                ..Default::default()
            })
            .await
            .expect("exec");
        let path = &url[url.find("/exec/").expect("an exec URL")..];
        let (out, _) = ws_exec(&streaming, path).await;
        assert_eq!(out, b"hi\n");
    })
    .await;
    row(
        "CRI Exec + WebSocket straight to the streaming server (new plain connection)",
        &direct,
    );
    direct
}

/// GET /healthz on a new TLS connection and on a kept-alive one.
async fn healthz_for_scale(client: &kube::Client, budget: Budget) -> (Samples, Samples) {
    let fresh = time_async(budget, || async {
        let request = http::Request::get("/healthz")
            .header("connection", "close")
            .body(Vec::new())
            .expect("request");
        client.request_text(request).await.expect("healthz");
    })
    .await;
    row("for scale: GET /healthz on a new TLS connection", &fresh);
    let reused = time_async(budget, || async {
        client.request_text(get("/healthz")).await.expect("healthz");
    })
    .await;
    row(
        "for scale: GET /healthz on a kept-alive connection",
        &reused,
    );
    (fresh, reused)
}

async fn auth_overhead(n: &Node, open_port: u16) {
    let budget = Budget::from_args(2000);
    let api = ApiServerSim::new();
    let served = api
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let kubeconfig = n.dir.join("kubeconfig");
    wasmlet_apiserver_sim::write_kubeconfig(&kubeconfig, &served.url()).expect("kubeconfig");
    let k = kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(k, &Default::default())
        .await
        .expect("config");
    wasmlet_cluster::connect::install_crypto_provider();
    let reviews = Arc::new(ApiReviews::new(
        kube::Client::try_from(config).expect("client"),
    ));
    api.add_token("bench-token", "bench", &["readers"]);
    api.allow("group:readers", "get", "proxy");

    header("an authorized request with warm caches");
    the_check_alone(&reviews, budget).await;
    let guarded = serve(
        n,
        "guarded",
        AuthnSettings::default(),
        AuthzSettings::default(),
        Some(reviews.clone()),
    )
    .await;
    let open = https(open_port, None);
    let with_token = https(guarded.addr.port(), Some("bench-token"));
    with_token
        .request_text(get("/healthz"))
        .await
        .expect("warm");
    let reviews_before = api.requests().len();
    let plain = time_async(budget, || async {
        open.request_text(get("/healthz")).await.expect("healthz");
    })
    .await;
    row("GET /healthz, anonymous + AlwaysAllow (keep-alive)", &plain);
    let authed = time_async(budget, || async {
        with_token
            .request_text(get("/healthz"))
            .await
            .expect("healthz");
    })
    .await;
    row(
        "GET /healthz, bearer token + Webhook, warm caches (keep-alive)",
        &authed,
    );
    let asked = api.requests().len() - reviews_before;
    println!(
        "\nAuthentication and authorization add {} at p50 over the wire; the API server was asked {asked} times in {} requests (each review once per cache TTL).",
        fmt(authed
            .percentile(50.0)
            .saturating_sub(plain.percentile(50.0))),
        budget.warmup + budget.iterations
    );
    served.stop();
}

/// The authenticator and authorizer alone, answering from their warm caches.
async fn the_check_alone(reviews: &Arc<ApiReviews>, budget: Budget) {
    let authn = Authenticator::new(AuthnSettings::default(), Some(reviews.clone()));
    let authz = Authorizer::new(AuthzSettings::default(), Some(reviews.clone()));
    let attributes = authz::attributes("GET", "/pods", NODE);
    let check = || async {
        let user = authn
            .authenticate(None, Some("Bearer bench-token"))
            .await
            .expect("authenticated");
        assert_eq!(
            authz.authorize(&user, &attributes).await,
            authz::Decision::Allow
        );
    };
    check().await;
    let s = time_async(budget, check).await;
    row(
        "TokenReview + SubjectAccessReview answered from their caches (the check alone)",
        &s,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let pods = args.get(i + 1).and_then(|n| n.parse().ok()).unwrap_or(10);
        child(pods);
        return;
    }
    let (count, pods) = if smoke() { (10, 2) } else { (100, 10) };
    println!("## The kubelet server and container logs — `server`");
    {
        let c = Child::start(pods);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            logs_throughput(&c).await;
            followers(&c, count, pods).await;
        });
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let n = node(dir("exec"), &["sh".to_owned()]).await;
        let (authn, authz) = open_access();
        let open = serve(&n, "open", authn, authz, None).await;
        exec_round_trip(&n, open.addr.port()).await;
        auth_overhead(&n, open.addr.port()).await;
        let _ = std::fs::remove_dir_all(&n.dir);
    });
}
