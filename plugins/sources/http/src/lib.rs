//! `source-http`: the kubelet's HTTP source (`staticPodURL`). GETs the `url` config
//! value, with a header for every `header.NAME` config value (the kubelet's
//! `staticPodURLHeader`), and reads the body as manifests: a Pod, a PodList, or several
//! YAML documents. An empty body is an empty set; a status other than 200 or a failed
//! request leaves the previous set in place. Needs a URL grant covering `url`.

use std::time::Duration;

use wasmlet_plugin_sdk::host;
use wasmlet_plugin_sdk::http::{self, Request};
use wasmlet_plugin_sdk::source::*;

/// How long a fetch may take unless `timeout-seconds` says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

struct HttpSource;

impl PodSource for HttpSource {
    fn poll() -> Result<Snapshot, String> {
        let url = host::config("url").ok_or("no `url` in the source's configuration")?;
        let timeout = match host::config("timeout-seconds") {
            Some(s) => Duration::from_secs_f64(
                s.parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v > 0.0)
                    .ok_or_else(|| format!("timeout-seconds {s:?}: not a positive number"))?,
            ),
            None => DEFAULT_TIMEOUT,
        };
        let mut request = Request::get(url.clone());
        request.max_body = 16 << 20;
        for (key, value) in host::config_all() {
            if let Some(name) = key.strip_prefix("header.") {
                request = request.header(name, value);
            }
        }
        let response = http::send(&request, timeout).map_err(|e| format!("GET {url}: {e}"))?;
        if response.status != 200 {
            return Err(format!("{url}: HTTP status {}", response.status));
        }
        if response.body.is_empty() {
            return Ok(Manifests::default().into());
        }
        let text = String::from_utf8(response.body)
            .map_err(|_| format!("{url}: the body is not UTF-8 text"))?;
        Ok(parse_manifests(&url, &text).into())
    }
}

wasmlet_plugin_sdk::export_pod_source!(HttpSource);
