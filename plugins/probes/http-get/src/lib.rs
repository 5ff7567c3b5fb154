//! `probe-http-get`: the kubelet's httpGet probe. A GET of `scheme://host:port/path` with
//! the probe's headers (plus `User-Agent: kube-probe/1.34` and `Accept: */*` unless the
//! probe sets them); a status from 200 to 399 is success, anything else failure
//! (`HTTP probe failed with statuscode: 503`). Redirects to the same host are followed
//! (at most 10); one to another host ends the probe as a success with the kubelet's
//! warning. At most 10 KiB of the body is kept, and on success it is the message.
//! Needs network access to the pod's address (wasi:http).

use std::time::Instant;

use wasmlet_plugin_sdk::http::{self, Request};
use wasmlet_plugin_sdk::probe::*;

/// The kubelet keeps this much of a probe's response body.
const MAX_BODY: usize = 10 << 10;
/// Redirects followed before the probe fails.
const MAX_REDIRECTS: usize = 10;

struct HttpGet;

/// The host name of an absolute URL, without port.
fn host_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next();
    }
    authority.split(':').next()
}

/// Where `location` (from a 3xx of `url`) points.
fn resolve(url: &str, location: &str) -> String {
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.to_owned();
    }
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    if location.starts_with('/') {
        format!("{scheme}://{authority}{location}")
    } else {
        // Relative to the current path's directory.
        let path = &rest[authority.len()..];
        let path = path.split(['?', '#']).next().unwrap_or("");
        let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
        format!("{scheme}://{authority}{dir}/{location}")
    }
}

fn failure_text(url: &str, address: &str, e: &http::Error) -> String {
    match e {
        http::Error::Refused => {
            format!("Get {url:?}: dial tcp {address}: connect: connection refused")
        }
        other => format!("Get {url:?}: {other}"),
    }
}

impl ProbeHandler for HttpGet {
    fn check(target: Target) -> Outcome {
        let Action::HttpGet(action) = &target.action else {
            return Outcome::Error("probe-http-get handles httpGet probes only".into());
        };
        let scheme = match action.scheme.to_ascii_uppercase().as_str() {
            "" | "HTTP" => "http",
            "HTTPS" => "https",
            other => return Outcome::Error(format!("unsupported scheme {other:?}")),
        };
        let address = target.address(&action.host, action.port);
        let path = if action.path.starts_with('/') {
            action.path.clone()
        } else {
            format!("/{}", action.path)
        };
        let mut url = format!("{scheme}://{address}{path}");

        let mut headers = action.headers.clone();
        for (name, default) in [("User-Agent", "kube-probe/1.34"), ("Accept", "*/*")] {
            if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name)) {
                headers.push((name.into(), default.into()));
            }
        }
        // An explicitly empty User-Agent means none, as in Go's client.
        headers.retain(|(k, v)| !(k.eq_ignore_ascii_case("user-agent") && v.is_empty()));

        let deadline = Instant::now() + target.timeout();
        let first_host = host_of(&url).unwrap_or_default().to_owned();
        for _ in 0..=MAX_REDIRECTS {
            let request = Request {
                headers: headers.clone(),
                max_body: MAX_BODY,
                ..Request::get(url.clone())
            };
            let left = deadline.saturating_duration_since(Instant::now());
            let response = match http::send(&request, left) {
                Ok(r) => r,
                Err(e) => return Outcome::Failure(failure_text(&url, &address, &e)),
            };
            let body = String::from_utf8_lossy(&response.body).into_owned();
            let status = response.status;
            if (300..400).contains(&status)
                && let Some(location) = response.header("location")
            {
                let next = resolve(&url, &location);
                if host_of(&next) != Some(first_host.as_str()) {
                    // The kubelet does not follow a redirect off the pod's host; it
                    // counts the redirect as a success and warns.
                    return Outcome::Success(format!(
                        "Probe terminated redirects, Response body: {body}"
                    ));
                }
                url = next;
                continue;
            }
            return if (200..400).contains(&status) {
                Outcome::Success(body)
            } else {
                Outcome::Failure(format!("HTTP probe failed with statuscode: {status}"))
            };
        }
        Outcome::Failure(format!(
            "Get {url:?}: stopped after {MAX_REDIRECTS} redirects"
        ))
    }
}

wasmlet_plugin_sdk::export_probe_handler!(HttpGet);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_resolve_against_the_current_url() {
        let base = "http://10.0.0.1:8080/a/b?x=1";
        assert_eq!(resolve(base, "/c"), "http://10.0.0.1:8080/c");
        assert_eq!(resolve(base, "c"), "http://10.0.0.1:8080/a/c");
        assert_eq!(resolve(base, "https://other/x"), "https://other/x");
        assert_eq!(host_of("http://10.0.0.1:8080/a"), Some("10.0.0.1"));
        assert_eq!(host_of("http://[fd00::1]:80/"), Some("fd00::1"));
    }
}
