//! The agent as a node runs it: `wasmlet run` in a process of its own, a fresh root
//! directory and KubeletConfiguration per start, watched from outside (its healthz, its
//! read-only `/pods`) — the shape in which an operator meets it, beside the in-process
//! agent the benchmarks otherwise drive.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The ports a benchmark node serves on (loopback).
const HEALTHZ: u16 = 10358;
const READ_ONLY: u16 = 10355;
const SERVER: u16 = 10359;

/// `wasmlet run` started on a fresh root directory; stopped (SIGTERM, then its
/// directory removed) on drop.
pub struct AgentProcess {
    child: Child,
    work: PathBuf,
    /// The static pod directory it watches.
    pub manifests: PathBuf,
}

impl AgentProcess {
    /// Starts `bin` as node `node` on the runtime at `endpoint`, with the shipped
    /// plugins (its defaults), and waits until its healthz answers.
    pub async fn start(bin: &Path, endpoint: &str, node: &str) -> AgentProcess {
        let work = std::env::temp_dir().join(format!("wasmlet-bench-process-{node}"));
        let _ = std::fs::remove_dir_all(&work);
        let manifests = work.join("manifests");
        std::fs::create_dir_all(&manifests).expect("manifest dir");
        let config = format!(
            "nodeName: {node}\ncontainerRuntimeEndpoint: {endpoint}\nstaticPodPath: {}\n\
             rootDir: {}\nhealthzPort: {HEALTHZ}\nreadOnlyPort: {READ_ONLY}\nport: {SERVER}\n\
             authorization: {{mode: AlwaysAllow}}\n\
             authentication: {{anonymous: {{enabled: true}}, webhook: {{enabled: false}}}}\n\
             imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 100\n",
            manifests.display(),
            work.join("root").display(),
        );
        std::fs::write(work.join("config.yaml"), config).expect("config");
        let log = std::fs::File::create(work.join("agent.log")).expect("log");
        let child = Command::new(bin)
            .args(["run", "--config"])
            .arg(work.join("config.yaml"))
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        let agent = AgentProcess {
            child,
            work,
            manifests,
        };
        let started = Instant::now();
        while get(HEALTHZ, "/healthz").await.is_none() {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "no healthz from {} (its log: {})",
                bin.display(),
                agent.work.join("agent.log").display()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        agent
    }

    /// The pods its read-only `/pods` shows Running, by name.
    pub async fn running(&self) -> Vec<String> {
        let Some(body) = get(READ_ONLY, "/pods").await else {
            return Vec::new();
        };
        let list: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let items = list["items"].as_array().cloned().unwrap_or_default();
        items
            .iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
            .collect()
    }

    /// Polls [`AgentProcess::running`] every `every` until `n` pods are Running (at
    /// most 300 s); when each was first seen Running (Unix nanoseconds), by name.
    pub async fn wait_running(&self, n: usize, every: Duration) -> BTreeMap<String, i64> {
        let started = Instant::now();
        let mut seen = BTreeMap::new();
        while seen.len() < n {
            assert!(
                started.elapsed() < Duration::from_secs(300),
                "not all running"
            );
            tokio::time::sleep(every).await;
            let now = wasmlet_cri::labels::unix_nanos();
            for name in self.running().await {
                seen.entry(name).or_insert(now);
            }
        }
        seen
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the agent (SIGTERM) and waits for it.
    pub fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
        let _ = std::fs::remove_dir_all(&self.work);
    }
}

/// The body of `GET path` on the loopback port `port` (HTTP/1.0, whole answer), when
/// the answer is 200.
async fn get(port: u16, path: &str) -> Option<Vec<u8>> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.ok()?;
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&answer[..split]).ok()?;
    head.split_whitespace()
        .nth(1)
        .filter(|code| *code == "200")?;
    Some(answer[split + 4..].to_vec())
}
