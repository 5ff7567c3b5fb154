//! The simulator's images: ids, tags, default commands and per-image scripts.

use std::collections::HashMap;

use wasmlet_cri::proto;

use crate::script::Script;

/// The sandbox ("pause") image the project's containerd is configured with.
pub const PAUSE_IMAGE: &str = "localhost/pause:3.9";
/// The general-purpose image the project builds from busybox.
pub const BUSYBOX_IMAGE: &str = "localhost/busybox:latest";

/// One image.
#[derive(Debug, Clone)]
pub struct ImageRecord {
    /// `sha256:<64 hex>`, derived from the reference so that it is stable across runs.
    pub id: String,
    /// Normalized references naming it.
    pub tags: Vec<String>,
    /// Bytes.
    pub size: u64,
    /// The command containers run when their config gives none.
    pub cmd: Vec<String>,
    /// Behaviour every container of this image gets.
    pub script: Option<Script>,
}

impl ImageRecord {
    /// The CRI view of the image.
    pub fn to_proto(&self) -> proto::Image {
        proto::Image {
            id: self.id.clone(),
            repo_tags: self.tags.clone(),
            size: self.size,
            ..Default::default()
        }
    }
}

/// Images by id, and the tags that point at them.
#[derive(Debug, Default)]
pub struct ImageStore {
    by_id: HashMap<String, ImageRecord>,
    tags: HashMap<String, String>,
}

impl ImageStore {
    /// The pause and busybox images, as `scripts/containerd.sh` imports them.
    pub fn with_defaults() -> Self {
        let mut store = Self::default();
        let pause = "trap 'exit 0' TERM INT; while true; do sleep 3600 & wait $!; done";
        store.add(
            PAUSE_IMAGE,
            vec!["/bin/sh".into(), "-c".into(), pause.into()],
            None,
        );
        store.add(BUSYBOX_IMAGE, vec!["sh".into()], None);
        store
    }

    /// Adds an image under `reference` (replacing what that tag named); returns its id.
    pub fn add(&mut self, reference: &str, cmd: Vec<String>, script: Option<Script>) -> String {
        let tag = normalize_reference(reference);
        let id = format!("sha256:{}", digest_hex(&tag));
        if let Some(old) = self.tags.insert(tag.clone(), id.clone())
            && old != id
            && let Some(img) = self.by_id.get_mut(&old)
        {
            img.tags.retain(|t| *t != tag);
        }
        let size = 2 << 20;
        let record = self.by_id.entry(id.clone()).or_insert_with(|| ImageRecord {
            id: id.clone(),
            tags: Vec::new(),
            size,
            cmd: Vec::new(),
            script: None,
        });
        if !record.tags.contains(&tag) {
            record.tags.push(tag);
        }
        record.cmd = cmd;
        record.script = script;
        id
    }

    /// Finds an image by tag, full id, or an unambiguous id prefix.
    pub fn resolve(&self, reference: &str) -> Option<&ImageRecord> {
        if reference.is_empty() {
            return None;
        }
        if let Some(id) = self.tags.get(&normalize_reference(reference)) {
            return self.by_id.get(id);
        }
        let hex = reference.strip_prefix("sha256:").unwrap_or(reference);
        if hex.len() >= 12 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
            let mut found = self
                .by_id
                .values()
                .filter(|i| i.id["sha256:".len()..].starts_with(hex));
            if let (Some(one), None) = (found.next(), found.next()) {
                return Some(one);
            }
        }
        None
    }

    /// Removes the image a reference names (all its tags). Absent is fine.
    pub fn remove(&mut self, reference: &str) {
        let Some(id) = self.resolve(reference).map(|i| i.id.clone()) else {
            return;
        };
        if let Some(img) = self.by_id.remove(&id) {
            for tag in img.tags {
                self.tags.remove(&tag);
            }
        }
    }

    /// Every image.
    pub fn all(&self) -> impl Iterator<Item = &ImageRecord> {
        self.by_id.values()
    }
}

/// Normalizes a reference the way containerd does: `busybox` →
/// `docker.io/library/busybox:latest`, `me/app` → `docker.io/me/app:latest`.
pub fn normalize_reference(reference: &str) -> String {
    let (name, digest) = match reference.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (reference, None),
    };
    let first = name.split('/').next().unwrap_or_default();
    let has_domain =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut full = match (has_domain, name.contains('/')) {
        (true, _) => name.to_owned(),
        (false, true) => format!("docker.io/{name}"),
        (false, false) => format!("docker.io/library/{name}"),
    };
    let last = full.rsplit('/').next().unwrap_or_default();
    if digest.is_none() && !last.contains(':') {
        full.push_str(":latest");
    }
    if let Some(d) = digest {
        full.push('@');
        full.push_str(d);
    }
    full
}

/// 64 hex digits derived from `text` (FNV-1a, four lanes): stable across runs.
fn digest_hex(text: &str) -> String {
    (0u64..4)
        .map(|lane| {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ lane.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            for b in text.bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
            format!("{h:016x}")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_like_containerd() {
        assert_eq!(
            normalize_reference("busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(normalize_reference("me/app:1"), "docker.io/me/app:1");
        assert_eq!(
            normalize_reference("localhost/busybox"),
            "localhost/busybox:latest"
        );
        assert_eq!(
            normalize_reference("registry.k8s.io/pause:3.9"),
            "registry.k8s.io/pause:3.9"
        );
        assert_eq!(
            normalize_reference("localhost:5000/x"),
            "localhost:5000/x:latest"
        );
        assert_eq!(
            normalize_reference("x@sha256:ab"),
            "docker.io/library/x@sha256:ab"
        );
    }

    #[test]
    fn resolves_by_tag_id_and_prefix() {
        let store = ImageStore::with_defaults();
        let busybox = store.resolve(BUSYBOX_IMAGE).expect("by tag").id.clone();
        assert_eq!(store.resolve(&busybox).map(|i| &i.id), Some(&busybox));
        assert_eq!(store.resolve(&busybox[..20]).map(|i| &i.id), Some(&busybox));
        assert!(store.resolve("localhost/other:1").is_none());
        assert_ne!(store.resolve(PAUSE_IMAGE).map(|i| &i.id), Some(&busybox));
    }
}
