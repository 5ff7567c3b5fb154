//! Outgoing HTTP for plugins (`wasi:http/outgoing-handler`), denied unless granted.
//!
//! The host sends every request itself, after checking it against the plugin's
//! [`HttpAccess`]: a URL under one of its granted URL prefixes, or an address inside one
//! of its network grants (`pod` or CIDRs, as for TCP). Anything else fails in the guest
//! with `HTTP-request-denied`, before a connection is opened.
//!
//! Two protocol choices are the host's, because `wasi:http` does not let a guest make
//! them:
//! - A request whose `content-type` is `application/grpc…` goes over HTTP/2 (cleartext
//!   with prior knowledge, or ALPN `h2` over TLS); everything else over HTTP/1.1. This is
//!   how a gRPC health probe runs in a guest.
//! - TLS is verified against the system's CA bundle, except where the grant says not to:
//!   probe handlers, because the kubelet's HTTPS probes skip verification (a pod's
//!   certificate rarely names its IP).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::uri::Scheme;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;
use wasmtime_wasi::runtime::AbortOnDropJoinHandle;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use crate::network::NetworkGrant;

/// How long a connection may take when the guest sets no timeout (the call's deadline
/// ends it sooner).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the system's CA certificates are, in the order looked at.
const CA_BUNDLES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// How a plugin's HTTPS peers are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVerification {
    /// Against the system's CA bundle, with the URL's host name.
    System,
    /// Not at all (the kubelet's HTTPS probes): the connection is encrypted, the peer is
    /// not authenticated.
    Skip,
}

/// What a plugin may reach over HTTP.
#[derive(Debug, Clone)]
pub struct HttpAccess {
    /// Addresses it may send to, whatever the URL.
    pub network: Vec<NetworkGrant>,
    /// The probed pod's address (what the `pod` grant means).
    pub pod_ip: Option<IpAddr>,
    /// URL prefixes it may fetch (`http://10.0.0.5:8080/manifests/`), wherever their
    /// host name resolves to.
    pub urls: Vec<String>,
    /// How HTTPS peers are checked.
    pub tls: TlsVerification,
}

impl HttpAccess {
    /// Whether `url` is under one of the granted prefixes. A prefix matches whole
    /// components: `http://a:80/x` grants `http://a:80/x/y` and `http://a:80/x?q`, not
    /// `http://a:80/xy`.
    pub fn url_granted(&self, url: &str) -> bool {
        self.urls.iter().any(|prefix| {
            url.strip_prefix(prefix.as_str()).is_some_and(|rest| {
                prefix.ends_with('/') || rest.is_empty() || rest.starts_with(['/', '?', '#'])
            })
        })
    }

    fn address_granted(&self, ip: IpAddr) -> bool {
        self.network.iter().any(|g| g.contains(ip, self.pod_ip))
    }
}

/// The `wasi:http` hooks of one call: its access (none = every request denied).
#[derive(Default)]
pub(crate) struct HttpHooks {
    pub(crate) access: Option<Arc<HttpAccess>>,
}

type SendFuture = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), Error>> + Send>,
                ),
                Error,
            >,
        > + Send,
>;

impl WasiHttpHooks for HttpHooks {
    fn is_forbidden_header(&mut self, name: &http::HeaderName) -> bool {
        // A probe may set `Host` (the kubelet honours it); the rest stay forbidden.
        *name != http::header::HOST && wasmtime_wasi_http::DEFAULT_FORBIDDEN_HEADERS.contains(name)
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> SendFuture {
        let access = self.access.clone();
        Box::new(async move {
            let Some(access) = access else {
                return Err(Error::HttpRequestDenied);
            };
            send(&access, request, options.unwrap_or_default()).await
        })
    }
}

/// Checks `request` against `access`, connects, and sends it.
async fn send(
    access: &HttpAccess,
    mut request: http::Request<WasiBody>,
    options: RequestOptions,
) -> Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), Error>> + Send>,
    ),
    Error,
> {
    let uri = request.uri().clone();
    let tls = uri.scheme() == Some(&Scheme::HTTPS);
    let authority = uri.authority().ok_or(Error::HttpRequestUriInvalid)?.clone();
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let by_url = access.url_granted(&uri.to_string());

    let addr = granted_address(access, host, port, by_url).await?;
    let connect_timeout = options.connect_timeout.unwrap_or(CONNECT_TIMEOUT);
    let stream = connect(addr, connect_timeout).await?;

    let grpc = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if !request.headers().contains_key(http::header::HOST) {
        let value = http::HeaderValue::from_str(authority.as_str())
            .map_err(|_| Error::HttpRequestUriInvalid)?;
        request.headers_mut().insert(http::header::HOST, value);
    }

    let io: Box<dyn IoStream> = if tls {
        let config = client_config(access.tls, grpc)?;
        Box::new(tls_handshake(stream, host, config, connect_timeout).await?)
    } else {
        Box::new(stream)
    };
    let io = TokioIo::new(io);

    let first_byte = options.first_byte_timeout.unwrap_or(Duration::MAX);
    let (response, driver): (_, AbortOnDropJoinHandle<Result<(), hyper::Error>>) = if grpc {
        let (mut sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .handshake(io)
            .await?;
        let driver = wasmtime_wasi::runtime::spawn(conn);
        let response = timeout_or(first_byte, sender.send_request(request)).await?;
        (response, driver)
    } else {
        // HTTP/1.1 sends the path only; the authority travels in `Host`.
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        *request.uri_mut() = http::Uri::try_from(path).map_err(|_| Error::HttpRequestUriInvalid)?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
        let driver = wasmtime_wasi::runtime::spawn(conn);
        let response = timeout_or(first_byte, sender.send_request(request)).await?;
        (response, driver)
    };
    let response = response.map(|body| body.map_err(Error::from).boxed_unsync());
    Ok((
        response,
        Box::new(async move { driver.await.map_err(Error::from) }),
    ))
}

/// The first address of `host` the plugin may reach (any, when its URL was granted).
async fn granted_address(
    access: &HttpAccess,
    host: &str,
    port: u16,
    by_url: bool,
) -> Result<SocketAddr, Error> {
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| Error::DnsError {
                rcode: Some(e.to_string()),
                info_code: None,
            })?
            .collect(),
    };
    addrs
        .into_iter()
        .find(|a| by_url || access.address_granted(a.ip()))
        .ok_or(Error::HttpRequestDenied)
}

