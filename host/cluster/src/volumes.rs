//! Volume content from the API server: ConfigMaps, Secrets and service account tokens
//! (TokenRequest, bound to the pod), for the agent's configMap, secret and projected
//! volumes — the Node authorizer lets a node read what its pods reference. The objects
//! pods project are watched ([`crate::objects`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1 as k8s;
use kube::Api;
use kube::api::PostParams;
use wasmlet_agent::volumes::{self, BoxFuture, Data, ObjectRef, VolumeSource};

use crate::objects::{Objects, config_map_data, secret_data};

/// The API server as a [`VolumeSource`]: ConfigMaps and Secrets the node's pods project
/// are read from their watches ([`Objects`]), anything else asked for directly.
#[derive(Clone)]
pub struct ApiVolumes {
    client: kube::Client,
    objects: Arc<Objects>,
}

impl std::fmt::Debug for ApiVolumes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiVolumes")
            .field("objects", &self.objects)
            .finish()
    }
}

impl ApiVolumes {
    /// Reads through `client`.
    pub fn new(client: kube::Client) -> Self {
        ApiVolumes {
            objects: Objects::new(client.clone()),
            client,
        }
    }

    /// The objects watched for the node's pods.
    pub fn objects(&self) -> &Arc<Objects> {
        &self.objects
    }

    async fn get<K>(&self, namespace: &str, name: &str, what: &str) -> Result<Option<K>, String>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        api.get_opt(name)
            .await
            .map_err(|e| format!("{what} \"{name}\": {e}"))
    }
}

impl VolumeSource for ApiVolumes {
    fn config_map<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Data, String>> {
        Box::pin(async move {
            let object = ObjectRef {
                secret: false,
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            };
            if let Some(data) = self.objects.read(&object).await {
                return Ok(data);
            }
            let cm: Option<k8s::ConfigMap> = self.get(namespace, name, "configmap").await?;
            Ok(cm.map(config_map_data))
        })
    }

    fn secret<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Data, String>> {
        Box::pin(async move {
            let object = ObjectRef {
                secret: true,
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            };
            if let Some(data) = self.objects.read(&object).await {
                return Ok(data);
            }
            let secret: Option<k8s::Secret> = self.get(namespace, name, "secret").await?;
            Ok(secret.map(secret_data))
        })
    }

    fn register_pod(&self, uid: &str, refs: BTreeSet<ObjectRef>) {
        self.objects.register(uid, refs);
    }

    fn unregister_pod(&self, uid: &str) {
        self.objects.unregister(uid);
    }

    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        Some(self.objects.changes())
    }

    fn token<'a>(&'a self, r: &'a volumes::TokenRequest) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let api: Api<k8s::ServiceAccount> = Api::namespaced(self.client.clone(), &r.namespace);
            let request = TokenRequest {
                spec: Some(TokenRequestSpec {
                    audiences: r.audience.clone().map(|a| vec![a]),
                    expiration_seconds: Some(r.expiration_seconds),
                    bound_object_ref: Some(BoundObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Pod".into()),
                        name: Some(r.pod_name.clone()),
                        uid: Some(r.pod_uid.clone()),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let answer = api
                .create_token_request(&r.service_account, &PostParams::default(), &request)
                .await
                .map_err(|e| format!("token for service account \"{}\": {e}", r.service_account))?;
            answer
                .status
                .and_then(|s| s.token)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| {
                    format!(
                        "token for service account \"{}\": empty answer",
                        r.service_account
                    )
                })
        })
    }
}
