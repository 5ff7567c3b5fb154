//! Authentication, the kubelet's model: a client certificate verified against
//! `authentication.x509.clientCAFile` names its user; otherwise a bearer token is
//! checked with the API server's TokenReview (`authentication.webhook`, answers cached
//! for `cacheTTL`); otherwise the request is `system:anonymous` when
//! `authentication.anonymous.enabled`, and refused with 401 when not.
//!
//! A token the API server rejects is refused (401) even with anonymous access on, and
//! when the API server cannot be asked the request is refused too: authentication fails
//! closed, never open.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::cache::TtlCache;

/// Who made a request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct User {
    /// The user name (`system:anonymous` for anonymous requests).
    pub name: String,
    /// The user's UID, when the authenticator knows one.
    pub uid: String,
    /// Its groups.
    pub groups: Vec<String>,
    /// Extra attributes (TokenReview's `extra`), passed on to SubjectAccessReview.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    /// The anonymous user.
    pub fn anonymous() -> Self {
        User {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            ..Default::default()
        }
    }
}

/// A review could not be made (the API server is unreachable or answered an error).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct ReviewError(pub String);

/// A boxed future, as the reviewers return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Checks bearer tokens: the API server's TokenReview.
pub trait TokenReviewer: Send + Sync {
    /// The user `token` belongs to; `None` when the API server says it is not valid.
    fn review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Option<User>, ReviewError>>;
}

/// `authentication` of the kubelet's configuration.
#[derive(Debug, Clone)]
pub struct AuthnSettings {
    /// `anonymous.enabled` (default false).
    pub anonymous: bool,
    /// `webhook.enabled` (default true).
    pub webhook: bool,
    /// `webhook.cacheTTL` (default 2 m).
    pub cache_ttl: Duration,
    /// Whether `x509.clientCAFile` is set (the TLS layer verifies the certificates).
    pub x509: bool,
}

impl Default for AuthnSettings {
    fn default() -> Self {
        AuthnSettings {
            anonymous: false,
            webhook: true,
            cache_ttl: Duration::from_secs(120),
            x509: false,
        }
    }
}

/// Why a request is not authenticated (the response is 401 either way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unauthenticated {
    /// No credentials, and anonymous requests are not allowed.
    NoCredentials,
    /// The token is not valid (or cannot be checked: no webhook).
    InvalidToken,
    /// The API server could not be asked.
    ReviewFailed(String),
}

/// The authenticator.
pub struct Authenticator {
    settings: AuthnSettings,
    tokens: Option<Arc<dyn TokenReviewer>>,
    /// By SHA-256 of the token: the token itself is never kept.
    cache: TtlCache<[u8; 32], Option<User>>,
}

