//! For tests: requests to a kubelet server as a client that is not the API server.

/// GET `path` from the kubelet server on 127.0.0.1:`port` over TLS (its certificate not
/// checked), with `token` as the bearer token (or none): the status and the body, or
/// the Status message the server answered with.
pub async fn get(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
    let url = format!("https://127.0.0.1:{port}");
    let mut config = kube::Config::new(url.parse().expect("url"));
    config.accept_invalid_certs = true;
    if let Some(t) = token {
        config.auth_info.token = Some(t.to_owned().into());
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = kube::Client::try_from(config).expect("client");
    let request = http::Request::get(path).body(Vec::new()).expect("request");
    match client.request_text(request).await {
        Ok(body) => (200, body),
        Err(kube::Error::Api(s)) => (s.code, s.message),
        Err(e) => panic!("{path}: {e}"),
    }
}
