//! Images: list, status, pull (a `.invalid` registry fails as an unreachable one does)
//! and remove.

use super::*;

impl Simulator {
    /// `ListImages`.
    pub(crate) async fn list_images(
        &self,
        filter: Option<proto::ImageFilter>,
    ) -> Result<Vec<proto::Image>, Status> {
        self.enter("ListImages").await?;
        let st = self.inner.lock();
        let wanted = filter
            .and_then(|f| f.image)
            .map(|i| i.image)
            .filter(|i| !i.is_empty());
        Ok(match wanted {
            Some(reference) => st
                .images
                .resolve(&reference)
                .map(|i| i.to_proto())
                .into_iter()
                .collect(),
            None => st.images.all().map(|i| i.to_proto()).collect(),
        })
    }

    /// `ImageStatus`.
    pub(crate) async fn image_status(
        &self,
        image: Option<proto::ImageSpec>,
    ) -> Result<Option<proto::Image>, Status> {
        self.enter("ImageStatus").await?;
        let reference = image.map(|i| i.image).unwrap_or_default();
        Ok(self
            .inner
            .lock()
            .images
            .resolve(&reference)
            .map(|i| i.to_proto()))
    }

    /// `PullImage`: any reference whose registry host ends in `.invalid` fails like an
    /// unresolvable registry; anything else "downloads" (after the method's latency).
    pub(crate) async fn pull_image(
        &self,
        image: Option<proto::ImageSpec>,
    ) -> Result<String, Status> {
        self.enter("PullImage").await?;
        let reference = image.map(|i| i.image).unwrap_or_default();
        if reference.is_empty() {
            return Err(Status::invalid_argument(
                "image reference must not be empty",
            ));
        }
        let normalized = normalize_reference(&reference);
        let host = normalized.split('/').next().unwrap_or_default();
        if host.ends_with(".invalid") {
            return Err(unknown(format!(
                "failed to pull and unpack image {normalized:?}: failed to resolve reference {normalized:?}: \
                 failed to do request: Head \"https://{host}/v2/\": dial tcp: lookup {host}: no such host"
            )));
        }
        let mut st = self.inner.lock();
        if let Some(existing) = st.images.resolve(&reference) {
            return Ok(existing.id.clone());
        }
        Ok(st.images.add(&reference, vec!["sh".into()], None))
    }

    /// `RemoveImage`. Idempotent.
    pub(crate) async fn remove_image(&self, image: Option<proto::ImageSpec>) -> Result<(), Status> {
        self.enter("RemoveImage").await?;
        let reference = image.map(|i| i.image).unwrap_or_default();
        self.inner.lock().images.remove(&reference);
        Ok(())
    }
}
