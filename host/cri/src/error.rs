//! One error type for every CRI failure, naming the call and the endpoint.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// What went wrong, for callers to match on. The gRPC status codes a runtime answers
/// with map one to one; the rest are the client's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The sandbox, container or image does not exist (gRPC NOT_FOUND).
    NotFound,
    /// The object exists already (gRPC ALREADY_EXISTS).
    AlreadyExists,
    /// The request was malformed (gRPC INVALID_ARGUMENT).
    InvalidArgument,
    /// The object is not in a state that allows the call (gRPC FAILED_PRECONDITION).
    FailedPrecondition,
    /// The runtime cannot be reached: socket missing, connection refused or reset,
    /// runtime restarting (gRPC UNAVAILABLE, and every transport failure).
    Unavailable,
    /// The call did not finish within its deadline (client side or gRPC DEADLINE_EXCEEDED).
    DeadlineExceeded,
    /// The runtime does not implement the call (gRPC UNIMPLEMENTED).
    Unimplemented,
    /// The call was cancelled (gRPC CANCELLED).
    Cancelled,
    /// The runtime ran out of something (gRPC RESOURCE_EXHAUSTED).
    ResourceExhausted,
    /// The caller may not do this (gRPC PERMISSION_DENIED / UNAUTHENTICATED).
    PermissionDenied,
    /// The runtime failed internally (gRPC INTERNAL, DATA_LOSS, ABORTED, OUT_OF_RANGE).
    Internal,
    /// The runtime failed without saying how (gRPC UNKNOWN). containerd answers most
    /// of its own failures (a failed runc start, a name conflict) with this code.
    Unknown,
    /// The endpoint string is not something this client can dial.
    InvalidEndpoint,
    /// The runtime speaks a CRI version other than `v1`.
    VersionMismatch,
}

impl ErrorKind {
    fn from_code(code: tonic::Code) -> Self {
        use tonic::Code;
        match code {
            Code::NotFound => Self::NotFound,
            Code::AlreadyExists => Self::AlreadyExists,
            Code::InvalidArgument => Self::InvalidArgument,
            Code::FailedPrecondition => Self::FailedPrecondition,
            Code::Unavailable => Self::Unavailable,
            Code::DeadlineExceeded => Self::DeadlineExceeded,
            Code::Unimplemented => Self::Unimplemented,
            Code::Cancelled => Self::Cancelled,
            Code::ResourceExhausted => Self::ResourceExhausted,
            Code::PermissionDenied | Code::Unauthenticated => Self::PermissionDenied,
            Code::Internal | Code::DataLoss | Code::Aborted | Code::OutOfRange => Self::Internal,
            Code::Unknown | Code::Ok => Self::Unknown,
        }
    }

