//! The kubelet's mount step for the volumes the node makes itself: emptyDir, and those
//! whose content comes from the API server or the pod — configMap, secret, downwardAPI
//! and projected (the `kube-api-access-…` volume every pod created through an API server
//! carries: a service account token, the cluster's CA from the `kube-root-ca.crt`
//! ConfigMap, and the namespace).
//!
//! [`prepare`] runs before the pod's containers start and again on every sync of the
//! pod, as the kubelet remounts these volumes on every sync: content volumes are
//! gathered (`content`) and written the kubelet's atomic way ([`atomic`]) under
//! `<rootDir>/pods/<uid>/volumes/<kind>/<name>` when they differ from what is there — so
//! a changed ConfigMap or Secret, an optional one created later, or new labels and
//! annotations reach the running containers. emptyDirs are made once ([`empty_dir`]: 0777,
//! tmpfs for `medium: Memory`). The pod's `fsGroup` is applied to each ([`ownership`]).
//! ConfigMaps, Secrets and tokens are read through a [`VolumeSource`] — in cluster mode a
//! watch-backed cache of the objects the node's pods reference, which also says which
//! pods to sync at once when one of them changes. A node without an API server can
//! still serve downwardAPI and emptyDir volumes, and names the volume that needs one
//! otherwise. A failure names the volume, the kubelet's way: `MountVolume.SetUp failed
//! for volume "config" : configmap "app" not found`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use k8s_openapi::api::core::v1 as k8s;

use crate::criconfig::NodeContext;
use crate::lookup::LookupError;
pub use error::{PathError, VolumeError};

pub mod atomic;
mod content;
pub mod empty_dir;
mod error;
pub mod ownership;

pub use crate::criconfig::BoxFuture;
/// Where a volume of a kind this module serves is written, and its directory kind: the
/// pod's configuration names the paths, this module fills them.
pub use crate::criconfig::{managed_volume_kind as kind, managed_volume_path as path};

/// Keys and bytes of a ConfigMap or Secret (`None`: it does not exist).
pub type Data = Option<BTreeMap<String, Vec<u8>>>;

/// A ConfigMap or Secret a pod's volumes project.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// A Secret (else a ConfigMap).
    pub secret: bool,
    /// Its namespace (the pod's).
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// Where ConfigMaps, Secrets and service account tokens come from.
pub trait VolumeSource: Send + Sync + fmt::Debug {
    /// The ConfigMap `namespace/name` (`data` and `binaryData`).
    fn config_map<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Data, LookupError>>;
    /// The Secret `namespace/name`.
    fn secret<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Data, LookupError>>;
    /// A token of service account `namespace/account` bound to the pod.
    fn token<'a>(&'a self, request: &'a TokenRequest)
    -> BoxFuture<'a, Result<String, LookupError>>;
    /// The objects pod `uid`'s volumes project now (replacing what it said before): a
    /// source that caches keeps these current.
    fn register_pod(&self, uid: &str, refs: BTreeSet<ObjectRef>) {
        let _ = (uid, refs);
    }
    /// Pod `uid` is gone: its objects need not be kept for it.
    fn unregister_pod(&self, uid: &str) {
        let _ = uid;
    }
    /// UIDs of registered pods one of whose objects changed (`None`: this source does
    /// not tell; the pods' periodic syncs pick changes up).
    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        None
    }
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

/// Why a volume could not be set up, in the kubelet's words.
#[derive(Debug, thiserror::Error)]
#[error("MountVolume.SetUp failed for volume \"{volume}\" : {cause}")]
pub struct MountError {
    /// The volume.
    pub volume: String,
    /// Why.
    #[source]
    pub cause: VolumeError,
}

