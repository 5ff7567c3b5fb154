//! A node of static pods run by `wasmlet run --config` on the real containerd, read back
//! through the read-only port's `GET /pods`: the end-to-end tests' harness.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_wasmlet");

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `GET path` on 127.0.0.1:`port`: (status, body).
pub fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

pub struct Harness {
    /// The test's directory.
    pub dir: PathBuf,
    pub manifests: PathBuf,
    pub config: PathBuf,
    pub read_only: String,
    pub node: String,
    pub agent: Option<Child>,
    pub runs: u32,
}

impl Harness {
    pub fn new(endpoint: &str) -> Self {
        Self::with("e2e", endpoint, "podPidsLimit: 64\n")
    }

    /// A node named `<name>-<pid>` whose configuration ends with `extra`.
    pub fn with(name: &str, endpoint: &str, extra: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("wasmlet-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let manifests = dir.join("manifests");
        std::fs::create_dir_all(&manifests).expect("manifest dir");
        let node = format!("{name}-{}", std::process::id());
        let (healthz, read_only) = (free_port(), free_port());
        let config = dir.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 nodeName: {node}\ncontainerRuntimeEndpoint: {endpoint}\n\
                 staticPodPath: {}\nfileCheckFrequency: 20s\nhealthzPort: {healthz}\n\
                 readOnlyPort: {read_only}\nrootDir: {root}\nclusterDomain: cluster.local\n\
                 devicePluginDir: {root}/device-plugins\n\
                 port: 0\nauthorization: {{mode: AlwaysAllow}}\n{}{extra}",
                manifests.display(),
                super::agent::TEST_RESOURCES,
                root = dir.join("root").display(),
            ),
        )
        .expect("config");
        Harness {
            dir,
            manifests,
            config,
            read_only: format!("127.0.0.1:{read_only}"),
            node,
            agent: None,
            runs: 0,
        }
    }

    pub fn log(&self, run: u32) -> PathBuf {
        self.dir.join(format!("agent-{run}.log"))
    }

    pub fn start(&mut self) {
        self.runs += 1;
        let plugins = wasmlet_plugin_host::dev::shipped_plugin("source-file");
        let log = std::fs::File::create(self.log(self.runs)).expect("log file");
        let child = Command::new(BIN)
            .args(["run", "--config"])
            .arg(&self.config)
            .env("WASMLET_PLUGIN_DIR", plugins.parent().expect("plugin dir"))
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start wasmlet run");
        self.agent = Some(child);
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.agent.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn logs(&self) -> String {
        (1..=self.runs)
            .map(|r| std::fs::read_to_string(self.log(r)).unwrap_or_default())
            .collect()
    }

    pub fn write(&self, name: &str, text: &str) {
        let tmp = self.dir.join(format!(".{name}"));
        std::fs::write(&tmp, text).expect("manifest");
        std::fs::rename(&tmp, self.manifests.join(name)).expect("manifest");
    }

    pub fn pods(&self) -> Vec<Value> {
        get(&self.read_only, "/pods")
            .and_then(|(_, body)| serde_json::from_str::<Value>(&body).ok())
            .and_then(|v| v["items"].as_array().cloned())
            .unwrap_or_default()
    }

    pub fn pod(&self, name: &str) -> Option<Value> {
        let full = format!("{name}-{}", self.node);
        self.pods()
            .into_iter()
            .find(|p| p["metadata"]["name"].as_str() == Some(full.as_str()))
    }

    pub fn wait_pod(
        &self,
        name: &str,
        what: &str,
        limit: Duration,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let started = Instant::now();
        loop {
            if let Some(p) = self.pod(name)
                && check(&p)
            {
                return p;
            }
            if started.elapsed() > limit {
                panic!(
                    "{name}: not {what} after {limit:?}\npod: {}\nagent log:\n{}",
                    self.pod(name).map(|p| p.to_string()).unwrap_or_default(),
                    tail(&self.logs(), 60)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

pub fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

pub fn condition(pod: &Value, kind: &str) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == kind && c["status"] == "True")
    })
}

pub fn manifest(name: &str, grace: u32, body: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  \
         terminationGracePeriodSeconds: {grace}\n{body}"
    )
}

pub const IMAGE: &str = "image: localhost/busybox:latest\n    imagePullPolicy: IfNotPresent";
