//! TLS bootstrap, client certificate rotation and serving certificates against the API
//! server double over HTTPS, with the CSR API as the API server and the controller
//! manager run it, set up as `kubeadm init` sets a cluster up for joining nodes: a
//! bootstrap token, and kubeadm's three ClusterRoleBindings.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use wasmlet_apiserver_sim::{ApiServerSim, Served};
use wasmlet_cluster::certificates::bootstrap;
use wasmlet_cluster::certificates::csr::{Request, obtain};
use wasmlet_cluster::certificates::store::{self, Store};
use wasmlet_cluster::certificates::{CertError, rotating_client};

mod support;

const TOKEN: &str = "abcdef.0123456789abcdef";
const TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

struct Cluster {
    api: ApiServerSim,
    served: Served,
    dir: PathBuf,
}

impl Cluster {
    /// The double over HTTPS with a bootstrap token; `approve`: kubeadm's bindings
    /// that let the controller manager approve node client certificates.
    async fn start(test: &str, approve: bool) -> Cluster {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let api = ApiServerSim::new();
        let served = api
            .serve_tls("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("serve");
        api.add_bootstrap_token("abcdef", "0123456789abcdef", &[TOKEN_GROUP]);
        let roles = "system:certificates.k8s.io:certificatesigningrequests:";
        let bind = |name: &str, role: &str, group: &str| {
            api.bind_group(name, role, group).expect("binding");
        };
        bind(
            "kubeadm:kubelet-bootstrap",
            "system:node-bootstrapper",
            TOKEN_GROUP,
        );
        if approve {
            bind(
                "kubeadm:node-autoapprove-bootstrap",
                &format!("{roles}nodeclient"),
                TOKEN_GROUP,
            );
            bind(
                "kubeadm:node-autoapprove-certificate-rotation",
                &format!("{roles}selfnodeclient"),
                "system:nodes",
            );
        }
        let dir = std::env::temp_dir().join(format!("wasmlet-certs-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let ca = api.cluster_ca_pem().expect("ca");
        wasmlet_apiserver_sim::write_bootstrap_kubeconfig(
            &dir.join("bootstrap-kubelet.conf"),
            &served.url(),
            &ca,
            TOKEN,
        )
        .expect("bootstrap kubeconfig");
        Cluster { api, served, dir }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubelet.conf")
    }

    fn store(&self) -> Store {
        Store::new(&self.dir.join("pki"), store::CLIENT)
    }

    async fn bootstrap(&self, node: &str) -> Result<bool, CertError> {
        bootstrap::ensure(
            &self.kubeconfig(),
            &self.dir.join("bootstrap-kubelet.conf"),
            &self.store(),
            node,
        )
        .await
    }

    fn csrs(&self) -> Vec<serde_json::Value> {
        self.api
            .list("apis/certificates.k8s.io/v1", "certificatesigningrequests")
    }
}

/// A client of the node with the credentials bootstrap wrote.
async fn node_client(kubeconfig: &Path) -> kube::Client {
    wasmlet_cluster::connect::client(kubeconfig)
        .await
        .expect("client")
}

#[tokio::test]
async fn a_node_joins_through_tls_bootstrap_and_restarts_without_a_new_csr() {
    let c = Cluster::start("join", true).await;
    assert!(
        c.bootstrap("node-a").await.expect("bootstrap"),
        "a CSR was made"
    );
    let csrs = c.csrs();
    assert_eq!(csrs.len(), 1);
    let csr = &csrs[0];
    assert_eq!(
        csr["spec"]["signerName"],
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert_eq!(csr["spec"]["username"], "system:bootstrap:abcdef");
    assert_eq!(
        csr["spec"]["usages"],
        json!(["digital signature", "client auth"])
    );
    assert_eq!(csr["status"]["conditions"][0]["reason"], "AutoApproved");
    // Stored as the kubelet stores it, the kubeconfig refers to it.
    let current = c.dir.join("pki/kubelet-client-current.pem");
    let meta = std::fs::symlink_metadata(&current).expect("current");
    assert!(meta.file_type().is_symlink());
    let target = std::fs::read_link(&current).expect("link");
    assert!(
        target
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("kubelet-client-2")),
        "{target:?}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&target)
            .expect("file")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    let kubeconfig = std::fs::read_to_string(c.kubeconfig()).expect("kubeconfig");
    assert!(
        kubeconfig.contains(&format!("client-certificate: {}", current.display())),
        "{kubeconfig}"
    );
    // The node acts under its own identity: it registers itself.
    let client = node_client(&c.kubeconfig()).await;
    let nodes: Api<Node> = Api::all(client);
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "node-a"}})).expect("node");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("registers");
    // A restart with a valid certificate makes no CSR.
    assert!(!c.bootstrap("node-a").await.expect("again"));
    assert_eq!(c.csrs().len(), 1);
    // Nor does one whose kubeconfig is gone while the stored certificate is valid.
    std::fs::remove_file(c.kubeconfig()).expect("rm");
    assert!(!c.bootstrap("node-a").await.expect("from the store"));
    assert!(bootstrap::usable(&c.kubeconfig()));
    assert_eq!(c.csrs().len(), 1);
    drop(c.served);
}