/// The ConfigMaps and Secrets `pod`'s volumes project.
pub fn references(pod: &k8s::Pod) -> BTreeSet<ObjectRef> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let object = |secret: bool, name: &str| ObjectRef {
        secret,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    };
    let mut out = BTreeSet::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        if let Some(c) = &v.config_map {
            out.insert(object(false, &c.name));
        }
        if let Some(name) = v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) {
            out.insert(object(true, name));
        }
        for s in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(c) = &s.config_map {
                out.insert(object(false, &c.name));
            }
            if let Some(sec) = &s.secret {
                out.insert(object(true, &sec.name));
            }
        }
    }
    out
}

/// Sets up every volume of `pod` the node makes, or brings it up to date; the names
/// of the content volumes that were (re)written. Service account tokens already written
/// are kept unless `refresh_tokens`.
pub async fn prepare(
    pod: &k8s::Pod,
    ctx: &NodeContext,
    source: Option<&dyn VolumeSource>,
    refresh_tokens: bool,
) -> Result<Vec<String>, MountError> {
    // Content volumes are walked whatever the pod's fsGroupChangePolicy (as the
    // kubelet's secret, configMap, downwardAPI and projected plugins do): only a new
    // version is, and it is new throughout.
    let owner = ownership::Ownership::of(pod, true).map(|o| ownership::Ownership {
        on_root_mismatch: false,
        ..o
    });
    let mut written = Vec::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let error = |cause: VolumeError| MountError {
            volume: v.name.clone(),
            cause,
        };
        if v.empty_dir.is_some() {
            empty_dir::set_up(pod, ctx, v).map_err(error)?;
            continue;
        }
        let Some(dir) = path(pod, ctx, v) else {
            continue;
        };
        let gather = content::Gather {
            pod,
            ctx,
            source,
            dir: &dir,
            refresh_tokens,
            fs_group: owner.is_some(),
        };
        let payload = gather.payload(v).await.map_err(error)?;
        if atomic::write(&dir, &payload, owner.as_ref()).map_err(error)? {
            written.push(v.name.clone());
        }
    }
    Ok(written)
}

/// Takes a stopped pod's directory away: its tmpfs volumes unmounted first (a mount
/// left would keep its memory and fail the removal), then everything under it. The
/// mounts that could not be taken down are named.
pub fn remove_pod_dir(dir: &Path) -> Result<(), VolumeError> {
    let failed = empty_dir::unmount_all(dir);
    if let Some((path, source)) = failed.into_iter().next() {
        return Err(VolumeError::Unmount { path, source });
    }
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(error::at(dir)(e)),
    }
}

/// Takes a terminated pod's volumes away — tmpfs unmounted, then every volume the node
/// made removed — as the kubelet's volume manager does once a pod's containers can no
/// longer run, while the pod itself stays (a finished pod until it is deleted).
pub fn tear_down(pod_dir: &Path) -> Result<(), VolumeError> {
    remove_pod_dir(&pod_dir.join("volumes"))
}

