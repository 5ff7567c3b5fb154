//! Builders for the CRI configs tests and benchmarks send, shaped the way the kubelet
//! shapes them (a container gets its own PID namespace). Start from these and set what a
//! case needs with struct-update syntax.

use wasmlet_cri::proto::*;

use crate::image::BUSYBOX_IMAGE;

/// A sandbox for pod `name` in namespace `default`, UID `uid-<name>`, attempt 0.
pub fn pod(name: &str) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            attempt: 0,
        }),
        ..Default::default()
    }
}

/// A busybox container `name` running `argv`, with its own PID namespace (so `argv[0]`
/// is PID 1 and, without a handler, ignores SIGTERM — as under the kubelet).
pub fn container(name: &str, argv: &[&str]) -> ContainerConfig {
    container_in(name, argv, NamespaceMode::Container)
}

/// [`container`] with the given PID namespace mode (`Pod` shares the sandbox's, where the
/// pause process is PID 1 and SIGTERM's default action kills `argv[0]`).
pub fn container_in(name: &str, argv: &[&str], pid: NamespaceMode) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: BUSYBOX_IMAGE.into(),
            ..Default::default()
        }),
        command: argv.iter().map(|s| s.to_string()).collect(),
        linux: Some(LinuxContainerConfig {
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: NamespaceMode::Pod as i32,
                    pid: pid as i32,
                    ipc: NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}
