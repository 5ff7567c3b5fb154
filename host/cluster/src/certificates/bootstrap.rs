//! TLS bootstrap, as the kubelet does it: when the kubeconfig is missing or its client
//! certificate has expired, the bootstrap kubeconfig's credentials (a bootstrap token)
//! request a client certificate for the node through a CSR; the certificate is stored
//! (`kubelet-client-current.pem`) and a kubeconfig written that refers to it. A restart
//! with a valid certificate requests nothing.

use std::path::Path;
use std::time::{Duration, SystemTime};

use base64::Engine;
use kube::config::Kubeconfig;
use serde_json::json;

use super::CertError;
use super::csr::{Request, obtain};
use super::store::{Pair, Store};

/// How long one CSR is waited for before another is posted.
const WAIT: Duration = Duration::from_secs(15 * 60);

/// The current context of `file`.
fn current_context(file: &Kubeconfig) -> Option<&kube::config::Context> {
    let name = file.current_context.as_deref().unwrap_or_default();
    file.contexts
        .iter()
        .find(|c| c.name == name)
        .and_then(|c| c.context.as_ref())
}

/// The credentials of `kubeconfig`'s current user, if it names one.
fn auth_info(path: &Path) -> Result<Option<kube::config::AuthInfo>, String> {
    let file = Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
    let user = current_context(&file).map(|c| c.user.clone().unwrap_or_default());
    Ok(file
        .auth_infos
        .into_iter()
        .find(|a| Some(&a.name) == user.as_ref())
        .and_then(|a| a.auth_info))
}

/// Whether `kubeconfig` carries its client certificate inline
/// (`client-certificate-data`), as the `kubelet.conf` of a `kubeadm init` node does.
pub fn embeds_certificate(path: &Path) -> bool {
    auth_info(path)
        .ok()
        .flatten()
        .is_some_and(|a| a.client_certificate_data.is_some())
}

/// The client certificate `kubeconfig` uses (a file or inline data), if it has one.
/// The error names the kubeconfig.
pub fn kubeconfig_certificate(path: &Path) -> Result<Option<Pair>, CertError> {
    certificate_of(path).map_err(|message| CertError::Kubeconfig {
        path: path.display().to_string(),
        message,
    })
}

/// [`kubeconfig_certificate`], its error said without the file.
fn certificate_of(path: &Path) -> Result<Option<Pair>, String> {
    let Some(auth) = auth_info(path)? else {
        return Ok(None);
    };
    let relative = |p: &str| path.parent().unwrap_or(Path::new("/")).join(p);
    let read = |file: &Option<String>, data: &Option<String>| -> Result<Option<String>, String> {
        if let Some(d) = data {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(d.trim())
                .map_err(|e| e.to_string())?;
            return Ok(Some(String::from_utf8_lossy(&bytes).into_owned()));
        }
        match file {
            Some(f) => std::fs::read_to_string(relative(f))
                .map(Some)
                .map_err(|e| format!("{f}: {e}")),
            None => Ok(None),
        }
    };
    let cert = read(&auth.client_certificate, &auth.client_certificate_data)?;
    let key_data = auth.client_key_data.as_ref().map(|s| {
        use secrecy::ExposeSecret;
        s.expose_secret().to_owned()
    });
    let key = read(&auth.client_key, &key_data)?;
    match (cert, key) {
        (Some(c), Some(k)) => Pair::parse(&c, &k).map(Some).map_err(|e| e.to_string()),
        _ => Ok(None),
    }
}

/// Whether `kubeconfig` can be used as it is: it exists and its client certificate, if
/// it has one, is valid now.
pub fn usable(kubeconfig: &Path) -> bool {
    if !kubeconfig.exists() {
        return false;
    }
    match kubeconfig_certificate(kubeconfig) {
        Ok(Some(pair)) => pair.valid_at(SystemTime::now()),
        Ok(None) => true,
        Err(e) => {
            tracing::warn!(kubeconfig = %kubeconfig.display(), "unusable client credentials: {e}");
            false
        }
    }
}

/// Writes a kubeconfig for the cluster `bootstrap` names that authenticates with the
/// certificate and key in `cert_file` (the kubelet's layout).
fn write_kubeconfig(
    kubeconfig: &Path,
    bootstrap: &Kubeconfig,
    cert_file: &Path,
) -> Result<(), CertError> {
    let cluster_name = current_context(bootstrap).map(|c| c.cluster.clone());
    let cluster = bootstrap
        .clusters
        .iter()
        .find(|c| Some(&c.name) == cluster_name.as_ref())
        .or(bootstrap.clusters.first())
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| CertError::Invalid("the bootstrap kubeconfig names no cluster".into()))?;
    let mut c = json!({"server": cluster.server});
    if let Some(ca) = &cluster.certificate_authority_data {
        c["certificate-authority-data"] = json!(ca);
    }
    if let Some(ca) = &cluster.certificate_authority {
        c["certificate-authority"] = json!(ca);
    }
    if cluster.insecure_skip_tls_verify == Some(true) {
        c["insecure-skip-tls-verify"] = json!(true);
    }
    let file = cert_file.display().to_string();
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": c}],
        "contexts": [{"name": "default-context",
                      "context": {"cluster": "default-cluster", "namespace": "default", "user": "default-auth"}}],
        "current-context": "default-context",
        "preferences": {},
        "users": [{"name": "default-auth", "user": {"client-certificate": file, "client-key": file}}],
    });
    let text = serde_yaml_ng::to_string(&doc).map_err(|e| CertError::Invalid(e.to_string()))?;
    if let Some(dir) = kubeconfig.parent() {
        std::fs::create_dir_all(dir).map_err(|e| store_error(kubeconfig, &e))?;
    }
    super::store::write_private(kubeconfig, text.as_bytes())
        .map_err(|e| store_error(kubeconfig, &e))
}

fn store_error(path: &Path, e: &std::io::Error) -> CertError {
    CertError::Store {
        dir: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Makes `kubeconfig` usable: as it is when it is; else from the stored client
/// certificate when that is still valid; else through a CSR with `bootstrap`'s
/// credentials, retried with back-off until one is issued. Returns whether a CSR was
/// made.
pub async fn ensure(
    kubeconfig: &Path,
    bootstrap: &Path,
    store: &Store,
    node: &str,
) -> Result<bool, CertError> {
    if usable(kubeconfig) {
        return Ok(false);
    }
    let bad = |message: String| CertError::Kubeconfig {
        path: bootstrap.display().to_string(),
        message,
    };
    let boot = Kubeconfig::read_from(bootstrap).map_err(|e| bad(e.to_string()))?;
    if let Some(pair) = store.current()
        && pair.valid_at(SystemTime::now())
    {
        tracing::info!(cert = %store.current_path().display(), "writing a kubeconfig for the stored client certificate");
        write_kubeconfig(kubeconfig, &boot, &store.current_path())?;
        return Ok(false);
    }
    let client = crate::connect::client(bootstrap).await?;
    let mut delay = Duration::from_secs(2);
    loop {
        match obtain(&client, &Request::client(node), WAIT).await {
            Ok((cert, key)) => {
                let pair = store.save(&cert, &key)?;
                write_kubeconfig(kubeconfig, &boot, &store.current_path())?;
                tracing::info!(
                    kubeconfig = %kubeconfig.display(),
                    expires = %super::store::rfc3339(pair.not_after),
                    "TLS bootstrap: client certificate issued"
                );
                return Ok(true);
            }
            Err(e) => {
                tracing::warn!("TLS bootstrap: {e}; trying again in {delay:?}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(60));
            }
        }
    }
}
