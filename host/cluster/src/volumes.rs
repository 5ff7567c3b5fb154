//! Volume content from the API server: ConfigMaps, Secrets and service account tokens
//! (TokenRequest, bound to the pod), for the agent's configMap, secret and projected
//! volumes — the Node authorizer lets a node read what its pods reference. The objects
//! pods project are watched ([`crate::objects`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1 as k8s;
use kube::Api;
use kube::api::PostParams;
use wasmlet_agent::lookup::LookupError;
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

    /// A ConfigMap (`secret` false) or Secret: from its watch when a pod projects it,
    /// else asked for directly.
    async fn read<K>(
        &self,
        secret: bool,
        namespace: &str,
        name: &str,
        data: fn(K) -> BTreeMap<String, Vec<u8>>,
    ) -> Result<Data, LookupError>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let object = ObjectRef {
            secret,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        if let Some(watched) = self.objects.read(&object).await {
            return Ok(watched);
        }
        let what = if secret { "secret" } else { "configmap" };
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        let found = api.get_opt(name).await.map_err(|e| LookupError::Api {
            what: format!("{what} \"{name}\""),
            source: Box::new(e),
        })?;
        Ok(found.map(data))
    }
}

impl VolumeSource for ApiVolumes {
    fn config_map<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Data, LookupError>> {
        Box::pin(self.read::<k8s::ConfigMap>(false, namespace, name, config_map_data))
    }

    fn secret<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Data, LookupError>> {
        Box::pin(self.read::<k8s::Secret>(true, namespace, name, secret_data))
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

    fn token<'a>(
        &'a self,
        r: &'a volumes::TokenRequest,
    ) -> BoxFuture<'a, Result<String, LookupError>> {
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
                .map_err(|e| LookupError::Api {
                    what: format!("token for service account \"{}\"", r.service_account),
                    source: Box::new(e),
                })?;
            answer
                .status
                .and_then(|s| s.token)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| {
                    LookupError::Unavailable(format!(
                        "token for service account \"{}\": empty answer",
                        r.service_account
                    ))
                })
        })
    }
}