#[tokio::test]
async fn an_expired_certificate_at_start_bootstraps_again() {
    let c = Cluster::start("expired", true).await;
    let now = SystemTime::now();
    let day = Duration::from_secs(86_400);
    let (cert, key) = c
        .api
        .issue_client_certificate(
            "system:node:node-b",
            &["system:nodes"],
            now - 2 * day,
            now - day,
        )
        .expect("expired");
    c.store().save(&cert, &key).expect("stored");
    let ca = c.api.cluster_ca_pem().expect("ca");
    let file = c.dir.join("pki/kubelet-client-current.pem");
    std::fs::write(
        c.kubeconfig(),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: k\n  cluster:\n    server: {}\n    certificate-authority-data: {}\ncontexts:\n- name: k\n  context: {{cluster: k, user: u}}\ncurrent-context: k\nusers:\n- name: u\n  user:\n    client-certificate: {f}\n    client-key: {f}\n",
            c.served.url(),
            base64_encode(&ca),
            f = file.display()
        ),
    )
    .expect("kubeconfig");
    assert!(!bootstrap::usable(&c.kubeconfig()));
    assert!(c.bootstrap("node-b").await.expect("bootstrap"));
    assert!(bootstrap::usable(&c.kubeconfig()));
    assert_eq!(c.csrs().len(), 1);
}

fn base64_encode(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test]
async fn a_denied_csr_is_an_error_with_the_apis_reason() {
    let c = Cluster::start("denied", false).await;
    let boot = node_client(&c.dir.join("bootstrap-kubelet.conf")).await;
    let wait = tokio::spawn(async move {
        obtain(&boot, &Request::client("node-c"), Duration::from_secs(30)).await
    });
    // Nobody approves it (no autoapprove binding): an admin denies it.
    let name = loop {
        if let Some(csr) = c.csrs().first() {
            assert!(csr["status"]["conditions"].is_null(), "not approved: {csr}");
            break csr["metadata"]["name"].as_str().expect("name").to_owned();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let admin = admin_client(&c).await;
    let csrs: Api<CertificateSigningRequest> = Api::all(admin);
    let deny = json!({"status": {"conditions": [{
        "type": "Denied", "status": "True", "reason": "KubectlDeny",
        "message": "This CSR was denied by kubectl certificate deny.",
    }]}});
    let patch = kube::api::Patch::Merge(&deny);
    csrs.patch_approval(&name, &kube::api::PatchParams::default(), &patch)
        .await
        .expect("deny");
    let e = wait.await.expect("task").expect_err("denied");
    assert!(matches!(e, CertError::Refused { .. }), "{e}");
    assert!(e.to_string().contains("Denied: KubectlDeny"), "{e}");
}

/// A cluster admin: a client certificate in `system:masters`.
async fn admin_client(c: &Cluster) -> kube::Client {
    let now = SystemTime::now();
    let (cert, key) = c
        .api
        .issue_client_certificate(
            "kubernetes-admin",
            &["system:masters"],
            now,
            now + Duration::from_secs(3600),
        )
        .expect("admin");
    let ca = c.api.cluster_ca_pem().expect("ca");
    let path = c.dir.join("admin.conf");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: k\n  cluster:\n    server: {}\n    certificate-authority-data: {}\ncontexts:\n- name: k\n  context: {{cluster: k, user: u}}\ncurrent-context: k\nusers:\n- name: u\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
            c.served.url(),
            base64_encode(&ca),
            base64_encode(&cert),
            base64_encode(&key)
        ),
    )
    .expect("admin.conf");
    node_client(&path).await
}

