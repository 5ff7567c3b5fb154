//! `scripts/containerd.sh up` (what `wasmlet up` and the test command run) on a machine
//! where another interface already routes part of the pod network — podman's default
//! network takes 10.88.0.0/16 — stops before starting anything, naming the interface and
//! how to choose another range. Needs root (it makes a bridge); skipped without.

use std::process::Command;

#[test]
fn a_pod_network_another_interface_routes_is_refused_naming_it() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if !root {
        eprintln!("not root: skipped");
        return;
    }
    let bridge = "wlcollide0";
    let ip = |args: &[&str]| {
        Command::new("ip")
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    };
    let _ = ip(&["link", "delete", bridge]);
    // A range no other test uses, so the shared containerd's pods are untouched.
    assert!(
        ip(&["link", "add", bridge, "type", "bridge"]),
        "ip link add"
    );
    assert!(ip(&["addr", "add", "10.200.7.1/24", "dev", bridge]));
    assert!(ip(&["link", "set", bridge, "up"]));
    let dir = std::env::temp_dir().join(format!("wasmlet-cidr-{}", std::process::id()));
    let out = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/containerd.sh"
        ))
        .arg("up")
        .arg(&dir)
        .env("WASMLET_POD_CIDR", "10.200.0.0/16")
        .env("WASMLET_CNI_BRIDGE", "wltest9")
        .output()
        .expect("containerd.sh");
    let _ = ip(&["link", "delete", bridge]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "the pod network 10.200.0.0/16 overlaps 10.200.7.0/24, already routed through wlcollide0"
        ) && stderr.contains("WASMLET_POD_CIDR="),
        "{stderr}"
    );
    assert!(!dir.join("containerd.pid").exists(), "nothing was started");
    let _ = std::fs::remove_dir_all(&dir);
}
