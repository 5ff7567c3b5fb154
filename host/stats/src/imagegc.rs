//! Image garbage collection, the kubelet's way: when the image filesystem is more than
//! `imageGCHighThresholdPercent` (85) full, images no container uses — least recently
//! used first, and none first seen less than `imageMinimumGCAge` (2 m) ago — are
//! removed until it is below `imageGCLowThresholdPercent` (80). Images in use (by any
//! container, running or exited), pinned images and the runtime's sandbox image are
//! never removed. Eviction's node-level reclaim removes every unused image past the
//! minimum age.
//!
//! When an image was last used is what this node saw: [`ImageGc::detect`] runs every
//! housekeeping period and records, for each image, when it was first seen and when a
//! container last used it.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;
use wasmlet_cri::CriRuntime;
use wasmlet_cri::proto::ImageSpec;

use crate::error::FieldError;

/// `imageGCHighThresholdPercent`, `imageGCLowThresholdPercent`, `imageMinimumGCAge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Disk use (percent) at which collection starts; 100 turns it off.
    pub high_percent: u8,
    /// Disk use collection brings it down to.
    pub low_percent: u8,
    /// How long an image is kept at least after it was first seen.
    pub min_age: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            high_percent: 85,
            low_percent: 80,
            min_age: Duration::from_secs(120),
        }
    }
}

