//! [`PodQueue`]: items waiting for the syncLoop, coalesced per pod.
//!
//! A pod with items waiting is one entry, however many items it collects; beyond
//! [`MAX_ITEMS_PER_POD`] they are counted, not kept (the pod is synced either way). The
//! queue is therefore bounded by the number of pods, and nothing is dropped silently:
//! what is not kept is counted in [`PodQueue::coalesced`].

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

/// Items kept per pod while it waits; more are counted.
pub const MAX_ITEMS_PER_POD: usize = 16;

/// Pods in the order of their first item, and their items.
type Waiting<T> = (VecDeque<String>, HashMap<String, Vec<T>>);

/// A per-pod coalescing queue with one consumer.
#[derive(Debug)]
pub struct PodQueue<T> {
    inner: Mutex<Waiting<T>>,
    notify: Notify,
    coalesced: AtomicU64,
}

impl<T> Default for PodQueue<T> {
    fn default() -> Self {
        PodQueue {
            inner: Mutex::new((VecDeque::new(), HashMap::new())),
            notify: Notify::new(),
            coalesced: AtomicU64::new(0),
        }
    }
}

impl<T> PodQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        PodQueue::default()
    }

    /// Adds an item for pod `uid`, waking the consumer.
    pub fn push(&self, uid: &str, item: T) {
        {
            let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            let (order, by_pod) = &mut *guard;
            match by_pod.get_mut(uid) {
                Some(list) if list.len() >= MAX_ITEMS_PER_POD => {
                    self.coalesced.fetch_add(1, Ordering::Relaxed);
                }
                Some(list) => list.push(item),
                None => {
                    order.push_back(uid.to_owned());
                    by_pod.insert(uid.to_owned(), vec![item]);
                }
            }
        }
        self.notify.notify_one();
    }

    /// Takes everything waiting, pods in the order of their first item.
    pub fn take(&self) -> Vec<(String, Vec<T>)> {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (order, by_pod) = &mut *guard;
        order
            .drain(..)
            .filter_map(|uid| by_pod.remove(&uid).map(|e| (uid, e)))
            .collect()
    }

    /// Waits until something is pushed (at once if something was pushed since the last
    /// wait).
    pub async fn wait(&self) {
        self.notify.notified().await;
    }

    /// Items counted but not kept because their pod already had many waiting.
    pub fn coalesced(&self) -> u64 {
        self.coalesced.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_coalesces_per_pod_and_counts_overflow() {
        let q = PodQueue::new();
        for i in 0..20 {
            q.push("a", i);
        }
        q.push("b", 100);
        q.push("a", 21);
        let taken = q.take();
        assert_eq!(taken.len(), 2);
        assert_eq!(taken[0].0, "a");
        assert_eq!(taken[0].1.len(), MAX_ITEMS_PER_POD);
        assert_eq!(taken[1], ("b".to_string(), vec![100]));
        assert_eq!(q.coalesced(), 5);
        assert!(q.take().is_empty());
    }

    #[tokio::test]
    async fn a_push_before_the_wait_is_not_lost() {
        let q = PodQueue::new();
        q.push("a", ());
        tokio::time::timeout(std::time::Duration::from_secs(1), q.wait())
            .await
            .expect("woken");
    }
}
