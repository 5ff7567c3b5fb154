//! Authorization, the kubelet's model: every request is an action on this node's
//! `nodes/<subresource>` — the verb from the HTTP method, the subresource from the path
//! (`/stats/*` → stats, `/metrics/*` → metrics, `/logs/*` → log, `/spec/*` → spec,
//! `/checkpoint/*` → checkpoint, everything else → proxy). `Webhook` asks the API
//! server's SubjectAccessReview (answers cached: allowed `cacheAuthorizedTTL` 5 m,
//! denied `cacheUnauthorizedTTL` 30 s); `AlwaysAllow` is for standalone use.

use std::sync::Arc;
use std::time::Duration;

use crate::authn::{BoxFuture, ReviewError, User};
use crate::cache::TtlCache;

/// What a request asks to do, as SubjectAccessReview's resourceAttributes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attributes {
    /// `get`, `create`, `update`, `patch`, `delete`.
    pub verb: &'static str,
    /// `proxy`, `stats`, `metrics`, `log`, `spec`, `checkpoint`.
    pub subresource: &'static str,
    /// The node's name.
    pub node: String,
}

/// Whether `path` is `prefix` or below it (`/stats` and `/stats/summary`, not `/statsx`).
fn under(path: &str, prefix: &str) -> bool {
    path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// `path` with `.` and `..` segments and repeated slashes resolved, as Go's
/// `path.Clean` (so `/pods/../stats` is a stats request).
fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The verb for an HTTP method (the kubelet's mapping; HEAD reads like GET).
pub fn verb(method: &str) -> &'static str {
    match method {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    }
}

/// The node subresource a path is about.
pub fn subresource(path: &str) -> &'static str {
    let path = clean(path);
    for (prefix, sub) in [
        ("/stats", "stats"),
        ("/metrics", "metrics"),
        ("/logs", "log"),
        ("/spec", "spec"),
        ("/checkpoint", "checkpoint"),
    ] {
        if under(&path, prefix) {
            return sub;
        }
    }
    "proxy"
}

/// The attributes of a request to this node.
pub fn attributes(method: &str, path: &str, node: &str) -> Attributes {
    Attributes {
        verb: verb(method),
        subresource: subresource(path),
        node: node.to_owned(),
    }
}

/// Asks whether a user may do something: the API server's SubjectAccessReview.
pub trait AccessReviewer: Send + Sync {
    /// `true` when allowed.
    fn review<'a>(
        &'a self,
        user: &'a User,
        attributes: &'a Attributes,
    ) -> BoxFuture<'a, Result<bool, ReviewError>>;
}

/// `authorization.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Ask the API server (the default of a KubeletConfiguration file).
    #[default]
    Webhook,
    /// Allow every authenticated request.
    AlwaysAllow,
}

/// `authorization` of the kubelet's configuration.
#[derive(Debug, Clone)]
pub struct AuthzSettings {
    /// `mode`.
    pub mode: Mode,
    /// `webhook.cacheAuthorizedTTL` (default 5 m).
    pub authorized_ttl: Duration,
    /// `webhook.cacheUnauthorizedTTL` (default 30 s).
    pub unauthorized_ttl: Duration,
}

impl Default for AuthzSettings {
    fn default() -> Self {
        AuthzSettings {
            mode: Mode::Webhook,
            authorized_ttl: Duration::from_secs(300),
            unauthorized_ttl: Duration::from_secs(30),
        }
    }
}

/// A decision that could not be made (answered 500, as the kubelet does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed.
    Allow,
    /// Denied: 403.
    Deny,
    /// The API server could not be asked (or there is none): 500, never allowed.
    Error(String),
}

/// The authorizer.
pub struct Authorizer {
    settings: AuthzSettings,
    reviewer: Option<Arc<dyn AccessReviewer>>,
    cache: TtlCache<(User, Attributes), bool>,
}

