//! The binary in the kubelet's place on a kubeadm node, against the API server double
//! over HTTPS set up as `kubeadm init` sets a cluster up for joining nodes (a bootstrap
//! token, kubeadm's three ClusterRoleBindings): run as `kubelet` with kubeadm's flags
//! and the KubeletConfiguration kubeadm writes, the node joins through TLS bootstrap
//! under its own identity, asks for a serving certificate that port 10250 serves once
//! an admin approves it, and a restart makes no new client CSR.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmlet_apiserver_sim::ApiServerSim;
use wasmlet_cri_sim::{SimServer, Simulator};

const BIN: &str = env!("CARGO_BIN_EXE_wasmlet");
const TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
const CSRS: &str = "apis/certificates.k8s.io/v1";

#[path = "support/agent.rs"]
mod agent;
use agent::Agent;

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wasmlet-kubeadm-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

/// What `kubeadm init` leaves for joining nodes.
fn kubeadm_init(api: &ApiServerSim) {
    api.add_bootstrap_token("abcdef", "0123456789abcdef", &[TOKEN_GROUP]);
    let csr = "system:certificates.k8s.io:certificatesigningrequests:";
    for (name, role, group) in [
        (
            "kubeadm:kubelet-bootstrap",
            "system:node-bootstrapper".to_owned(),
            TOKEN_GROUP,
        ),
        (
            "kubeadm:node-autoapprove-bootstrap",
            format!("{csr}nodeclient"),
            TOKEN_GROUP,
        ),
        (
            "kubeadm:node-autoapprove-certificate-rotation",
            format!("{csr}selfnodeclient"),
            "system:nodes",
        ),
    ] {
        api.bind_group(name, &role, group).expect("binding");
    }
}

/// kubeadm's /var/lib/kubelet/config.yaml (1.28), with this test's paths and free
/// ports, and `serverTLSBootstrap: true`.
fn kubeadm_config(dir: &Path) -> String {
    let kubeadm = include_str!("fixtures/kubeadm/config.yaml");
    let mut file: serde_yaml_ng::Mapping = serde_yaml_ng::from_str(kubeadm).expect("fixture");
    let root = dir.join("root");
    let ours = format!(
        "authentication: {{anonymous: {{enabled: false}}, webhook: {{cacheTTL: 0s, enabled: true}}, \
         x509: {{clientCAFile: {ca}}}}}\nhealthzPort: 0\nreadOnlyPort: 0\nport: 0\n\
         rootDir: {root}\npodLogsDir: {root}/pod-logs\nserverTLSBootstrap: true\n\
         devicePluginDir: {root}/device-plugins\n\
         staticPodPath: {manifests}\n{resources}",
        ca = dir.join("pki/ca.crt").display(),
        root = root.display(),
        manifests = dir.join("manifests").display(),
        resources = agent::TEST_RESOURCES,
    );
    let ours: serde_yaml_ng::Mapping = serde_yaml_ng::from_str(&ours).expect("overrides");
    file.extend(ours);
    serde_yaml_ng::to_string(&file).expect("yaml")
}

/// `kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS`, the
/// binary called through a `kubelet` symlink, with `KUBELET_EXTRA_ARGS` [`EXTRA`].
fn start_kubelet(dir: &Path, endpoint: &str, run: usize) -> Agent {
    start_kubelet_with(dir, endpoint, run, EXTRA)
}

/// `KUBELET_EXTRA_ARGS`: kubeadm writes `cgroupDriver: systemd`; this machine runs no
/// systemd and its containerd uses cgroupfs (the kubelet needs the same flag here).
const EXTRA: &[&str] = &["--cgroup-driver=cgroupfs"];

fn start_kubelet_with(dir: &Path, endpoint: &str, run: usize, extra: &[&str]) -> Agent {
    let kubelet = dir.join("bin/kubelet");
    if !kubelet.exists() {
        std::fs::create_dir_all(dir.join("bin")).expect("bin");
        std::os::unix::fs::symlink(BIN, &kubelet).expect("symlink");
    }
    let log = dir.join(format!("kubelet-{run}.log"));
    let child = Command::new(&kubelet)
        .arg(format!(
            "--bootstrap-kubeconfig={}",
            dir.join("bootstrap-kubelet.conf").display()
        ))
        .arg(format!(
            "--kubeconfig={}",
            dir.join("kubelet.conf").display()
        ))
        .arg(format!("--config={}", dir.join("config.yaml").display()))
        .arg(format!("--container-runtime-endpoint={endpoint}"))
        .arg("--pod-infra-container-image=registry.k8s.io/pause:3.9")
        .arg("--hostname-override=worker-1")
        .arg("--node-ip=127.0.0.1")
        .arg("--v=2")
        .args(extra)
        .env(
            "WASMLET_PLUGIN_DIR",
            wasmlet_plugin_host::dev::shipped_plugin("source-file")
                .parent()
                .expect("dir"),
        )
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start kubelet");
    Agent { child, log }
}