impl Policy {
    /// Checks the percentages as the kubelet does; errors name the field.
    pub fn check(&self) -> Result<(), FieldError> {
        if self.high_percent > 100 {
            return Err(FieldError::new(
                "imageGCHighThresholdPercent",
                format!("{} must be between 0 and 100", self.high_percent),
            ));
        }
        if self.low_percent > 100 {
            return Err(FieldError::new(
                "imageGCLowThresholdPercent",
                format!("{} must be between 0 and 100", self.low_percent),
            ));
        }
        if self.low_percent > self.high_percent {
            return Err(FieldError::new(
                "imageGCLowThresholdPercent",
                format!(
                    "{} must be less than imageGCHighThresholdPercent {}",
                    self.low_percent, self.high_percent
                ),
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy)]
struct Record {
    first_seen: Instant,
    last_used: Instant,
    size: u64,
}

/// What a collection did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Freed {
    /// Images removed.
    pub removed: usize,
    /// Their bytes.
    pub freed: u64,
}

/// The image garbage collector's records.
#[derive(Debug)]
pub struct ImageGc {
    policy: Policy,
    records: HashMap<String, Record>,
    /// Images never removed whatever their use: the runtime's sandbox image.
    protected: HashSet<String>,
}

/// The sandbox images runtimes use by default, protected when the runtime does not say
/// which one it uses.
const SANDBOX_IMAGES: &[&str] = &["registry.k8s.io/pause", "k8s.gcr.io/pause"];

impl ImageGc {
    /// A collector with `policy` and nothing recorded.
    pub fn new(policy: Policy) -> Self {
        ImageGc {
            policy,
            records: HashMap::new(),
            protected: HashSet::new(),
        }
    }

    /// Also never removes `image` (a reference or an id): the runtime's sandbox image.
    pub fn protect(&mut self, image: &str) {
        self.protected.insert(image.to_owned());
    }

    /// Protects the sandbox image the runtime says it uses (containerd's verbose
    /// `Status` carries its configuration, `sandboxImage` in it); returns it.
    pub async fn protect_sandbox_image<R: CriRuntime>(&mut self, runtime: &R) -> Option<String> {
        let status = runtime.status(true).await.ok()?;
        let config: serde_json::Value = serde_json::from_str(status.info.get("config")?).ok()?;
        let image = config["sandboxImage"].as_str()?.to_owned();
        self.protect(&image);
        if let Some(name) = image.strip_prefix("docker.io/library/") {
            self.protect(name);
        }
        Some(image)
    }

    fn is_protected(&self, image: &wasmlet_cri::proto::Image) -> bool {
        image.pinned
            || self.protected.contains(&image.id)
            || image.repo_tags.iter().any(|t| {
                self.protected.contains(t)
                    || SANDBOX_IMAGES
                        .iter()
                        .any(|p| t.strip_prefix(p).is_some_and(|r| r.starts_with(':')))
            })
    }

    /// Records the images present and the ones containers use now; returns the images
    /// (ids) no container uses.
    pub async fn detect<R: CriRuntime>(
        &mut self,
        runtime: &R,
        now: Instant,
    ) -> Result<Vec<wasmlet_cri::proto::Image>, wasmlet_cri::CriError> {
        let images = runtime.list_images(None).await?;
        let containers = runtime.list_containers(None).await?;
        let mut used: HashSet<&str> = HashSet::new();
        for c in &containers {
            used.insert(c.image_ref.as_str());
            used.insert(c.image_id.as_str());
            if let Some(i) = &c.image {
                used.insert(i.image.as_str());
            }
        }
        let present: HashSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
        self.records.retain(|id, _| present.contains(id.as_str()));
        let mut unused = Vec::new();
        for image in images {
            let in_use = used.contains(image.id.as_str())
                || image.repo_tags.iter().any(|t| used.contains(t.as_str()))
                || image.repo_digests.iter().any(|d| used.contains(d.as_str()));
            let r = self.records.entry(image.id.clone()).or_insert(Record {
                first_seen: now,
                last_used: now,
                size: image.size,
            });
            r.size = image.size;
            if in_use {
                r.last_used = now;
            } else if !self.is_protected(&image) {
                unused.push(image);
            }
        }
        Ok(unused)
    }

    /// Frees at least `bytes` if it can: unused images past the minimum age, least
    /// recently used first (then the older first seen).
    pub async fn free<R: CriRuntime>(
        &mut self,
        runtime: &R,
        bytes: u64,
        now: Instant,
    ) -> Result<Freed, wasmlet_cri::CriError> {
        let mut candidates: Vec<(wasmlet_cri::proto::Image, Record)> = self
            .detect(runtime, now)
            .await?
            .into_iter()
            .filter_map(|i| {
                let r = *self.records.get(&i.id)?;
                (now.saturating_duration_since(r.first_seen) >= self.policy.min_age)
                    .then_some((i, r))
            })
            .collect();
        candidates.sort_by_key(|(_, r)| (r.last_used, r.first_seen));
        let mut freed = Freed::default();
        for (image, record) in candidates {
            if freed.freed >= bytes {
                break;
            }
            let spec = ImageSpec {
                image: image.id.clone(),
                ..Default::default()
            };
            match runtime.remove_image(spec).await {
                Ok(()) => {
                    tracing::info!(
                        image = %image.repo_tags.first().unwrap_or(&image.id),
                        size = record.size,
                        "image garbage collection: removed an unused image"
                    );
                    self.records.remove(&image.id);
                    freed.removed += 1;
                    freed.freed += record.size;
                }
                Err(e) => tracing::warn!(
                    image = %image.id,
                    "image garbage collection: cannot remove an unused image: {e}"
                ),
            }
        }
        Ok(freed)
    }

    /// Every unused image past the minimum age (eviction's node-level reclaim).
    pub async fn delete_unused<R: CriRuntime>(
        &mut self,
        runtime: &R,
    ) -> Result<Freed, wasmlet_cri::CriError> {
        self.free(runtime, u64::MAX, Instant::now()).await
    }

    /// How many bytes to free on an image filesystem of `capacity` with `available`
    /// left: none below the high mark, else down to the low mark.
    pub fn to_free(&self, capacity: u64, available: u64) -> u64 {
        if capacity == 0 || self.policy.high_percent >= 100 {
            return 0;
        }
        let used = capacity.saturating_sub(available);
        let percent = used.saturating_mul(100) / capacity;
        if percent < u64::from(self.policy.high_percent) {
            return 0;
        }
        let target_available = capacity * u64::from(100 - self.policy.low_percent) / 100;
        target_available.saturating_sub(available)
    }

    /// One collection on an image filesystem of `capacity` with `available` left:
    /// `None` when under the high mark.
    pub async fn collect<R: CriRuntime>(
        &mut self,
        runtime: &R,
        capacity: u64,
        available: u64,
        now: Instant,
    ) -> Result<Option<Freed>, wasmlet_cri::CriError> {
        let want = self.to_free(capacity, available);
        if want == 0 {
            self.detect(runtime, now).await?;
            return Ok(None);
        }
        tracing::info!(
            capacity,
            available,
            want,
            "image garbage collection: disk usage above the high threshold ({}%)",
            self.policy.high_percent
        );
        let freed = self.free(runtime, want, now).await?;
        if freed.freed < want {
            tracing::warn!(
                want,
                freed = freed.freed,
                "image garbage collection: failed to free enough space"
            );
        }
        Ok(Some(freed))
    }
}

#[cfg(test)]
mod tests;
