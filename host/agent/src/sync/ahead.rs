//! What a pod's containers need before they start, asked for while their sandbox is
//! made: RunPodSandbox is the longest call of a pod's start (tens of milliseconds alone,
//! hundreds in a burst), and nothing else of the start depends on it but the pod's IP.
//! The kubelet asks for these after the sandbox; the answers are the same, only off the
//! start's path: whether each image is present (ImageStatus), and the ConfigMaps,
//! Secrets and Services the containers' environment refers to.

use k8s_openapi::api::core::v1 as k8s;
use std::collections::HashSet;
use tracing::warn;
use wasmlet_cri::CriRuntime;
use wasmlet_cri::proto::ImageSpec;

use super::SyncContext;
use crate::criconfig;
use wasmlet_core::pod::{self, PodKey};

/// What the containers a sync starts need, asked for once.
#[derive(Debug, Default)]
pub(super) struct Ahead {
    /// The ConfigMaps, Secrets and Services of their environment.
    pub env: criconfig::EnvData,
    /// The images found present. Any other is asked for again at its container's start:
    /// another container of the sync may have pulled it meanwhile.
    pub present: HashSet<String>,
}

impl<R: CriRuntime + 'static> SyncContext<R> {
    /// Asks for what the containers `starting` need: their environment's objects, and,
    /// when a new sandbox is being made (`new_sandbox`: a call long enough to hide
    /// them), whether their images are present.
    pub(super) async fn ahead(
        &self,
        pod: &k8s::Pod,
        starting: &[(&k8s::Container, bool)],
        new_sandbox: bool,
    ) -> Ahead {
        let images = async {
            let mut present = HashSet::new();
            if !new_sandbox {
                return present;
            }
            let mut images: Vec<String> = starting
                .iter()
                .map(|(c, _)| c.image.clone().unwrap_or_default())
                .collect();
            images.sort();
            images.dedup();
            for image in images {
                let spec = ImageSpec {
                    image: image.clone(),
                    ..Default::default()
                };
                if let Ok(Some(_)) = self.runtime.image_status(spec).await {
                    present.insert(image);
                }
            }
            present
        };
        let (env, present) = tokio::join!(self.env_data(pod, starting), images);
        Ahead { env, present }
    }

    /// Reads the ConfigMaps and Secrets the environment of the containers `starting`
    /// refers to (none without a volume source: those containers then wait with
    /// CreateContainerConfigError, naming what is missing), and the Services whose
    /// variables they get.
    async fn env_data(
        &self,
        pod: &k8s::Pod,
        starting: &[(&k8s::Container, bool)],
    ) -> criconfig::EnvData {
        let mut data = criconfig::EnvData::default();
        if starting.is_empty() {
            return data;
        }
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        if let Some(services) = &self.services {
            // Static pods never wait for the API server: on a control-plane node it is
            // one of them (the kubelet exempts them the same way).
            match services.services(namespace, !pod::is_static(pod)).await {
                Ok(all) => {
                    let links = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.enable_service_links)
                        .unwrap_or(true);
                    let chosen = criconfig::services::for_pod(&all, namespace, links);
                    data.services = criconfig::services::env(&chosen);
                }
                Err(e) => data.services_error = Some(e.to_string()),
            }
        }
        let Some(source) = &self.volume_source else {
            return data;
        };
        let mut wanted: Vec<(bool, String)> = starting
            .iter()
            .flat_map(|(c, _)| criconfig::EnvData::wanted(c))
            .collect();
        wanted.sort();
        wanted.dedup();
        for (secret, name) in wanted {
            let got = if secret {
                source.secret(namespace, &name).await
            } else {
                source.config_map(namespace, &name).await
            };
            let text = match got {
                Ok(d) => d.map(|d| {
                    d.into_iter()
                        .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
                        .collect()
                }),
                Err(e) => {
                    warn!(pod = %PodKey::of(pod), "{e}");
                    None
                }
            };
            if secret {
                data.secrets.insert(name, text);
            } else {
                data.config_maps.insert(name, text);
            }
        }
        data
    }
}
