//! Outgoing HTTP from a plugin (`wasi:http`), as plain blocking calls.
//!
//! The host sends the request only if the plugin is granted its address (probe handlers:
//! `network` grants) or its URL (pod sources: `urls` grants); otherwise [`send`] fails
//! with [`Error::Denied`] and nothing leaves the node. A request with
//! `content-type: application/grpc` goes over HTTP/2; everything else over HTTP/1.1.
//!
//! ```ignore
//! use std::time::Duration;
//! use wasmlet_plugin_sdk::http::{Request, send};
//!
//! let response = send(&Request::get("http://10.88.0.7:8080/healthz"), Duration::from_secs(1))?;
//! assert!(response.status < 400);
//! ```

use std::time::{Duration, Instant};

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingBody, IncomingResponse, Method, OutgoingBody, OutgoingRequest,
    RequestOptions, Scheme,
};
use wasip2::io::streams::StreamError;

/// A request to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, …
    pub method: String,
    /// An absolute `http://` or `https://` URL.
    pub url: String,
    /// Headers, in order (a `Host` header replaces the URL's authority on the wire).
    pub headers: Vec<(String, String)>,
    /// The body (empty: none).
    pub body: Vec<u8>,
    /// Body bytes kept at most; the rest is read and dropped.
    pub max_body: usize,
}

impl Request {
    /// A `GET` of `url`, keeping at most 1 MiB of the body.
    pub fn get(url: impl Into<String>) -> Self {
        Self {
            method: "GET".into(),
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            max_body: 1 << 20,
        }
    }

