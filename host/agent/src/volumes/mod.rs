//! Volumes whose content comes from the API server or the pod itself: configMap, secret,
//! downwardAPI and projected (the `kube-api-access-…` volume every pod created through an
//! API server carries: a service account token, the cluster's CA from the
//! `kube-root-ca.crt` ConfigMap, and the namespace).
//!
//! [`prepare`] writes each such volume's files under
//! `<rootDir>/pods/<uid>/volumes/<kind>/<name>` before the pod's containers start (the
//! kubelet's mount step); mounts then bind that directory. ConfigMaps, Secrets and
//! tokens are read through a [`VolumeSource`] — the API server in cluster mode; a node
//! without one can still serve downwardAPI volumes, and names the volume that needs an
//! API server otherwise. A failure names the volume, the kubelet's way: `MountVolume.SetUp
//! failed for volume "config" : configmap "app" not found`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use k8s_openapi::api::core::v1 as k8s;

use crate::criconfig::{self, NodeContext};

/// A boxed future, for the dyn-compatible [`VolumeSource`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Keys and bytes of a ConfigMap or Secret (`None`: it does not exist).
pub type Data = Option<BTreeMap<String, Vec<u8>>>;

/// Where ConfigMaps, Secrets and service account tokens come from.
pub trait VolumeSource: Send + Sync + fmt::Debug {
    /// The ConfigMap `namespace/name` (`data` and `binaryData`).
    fn config_map<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Data, String>>;
    /// The Secret `namespace/name`.
    fn secret<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Data, String>>;
    /// A token of service account `namespace/account` bound to the pod.
    fn token<'a>(&'a self, request: &'a TokenRequest) -> BoxFuture<'a, Result<String, String>>;
}

/// What a projected service account token asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRequest {
    /// The pod's namespace.
    pub namespace: String,
    /// The service account (`spec.serviceAccountName`, `default` unless set).
    pub service_account: String,
    /// The audience, if the volume names one.
    pub audience: Option<String>,
    /// How long the token is valid.
    pub expiration_seconds: i64,
    /// The pod it is bound to.
    pub pod_name: String,
    /// The pod's UID.
    pub pod_uid: String,
}

/// Why a volume could not be set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountError {
    /// The volume.
    pub volume: String,
    /// Why.
    pub message: String,
}

impl fmt::Display for MountError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MountVolume.SetUp failed for volume \"{}\" : {}",
            self.volume, self.message
        )
    }
}

/// The directory kind (`kubernetes.io~projected`, …) of a volume this module serves.
pub fn kind(v: &k8s::Volume) -> Option<&'static str> {
    if v.projected.is_some() {
        Some("kubernetes.io~projected")
    } else if v.config_map.is_some() {
        Some("kubernetes.io~configmap")
    } else if v.secret.is_some() {
        Some("kubernetes.io~secret")
    } else if v.downward_api.is_some() {
        Some("kubernetes.io~downward-api")
    } else {
        None
    }
}

/// Where volume `v` of `pod` is written, if it is of a kind this module serves.
pub fn path(pod: &k8s::Pod, ctx: &NodeContext, v: &k8s::Volume) -> Option<PathBuf> {
    Some(
        criconfig::pod_dir(pod, ctx)
            .join("volumes")
            .join(kind(v)?)
            .join(&v.name),
    )
}

/// One file to write: relative path, content, mode.
type File = (String, Vec<u8>, i32);

/// A key selection of a ConfigMap or Secret: every key, or the items listed.
fn select(
    data: BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<k8s::KeyToPath>>,
    mode: i32,
    what: &str,
) -> Result<Vec<File>, String> {
    match items {
        None => Ok(data.into_iter().map(|(k, v)| (k, v, mode)).collect()),
        Some(items) => items
            .iter()
            .map(|i| match data.get(&i.key) {
                Some(v) => Ok((i.path.clone(), v.clone(), i.mode.unwrap_or(mode))),
                None => Err(format!("{what}: key \"{}\" not found", i.key)),
            })
            .collect(),
    }
}

