//! What a configMap, secret, downwardAPI or projected volume holds: its payload, from the
//! [`VolumeSource`] and the pod itself.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1 as k8s;

use super::atomic::{DATA_DIR, FileProjection, Payload};
use super::error::VolumeError;
use super::{TokenRequest, VolumeSource};
use crate::criconfig::{self, NodeContext};

/// How the payload is made.
pub(super) struct Gather<'a> {
    pub pod: &'a k8s::Pod,
    pub ctx: &'a NodeContext,
    pub source: Option<&'a dyn VolumeSource>,
    /// The volume's directory: a service account token already written there is kept
    /// unless `refresh_tokens`.
    pub dir: &'a Path,
    pub refresh_tokens: bool,
    /// The pod has an `fsGroup` (tokens are then 0600, and group-readable once owned).
    pub fs_group: bool,
}

fn add(out: &mut Payload, path: &str, data: Vec<u8>, mode: i32) {
    let mode = u32::try_from(mode & 0o7777).unwrap_or(0o644);
    out.insert(path.to_owned(), FileProjection { data, mode });
}

impl Gather<'_> {
    fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or("default")
    }

    /// The payload of volume `v`.
    pub async fn payload(&self, v: &k8s::Volume) -> Result<Payload, VolumeError> {
        let mut out = Payload::new();
        if let Some(c) = &v.config_map {
            let mode = c.default_mode.unwrap_or(0o644);
            let items = c.items.as_ref();
            self.keyed(&mut out, false, &c.name, c.optional, items, mode)
                .await?;
        } else if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let mode = s.default_mode.unwrap_or(0o644);
            self.keyed(&mut out, true, &name, s.optional, s.items.as_ref(), mode)
                .await?;
        } else if let Some(d) = &v.downward_api {
            let mode = d.default_mode.unwrap_or(0o644);
            self.downward(&mut out, d.items.as_deref().unwrap_or(&[]), mode)?;
        } else if let Some(p) = &v.projected {
            let mode = p.default_mode.unwrap_or(0o644);
            for s in p.sources.iter().flatten() {
                self.projection(&mut out, s, mode).await?;
            }
        }
        Ok(out)
    }

    async fn projection(
        &self,
        out: &mut Payload,
        s: &k8s::VolumeProjection,
        mode: i32,
    ) -> Result<(), VolumeError> {
        if let Some(t) = &s.service_account_token {
            let token = self.token(t).await?;
            // With an fsGroup the token is the owner's alone until the group gets read.
            add(
                out,
                &t.path,
                token,
                if self.fs_group { 0o600 } else { mode },
            );
        }
        if let Some(c) = &s.config_map {
            self.keyed(out, false, &c.name, c.optional, c.items.as_ref(), mode)
                .await?;
        }
        if let Some(sec) = &s.secret {
            let items = sec.items.as_ref();
            self.keyed(out, true, &sec.name, sec.optional, items, mode)
                .await?;
        }
        if let Some(d) = &s.downward_api {
            self.downward(out, d.items.as_deref().unwrap_or(&[]), mode)?;
        }
        Ok(())
    }

    /// The token the volume holds, or a new one when there is none or it is due.
    async fn token(&self, t: &k8s::ServiceAccountTokenProjection) -> Result<Vec<u8>, VolumeError> {
        if !self.refresh_tokens
            && let Ok(token) = std::fs::read(self.dir.join(DATA_DIR).join(&t.path))
        {
            return Ok(token);
        }
        let Some(source) = self.source else {
            return Err(VolumeError::Content(
                "a service account token needs an API server (no kubeconfig)".into(),
            ));
        };
        let request = TokenRequest {
            namespace: self.namespace().to_owned(),
            service_account: self
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "default".into()),
            audience: t.audience.clone().filter(|a| !a.is_empty()),
            expiration_seconds: t.expiration_seconds.unwrap_or(3600),
            pod_name: self.pod.metadata.name.clone().unwrap_or_default(),
            pod_uid: wasmlet_core::pod::uid(self.pod).to_owned(),
        };
        Ok(source.token(&request).await?.into_bytes())
    }

    /// The files of a ConfigMap (`secret` false) or Secret, added to `out`: all its keys,
    /// or the items listed; none for an optional one that does not exist.
    async fn keyed(
        &self,
        out: &mut Payload,
        secret: bool,
        name: &str,
        optional: Option<bool>,
        items: Option<&Vec<k8s::KeyToPath>>,
        mode: i32,
    ) -> Result<(), VolumeError> {
        let optional = optional.unwrap_or(false);
        let data = self.fetch(secret, name, optional).await?;
        let what = format!("{} \"{name}\"", kind_name(secret));
        select(out, data, items, (mode, optional), &what)
    }

    /// A ConfigMap's (`secret` false) or Secret's keys; `None` for an optional one that
    /// does not exist.
    async fn fetch(
        &self,
        secret: bool,
        name: &str,
        optional: bool,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, VolumeError> {
        let what = kind_name(secret);
        let Some(source) = self.source else {
            return Err(VolumeError::Content(format!(
                "{what} \"{name}\": this node has no API server to read it from (no kubeconfig)"
            )));
        };
        let data = if secret {
            source.secret(self.namespace(), name).await?
        } else {
            source.config_map(self.namespace(), name).await?
        };
        match data {
            Some(d) => Ok(Some(d)),
            None if optional => Ok(None),
            None => Err(VolumeError::Content(format!("{what} \"{name}\" not found"))),
        }
    }

    fn downward(
        &self,
        out: &mut Payload,
        items: &[k8s::DownwardAPIVolumeFile],
        mode: i32,
    ) -> Result<(), VolumeError> {
        let (pod, ctx) = (self.pod, self.ctx);
        for item in items {
            let value = match (&item.field_ref, &item.resource_field_ref) {
                (Some(f), _) => match f.field_path.as_str() {
                    "metadata.labels" => map_file(pod.metadata.labels.as_ref()),
                    "metadata.annotations" => map_file(pod.metadata.annotations.as_ref()),
                    path => criconfig::field_ref(pod, path, "", ctx).ok_or_else(|| {
                        VolumeError::Content(format!("unsupported fieldPath {path:?}"))
                    })?,
                },
                (None, Some(r)) => {
                    let spec = wasmlet_core::pod::containers(pod)
                        .iter()
                        .find(|c| Some(&c.name) == r.container_name.as_ref())
                        .or_else(|| wasmlet_core::pod::containers(pod).first())
                        .ok_or_else(|| VolumeError::Content("no container".into()))?;
                    criconfig::resource_ref(spec, r, &item.path, ctx)
                        .map_err(|e| VolumeError::Content(e.to_string()))?
                }
                (None, None) => {
                    return Err(VolumeError::Content(format!(
                        "{}: no fieldRef or resourceFieldRef",
                        item.path
                    )));
                }
            };
            add(
                out,
                &item.path,
                value.into_bytes(),
                item.mode.unwrap_or(mode),
            );
        }
        Ok(())
    }
}

/// How errors name a ConfigMap (`secret` false) or Secret.
fn kind_name(secret: bool) -> &'static str {
    if secret { "secret" } else { "configmap" }
}

/// A key selection of a ConfigMap or Secret: every key, or the items listed (a listed
/// key it lacks is an error unless the source is optional).
fn select(
    out: &mut Payload,
    data: Option<BTreeMap<String, Vec<u8>>>,
    items: Option<&Vec<k8s::KeyToPath>>,
    (mode, optional): (i32, bool),
    what: &str,
) -> Result<(), VolumeError> {
    let Some(data) = data else {
        return Ok(());
    };
    match items {
        None => {
            for (k, v) in data {
                add(out, &k, v, mode);
            }
        }
        Some(items) => {
            for i in items {
                match data.get(&i.key) {
                    Some(v) => add(out, &i.path, v.clone(), i.mode.unwrap_or(mode)),
                    None if optional => {}
                    None => {
                        return Err(VolumeError::Content(format!(
                            "{what}: key \"{}\" not found",
                            i.key
                        )));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Labels or annotations the way the downward API writes them: `key="value"` lines.
fn map_file(map: Option<&BTreeMap<String, String>>) -> String {
    map.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v:?}\n"))
        .collect()
}
