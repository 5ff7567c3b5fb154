//! The images the node reports in its status (`status.images`), as the kubelet reports
//! them: largest first, at most `nodeStatusMaxImages` (50), each with up to five names —
//! its digests, then its tags — and its size. The scheduler's ImageLocality scores on
//! them. The runtime is asked every 30 s (the kubelet's image cache period), not on
//! every status.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use wasmlet_cri::CriRuntime;
use wasmlet_cri::proto::Image;

/// The kubelet's default `nodeStatusMaxImages`.
pub const DEFAULT_MAX_IMAGES: usize = 50;
/// Names reported per image (the kubelet's MaxNamesPerImageInNodeStatus).
pub const MAX_NAMES_PER_IMAGE: usize = 5;
/// How often the list is read from the runtime.
pub const REFRESH: Duration = Duration::from_secs(30);

/// `images` as the node status lists them; `max` caps the count (`None`: all).
pub fn node_images(mut images: Vec<Image>, max: Option<usize>) -> Vec<k8s::ContainerImage> {
    images.sort_by_key(|i| std::cmp::Reverse(i.size));
    if let Some(max) = max {
        images.truncate(max);
    }
    images
        .into_iter()
        .map(|i| {
            let mut names = i.repo_digests;
            names.extend(i.repo_tags);
            names.truncate(MAX_NAMES_PER_IMAGE);
            k8s::ContainerImage {
                names: Some(names),
                size_bytes: i64::try_from(i.size).ok(),
            }
        })
        .collect()
}

/// The node's images, as last read.
#[derive(Debug, Default)]
pub struct NodeImages {
    list: Mutex<Arc<Vec<k8s::ContainerImage>>>,
}

impl NodeImages {
    /// The images as last read (empty until the first read).
    pub fn get(&self) -> Arc<Vec<k8s::ContainerImage>> {
        self.list.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Reads the list from `runtime` now.
    pub async fn refresh<R: CriRuntime>(&self, runtime: &R, max: Option<usize>) {
        match runtime.list_images(None).await {
            Ok(images) => {
                *self.list.lock().unwrap_or_else(|e| e.into_inner()) =
                    Arc::new(node_images(images, max));
            }
            Err(e) => tracing::debug!("listing images for the node status: {e}"),
        }
    }

    /// Keeps the list of `runtime`'s images, read every [`REFRESH`], until the task is
    /// aborted.
    pub fn start<R: CriRuntime + 'static>(
        runtime: Arc<R>,
        max: Option<usize>,
    ) -> (Arc<Self>, tokio::task::JoinHandle<()>) {
        let images = Arc::new(NodeImages::default());
        let kept = images.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(REFRESH);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                kept.refresh(runtime.as_ref(), max).await;
            }
        });
        (images, task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(size: u64, tags: &[&str], digests: &[&str]) -> Image {
        Image {
            id: format!("sha256:{size}"),
            size,
            repo_tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            repo_digests: digests.iter().map(|d| (*d).to_owned()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn largest_first_digests_then_tags_at_most_five_names_and_the_cap() {
        let many_tags: Vec<String> = (0..7).map(|i| format!("r/many:{i}")).collect();
        let many_tags: Vec<&str> = many_tags.iter().map(String::as_str).collect();
        let images = vec![
            image(10, &["r/small:1"], &["r/small@sha256:aa"]),
            image(30, &many_tags, &[]),
            image(20, &["r/mid:1", "r/mid:2"], &["r/mid@sha256:bb"]),
        ];
        let listed = node_images(images.clone(), None);
        let sizes: Vec<_> = listed.iter().map(|i| i.size_bytes).collect();
        assert_eq!(sizes, [Some(30), Some(20), Some(10)]);
        assert_eq!(
            listed[1].names.as_deref(),
            Some(
                &[
                    "r/mid@sha256:bb".to_owned(),
                    "r/mid:1".into(),
                    "r/mid:2".into()
                ][..]
            )
        );
        assert_eq!(listed[0].names.as_ref().map(Vec::len), Some(5));
        let capped = node_images(images, Some(2));
        assert_eq!(capped.len(), 2, "nodeStatusMaxImages");
        assert_eq!(capped[1].size_bytes, Some(20));
    }
}
