//! The API server's TokenReview and SubjectAccessReview, through kube: what the
//! `Webhook` modes of authentication and authorization ask.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use crate::authn::{BoxFuture, ReviewError, TokenReviewer, User};
use crate::authz::{AccessReviewer, Attributes};

/// Reviews through the API server this client talks to.
#[derive(Clone)]
pub struct ApiReviews {
    client: kube::Client,
}

impl ApiReviews {
    /// Reviews through `client`.
    pub fn new(client: kube::Client) -> Self {
        ApiReviews { client }
    }
}

impl TokenReviewer for ApiReviews {
    fn review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Option<User>, ReviewError>> {
        Box::pin(async move {
            let api: Api<TokenReview> = Api::all(self.client.clone());
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: token.to_owned(),
                    audiences: None,
                },
                ..Default::default()
            };
            let answer = api
                .create(&PostParams::default(), &review)
                .await
                .map_err(|e| ReviewError(format!("TokenReview: {e}")))?;
            let status = answer.status.unwrap_or_default();
            if status.authenticated != Some(true) {
                return Ok(None);
            }
            let info = status.user.unwrap_or_default();
            Ok(Some(User {
                name: info.username.unwrap_or_default(),
                uid: info.uid.unwrap_or_default(),
                groups: info.groups.unwrap_or_default(),
                extra: info.extra.unwrap_or_default().into_iter().collect(),
            }))
        })
    }
}

impl AccessReviewer for ApiReviews {
    fn review<'a>(
        &'a self,
        user: &'a User,
        a: &'a Attributes,
    ) -> BoxFuture<'a, Result<bool, ReviewError>> {
        Box::pin(async move {
            let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(user.name.clone()),
                    uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
                    groups: Some(user.groups.clone()),
                    extra: (!user.extra.is_empty())
                        .then(|| user.extra.clone().into_iter().collect()),
                    resource_attributes: Some(ResourceAttributes {
                        verb: Some(a.verb.to_owned()),
                        resource: Some("nodes".into()),
                        subresource: Some(a.subresource.to_owned()),
                        name: Some(a.node.clone()),
                        version: Some("v1".into()),
                        group: Some(String::new()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer = api
                .create(&PostParams::default(), &review)
                .await
                .map_err(|e| ReviewError(format!("SubjectAccessReview: {e}")))?;
            Ok(answer.status.is_some_and(|s| s.allowed))
        })
    }
}
