//! `probe-grpc`: the kubelet's grpc probe. Calls `grpc.health.v1.Health/Check` on
//! `host:port` over HTTP/2 (cleartext, as the kubelet does) with the probe's service
//! name; `SERVING` is success, any other status or an RPC error is failure, worded as
//! the kubelet words it (`service unhealthy (responded with "NOT_SERVING")`, `this
//! server does not implement the grpc health protocol (grpc.health.v1.Health): …`).
//! Needs network access to the pod's address (wasi:http; the host speaks HTTP/2 for
//! `application/grpc` requests).

use wasmlet_plugin_sdk::http::{self, Request};
use wasmlet_plugin_sdk::probe::*;

struct Grpc;

/// gRPC status codes the kubelet words specially, and names for the rest.
fn code_name(code: u32) -> String {
    const NAMES: [&str; 17] = [
        "OK",
        "Canceled",
        "Unknown",
        "InvalidArgument",
        "DeadlineExceeded",
        "NotFound",
        "AlreadyExists",
        "PermissionDenied",
        "ResourceExhausted",
        "FailedPrecondition",
        "Aborted",
        "OutOfRange",
        "Unimplemented",
        "Internal",
        "Unavailable",
        "DataLoss",
        "Unauthenticated",
    ];
    NAMES
        .get(code as usize)
        .map_or_else(|| format!("Code({code})"), |n| (*n).to_owned())
}

/// `HealthCheckRequest { service }` in a gRPC frame (uncompressed, length-prefixed).
fn request_frame(service: &str) -> Vec<u8> {
    let mut message = Vec::new();
    if !service.is_empty() {
        message.push(0x0a); // field 1, length-delimited
        let mut len = service.len();
        while len >= 0x80 {
            message.push((len as u8) | 0x80);
            len >>= 7;
        }
        message.push(len as u8);
        message.extend_from_slice(service.as_bytes());
    }
    let mut frame = vec![0];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(&message);
    frame
}

/// The `status` of a `HealthCheckResponse` frame (0 when absent, as proto3 omits it).
fn response_status(body: &[u8]) -> Result<u64, String> {
    let Some((&[flag, a, b, c, d], message)) = body.split_first_chunk::<5>() else {
        return Err("empty response".into());
    };
    if flag != 0 {
        return Err("compressed response".into());
    }
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    let message = message.get(..len).ok_or("truncated response")?;
    let mut i = 0;
    let varint = |i: &mut usize| -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *message.get(*i).ok_or("truncated varint")?;
            *i += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err("overlong varint".into())
    };
    let mut status = 0;
    while i < message.len() {
        let key = varint(&mut i)?;
        match (key >> 3, key & 7) {
            (1, 0) => status = varint(&mut i)?,
            (_, 0) => {
                varint(&mut i)?;
            }
            (_, 2) => {
                let n = varint(&mut i)? as usize;
                i += n;
            }
            (_, 1) => i += 8,
            (_, 5) => i += 4,
            _ => return Err("malformed response".into()),
        }
    }
    Ok(status)
}

/// `grpc-message` is percent-encoded on the wire.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn status_name(status: u64) -> String {
    match status {
        0 => "UNKNOWN".into(),
        1 => "SERVING".into(),
        2 => "NOT_SERVING".into(),
        3 => "SERVICE_UNKNOWN".into(),
        n => n.to_string(),
    }
}

impl ProbeHandler for Grpc {
    fn check(target: Target) -> Outcome {
        let Action::Grpc(action) = &target.action else {
            return Outcome::Error("probe-grpc handles grpc probes only".into());
        };
        let address = target.address(&action.host, action.port);
        let timeout = target.timeout();
        let service = action.service.clone().unwrap_or_default();
        let request = Request::post(
            format!("http://{address}/grpc.health.v1.Health/Check"),
            request_frame(&service),
        )
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", format!("{}m", timeout.as_millis().max(1)))
        .header("user-agent", "kube-probe/1.34");

        let response = match http::send(&request, timeout) {
            Ok(r) => r,
            Err(http::Error::Timeout) => {
                return Outcome::Failure(format!(
                    "timeout: health rpc did not complete within {}s",
                    timeout.as_secs_f64()
                ));
            }
            Err(e) => {
                return Outcome::Failure(format!(
                    "error: failed to connect service at {address:?}: {e}"
                ));
            }
        };
        let code = response
            .header("grpc-status")
            .and_then(|s| s.trim().parse::<u32>().ok());
        let message = percent_decode(&response.header("grpc-message").unwrap_or_default());
        match code {
            Some(0) => {}
            Some(12) => {
                return Outcome::Failure(format!(
                    "this server does not implement the grpc health protocol (grpc.health.v1.Health): {message}"
                ));
            }
            Some(4) => {
                return Outcome::Failure(format!(
                    "timeout: health rpc did not complete within {}s",
                    timeout.as_secs_f64()
                ));
            }
            Some(code) => {
                return Outcome::Failure(format!(
                    "error: health rpc probe failed: rpc error: code = {} desc = {message}",
                    code_name(code)
                ));
            }
            None => {
                return Outcome::Failure(format!(
                    "error: health rpc probe failed: HTTP status {} without a grpc-status",
                    response.status
                ));
            }
        }
        match response_status(&response.body) {
            Ok(1) => Outcome::Success("SERVING".into()),
            Ok(status) => Outcome::Failure(format!(
                "service unhealthy (responded with {:?})",
                status_name(status)
            )),
            Err(e) => Outcome::Failure(format!("error: health rpc probe failed: {e}")),
        }
    }
}

wasmlet_plugin_sdk::export_probe_handler!(Grpc);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_encode_and_decode() {
        assert_eq!(request_frame(""), vec![0, 0, 0, 0, 0]);
        assert_eq!(
            request_frame("db"),
            vec![0, 0, 0, 0, 4, 0x0a, 2, b'd', b'b']
        );
        assert_eq!(response_status(&[0, 0, 0, 0, 2, 0x08, 1]), Ok(1));
        assert_eq!(response_status(&[0, 0, 0, 0, 0]), Ok(0));
        assert!(response_status(&[0, 0, 0, 0, 9, 0x08]).is_err());
        assert_eq!(code_name(5), "NotFound");
        assert_eq!(
            percent_decode("service%20not%20registered%"),
            "service not registered%"
        );
    }
}