/// A TCP connection to `addr` within `limit`, its errors in WASI's terms.
async fn connect(addr: SocketAddr, limit: Duration) -> Result<TcpStream, Error> {
    let stream = tokio::time::timeout(limit, TcpStream::connect(addr))
        .await
        .map_err(|_| Error::ConnectionTimeout)?
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::ConnectionRefused => Error::ConnectionRefused,
            std::io::ErrorKind::TimedOut => Error::ConnectionTimeout,
            _ => Error::Connect(e),
        })?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// TLS over `stream` to `host` (a name, or an address), within `limit`.
async fn tls_handshake(
    stream: TcpStream,
    host: &str,
    config: Arc<rustls::ClientConfig>,
    limit: Duration,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, Error> {
    let name = match host.parse::<IpAddr>() {
        Ok(ip) => ServerName::from(ip),
        Err(_) => ServerName::try_from(host.to_owned()).map_err(|e| Error::DnsError {
            rcode: Some(e.to_string()),
            info_code: None,
        })?,
    };
    let connector = tokio_rustls::TlsConnector::from(config);
    tokio::time::timeout(limit, connector.connect(name, stream))
        .await
        .map_err(|_| Error::ConnectionTimeout)?
        .map_err(Error::Tls)
}

async fn timeout_or<T>(
    limit: Duration,
    fut: impl Future<Output = Result<T, hyper::Error>>,
) -> Result<T, Error> {
    match tokio::time::timeout(limit, fut).await {
        Ok(result) => result.map_err(Error::from),
        Err(_) => Err(Error::ConnectionReadTimeout),
    }
}

trait IoStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> IoStream for T {}

/// The TLS client configuration for a verification mode and protocol, built once each.
fn client_config(
    verification: TlsVerification,
    h2: bool,
) -> Result<Arc<rustls::ClientConfig>, Error> {
    static CONFIGS: OnceLock<Result<[Arc<rustls::ClientConfig>; 4], String>> = OnceLock::new();
    let configs = CONFIGS.get_or_init(|| {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = Arc::new(system_roots());
        let build = |skip: bool, h2: bool| -> Result<Arc<rustls::ClientConfig>, String> {
            let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?;
            let mut config = if skip {
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(SkipVerification(provider.clone())))
                    .with_no_client_auth()
            } else {
                builder
                    .with_root_certificates(roots.clone())
                    .with_no_client_auth()
            };
            config.alpn_protocols = vec![if h2 {
                b"h2".to_vec()
            } else {
                b"http/1.1".to_vec()
            }];
            Ok(Arc::new(config))
        };
        Ok([
            build(false, false)?,
            build(false, true)?,
            build(true, false)?,
            build(true, true)?,
        ])
    });
    let configs = configs
        .as_ref()
        .map_err(|e| Error::InternalError(Some(format!("TLS configuration: {e}"))))?;
    let index = usize::from(verification == TlsVerification::Skip) * 2 + usize::from(h2);
    Ok(configs[index].clone())
}

/// The system's CA certificates (none if no bundle is found: every verified HTTPS
/// request then fails with a certificate error, which names the cause).
fn system_roots() -> rustls::RootCertStore {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    if let Some(bundle) = CA_BUNDLES.iter().find(|p| std::path::Path::new(p).exists())
        && let Ok(certs) = CertificateDer::pem_file_iter(bundle)
    {
        roots.add_parsable_certificates(certs.flatten());
    }
    roots
}

/// Accepts any certificate; still checks that the handshake is signed by its key.
#[derive(Debug)]
struct SkipVerification(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for SkipVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_prefixes_match_whole_components() {
        let access = HttpAccess {
            network: vec![],
            pod_ip: None,
            urls: vec![
                "http://config:8080/pods".into(),
                "https://example.com/manifests/".into(),
            ],
            tls: TlsVerification::System,
        };
        for ok in [
            "http://config:8080/pods",
            "http://config:8080/pods/web.yaml",
            "http://config:8080/pods?node=a",
            "https://example.com/manifests/x",
        ] {
            assert!(access.url_granted(ok), "{ok}");
        }
        for denied in [
            "http://config:8080/podsx",
            "http://config:8081/pods",
            "https://config:8080/pods",
            "https://example.com/manifests",
            "http://config:8080.evil/pods",
        ] {
            assert!(!access.url_granted(denied), "{denied}");
        }
    }
}