/// Labels or annotations the way the downward API writes them: `key="value"` lines.
fn map_file(map: Option<&BTreeMap<String, String>>) -> String {
    map.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v:?}\n"))
        .collect()
}

fn downward(
    pod: &k8s::Pod,
    ctx: &NodeContext,
    items: &[k8s::DownwardAPIVolumeFile],
    mode: i32,
) -> Result<Vec<File>, String> {
    let mut files = Vec::new();
    for item in items {
        let value = match (&item.field_ref, &item.resource_field_ref) {
            (Some(f), _) => match f.field_path.as_str() {
                "metadata.labels" => map_file(pod.metadata.labels.as_ref()),
                "metadata.annotations" => map_file(pod.metadata.annotations.as_ref()),
                path => criconfig::field_ref(pod, path, "", ctx)
                    .ok_or_else(|| format!("unsupported fieldPath {path:?}"))?,
            },
            (None, Some(r)) => {
                let spec = crate::pod::containers(pod)
                    .iter()
                    .find(|c| Some(&c.name) == r.container_name.as_ref())
                    .or_else(|| crate::pod::containers(pod).first())
                    .ok_or("no container")?;
                criconfig::resource_ref(spec, r, &item.path, ctx).map_err(|e| e.to_string())?
            }
            (None, None) => return Err(format!("{}: no fieldRef or resourceFieldRef", item.path)),
        };
        files.push((
            item.path.clone(),
            value.into_bytes(),
            item.mode.unwrap_or(mode),
        ));
    }
    Ok(files)
}

async fn fetch(
    source: Option<&dyn VolumeSource>,
    secret: bool,
    namespace: &str,
    name: &str,
    optional: bool,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    let what = if secret { "secret" } else { "configmap" };
    let Some(source) = source else {
        return Err(format!(
            "{what} \"{name}\": this node has no API server to read it from (no kubeconfig)"
        ));
    };
    let data = if secret {
        source.secret(namespace, name).await?
    } else {
        source.config_map(namespace, name).await?
    };
    match data {
        Some(d) => Ok(Some(d)),
        None if optional => Ok(None),
        None => Err(format!("{what} \"{name}\" not found")),
    }
}

/// The files of a ConfigMap (`secret` false) or Secret: all its keys, or the items
/// listed; none for an optional one that is missing.
async fn keyed(
    source: Option<&dyn VolumeSource>,
    secret: bool,
    namespace: &str,
    name: &str,
    optional: bool,
    items: Option<&Vec<k8s::KeyToPath>>,
    mode: i32,
) -> Result<Vec<File>, String> {
    let what = if secret { "secret" } else { "configmap" };
    match fetch(source, secret, namespace, name, optional).await? {
        Some(d) => select(d, items, mode, &format!("{what} \"{name}\"")),
        None => Ok(Vec::new()),
    }
}