fn ready(node: &Value) -> bool {
    node["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn csrs(api: &ApiServerSim, signer: &str) -> Vec<Value> {
    api.list(CSRS, "certificatesigningrequests")
        .into_iter()
        .filter(|c| c["spec"]["signerName"] == signer)
        .collect()
}

async fn wait_for<T>(what: &str, agent: &Agent, mut f: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{what} within 20 s\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A TLS handshake with the kubelet server at `port`, verified against the cluster CA
/// for `name`.
async fn handshake(ca_pem: &str, port: u16, name: &str) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(c.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let server =
        rustls::pki_types::ServerName::try_from(name.to_owned()).map_err(|e| e.to_string())?;
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(server, stream)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A control plane as `kubeadm init` leaves it for joining nodes, served over HTTPS,
/// and a node's directory as `kubeadm join` leaves it: the cluster CA, the bootstrap
/// kubeconfig with a bootstrap token, kubeadm's KubeletConfiguration.
struct Joining {
    api: ApiServerSim,
    _served: wasmlet_apiserver_sim::Served,
    dir: PathBuf,
    ca: String,
}

async fn joining(name: &str) -> Joining {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let api = ApiServerSim::new();
    let served = api
        .serve_tls("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    kubeadm_init(&api);
    let dir = tempdir(name);
    let ca = api.cluster_ca_pem().expect("ca");
    std::fs::create_dir_all(dir.join("pki")).expect("pki");
    std::fs::create_dir_all(dir.join("manifests")).expect("manifests");
    std::fs::write(dir.join("pki/ca.crt"), &ca).expect("ca.crt");
    wasmlet_apiserver_sim::write_bootstrap_kubeconfig(
        &dir.join("bootstrap-kubelet.conf"),
        &served.url(),
        &ca,
        "abcdef.0123456789abcdef",
    )
    .expect("bootstrap-kubelet.conf");
    std::fs::write(dir.join("config.yaml"), kubeadm_config(&dir)).expect("config.yaml");
    Joining {
        api,
        _served: served,
        dir,
        ca,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeadm_node_joins_through_tls_bootstrap_with_kubeadms_flags_and_file() {
    let Joining {
        api,
        _served,
        dir,
        ca,
    } = joining("join").await;
    let runtime = SimServer::serve(Simulator::new(), &dir.join("cri.sock"))
        .await
        .expect("simulator");
    let agent = start_kubelet(&dir, &runtime.endpoint(), 1);
    // The node joins under its own identity and is Ready.
    let node = wait_for("node worker-1 Ready", &agent, || {
        api.get("api/v1", "nodes", "", "worker-1").filter(ready)
    })
    .await;
    let client = csrs(&api, "kubernetes.io/kube-apiserver-client-kubelet");
    assert_eq!(client.len(), 1, "{client:?}");
    assert_eq!(client[0]["spec"]["username"], "system:bootstrap:abcdef");
    assert!(dir.join("root/pki/kubelet-client-current.pem").exists());
    assert!(dir.join("kubelet.conf").exists());
    // A kubelet-serving CSR for the node's names and address; until an admin approves
    // it the server has no certificate.
    let serving = wait_for("a kubelet-serving CSR", &agent, || {
        csrs(&api, "kubernetes.io/kubelet-serving")
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(
        serving["spec"]["username"], "system:node:worker-1",
        "asked by the node itself"
    );
    assert!(
        serving["status"]["conditions"].is_null(),
        "not approved automatically"
    );
    let port = u16::try_from(
        node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
            .as_i64()
            .expect("port"),
    )
    .expect("port");
    assert!(
        handshake(&ca, port, "worker-1").await.is_err(),
        "no certificate before approval"
    );
    let name = serving["metadata"]["name"].as_str().expect("name");
    api.approve_csr(name).expect("approve");
    wait_for("the serving certificate", &agent, || {
        dir.join("root/pki/kubelet-server-current.pem")
            .exists()
            .then_some(())
    })
    .await;
    let started = Instant::now();
    while let Err(e) = handshake(&ca, port, "worker-1").await {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "10250 serves the cluster's certificate: {e}\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A restart with a valid certificate makes no new client CSR.
    drop(agent);
    let again = start_kubelet(&dir, &runtime.endpoint(), 2);
    wait_for("the restarted node's lease renewed", &again, || {
        again
            .log()
            .contains("cluster mode: registering the node")
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        csrs(&api, "kubernetes.io/kube-apiserver-client-kubelet").len(),
        1,
        "{}",
        again.log()
    );
    assert_eq!(
        csrs(&api, "kubernetes.io/kubelet-serving").len(),
        1,
        "the issued serving certificate is reused"
    );
    let log = again.log();
    assert!(
        !log.contains("not implemented by wasmlet"),
        "kubeadm's file passes quietly:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_systemd_kubeadms_cgroup_driver_stops_the_start_naming_the_field() {
    if Path::new("/run/systemd/system").exists() {
        eprintln!("skipped: systemd runs here");
        return;
    }
    let Joining {
        api, _served, dir, ..
    } = joining("no-systemd").await;
    let mut agent = start_kubelet_with(&dir, "unix:///nonexistent.sock", 1, &[]);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = agent.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "still running\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!status.success());
    let log = agent.log();
    assert!(
        log.contains("cgroupDriver: systemd: cannot reach systemd over D-Bus"),
        "{log}"
    );
    assert!(
        csrs(&api, "kubernetes.io/kube-apiserver-client-kubelet").is_empty(),
        "nothing asked of the cluster first"
    );
}