/// `kubeadm init` writes the control-plane node's `kubelet.conf` with its client
/// certificate inline. As the kubelet's certificate manager, the node stores it as its
/// first client certificate (`kubelet-client-current.pem`, which kubeadm's
/// kubelet-finalize phase looks for) and renews it through a CSR at once; kubelet.conf
/// then pointed at the store (what kubelet-finalize writes) works, and a restart adopts
/// nothing again.
#[tokio::test]
async fn an_embedded_client_certificate_is_stored_and_renewed_at_once() {
    let c = Cluster::start("embedded", true).await;
    let now = SystemTime::now();
    let (cert, key) = c
        .api
        .issue_client_certificate(
            "system:node:cp-1",
            &["system:nodes"],
            now - Duration::from_secs(60),
            now + Duration::from_secs(365 * 86_400),
        )
        .expect("kubeadm's certificate");
    let ca = c.api.cluster_ca_pem().expect("ca");
    let kubeconfig = |user: String| {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: k\n  cluster:\n    server: {}\n    certificate-authority-data: {}\ncontexts:\n- name: system:node:cp-1@k\n  context: {{cluster: k, user: system:node:cp-1}}\ncurrent-context: system:node:cp-1@k\nusers:\n- name: system:node:cp-1\n  user:\n{user}",
            c.served.url(),
            base64_encode(&ca),
        )
    };
    std::fs::write(
        c.kubeconfig(),
        kubeconfig(format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            base64_encode(&cert),
            base64_encode(&key)
        )),
    )
    .expect("kubelet.conf");
    assert!(bootstrap::embeds_certificate(&c.kubeconfig()));
    let in_use = bootstrap::kubeconfig_certificate(&c.kubeconfig()).expect("reads");
    let adopted =
        wasmlet_cluster::certificates::adopt_embedded(&c.kubeconfig(), in_use.as_ref(), &c.store())
            .expect("adopt")
            .expect("stored");
    assert_eq!(adopted.cert_pem, cert);
    let current = c.dir.join("pki/kubelet-client-current.pem");
    let target = std::fs::read_link(&current).expect("a link to the stored pair");
    assert!(
        target
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("kubelet-client-2") && n.ends_with(".pem")),
        "{target:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&current).expect("current"),
        format!("{cert}{key}")
    );
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let _client = rotating_client(
        &c.kubeconfig(),
        &adopted,
        c.store(),
        "cp-1",
        None,
        true,
        stopped,
    )
    .await
    .expect("client");
    // Renewed now, not at 70-90 % of a year: a CSR by the node itself, approved through
    // selfnodeclient, its certificate stored.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let renewed = loop {
        // The stored file holds the certificate, then its key.
        if let Some(p) = c.store().current()
            && !p.cert_pem.starts_with(&cert)
        {
            break p;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not renewed: {:?}",
            c.csrs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(c.csrs()[0]["spec"]["username"], "system:node:cp-1");
    stop.cancel();
    // kubelet-finalize points kubelet.conf at the store: that works, and is no longer
    // adopted from.
    let file = current.display();
    std::fs::write(
        c.kubeconfig(),
        kubeconfig(format!(
            "    client-certificate: {file}\n    client-key: {file}\n"
        )),
    )
    .expect("finalized kubelet.conf");
    assert!(!bootstrap::embeds_certificate(&c.kubeconfig()));
    let in_use = bootstrap::kubeconfig_certificate(&c.kubeconfig()).expect("reads");
    assert!(
        wasmlet_cluster::certificates::adopt_embedded(&c.kubeconfig(), in_use.as_ref(), &c.store())
            .expect("adopt")
            .is_none()
    );
    assert_eq!(
        bootstrap::kubeconfig_certificate(&c.kubeconfig())
            .expect("reads")
            .expect("a certificate")
            .not_after,
        renewed.not_after
    );
    let nodes: Api<Node> = Api::all(node_client(&c.kubeconfig()).await);
    nodes
        .list(&ListParams::default())
        .await
        .expect("the finalized kubelet.conf works");
}

