//! What the end-to-end tests against the API server double share: a `wasmlet run
//! --kubeconfig` agent on the real containerd, pods bound to it, waits on the double's
//! copy of them, and removing what the node made from the shared containerd.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wasmlet_apiserver_sim::ApiServerSim;
use wasmlet_cri::proto::PodSandboxFilter;
use wasmlet_cri::{CriClient, CriRuntime};

use super::agent::Agent;

pub const BIN: &str = env!("CARGO_BIN_EXE_wasmlet");

/// A test's cluster: the double serving on loopback, a kubeconfig for it and the CA a
/// kubelet server trusts it by, in a fresh directory `name` — with the pods an earlier
/// run of node `node` left on the shared containerd removed.
pub struct Double {
    pub dir: std::path::PathBuf,
    pub api: ApiServerSim,
    pub served: wasmlet_apiserver_sim::Served,
    pub kubeconfig: std::path::PathBuf,
    pub client_ca: std::path::PathBuf,
}

impl Double {
    /// Starts it; the API server's own client certificate may do anything on nodes.
    pub async fn start(name: &str, endpoint: &str, node: &str) -> Double {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        remove_pods(endpoint, node).await;
        let api = ApiServerSim::new();
        api.set_address_types(&["InternalIP", "Hostname"]);
        let served = api
            .serve("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("serve");
        let kubeconfig = dir.join("kubeconfig");
        wasmlet_apiserver_sim::write_kubeconfig(&kubeconfig, &served.url()).expect("kubeconfig");
        let client_ca = dir.join("client-ca.crt");
        std::fs::write(&client_ca, api.kubelet_client_ca_pem().expect("ca")).expect("ca");
        api.allow("group:system:masters", "*", "*");
        Double {
            dir,
            api,
            served,
            kubeconfig,
            client_ca,
        }
    }
}
pub const IMAGE: &str = "localhost/busybox:latest";

pub fn start_agent(
    dir: &Path,
    endpoint: &str,
    kubeconfig: &Path,
    client_ca: &Path,
    node: &str,
    extra: &str,
) -> Agent {
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "nodeName: {node}\nnodeIP: 127.0.0.1\ncontainerRuntimeEndpoint: {endpoint}\n\
             healthzPort: 0\nreadOnlyPort: 0\nport: 0\nrootDir: {root}\npodLogsDir: {logs}\n\
             devicePluginDir: {root}/device-plugins\n\
             {cgroups}{resources}{extra}\
             authentication: {{x509: {{clientCAFile: {ca}}}}}\n",
            root = dir.join("root").display(),
            logs = dir.join("logs").display(),
            ca = client_ca.display(),
            // Unless the test sets its own thresholds.
            resources = if extra.contains("evictionHard") {
                ""
            } else {
                super::agent::TEST_RESOURCES
            },
            // Pod cgroups off unless the test asks for them.
            cgroups = if extra.contains("cgroupsPerQOS") {
                ""
            } else {
                "cgroupsPerQOS: false\n"
            },
        ),
    )
    .expect("config");
    let plugins = wasmlet_plugin_host::dev::shipped_plugin("source-file");
    let log = dir.join("agent.log");
    let child = Command::new(BIN)
        .args(["run", "--config"])
        .arg(&config)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env("WASMLET_PLUGIN_DIR", plugins.parent().expect("plugin dir"))
        .env("RUST_LOG", "info,wasmlet_logs=debug")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start wasmlet run");
    Agent { child, log }
}

pub async fn client_from(kubeconfig: &Path) -> kube::Client {
    let k = kube::config::Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(k, &Default::default())
        .await
        .expect("config");
    let _ = rustls::crypto::ring::default_provider().install_default();
    kube::Client::try_from(config).expect("client")
}

pub fn pod(node: &str, name: &str, restart: &str, container: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
        },
    })
}

pub fn busybox(name: &str, script: &str) -> Value {
    json!({"name": name, "image": IMAGE, "imagePullPolicy": "IfNotPresent",
           "command": ["sh", "-c", script]})
}

/// Waits until the double's copy of pod `name` satisfies `ok`; panics with the pod and
/// the agent's log otherwise.
pub async fn wait_pod(
    api: &ApiServerSim,
    agent: &Agent,
    name: &str,
    within: Duration,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let p = api.get("api/v1", "pods", "default", name);
        if let Some(p) = &p
            && ok(p)
        {
            return p.clone();
        }
        if Instant::now() > deadline {
            panic!(
                "pod {name} not as expected within {within:?}: {}\n--- agent log ---\n{}",
                p.map(|p| p["status"].to_string()).unwrap_or_default(),
                agent.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What container `container` of pod `name` (its only one: `None`) has logged.
pub async fn logs(
    pods: &kube::Api<k8s_openapi::api::core::v1::Pod>,
    name: &str,
    container: Option<&str>,
) -> String {
    let params = kube::api::LogParams {
        container: container.map(str::to_owned),
        ..Default::default()
    };
    pods.logs(name, &params)
        .await
        .unwrap_or_else(|e| panic!("logs of {name}/{}: {e}", container.unwrap_or("")))
}

pub fn phase(p: &Value) -> &str {
    p["status"]["phase"].as_str().unwrap_or("")
}

pub fn running(p: &Value) -> bool {
    p["status"]["containerStatuses"]
        .as_array()
        .is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| !c["state"]["running"].is_null()))
}

/// Removes the pods this node made from containerd (other tests share it).
pub async fn remove_pods(endpoint: &str, node: &str) {
    let Ok(cri) = CriClient::connect(endpoint).await else {
        return;
    };
    let filter = PodSandboxFilter {
        label_selector: [("wasmlet.io/node".to_owned(), node.to_owned())].into(),
        ..Default::default()
    };
    for s in cri.list_pod_sandbox(Some(filter)).await.unwrap_or_default() {
        let _ = cri.stop_pod_sandbox(&s.id).await;
        let _ = cri.remove_pod_sandbox(&s.id).await;
    }
}
