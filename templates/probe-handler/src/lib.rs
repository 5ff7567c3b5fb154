//! A custom probe for wasmlet: the container's redis answers `PING` with `+PONG`.
//! Arguments (the custom action's key-values): `port` (default 6379).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use wasmlet_plugin_sdk::probe::*;

struct RedisPing;

fn ping(addr: SocketAddr, timeout: Duration) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(b"PING\r\n")?;
    let mut reply = [0u8; 64];
    let n = stream.read(&mut reply)?;
    Ok(String::from_utf8_lossy(&reply[..n]).trim_end().to_owned())
}

impl ProbeHandler for RedisPing {
    fn check(target: Target) -> Outcome {
        let Action::Custom(args) = &target.action else {
            return Outcome::Error("redis-ping handles custom probes only".into());
        };
        let port = args
            .iter()
            .find(|(k, _)| k == "port")
            .map_or("6379", |(_, v)| v.as_str());
        let Ok(addr) = format!("{}:{port}", target.pod_ip).parse::<SocketAddr>() else {
            return Outcome::Error(format!("bad address {}:{port}", target.pod_ip));
        };
        let timeout = target.timeout();
        match ping(addr, timeout) {
            Ok(reply) if reply == "+PONG" => Outcome::Success(reply),
            Ok(reply) => Outcome::Failure(format!("redis answered {reply:?} to PING")),
            Err(e) => Outcome::Failure(format!("redis at {addr}: {e}")),
        }
    }
}

wasmlet_plugin_sdk::export_probe_handler!(RedisPing);