/// How long after a token was requested it is requested again: at 80 % of the shortest
/// service account token's life (the kubelet refreshes projected tokens then); `None`
/// without tokens.
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
        .any(|v| v.empty_dir.is_some() || kind(v).is_some())
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
        ) -> BoxFuture<'a, Result<Data, LookupError>> {
            Box::pin(async move {
                Ok((name == "kube-root-ca.crt")
                    .then(|| BTreeMap::from([("ca.crt".to_string(), b"CERT".to_vec())])))
            })
        }
        fn secret<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Data, LookupError>> {
            Box::pin(async { Ok(None) })
        }
        fn token<'a>(&'a self, r: &'a TokenRequest) -> BoxFuture<'a, Result<String, LookupError>> {
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
        prepare(&p, &c, Some(&Fake), false).await.expect("prepared");
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
        let err = prepare(&p, &ctx("projected-standalone"), None, false)
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
        let err = prepare(&p, &ctx("missing"), Some(&Fake), false)
            .await
            .expect_err("missing");
        assert_eq!(
            err.to_string(),
            "MountVolume.SetUp failed for volume \"config\" : configmap \"app\" not found"
        );
        let optional = pod(
            serde_json::json!([{"name": "config", "configMap": {"name": "app", "optional": true}}]),
        );
        prepare(&optional, &ctx("optional"), Some(&Fake), false)
            .await
            .expect("optional");
        assert_eq!(refresh_after(&optional), None, "no token, no refresh");
        let info = pod(
            serde_json::json!([{"name": "info", "downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}]),
        );
        let c = ctx("downward");
        prepare(&info, &c, None, false)
            .await
            .expect("downward API alone");
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

    /// A source whose objects the test changes, counting the tokens it issues.
    #[derive(Debug, Default)]
    struct Changing {
        config_maps: std::sync::Mutex<BTreeMap<String, BTreeMap<String, Vec<u8>>>>,
        tokens: std::sync::atomic::AtomicUsize,
    }

    impl Changing {
        fn set(&self, name: &str, data: &[(&str, &str)]) {
            let data = data
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
                .collect();
            self.config_maps
                .lock()
                .expect("lock")
                .insert(name.to_owned(), data);
        }
    }

    impl VolumeSource for Changing {
        fn config_map<'a>(
            &'a self,
            _: &'a str,
            name: &'a str,
        ) -> BoxFuture<'a, Result<Data, LookupError>> {
            let found = self.config_maps.lock().expect("lock").get(name).cloned();
            Box::pin(async move { Ok(found) })
        }
        fn secret<'a>(
            &'a self,
            ns: &'a str,
            name: &'a str,
        ) -> BoxFuture<'a, Result<Data, LookupError>> {
            self.config_map(ns, name)
        }
        fn token<'a>(&'a self, _: &'a TokenRequest) -> BoxFuture<'a, Result<String, LookupError>> {
            let n = self
                .tokens
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async move { Ok(format!("token-{n}")) })
        }
    }

    #[tokio::test]
    async fn volumes_follow_their_config_maps_and_an_optional_one_created_later() {
        let source = Changing::default();
        let p = pod(serde_json::json!([
            {"name": "config", "configMap": {"name": "app"}},
            {"name": "later", "projected": {"sources": [{"configMap": {"name": "opt", "optional": true}}]}}]));
        let c = ctx("follow");
        source.set("app", &[("mode", "a"), ("old", "x")]);
        assert_eq!(
            prepare(&p, &c, Some(&source), false).await.expect("first"),
            ["config", "later"]
        );
        let dir = c.pods_dir.join("u1/volumes/kubernetes.io~configmap/config");
        let later = c.pods_dir.join("u1/volumes/kubernetes.io~projected/later");
        let read = |d: &Path, f: &str| std::fs::read_to_string(d.join(f)).ok();
        assert_eq!(read(&dir, "mode").as_deref(), Some("a"));
        assert!(
            read(&later, "k").is_none(),
            "an optional source that is missing: no files"
        );
        assert!(
            prepare(&p, &c, Some(&source), false)
                .await
                .expect("again")
                .is_empty(),
            "nothing changed, nothing written"
        );
        source.set("app", &[("mode", "b")]);
        source.set("opt", &[("k", "v")]);
        assert_eq!(
            prepare(&p, &c, Some(&source), false)
                .await
                .expect("changed"),
            ["config", "later"]
        );
        assert_eq!(read(&dir, "mode").as_deref(), Some("b"));
        assert!(read(&dir, "old").is_none(), "a key gone is removed");
        assert_eq!(
            read(&later, "k").as_deref(),
            Some("v"),
            "the optional source, once created"
        );
    }

    #[tokio::test]
    async fn downward_files_follow_labels_and_tokens_are_kept_until_due() {
        let source = Changing::default();
        let mut p = pod(
            serde_json::json!([{"name": "info", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token"}},
            {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}}]),
        );
        let c = ctx("labels");
        prepare(&p, &c, Some(&source), false).await.expect("first");
        let dir = c.pods_dir.join("u1/volumes/kubernetes.io~projected/info");
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect(f);
        assert_eq!(read("labels"), "app=\"web\"\n");
        p.metadata.labels = Some([("app".to_owned(), "shop".to_owned())].into());
        assert_eq!(
            prepare(&p, &c, Some(&source), false).await.expect("labels"),
            ["info"]
        );
        assert_eq!(read("labels"), "app=\"shop\"\n");
        assert_eq!(read("token"), "token-0", "the token written before is kept");
        prepare(&p, &c, Some(&source), true).await.expect("refresh");
        assert_eq!(read("token"), "token-1", "a refresh asks for a new one");
        assert_eq!(source.tokens.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_fs_group_owns_the_files_with_group_read() {
        use std::os::unix::fs::MetadataExt;
        let source = Changing::default();
        source.set("creds", &[("user", "admin")]);
        let mut p = pod(serde_json::json!([
            {"name": "s", "projected": {"defaultMode": 0o440, "sources": [
                {"secret": {"name": "creds"}}, {"serviceAccountToken": {"path": "token"}}]}},
            {"name": "scratch", "emptyDir": {}}]));
        let c = ctx("fsgroup");
        let plain = c
            .pods_dir
            .join("u1/volumes/kubernetes.io~empty-dir/scratch");
        prepare(&p, &ctx("fsgroup"), Some(&source), false)
            .await
            .expect("no group");
        let meta = std::fs::metadata(&plain).expect("emptyDir");
        assert_eq!(meta.mode() & 0o7777, 0o777, "emptyDir: anyone may write");
        p.spec.as_mut().expect("spec").security_context = Some(k8s::PodSecurityContext {
            fs_group: Some(1234),
            ..Default::default()
        });
        let c = ctx("fsgroup");
        prepare(&p, &c, Some(&source), false).await.expect("group");
        let dir = c.pods_dir.join("u1/volumes/kubernetes.io~projected/s");
        let meta = |f: &Path| std::fs::metadata(f).expect("meta");
        assert_eq!(meta(&dir.join("user")).gid(), 1234);
        assert_eq!(
            meta(&dir.join("user")).mode() & 0o7777,
            0o440,
            "defaultMode, group-read already"
        );
        assert_eq!(
            meta(&dir.join("token")).mode() & 0o7777,
            0o640,
            "0600, then group read"
        );
        assert_eq!(meta(&plain).gid(), 1234);
        assert_eq!(
            meta(&plain).mode() & 0o7777,
            0o2777,
            "setgid on the emptyDir"
        );
    }

    #[tokio::test]
    async fn a_memory_empty_dir_is_a_tmpfs_taken_down_with_the_pod() {
        let p = pod(
            serde_json::json!([{"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}]),
        );
        let c = ctx("tmpfs");
        prepare(&p, &c, None, false).await.expect("tmpfs");
        let dir = c.pods_dir.join("u1/volumes/kubernetes.io~empty-dir/mem");
        let fs = rustix::fs::statfs(&dir).expect("statfs");
        assert_eq!(fs.f_type, 0x0102_1994, "TMPFS_MAGIC");
        assert_eq!(
            fs.f_blocks * fs.f_bsize as u64,
            1 << 20,
            "sized by sizeLimit"
        );
        prepare(&p, &c, None, false)
            .await
            .expect("again: already mounted, not twice");
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        let dir_text = dir.to_string_lossy().into_owned();
        assert_eq!(
            mounts
                .lines()
                .filter(|l| l.contains(dir_text.as_str()))
                .count(),
            1
        );
        remove_pod_dir(&c.pods_dir.join("u1")).expect("removed");
        assert!(!c.pods_dir.join("u1").exists());
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        assert!(!mounts.contains(dir_text.as_str()), "unmounted");
    }
}