#[tokio::test]
async fn the_client_certificate_rotates_and_new_connections_use_it() {
    let c = Cluster::start("rotate", true).await;
    c.api.set_signing_duration(Duration::from_secs(4));
    c.api.set_signing_backdate(Duration::ZERO);
    assert!(c.bootstrap("node-d").await.expect("bootstrap"));
    let first = c.store().current().expect("first");
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let client = rotating_client(
        &c.kubeconfig(),
        &first,
        c.store(),
        "node-d",
        None,
        false,
        stopped,
    )
    .await
    .expect("client");
    // Within 90 % of 4 s a second CSR, made by the node itself, approved through
    // selfnodeclient.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let second = loop {
        let csrs = c.csrs();
        if let Some(csr) = csrs.iter().find(|c| {
            c["spec"]["username"] == "system:node:node-d" && !c["status"]["certificate"].is_null()
        }) {
            break csr.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no rotation: {csrs:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        second["status"]["conditions"][0]["message"],
        "Auto approving self kubelet client certificate after SubjectAccessReview."
    );
    // Wait for the new pair to be stored; then the old one expires and the client
    // still works on new connections.
    let renewed = loop {
        let now = c.store().current().expect("current");
        if now.not_after != first.not_after {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tokio::time::sleep(
        first
            .not_after
            .duration_since(SystemTime::now())
            .unwrap_or_default()
            + Duration::from_millis(500),
    )
    .await;
    assert!(renewed.not_after > first.not_after);
    let nodes: Api<Node> = Api::all(client);
    nodes
        .list(&ListParams::default())
        .await
        .expect("works after the first certificate expired");
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotating_node_keeps_its_watches_and_loses_no_status_update() {
    let c = Cluster::start("rotating-node", true).await;
    // Certificates of 3 s (no backdating): renewed every 2.1-2.7 s, each expiring while
    // connections made with it may still be open.
    c.api.set_signing_duration(Duration::from_secs(3));
    c.api.set_signing_backdate(Duration::ZERO);
    let name = "node-rotating-node";
    assert!(c.bootstrap(name).await.expect("bootstrap"));
    let first = c.store().current().expect("first");
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let client = rotating_client(
        &c.kubeconfig(),
        &first,
        c.store(),
        name,
        None,
        false,
        stopped,
    )
    .await
    .expect("client");
    let timing = wasmlet_cluster::node::Timing {
        update: Duration::from_millis(300),
        report: Duration::from_millis(600),
        lease_seconds: 1,
    };
    let Cluster {
        api,
        served,
        dir: _,
    } = c;
    let addr = served.addr;
    let node = support::Node::start_on(
        "rotating-node",
        api.clone(),
        (Some(served), addr),
        client,
        timing,
    )
    .await;
    let ready = |n: &serde_json::Value| {
        n["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
    };
    let started = tokio::time::Instant::now();
    while !api
        .get("api/v1", "nodes", "", name)
        .is_some_and(|n| ready(&n))
    {
        assert!(started.elapsed() < Duration::from_secs(10), "not Ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let node_watches = |api: &ApiServerSim| -> Vec<String> {
        let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
        api.watches_started()
            .into_iter()
            .filter(|w| w != csrs)
            .collect()
    };
    let watches = node_watches(&api);
    // Three certificates' lives: the first expires, two more are issued.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        api.failed_requests(),
        Vec::new(),
        "no request refused for its credentials"
    );
    assert_eq!(node_watches(&api), watches, "no watch started again");
    let renewed: Vec<_> = api
        .list("apis/certificates.k8s.io/v1", "certificatesigningrequests")
        .into_iter()
        .filter(|c| {
            c["spec"]["username"] == format!("system:node:{name}").as_str()
                && !c["status"]["certificate"].is_null()
        })
        .collect();
    assert!(renewed.len() >= 2, "{} rotations", renewed.len());
    // The lease was renewed after the first certificate expired, and the node is Ready.
    let lease = api
        .get(
            "apis/coordination.k8s.io/v1",
            "leases",
            "kube-node-lease",
            name,
        )
        .expect("lease");
    let renew_time = lease["spec"]["renewTime"].as_str().expect("renewTime");
    let expired = wasmlet_cluster::certificates::store::rfc3339(first.not_after);
    assert!(
        renew_time[..19] > expired[..19],
        "{renew_time} after {expired}"
    );
    assert!(
        api.get("api/v1", "nodes", "", name)
            .is_some_and(|n| ready(&n))
    );
    stop.cancel();
    drop(node);
}