    /// The gRPC status code a server answers with for this kind.
    pub fn code(self) -> tonic::Code {
        use tonic::Code;
        match self {
            Self::NotFound => Code::NotFound,
            Self::AlreadyExists => Code::AlreadyExists,
            Self::InvalidArgument | Self::InvalidEndpoint => Code::InvalidArgument,
            Self::FailedPrecondition | Self::VersionMismatch => Code::FailedPrecondition,
            Self::Unavailable => Code::Unavailable,
            Self::DeadlineExceeded => Code::DeadlineExceeded,
            Self::Unimplemented => Code::Unimplemented,
            Self::Cancelled => Code::Cancelled,
            Self::ResourceExhausted => Code::ResourceExhausted,
            Self::PermissionDenied => Code::PermissionDenied,
            Self::Internal => Code::Internal,
            Self::Unknown => Code::Unknown,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::NotFound => "not found",
            Self::AlreadyExists => "already exists",
            Self::InvalidArgument => "invalid argument",
            Self::FailedPrecondition => "failed precondition",
            Self::Unavailable => "runtime unavailable",
            Self::DeadlineExceeded => "deadline exceeded",
            Self::Unimplemented => "not implemented by the runtime",
            Self::Cancelled => "cancelled",
            Self::ResourceExhausted => "resource exhausted",
            Self::PermissionDenied => "permission denied",
            Self::Internal => "runtime internal error",
            Self::Unknown => "runtime error",
            Self::InvalidEndpoint => "invalid endpoint",
            Self::VersionMismatch => "unsupported CRI version",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// A failed CRI call: which call, against which endpoint, what kind of failure, and the
/// runtime's own words.
///
/// Displays as `CRI ListContainers on unix:///run/x.sock: runtime unavailable: <message>`.
#[derive(Debug, Clone)]
pub struct CriError {
    call: &'static str,
    endpoint: Arc<str>,
    kind: ErrorKind,
    message: String,
    source: Option<Arc<dyn StdError + Send + Sync>>,
}

impl CriError {
    /// An error of `kind` for `call` on `endpoint`.
    pub fn new(
        call: &'static str,
        endpoint: impl Into<Arc<str>>,
        kind: ErrorKind,
        message: impl Into<String>,
    ) -> Self {
        Self {
            call,
            endpoint: endpoint.into(),
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// Maps a gRPC status to an error. A status that carries a failure of the
    /// connection itself (refused, reset, broken mid-call) is [`ErrorKind::Unavailable`]
    /// whatever its code: the runtime was not there to answer.
    pub fn from_status(
        call: &'static str,
        endpoint: impl Into<Arc<str>>,
        status: tonic::Status,
    ) -> Self {
        let kind = if is_transport_failure(&status) {
            ErrorKind::Unavailable
        } else {
            ErrorKind::from_code(status.code())
        };
        let mut message = status.message().to_owned();
        let source = status.source().map(|s| {
            // tonic puts the transport failure ("connection refused", "No such file or
            // directory") in the source chain; say it in the message too, it is the useful part.
            let mut chain = Vec::new();
            let mut cur: Option<&(dyn StdError + 'static)> = Some(s);
            while let Some(e) = cur {
                chain.push(e.to_string());
                cur = e.source();
            }
            chain.join(": ")
        });
        if let Some(detail) = &source {
            if message.is_empty() || message == "transport error" {
                message = detail.clone();
            } else if !message.contains(detail.as_str()) {
                message = format!("{message}: {detail}");
            }
        }
        Self {
            call,
            endpoint: endpoint.into(),
            kind,
            message,
            source: None,
        }
    }

    /// The client gave up waiting after `timeout`.
    pub fn deadline(call: &'static str, endpoint: impl Into<Arc<str>>, timeout: Duration) -> Self {
        Self::new(
            call,
            endpoint,
            ErrorKind::DeadlineExceeded,
            format!("no answer within {timeout:?}"),
        )
    }

    /// Attaches an underlying error.
    pub fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The CRI call that failed (`RunPodSandbox`, `ListContainers`, ...).
    pub fn call(&self) -> &'static str {
        self.call
    }

    /// The runtime endpoint the call went to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The runtime's (or the transport's) own description.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Shorthand for `kind() == ErrorKind::NotFound`.
    pub fn is_not_found(&self) -> bool {
        self.kind == ErrorKind::NotFound
    }

    /// Shorthand for `kind() == ErrorKind::Unimplemented`.
    pub fn is_unimplemented(&self) -> bool {
        self.kind == ErrorKind::Unimplemented
    }

    /// The gRPC status a CRI server answers with for this error.
    pub fn to_status(&self) -> tonic::Status {
        tonic::Status::new(self.kind.code(), self.message.clone())
    }
}

/// Whether tonic built this status from a failure of the connection itself.
fn is_transport_failure(status: &tonic::Status) -> bool {
    let mut cur: Option<&(dyn StdError + 'static)> = status.source();
    while let Some(e) = cur {
        if e.is::<tonic::transport::Error>() || e.is::<std::io::Error>() {
            return true;
        }
        cur = e.source();
    }
    false
}

impl fmt::Display for CriError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CRI {} on {}: {}", self.call, self.endpoint, self.kind)?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

impl StdError for CriError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_map_to_kinds_and_back() {
        for (code, kind) in [
            (tonic::Code::NotFound, ErrorKind::NotFound),
            (tonic::Code::Unavailable, ErrorKind::Unavailable),
            (tonic::Code::DeadlineExceeded, ErrorKind::DeadlineExceeded),
            (tonic::Code::Unimplemented, ErrorKind::Unimplemented),
            (tonic::Code::Unknown, ErrorKind::Unknown),
            (tonic::Code::AlreadyExists, ErrorKind::AlreadyExists),
        ] {
            let e =
                CriError::from_status("ListContainers", "unix:///x", tonic::Status::new(code, "m"));
            assert_eq!(e.kind(), kind);
            assert_eq!(e.to_status().code(), code);
        }
    }

    #[test]
    fn display_names_call_endpoint_and_message() {
        let e = CriError::from_status(
            "ContainerStatus",
            "unix:///run/c.sock",
            tonic::Status::not_found("container \"abc\" not found"),
        );
        assert_eq!(
            e.to_string(),
            "CRI ContainerStatus on unix:///run/c.sock: not found: container \"abc\" not found"
        );
        assert!(e.is_not_found());
    }
}