impl Authenticator {
    /// An authenticator; `tokens` is the TokenReview client (`None` standalone: a bearer
    /// token cannot be checked and is refused).
    pub fn new(settings: AuthnSettings, tokens: Option<Arc<dyn TokenReviewer>>) -> Self {
        Authenticator {
            settings,
            tokens,
            cache: TtlCache::default(),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &AuthnSettings {
        &self.settings
    }

    /// Who made a request that presented `certificate_user` (a verified client
    /// certificate's user) and the `Authorization` header `authorization`.
    pub async fn authenticate(
        &self,
        certificate_user: Option<&User>,
        authorization: Option<&str>,
    ) -> Result<User, Unauthenticated> {
        if let Some(user) = certificate_user
            && self.settings.x509
        {
            return Ok(user.clone());
        }
        let token = authorization
            .and_then(|h| {
                let (scheme, rest) = h.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
            })
            .filter(|t| !t.is_empty());
        match token {
            Some(token) => self.token(token).await,
            None if self.settings.anonymous => Ok(User::anonymous()),
            None => Err(Unauthenticated::NoCredentials),
        }
    }

    async fn token(&self, token: &str) -> Result<User, Unauthenticated> {
        let Some(reviewer) = self.tokens.as_ref().filter(|_| self.settings.webhook) else {
            return Err(Unauthenticated::InvalidToken);
        };
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let answer = match self.cache.get(&key) {
            Some(a) => a,
            None => {
                // Errors are not cached: the next request asks again.
                let a = reviewer
                    .review(token)
                    .await
                    .map_err(|e| Unauthenticated::ReviewFailed(e.0))?;
                self.cache.insert(key, a.clone(), self.settings.cache_ttl);
                a
            }
        };
        answer.ok_or(Unauthenticated::InvalidToken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Tokens {
        calls: AtomicUsize,
        down: std::sync::atomic::AtomicBool,
    }

    impl TokenReviewer for Tokens {
        fn review<'a>(
            &'a self,
            token: &'a str,
        ) -> BoxFuture<'a, Result<Option<User>, ReviewError>> {
            Box::pin(async move {
                self.calls.fetch_add(1, Ordering::SeqCst);
                if self.down.load(Ordering::SeqCst) {
                    return Err(ReviewError("connection refused".into()));
                }
                Ok((token == "good").then(|| User {
                    name: "alice".into(),
                    ..Default::default()
                }))
            })
        }
    }

    fn tokens() -> Arc<Tokens> {
        Arc::new(Tokens {
            calls: AtomicUsize::new(0),
            down: std::sync::atomic::AtomicBool::new(false),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_are_reviewed_once_per_ttl_and_failures_fail_closed() {
        let t = tokens();
        let a = Authenticator::new(AuthnSettings::default(), Some(t.clone()));
        for _ in 0..3 {
            let u = a
                .authenticate(None, Some("Bearer good"))
                .await
                .expect("valid");
            assert_eq!(u.name, "alice");
        }
        assert_eq!(t.calls.load(Ordering::SeqCst), 1, "cached");
        assert_eq!(
            a.authenticate(None, Some("Bearer bad")).await,
            Err(Unauthenticated::InvalidToken)
        );
        assert_eq!(
            a.authenticate(None, Some("Bearer bad")).await,
            Err(Unauthenticated::InvalidToken)
        );
        assert_eq!(
            t.calls.load(Ordering::SeqCst),
            2,
            "a rejection is cached too"
        );
        tokio::time::advance(Duration::from_secs(121)).await;
        t.down.store(true, Ordering::SeqCst);
        assert!(matches!(
            a.authenticate(None, Some("Bearer good")).await,
            Err(Unauthenticated::ReviewFailed(_))
        ));
        assert!(
            a.authenticate(None, Some("Bearer good")).await.is_err(),
            "an error is not cached, and never lets a request in"
        );
        assert_eq!(t.calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn anonymous_only_when_enabled_and_certificates_only_with_a_client_ca() {
        let cert_user = User {
            name: "kube-apiserver-kubelet-client".into(),
            groups: vec!["system:masters".into()],
            ..Default::default()
        };
        let strict = Authenticator::new(AuthnSettings::default(), None);
        assert_eq!(
            strict.authenticate(None, None).await,
            Err(Unauthenticated::NoCredentials)
        );
        assert_eq!(
            strict.authenticate(Some(&cert_user), None).await,
            Err(Unauthenticated::NoCredentials),
            "no client CA configured: a certificate names nobody"
        );
        assert_eq!(
            strict.authenticate(None, Some("Bearer x")).await,
            Err(Unauthenticated::InvalidToken),
            "no API server to ask"
        );
        let open = Authenticator::new(
            AuthnSettings {
                anonymous: true,
                x509: true,
                ..Default::default()
            },
            None,
        );
        assert_eq!(
            open.authenticate(None, None).await.expect("anonymous").name,
            "system:anonymous"
        );
        assert_eq!(
            open.authenticate(Some(&cert_user), None).await,
            Ok(cert_user)
        );
    }
}
