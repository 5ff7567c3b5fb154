//! What the kubelet server end-to-end test reads and writes with: a stream read up to
//! a text, a raw request to port 10250 as a client that is not the API server, and
//! `kubectl cp` both ways.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use tokio::io::AsyncReadExt;

/// Reads from `r` until what was read contains `want` (within 20 s).
pub async fn read_until(r: &mut (impl tokio::io::AsyncRead + Unpin), want: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(20);
    while !String::from_utf8_lossy(&got).contains(want) {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, r.read(&mut buf))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{want:?} not read in time; got {:?}",
                    String::from_utf8_lossy(&got)
                )
            })
            .expect("read");
        assert!(
            n > 0,
            "stream ended before {want:?}; got {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// A raw request to the kubelet server, as a client that is not the API server.
pub async fn raw(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
    wasmlet_server::dev::get(port, path, token).await
}

/// `kubectl cp` into ks-web and back, with the commands kubectl runs: a tar stream into
/// `tar -xmf - -C /tmp` (over SPDY, whose stdin stream a client can close, as kubectl
/// 1.28 does), then `tar cf - cp-src` read back over WebSocket and unpacked here.
pub async fn kubectl_cp_both_ways(api: &str, pods: &Api<Pod>, dir: &Path) {
    let src = dir.join("cp-src");
    std::fs::create_dir_all(src.join("deep")).expect("mkdir");
    std::fs::write(src.join("notes.txt"), "copied in\n").expect("write");
    let binary: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(src.join("deep/blob.bin"), &binary).expect("write");
    let tar = |args: &[&str], input: Option<&[u8]>| {
        let mut child = std::process::Command::new("tar")
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("tar");
        let mut stdin = child.stdin.take().expect("stdin");
        if let Some(bytes) = input {
            std::io::Write::write_all(&mut stdin, bytes).expect("into tar");
        }
        drop(stdin);
        let out = child.wait_with_output().expect("tar");
        assert!(out.status.success(), "tar {args:?}: {:?}", out.status);
        out.stdout
    };
    let archive = tar(&["cf", "-", "-C", &dir.to_string_lossy(), "cp-src"], None);
    let (_, out, status) = super::spdy::exec_stdin(
        api,
        "ks-web",
        &["tar", "-xmf", "-", "-C", "/tmp"],
        Some(&archive),
    )
    .await;
    assert!(
        status.contains("\"Success\""),
        "tar -x in the pod: {status} {out}"
    );

    let mut back = pods
        .exec(
            "ks-web",
            ["tar", "cf", "-", "-C", "/tmp", "cp-src"],
            &AttachParams::default().stdout(true).stderr(false),
        )
        .await
        .expect("exec tar cf");
    let mut packed = Vec::new();
    back.stdout()
        .expect("stdout")
        .read_to_end(&mut packed)
        .await
        .expect("tar stream");
    back.join().await.expect("join");
    let out_dir = dir.join("cp-back");
    std::fs::create_dir_all(&out_dir).expect("mkdir");
    tar(
        &["xf", "-", "-C", &out_dir.to_string_lossy()],
        Some(&packed),
    );
    assert_eq!(
        std::fs::read_to_string(out_dir.join("cp-src/notes.txt")).expect("notes back"),
        "copied in\n"
    );
    assert!(
        std::fs::read(out_dir.join("cp-src/deep/blob.bin")).expect("blob back") == binary,
        "the binary file came back unchanged"
    );
}
