//! `probe-tcp-socket`: the kubelet's tcpSocket probe. Success when a TCP connection to
//! the target opens within the probe's timeout; otherwise failure with the dial error,
//! worded as the kubelet's Go prober words it (`dial tcp 10.88.0.5:8080: connect:
//! connection refused`). Needs network access to the pod's address (wasi:sockets).

use std::net::{SocketAddr, TcpStream};

use wasmlet_plugin_sdk::probe::*;

struct TcpSocket;

fn describe(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connect: connection refused".into(),
        std::io::ErrorKind::TimedOut => "i/o timeout".into(),
        std::io::ErrorKind::PermissionDenied => "connect: not permitted for this plugin".into(),
        _ => format!("connect: {e}"),
    }
}

impl ProbeHandler for TcpSocket {
    fn check(target: Target) -> Outcome {
        let Action::TcpSocket(action) = &target.action else {
            return Outcome::Error("probe-tcp-socket handles tcpSocket probes only".into());
        };
        let text = target.address(&action.host, action.port);
        let Ok(addr) = text.parse::<SocketAddr>() else {
            return Outcome::Error(format!("{text:?} is not an IP address and port"));
        };
        let timeout = target.timeout();
        // wasi-libc reports a non-blocking connect as done once the socket is writable,
        // which a refused connection also is: the peer address tells the two apart, and
        // a blocking connect (which fails at once) tells why.
        let connected = TcpStream::connect_timeout(&addr, timeout)
            .and_then(|s| s.peer_addr())
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::NotConnected => {
                    TcpStream::connect(addr).and_then(|s| s.peer_addr())
                }
                _ => Err(e),
            });
        match connected {
            Ok(_) => Outcome::Success(String::new()),
            Err(e) => Outcome::Failure(format!("dial tcp {text}: {}", describe(&e))),
        }
    }
}

wasmlet_plugin_sdk::export_probe_handler!(TcpSocket);