/// The files of volume `v`.
async fn files(
    pod: &k8s::Pod,
    ctx: &NodeContext,
    v: &k8s::Volume,
    source: Option<&dyn VolumeSource>,
) -> Result<Vec<File>, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    if let Some(c) = &v.config_map {
        let (optional, mode) = (c.optional.unwrap_or(false), c.default_mode.unwrap_or(0o644));
        return keyed(
            source,
            false,
            namespace,
            &c.name,
            optional,
            c.items.as_ref(),
            mode,
        )
        .await;
    }
    if let Some(sec) = &v.secret {
        let name = sec.secret_name.clone().unwrap_or_default();
        let (optional, mode) = (
            sec.optional.unwrap_or(false),
            sec.default_mode.unwrap_or(0o644),
        );
        return keyed(
            source,
            true,
            namespace,
            &name,
            optional,
            sec.items.as_ref(),
            mode,
        )
        .await;
    }
    if let Some(d) = &v.downward_api {
        return downward(
            pod,
            ctx,
            d.items.as_deref().unwrap_or(&[]),
            d.default_mode.unwrap_or(0o644),
        );
    }
    let Some(p) = &v.projected else {
        return Ok(Vec::new());
    };
    let mode = p.default_mode.unwrap_or(0o644);
    let mut out = Vec::new();
    for s in p.sources.iter().flatten() {
        if let Some(t) = &s.service_account_token {
            let Some(source) = source else {
                return Err("a service account token needs an API server (no kubeconfig)".into());
            };
            let request = TokenRequest {
                namespace: namespace.to_owned(),
                service_account: pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.service_account_name.clone())
                    .unwrap_or_else(|| "default".into()),
                audience: t.audience.clone().filter(|a| !a.is_empty()),
                expiration_seconds: t.expiration_seconds.unwrap_or(3600),
                pod_name: pod.metadata.name.clone().unwrap_or_default(),
                pod_uid: crate::pod::uid(pod).to_owned(),
            };
            let token = source.token(&request).await?;
            out.push((t.path.clone(), token.into_bytes(), mode));
        }
        if let Some(c) = &s.config_map {
            let optional = c.optional.unwrap_or(false);
            out.extend(
                keyed(
                    source,
                    false,
                    namespace,
                    &c.name,
                    optional,
                    c.items.as_ref(),
                    mode,
                )
                .await?,
            );
        }
        if let Some(sec) = &s.secret {
            let optional = sec.optional.unwrap_or(false);
            out.extend(
                keyed(
                    source,
                    true,
                    namespace,
                    &sec.name,
                    optional,
                    sec.items.as_ref(),
                    mode,
                )
                .await?,
            );
        }
        if let Some(d) = &s.downward_api {
            out.extend(downward(pod, ctx, d.items.as_deref().unwrap_or(&[]), mode)?);
        }
    }
    Ok(out)
}

fn write(dir: &Path, files: &[File]) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (rel, content, mode) in files {
        if rel.split('/').any(|p| p == ".." || p.is_empty()) {
            return Err(format!("{rel:?} is not a relative path inside the volume"));
        }
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        // Written beside, then renamed over: a container reading the file (a refreshed
        // token) sees the old content or the new, never half of one.
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = path.with_file_name(format!(".{name}.tmp"));
        std::fs::write(&temp, content).map_err(|e| format!("{}: {e}", temp.display()))?;
        let mode = u32::try_from(*mode & 0o777).unwrap_or(0o644);
        let _ = std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(mode));
        std::fs::rename(&temp, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// Writes every configMap, secret, downwardAPI and projected volume of `pod`.
pub async fn prepare(
    pod: &k8s::Pod,
    ctx: &NodeContext,
    source: Option<&dyn VolumeSource>,
) -> Result<(), MountError> {
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let Some(dir) = path(pod, ctx, v) else {
            continue;
        };
        let error = |message: String| MountError {
            volume: v.name.clone(),
            message,
        };
        let files = files(pod, ctx, v, source).await.map_err(error)?;
        write(&dir, &files).map_err(error)?;
    }
    Ok(())
}

/// How long after [`prepare`] the pod's volumes are written again: at 80 % of the
/// shortest service account token's life (the kubelet refreshes projected tokens
/// then); `None` without tokens (ConfigMap and Secret volumes are written once).
pub fn refresh_after(pod: &k8s::Pod) -> Option<std::time::Duration> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.projected.as_ref())
        .flat_map(|p| p.sources.iter().flatten())
        .filter_map(|s| s.service_account_token.as_ref())
        .map(|t| t.expiration_seconds.unwrap_or(3600).max(1))
        .min()
        .map(|seconds| {
            std::time::Duration::from_millis(u64::try_from(seconds).unwrap_or(3600) * 800)
        })
}