    /// A `POST` of `body` to `url`.
    pub fn post(url: impl Into<String>, body: Vec<u8>) -> Self {
        Self {
            method: "POST".into(),
            body,
            ..Self::get(url)
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// A response, read whole.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers, names in lower case.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body, cut at the request's `max_body`.
    pub body: Vec<u8>,
    /// The trailers (gRPC puts its status there), names in lower case.
    pub trailers: Vec<(String, Vec<u8>)>,
}

impl Response {
    /// The first header (or trailer) named `name` (lower case), as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .chain(&self.trailers)
            .find(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }
}

/// Why a request got no response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The URL is not one this plugin may reach (not granted).
    Denied,
    /// Nothing listens there.
    Refused,
    /// The time ran out (connecting, or waiting for the response).
    Timeout,
    /// The URL could not be parsed.
    InvalidUrl(String),
    /// Anything else, described.
    Other(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Denied => {
                f.write_str("access denied (the address is not granted to this plugin)")
            }
            Self::Refused => f.write_str("connect: connection refused"),
            Self::Timeout => f.write_str(
                "context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
            ),
            Self::InvalidUrl(url) => write!(f, "invalid URL {url:?}"),
            Self::Other(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for Error {}

impl From<ErrorCode> for Error {
    fn from(code: ErrorCode) -> Self {
        match code {
            ErrorCode::HttpRequestDenied => Self::Denied,
            ErrorCode::ConnectionRefused => Self::Refused,
            ErrorCode::ConnectionTimeout
            | ErrorCode::ConnectionReadTimeout
            | ErrorCode::HttpResponseTimeout => Self::Timeout,
            ErrorCode::DnsError(p) => Self::Other(format!(
                "lookup failed: {}",
                p.rcode.unwrap_or_else(|| "no such host".into())
            )),
            ErrorCode::InternalError(Some(m)) => Self::Other(m),
            ErrorCode::TlsProtocolError => Self::Other("TLS handshake failed".into()),
            ErrorCode::TlsCertificateError => Self::Other("TLS certificate not trusted".into()),
            ErrorCode::ConnectionTerminated => Self::Other("connection reset by peer".into()),
            other => Self::Other(format!("{other:?}")),
        }
    }
}

/// An absolute URL's parts.
struct Url<'a> {
    https: bool,
    authority: &'a str,
    path: &'a str,
}

fn parse_url(url: &str) -> Result<Url<'_>, Error> {
    let invalid = || Error::InvalidUrl(url.to_owned());
    let (https, rest) = if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else {
        return Err(invalid());
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.is_empty() {
        return Err(invalid());
    }
    let path = path.split('#').next().unwrap_or("");
    Ok(Url {
        https,
        authority,
        path: if path.is_empty() { "/" } else { path },
    })
}

/// Sends `request` and reads the whole response, all within `timeout`.
pub fn send(request: &Request, timeout: Duration) -> Result<Response, Error> {
    let deadline = Instant::now() + timeout;
    let outgoing = outgoing(request)?;
    let body = outgoing
        .body()
        .map_err(|()| Error::Other("request body taken twice".into()))?;

    let options = RequestOptions::new();
    let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    let _ = options.set_connect_timeout(Some(nanos));
    let _ = options.set_first_byte_timeout(Some(nanos));
    let future = outgoing_handler::handle(outgoing, Some(options))?;

    if !request.body.is_empty() {
        let stream = body
            .write()
            .map_err(|()| Error::Other("request body stream taken twice".into()))?;
        // A blocking write takes at most 4096 bytes at a time.
        for chunk in request.body.chunks(4096) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| Error::Other(format!("writing the request body: {e:?}")))?;
        }
    }
    OutgoingBody::finish(body, None)?;

    wait(&future.subscribe(), deadline)?;
    let incoming = match future.get() {
        Some(Ok(result)) => result?,
        _ => return Err(Error::Other("the response was lost".into())),
    };
    read_response(incoming, request.max_body, deadline)
}

/// The WASI request for `request`: method, scheme, authority, path and headers.
fn outgoing(request: &Request) -> Result<OutgoingRequest, Error> {
    let url = parse_url(&request.url)?;
    let headers = Fields::new();
    for (name, value) in &request.headers {
        headers
            .append(&name.to_ascii_lowercase(), value.as_bytes())
            .map_err(|e| Error::Other(format!("header {name:?}: {e:?}")))?;
    }
    let outgoing = OutgoingRequest::new(headers);
    let method = match request.method.as_str() {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        other => Method::Other(other.to_owned()),
    };
    let set = |ok: Result<(), ()>, what: &str| {
        ok.map_err(|()| Error::Other(format!("{what} refused for {}", request.url)))
    };
    let scheme = if url.https {
        &Scheme::Https
    } else {
        &Scheme::Http
    };
    set(outgoing.set_method(&method), "method")?;
    set(outgoing.set_scheme(Some(scheme)), "scheme")?;
    set(outgoing.set_authority(Some(url.authority)), "authority")?;
    set(outgoing.set_path_with_query(Some(url.path)), "path")?;
    Ok(outgoing)
}

/// The response: status, headers, at most `max_body` bytes of its body (the rest read
/// and dropped) and its trailers, all by `deadline`.
fn read_response(
    incoming: IncomingResponse,
    max_body: usize,
    deadline: Instant,
) -> Result<Response, Error> {
    let mut response = Response {
        status: incoming.status(),
        headers: incoming.headers().entries(),
        ..Response::default()
    };
    let body = incoming
        .consume()
        .map_err(|()| Error::Other("response body taken twice".into()))?;
    {
        let stream = body
            .stream()
            .map_err(|()| Error::Other("response body stream taken twice".into()))?;
        loop {
            wait(&stream.subscribe(), deadline)?;
            match stream.read(64 * 1024) {
                Ok(chunk) => {
                    let room = max_body.saturating_sub(response.body.len());
                    response
                        .body
                        .extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(Error::Other(format!(
                        "reading the response body: {}",
                        e.to_debug_string()
                    )));
                }
            }
        }
    }
    let trailers = IncomingBody::finish(body);
    wait(&trailers.subscribe(), deadline)?;
    if let Some(Ok(Ok(Some(fields)))) = trailers.get() {
        response.trailers = fields.entries();
    }
    Ok(response)
}

/// Blocks until `pollable` is ready, or fails with [`Error::Timeout`] at `deadline`.
fn wait(pollable: &wasip2::io::poll::Pollable, deadline: Instant) -> Result<(), Error> {
    let left = deadline.saturating_duration_since(Instant::now());
    let timer = wasip2::clocks::monotonic_clock::subscribe_duration(
        u64::try_from(left.as_nanos()).unwrap_or(u64::MAX),
    );
    let ready = wasip2::io::poll::poll(&[pollable, &timer]);
    if ready.contains(&0) {
        Ok(())
    } else {
        Err(Error::Timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_parts() {
        let u = parse_url("http://10.0.0.1:8080/healthz?x=1#frag").expect("url");
        assert!(!u.https);
        assert_eq!(u.authority, "10.0.0.1:8080");
        assert_eq!(u.path, "/healthz?x=1");
        let u = parse_url("https://[::1]:443").expect("url");
        assert!(u.https);
        assert_eq!(u.authority, "[::1]:443");
        assert_eq!(u.path, "/");
        for bad in ["ftp://x/", "http:///path", "10.0.0.1:80/x"] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }
}
