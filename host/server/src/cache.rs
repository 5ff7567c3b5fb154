//! A small cache whose entries expire: what TokenReview and SubjectAccessReview answers
//! are kept in, so that the API server is asked once per TTL, never per request.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Most entries kept; past it, expired entries are dropped, and if none were, the oldest
/// half goes (a flood of distinct tokens cannot grow the agent without bound).
const MAX_ENTRIES: usize = 8192;

/// Entries that expire, each with its own time to live.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K, V> Default for TtlCache<K, V> {
    fn default() -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    /// The value under `key`, unless it has expired.
    pub fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(key)
            .filter(|(_, until)| Instant::now() < *until)
            .map(|(v, _)| v.clone())
    }

    /// Keeps `value` under `key` for `ttl` (a zero TTL keeps nothing).
    pub fn insert(&self, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, (_, until)| now < *until);
        }
        if entries.len() >= MAX_ENTRIES {
            let mut deadlines: Vec<Instant> = entries.values().map(|(_, u)| *u).collect();
            deadlines.sort_unstable();
            let cut = deadlines[deadlines.len() / 2];
            entries.retain(|_, (_, until)| *until > cut);
        }
        entries.insert(key, (value, now + ttl));
    }

    /// How many entries are held (expired ones included until they are pruned).
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn entries_expire_after_their_own_ttl() {
        let c = TtlCache::default();
        c.insert("allowed", true, Duration::from_secs(300));
        c.insert("denied", false, Duration::from_secs(30));
        c.insert("never", true, Duration::ZERO);
        assert_eq!(c.get(&"allowed"), Some(true));
        assert_eq!(c.get(&"denied"), Some(false));
        assert_eq!(c.get(&"never"), None);
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(c.get(&"denied"), None);
        assert_eq!(c.get(&"allowed"), Some(true));
        tokio::time::advance(Duration::from_secs(270)).await;
        assert_eq!(c.get(&"allowed"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_of_keys_stays_bounded() {
        let c = TtlCache::default();
        for i in 0..(MAX_ENTRIES * 3) {
            c.insert(i, (), Duration::from_secs(60 + i as u64));
        }
        assert!(c.len() <= MAX_ENTRIES, "{}", c.len());
        assert!(
            c.get(&(MAX_ENTRIES * 3 - 1)).is_some(),
            "the newest is kept"
        );
    }
}
