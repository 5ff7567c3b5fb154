//! Certificates on disk as the kubelet keeps them: `<dir>/<prefix>-<timestamp>.pem` (the
//! certificate chain, then the private key; mode 0600) and `<prefix>-current.pem`, a
//! symbolic link to the newest, replaced atomically. The prefixes are the kubelet's:
//! `kubelet-client` and `kubelet-server`.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::CertError;

/// A certificate and its key, as stored.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The certificate chain, PEM.
    pub cert_pem: String,
    /// The private key, PEM.
    pub key_pem: String,
    /// When the certificate starts being valid.
    pub not_before: SystemTime,
    /// When it stops.
    pub not_after: SystemTime,
}

impl Pair {
    /// Reads a certificate chain and key (one PEM file or two).
    pub fn parse(cert_pem: &str, key_pem: &str) -> Result<Pair, CertError> {
        let invalid = CertError::Invalid;
        let first = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .next()
            .ok_or_else(|| invalid("no certificate".into()))?
            .map_err(|e| invalid(format!("not a PEM certificate: {e}")))?;
        PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| invalid(format!("no private key: {e}")))?;
        let (_, cert) = x509_parser::parse_x509_certificate(&first)
            .map_err(|e| invalid(format!("not an X.509 certificate: {e}")))?;
        let at = |t: i64| UNIX_EPOCH + Duration::from_secs(u64::try_from(t).unwrap_or(0));
        Ok(Pair {
            cert_pem: cert_pem.to_owned(),
            key_pem: key_pem.to_owned(),
            not_before: at(cert.validity().not_before.timestamp()),
            not_after: at(cert.validity().not_after.timestamp()),
        })
    }

    /// Whether the certificate is valid at `now`.
    pub fn valid_at(&self, now: SystemTime) -> bool {
        self.not_before <= now && now < self.not_after
    }

    /// The rotation deadline: `fraction` (0.7–0.9, jittered by the caller) of the way
    /// through the certificate's lifetime.
    pub fn deadline(&self, fraction: f64) -> SystemTime {
        let life = self
            .not_after
            .duration_since(self.not_before)
            .unwrap_or_default();
        self.not_before + life.mul_f64(fraction.clamp(0.0, 1.0))
    }

    /// The rustls identity of this pair.
    pub fn certified_key(&self) -> Result<rustls::sign::CertifiedKey, CertError> {
        let invalid = CertError::Invalid;
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| invalid(format!("certificate: {e}")))?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .map_err(|e| invalid(format!("private key: {e}")))?;
        let signing = rustls::crypto::ring::sign::any_supported_type(&key)
            .map_err(|e| invalid(format!("private key: {e}")))?;
        Ok(rustls::sign::CertifiedKey::new(certs, signing))
    }
}

/// Where a kind of certificate is kept.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    prefix: &'static str,
}

/// The kubelet's client certificate prefix.
pub const CLIENT: &str = "kubelet-client";
/// The kubelet's serving certificate prefix.
pub const SERVER: &str = "kubelet-server";

impl Store {
    /// The certificates named `<prefix>-*.pem` under `dir`.
    pub fn new(dir: &Path, prefix: &'static str) -> Self {
        Store {
            dir: dir.to_owned(),
            prefix,
        }
    }

    /// `<dir>/<prefix>-current.pem`: what a kubeconfig refers to.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.prefix))
    }

    /// The current pair, if there is one that reads.
    pub fn current(&self) -> Option<Pair> {
        let text = std::fs::read_to_string(self.current_path()).ok()?;
        Pair::parse(&text, &text).ok()
    }

    /// Stores a new pair and points `-current.pem` at it.
    pub fn save(&self, cert_pem: &str, key_pem: &str) -> Result<Pair, CertError> {
        let pair = Pair::parse(cert_pem, key_pem)?;
        let io = |e: std::io::Error| CertError::Store {
            dir: self.dir.display().to_string(),
            message: e.to_string(),
        };
        std::fs::create_dir_all(&self.dir).map_err(io)?;
        let name = format!("{}-{}.pem", self.prefix, timestamp(SystemTime::now()));
        let file = self.dir.join(&name);
        write_private(&file, format!("{cert_pem}{key_pem}").as_bytes()).map_err(io)?;
        let link = self.dir.join(format!(".{}-current.pem.tmp", self.prefix));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&file, &link).map_err(io)?;
        std::fs::rename(&link, self.current_path()).map_err(io)?;
        Ok(pair)
    }
}

/// `t` as RFC 3339 (UTC, seconds), for logs.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    wasmlet_agent::time::rfc3339(i64::try_from(secs).unwrap_or(i64::MAX))
}

/// `YYYY-MM-DD-HH-MM-SS` in UTC, as the kubelet names its files.
fn timestamp(t: SystemTime) -> String {
    rfc3339(t).trim_end_matches('Z').replace(['T', ':'], "-")
}

/// Writes `data` to `path` readable by its owner only.
pub(crate) fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_the_kubelets() {
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01-00-00-00");
        let t = UNIX_EPOCH + Duration::from_secs(1_795_564_800 + 3_723);
        assert_eq!(timestamp(t), "2026-11-25-01-02-03");
        assert_eq!(rfc3339(t), "2026-11-25T01:02:03Z");
    }
}
