//! Volume content from the API server: ConfigMaps, Secrets and service account tokens
//! (TokenRequest, bound to the pod), for the agent's configMap, secret and projected
//! volumes — the Node authorizer lets a node read what its pods reference.

use std::collections::BTreeMap;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1 as k8s;
use kube::Api;
use kube::api::PostParams;
use wasmlet_agent::volumes::{self, BoxFuture, Data, VolumeSource};

/// The API server as a [`VolumeSource`].
#[derive(Clone)]
pub struct ApiVolumes {
    client: kube::Client,
}

impl std::fmt::Debug for ApiVolumes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiVolumes")
    }
}

impl ApiVolumes {
    /// Reads through `client`.
    pub fn new(client: kube::Client) -> Self {
        ApiVolumes { client }
    }
}

impl VolumeSource for ApiVolumes {
    fn config_map<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Data, String>> {
        Box::pin(async move {
            let api: Api<k8s::ConfigMap> = Api::namespaced(self.client.clone(), namespace);
            let cm = api
                .get_opt(name)
                .await
                .map_err(|e| format!("configmap \"{name}\": {e}"))?;
            Ok(cm.map(|cm| {
                let mut out: BTreeMap<String, Vec<u8>> = cm
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes()))
                    .collect();
                out.extend(
                    cm.binary_data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.0)),
                );
                out
            }))
        })
    }

    fn secret<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Data, String>> {
        Box::pin(async move {
            let api: Api<k8s::Secret> = Api::namespaced(self.client.clone(), namespace);
            let secret = api
                .get_opt(name)
                .await
                .map_err(|e| format!("secret \"{name}\": {e}"))?;
            Ok(secret.map(|s| {
                let mut out: BTreeMap<String, Vec<u8>> = s
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                out.extend(
                    s.string_data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.into_bytes())),
                );
                out
            }))
        })
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