/// Whether `pod` has volumes [`prepare`] writes.
pub fn needed(pod: &k8s::Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .any(|v| kind(v).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Fake;

    impl VolumeSource for Fake {
        fn config_map<'a>(
            &'a self,
            _: &'a str,
            name: &'a str,
        ) -> BoxFuture<'a, Result<Data, String>> {
            Box::pin(async move {
                Ok((name == "kube-root-ca.crt")
                    .then(|| BTreeMap::from([("ca.crt".to_string(), b"CERT".to_vec())])))
            })
        }
        fn secret<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, Result<Data, String>> {
            Box::pin(async { Ok(None) })
        }
        fn token<'a>(&'a self, r: &'a TokenRequest) -> BoxFuture<'a, Result<String, String>> {
            Box::pin(async move { Ok(format!("token-for-{}-{}", r.service_account, r.pod_name)) })
        }
    }

    fn pod(volumes: serde_json::Value) -> k8s::Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "labels": {"app": "web"}},
            "spec": {"serviceAccountName": "builder", "containers": [{"name": "c", "image": "i"}],
                "volumes": volumes}
        }))
        .expect("pod")
    }

    fn ctx(name: &str) -> NodeContext {
        let dir =
            std::env::temp_dir().join(format!("wasmlet-volumes-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        NodeContext {
            pods_dir: dir,
            node_name: "n".into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn the_api_access_volume_gets_a_token_the_ca_and_the_namespace() {
        let p = pod(
            serde_json::json!([{"name": "kube-api-access-x", "projected": {"sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
            ]}}]),
        );
        let c = ctx("projected");
        assert!(needed(&p));
        prepare(&p, &c, Some(&Fake)).await.expect("prepared");
        let dir = path(
            &p,
            &c,
            &p.spec.as_ref().expect("spec").volumes.as_ref().expect("v")[0],
        )
        .expect("path");
        assert!(dir.ends_with("u1/volumes/kubernetes.io~projected/kube-api-access-x"));
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect(f);
        assert_eq!(read("token"), "token-for-builder-web");
        assert_eq!(read("ca.crt"), "CERT");
        assert_eq!(read("namespace"), "shop");
        assert_eq!(
            refresh_after(&p),
            Some(std::time::Duration::from_millis(3607 * 800)),
            "tokens are refreshed at 80 % of their life"
        );
        // Without an API server the token cannot be had: the volume is named.
        let err = prepare(&p, &ctx("projected-standalone"), None)
            .await
            .expect_err("no API server");
        assert!(
            err.to_string()
                .starts_with("MountVolume.SetUp failed for volume \"kube-api-access-x\" : "),
            "{err}"
        );
    }

    #[tokio::test]
    async fn missing_config_maps_are_named_and_downward_files_need_no_api_server() {
        let p = pod(serde_json::json!([{"name": "config", "configMap": {"name": "app"}}]));
        let err = prepare(&p, &ctx("missing"), Some(&Fake))
            .await
            .expect_err("missing");
        assert_eq!(
            err.to_string(),
            "MountVolume.SetUp failed for volume \"config\" : configmap \"app\" not found"
        );
        let optional = pod(
            serde_json::json!([{"name": "config", "configMap": {"name": "app", "optional": true}}]),
        );
        prepare(&optional, &ctx("optional"), Some(&Fake))
            .await
            .expect("optional");
        assert_eq!(refresh_after(&optional), None, "no token, no refresh");
        let info = pod(
            serde_json::json!([{"name": "info", "downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}]),
        );
        let c = ctx("downward");
        prepare(&info, &c, None).await.expect("downward API alone");
        let dir = c
            .pods_dir
            .join("u1/volumes/kubernetes.io~downward-api/info");
        assert_eq!(
            std::fs::read_to_string(dir.join("labels")).expect("labels"),
            "app=\"web\"\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("name")).expect("name"),
            "web"
        );
    }
}