impl Authorizer {
    /// An authorizer; `reviewer` is the SubjectAccessReview client (`None` standalone:
    /// `Webhook` then denies everything with an error saying why).
    pub fn new(settings: AuthzSettings, reviewer: Option<Arc<dyn AccessReviewer>>) -> Self {
        Authorizer {
            settings,
            reviewer,
            cache: TtlCache::default(),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &AuthzSettings {
        &self.settings
    }

    /// May `user` do `attributes`?
    pub async fn authorize(&self, user: &User, attributes: &Attributes) -> Decision {
        if self.settings.mode == Mode::AlwaysAllow {
            return Decision::Allow;
        }
        let Some(reviewer) = &self.reviewer else {
            return Decision::Error(
                "authorization mode Webhook needs an API server (a kubeconfig)".into(),
            );
        };
        let key = (user.clone(), attributes.clone());
        if let Some(allowed) = self.cache.get(&key) {
            return if allowed {
                Decision::Allow
            } else {
                Decision::Deny
            };
        }
        match reviewer.review(user, attributes).await {
            Ok(allowed) => {
                let ttl = if allowed {
                    self.settings.authorized_ttl
                } else {
                    self.settings.unauthorized_ttl
                };
                self.cache.insert(key, allowed, ttl);
                if allowed {
                    Decision::Allow
                } else {
                    Decision::Deny
                }
            }
            Err(e) => Decision::Error(e.0),
        }
    }
}

/// The body of a 403, in the kubelet's words.
pub fn forbidden_message(user: &User, a: &Attributes) -> String {
    format!(
        "Forbidden (user={}, verb={}, resource=nodes, subresource={})",
        user.name, a.verb, a.subresource
    )
}

/// The body of a 500 for a decision that could not be made, in the kubelet's words.
pub fn error_message(user: &User, a: &Attributes) -> String {
    format!(
        "Authorization error (user={}, verb={}, resource=nodes, subresource={})",
        user.name, a.verb, a.subresource
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn paths_map_to_the_kubelets_subresources() {
        for (path, sub) in [
            ("/stats/summary", "stats"),
            ("/stats", "stats"),
            ("/stats/", "stats"),
            ("/statsx", "proxy"),
            ("/metrics", "metrics"),
            ("/metrics/cadvisor", "metrics"),
            ("/metrics/probes", "metrics"),
            ("/metrics/resource", "metrics"),
            ("/logs/", "log"),
            ("/logs/syslog", "log"),
            ("/spec/", "spec"),
            ("/checkpoint/ns/pod/c", "checkpoint"),
            ("/containerLogs/ns/pod/c", "proxy"),
            ("/exec/ns/pod/c", "proxy"),
            ("/portForward/ns/pod", "proxy"),
            ("/pods", "proxy"),
            ("/runningpods/", "proxy"),
            ("/healthz", "proxy"),
            ("/configz", "proxy"),
            ("/pods/../stats/summary", "stats"),
            ("//metrics", "metrics"),
            ("/logs/../exec/a/b/c", "proxy"),
        ] {
            assert_eq!(subresource(path), sub, "{path}");
        }
        for (method, v) in [
            ("GET", "get"),
            ("HEAD", "get"),
            ("POST", "create"),
            ("PUT", "update"),
            ("PATCH", "patch"),
            ("DELETE", "delete"),
        ] {
            assert_eq!(verb(method), v);
        }
        let a = attributes("POST", "/exec/default/web/c", "node-a");
        assert_eq!(
            forbidden_message(
                &User {
                    name: "bob".into(),
                    ..Default::default()
                },
                &a
            ),
            "Forbidden (user=bob, verb=create, resource=nodes, subresource=proxy)"
        );
    }

    struct Rules(AtomicUsize);

    impl AccessReviewer for Rules {
        fn review<'a>(
            &'a self,
            user: &'a User,
            a: &'a Attributes,
        ) -> BoxFuture<'a, Result<bool, ReviewError>> {
            Box::pin(async move {
                self.0.fetch_add(1, Ordering::SeqCst);
                Ok(user.name == "admin" || a.subresource == "stats")
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn webhook_answers_are_cached_for_their_ttls() {
        let rules = Arc::new(Rules(AtomicUsize::new(0)));
        let z = Authorizer::new(AuthzSettings::default(), Some(rules.clone()));
        let admin = User {
            name: "admin".into(),
            ..Default::default()
        };
        let bob = User {
            name: "bob".into(),
            ..Default::default()
        };
        let logs = attributes("GET", "/containerLogs/a/b/c", "n");
        for _ in 0..5 {
            assert_eq!(z.authorize(&admin, &logs).await, Decision::Allow);
            assert_eq!(z.authorize(&bob, &logs).await, Decision::Deny);
        }
        assert_eq!(rules.0.load(Ordering::SeqCst), 2);
        tokio::time::advance(Duration::from_secs(31)).await;
        z.authorize(&bob, &logs).await;
        z.authorize(&admin, &logs).await;
        assert_eq!(rules.0.load(Ordering::SeqCst), 3, "only the denial expired");
        tokio::time::advance(Duration::from_secs(270)).await;
        z.authorize(&admin, &logs).await;
        assert_eq!(rules.0.load(Ordering::SeqCst), 4);
        let standalone = Authorizer::new(AuthzSettings::default(), None);
        assert!(matches!(
            standalone.authorize(&admin, &logs).await,
            Decision::Error(_)
        ));
        let open = Authorizer::new(
            AuthzSettings {
                mode: Mode::AlwaysAllow,
                ..Default::default()
            },
            None,
        );
        assert_eq!(open.authorize(&bob, &logs).await, Decision::Allow);
    }
}
