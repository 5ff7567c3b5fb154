//! The pod cache: the newest known [`PodRuntime`] of every pod, written by PLEG after a
//! relist and by a pod worker right after it changed something, read by status and
//! probes. Each entry carries the instant its observation began; an older observation
//! never replaces a newer one, so a relist that started before a worker's update cannot
//! undo it.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tokio::time::Instant;

use wasmlet_core::runtime::PodRuntime;

#[derive(Debug, Clone)]
struct Entry {
    observed: Instant,
    runtime: Arc<PodRuntime>,
}

/// The pod cache.
#[derive(Debug, Default)]
pub struct PodCache {
    pods: RwLock<HashMap<String, Entry>>,
}

impl PodCache {
    /// An empty cache.
    pub fn new() -> Self {
        PodCache::default()
    }

    /// The newest runtime view of pod `uid`.
    pub fn get(&self, uid: &str) -> Option<Arc<PodRuntime>> {
        self.read().get(uid).map(|e| e.runtime.clone())
    }

    /// Stores `runtime`, observed from `observed` on, unless a newer observation is
    /// there already. Returns whether it was stored.
    pub fn set(&self, runtime: PodRuntime, observed: Instant) -> bool {
        let mut pods = self.write();
        match pods.get(&runtime.uid) {
            Some(e) if e.observed > observed => false,
            _ => {
                pods.insert(
                    runtime.uid.clone(),
                    Entry {
                        observed,
                        runtime: Arc::new(runtime),
                    },
                );
                true
            }
        }
    }

    /// Forgets pod `uid` if nothing newer than `observed` was stored for it.
    pub fn remove(&self, uid: &str, observed: Instant) {
        let mut pods = self.write();
        if pods.get(uid).is_some_and(|e| e.observed <= observed) {
            pods.remove(uid);
        }
    }

    /// Whether pod `uid` has an entry.
    pub fn contains(&self, uid: &str) -> bool {
        self.read().contains_key(uid)
    }

    /// Removes, as of `observed`, every pod for which `keep` is false (unless observed
    /// later than that).
    pub fn remove_unless(&self, keep: impl Fn(&str) -> bool, observed: Instant) {
        let mut pods = self.write();
        pods.retain(|uid, e| keep(uid) || e.observed > observed);
    }

    /// Every pod's runtime view.
    pub fn all(&self) -> Vec<Arc<PodRuntime>> {
        self.read().values().map(|e| e.runtime.clone()).collect()
    }

    /// How many pods and containers the cache holds.
    pub fn counts(&self) -> (usize, usize) {
        let pods = self.read();
        (
            pods.len(),
            pods.values().map(|e| e.runtime.containers.len()).sum(),
        )
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Entry>> {
        self.pods.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Entry>> {
        self.pods.write().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn rt(uid: &str, name: &str) -> PodRuntime {
        PodRuntime {
            uid: uid.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn an_older_observation_never_replaces_a_newer_one() {
        let cache = PodCache::new();
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(5);
        assert!(cache.set(rt("u", "new"), t1));
        assert!(!cache.set(rt("u", "old"), t0));
        assert_eq!(
            cache.get("u").map(|r| r.name.clone()).as_deref(),
            Some("new")
        );
        cache.remove("u", t0);
        assert!(cache.get("u").is_some(), "removal older than the entry");
        cache.remove("u", t1);
        assert!(cache.get("u").is_none());
    }
}
