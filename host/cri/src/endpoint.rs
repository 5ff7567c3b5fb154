//! Runtime endpoints: `unix:///path/to/socket` (or a bare absolute path).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{CriError, ErrorKind};

/// A parsed runtime endpoint. Only unix sockets are supported, as with the kubelet on
/// Linux.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    text: Arc<str>,
    path: PathBuf,
}

impl Endpoint {
    /// Parses `unix:///run/containerd/containerd.sock` or `/run/containerd/containerd.sock`.
    pub fn parse(text: &str) -> Result<Self, CriError> {
        let invalid =
            |why: &str| CriError::new("connect", text, ErrorKind::InvalidEndpoint, why.to_string());
        let path = if let Some(rest) = text.strip_prefix("unix://") {
            rest
        } else if text.contains("://") {
            return Err(invalid("only unix:// endpoints are supported"));
        } else {
            text
        };
        if path.is_empty() {
            return Err(invalid("the socket path is empty"));
        }
        if !path.starts_with('/') {
            return Err(invalid("the socket path must be absolute (unix:///path)"));
        }
        // sockaddr_un holds 108 bytes including the terminating NUL.
        if path.len() > 107 {
            return Err(invalid(
                "the socket path is longer than the 107 bytes a unix socket allows",
            ));
        }
        Ok(Self {
            text: format!("unix://{path}").into(),
            path: PathBuf::from(path),
        })
    }

    /// The socket's path on this host.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The endpoint as written in errors and logs (`unix:///...`).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub(crate) fn shared(&self) -> Arc<str> {
        self.text.clone()
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Endpoint({})", self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_unix_urls_and_bare_paths() {
        let e = Endpoint::parse("unix:///run/containerd/containerd.sock").expect("valid");
        assert_eq!(e.path(), Path::new("/run/containerd/containerd.sock"));
        let e = Endpoint::parse("/tmp/x.sock").expect("valid");
        assert_eq!(e.as_str(), "unix:///tmp/x.sock");
    }

    #[test]
    fn rejects_what_it_cannot_dial() {
        for bad in [
            "tcp://127.0.0.1:1234",
            "unix://",
            "relative.sock",
            "unix://rel.sock",
        ] {
            let err = Endpoint::parse(bad).expect_err(bad);
            assert_eq!(err.kind(), ErrorKind::InvalidEndpoint, "{bad}");
            assert!(err.to_string().contains(bad), "{err}");
        }
        let long = format!("/{}", "a".repeat(120));
        assert_eq!(
            Endpoint::parse(&long).expect_err("long").kind(),
            ErrorKind::InvalidEndpoint
        );
    }
}
