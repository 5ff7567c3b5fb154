//! The device manager with real device plugins over real unix sockets: registration,
//! health, failures, allocation at admission and the checkpoint — what the e2e_node
//! suite's `Device Plugin Failures` specs check on a node, and what they leave out.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use wasmlet_devices::Manager;
use wasmlet_devices::registration::{bind, serve};
use wasmlet_devices::testing::{self, Behaviour, TestPlugin};

const GPU: &str = "example.com/gpu";

/// A fresh device plugin directory.
fn directory() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("device-plugins");
    (dir, path)
}

/// A manager serving registrations on `dir` until the test ends.
fn start(dir: &std::path::Path) -> Arc<Manager> {
    testing::serve_manager(dir)
}

/// (allocatable, capacity) of GPU, `None` when the node does not have it.
fn counts(m: &Manager) -> (Option<u64>, Option<u64>) {
    testing::counts(m, GPU)
}

/// Waits (5 s at most) until GPU's counts are `want`.
async fn until(m: &Manager, want: (Option<u64>, Option<u64>)) {
    testing::until_counts(m, GPU, want).await;
}

fn pod(uid: &str, init: &[(&str, &str, bool)], apps: &[(&str, &str)]) -> k8s::Pod {
    let container = |name: &str, gpus: &str, sidecar: bool| {
        let mut c = serde_json::json!({
            "name": name, "image": "busybox",
            "resources": {"limits": {GPU: gpus}, "requests": {GPU: gpus}}
        });
        if sidecar {
            c["restartPolicy"] = "Always".into();
        }
        c
    };
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": uid, "namespace": "default", "uid": uid},
        "spec": {
            "initContainers": init.iter().map(|(n, g, s)| container(n, g, *s)).collect::<Vec<_>>(),
            "containers": apps.iter().map(|(n, g)| container(n, g, false)).collect::<Vec<_>>(),
        }
    }))
    .expect("pod")
}

fn container<'a>(p: &'a k8s::Pod, name: &str) -> &'a k8s::Container {
    let spec = p.spec.as_ref().expect("spec");
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .find(|c| c.name == name)
        .expect("container")
}

#[tokio::test]
async fn a_plugins_devices_are_capacity_and_the_healthy_ones_allocatable() {
    let (_t, dir) = directory();
    let m = start(&dir);
    let healthy = [("0", true), ("1", true), ("2", true), ("3", true)];
    let plugin = TestPlugin::serve(&dir, "gpu", &healthy, Behaviour::default());
    plugin.register(&dir, GPU).await.expect("registers");
    until(&m, (Some(4), Some(4))).await;
    plugin.update(&[("0", true), ("1", true), ("2", true), ("3", false)]);
    until(&m, (Some(3), Some(4))).await;
    plugin.update(&[("0", true), ("1", false), ("2", true), ("3", false)]);
    until(&m, (Some(2), Some(4))).await;
    plugin.update(&healthy);
    until(&m, (Some(4), Some(4))).await;
    assert_eq!(plugin.calls(), ["GetDevicePluginOptions", "ListAndWatch"]);
}

#[tokio::test]
async fn a_plugin_whose_options_fail_is_refused_and_never_listed() {
    let (_t, dir) = directory();
    let m = start(&dir);
    let behaviour = Behaviour {
        options_fail: Some("GetDevicePluginOptions failed".into()),
        ..Behaviour::default()
    };
    let plugin = TestPlugin::serve(&dir, "gpu", &[("0", true)], behaviour);
    let err = plugin.register(&dir, GPU).await.expect_err("refused");
    assert!(
        err.message()
            .contains("failed to get device plugin options"),
        "{err:?}"
    );
    assert!(
        err.message().contains("GetDevicePluginOptions failed"),
        "{err:?}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(plugin.calls(), ["GetDevicePluginOptions"]);
    assert_eq!(counts(&m), (None, None), "the resource is not on the node");
}

#[tokio::test]
async fn registrations_the_kubelet_refuses_are_refused_with_its_words() {
    let (_t, dir) = directory();
    let _m = start(&dir);
    let plugin = TestPlugin::serve(&dir, "gpu", &[("0", true)], Behaviour::default());
    let err = plugin
        .register(&dir, "gpu")
        .await
        .expect_err("not extended");
    assert_eq!(err.message(), "the ResourceName \"gpu\" is invalid");
    assert!(plugin.calls().is_empty());
}

#[tokio::test]
async fn a_list_that_fails_is_not_tried_again_and_leaves_a_resource_of_nothing() {
    let (_t, dir) = directory();
    let m = start(&dir);
    let behaviour = Behaviour {
        list_fails: Some("ListAndWatch failed".into()),
        ..Behaviour::default()
    };
    let plugin = TestPlugin::serve(&dir, "gpu", &[("0", true)], behaviour);
    plugin.register(&dir, GPU).await.expect("registers");
    until(&m, (None, Some(0))).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(plugin.calls(), ["GetDevicePluginOptions", "ListAndWatch"]);
    assert_eq!(
        counts(&m),
        (None, Some(0)),
        "kept, at 0, within the grace period"
    );
}

#[tokio::test]
async fn a_plugin_that_stops_leaves_its_devices_unhealthy() {
    let (_t, dir) = directory();
    let m = start(&dir);
    let mut plugin = TestPlugin::serve(
        &dir,
        "gpu",
        &[("0", true), ("1", true)],
        Behaviour::default(),
    );
    plugin.register(&dir, GPU).await.expect("registers");
    until(&m, (Some(2), Some(2))).await;
    plugin.stop().await;
    until(&m, (Some(0), Some(2))).await;
    // It comes back and registers again: its devices count again.
    let again = TestPlugin::serve(
        &dir,
        "gpu-2",
        &[("0", true), ("1", true)],
        Behaviour::default(),
    );
    again.register(&dir, GPU).await.expect("registers again");
    until(&m, (Some(2), Some(2))).await;
}

#[tokio::test]
async fn admission_gives_each_container_its_devices_and_the_container_what_the_plugin_said() {
    let (_t, dir) = directory();
    let m = start(&dir);
    let behaviour = Behaviour {
        options: wasmlet_devices::proto::DevicePluginOptions {
            pre_start_required: true,
            get_preferred_allocation_available: true,
        },
        preferred: vec!["3".into(), "2".into()],
        ..Behaviour::default()
    };
    let devices = [("0", true), ("1", true), ("2", true), ("3", true)];
    let plugin = TestPlugin::serve(&dir, "gpu", &devices, behaviour);
    plugin.register(&dir, GPU).await.expect("registers");
    until(&m, (Some(4), Some(4))).await;

    // An init container's device is given again to the app after it; a sidecar's is its own.
    let p = pod(
        "pod-a",
        &[("setup", "1", false), ("proxy", "1", true)],
        &[("app", "2")],
    );
    m.admit(&p, true, |_| true).await.expect("admitted");
    let allocated = plugin.allocated();
    assert_eq!(allocated.len(), 3, "{allocated:?}");
    let (setup, proxy, app) = (&allocated[0], &allocated[1], &allocated[2]);
    assert_eq!(setup, &["3"], "the plugin's preference");
    assert_eq!(proxy, &["3"], "setup's device, free again once it ends");
    assert!(
        app.contains(&"2".to_string()),
        "preferred among the free: {app:?}"
    );
    assert!(
        !app.contains(&"3".to_string()),
        "the sidecar keeps its own: {app:?}"
    );

    let options = m
        .container_options(&p, container(&p, "app"))
        .await
        .expect("options")
        .expect("some");
    assert_eq!(options.envs["TEST_DEVICES"], app.join(","));
    assert_eq!(options.mounts.len(), 2);
    assert_eq!(
        plugin.pre_started(),
        std::slice::from_ref(app),
        "PreStartContainer with the app's devices"
    );

    // One device is left: a pod asking for two is refused in the kubelet's words.
    let greedy = pod("pod-b", &[], &[("app", "2")]);
    let err = m.admit(&greedy, true, |_| true).await.expect_err("too few");
    assert_eq!(
        err.to_string(),
        "requested number of devices unavailable for example.com/gpu. Requested: 2, Available: 1"
    );
    // Once the first pod is gone its devices are free again.
    m.admit(&greedy, true, |uid| uid != "pod-a")
        .await
        .expect("admitted once pod-a is gone");
}

#[tokio::test]
async fn grants_survive_a_restart_of_the_agent() {
    let (_t, dir) = directory();
    let p = pod("pod-a", &[], &[("app", "1")]);
    {
        let m = start(&dir);
        let plugin = TestPlugin::serve(
            &dir,
            "gpu",
            &[("0", true), ("1", true)],
            Behaviour::default(),
        );
        plugin.register(&dir, GPU).await.expect("registers");
        until(&m, (Some(2), Some(2))).await;
        m.admit(&p, true, |_| true).await.expect("admitted");
        assert_eq!(plugin.allocated().len(), 1);
    }
    // A new manager on the same directory: the plugin registers again (its socket was
    // cleaned away), the container's grant comes from the checkpoint, not a new Allocate.
    let listener_dir = dir.clone();
    let m = Manager::new(&dir);
    assert_eq!(
        counts(&m),
        (Some(0), Some(0)),
        "no device until the plugin is back"
    );
    let listener = bind(&listener_dir).expect("bind again");
    tokio::spawn(serve(m.clone(), listener, std::future::pending()));
    assert!(
        !dir.join("gpu.sock").exists(),
        "old sockets are removed at start"
    );
    let plugin = TestPlugin::serve(
        &dir,
        "gpu",
        &[("0", true), ("1", true)],
        Behaviour::default(),
    );
    plugin.register(&dir, GPU).await.expect("registers");
    until(&m, (Some(2), Some(2))).await;
    // Its devices unhealthy while the sources are not all in: the restarting agent
    // admits its running pod again, keeping what it holds.
    plugin.update(&[("0", false), ("1", false)]);
    until(&m, (Some(0), Some(2))).await;
    m.admit(&p, false, |_| false)
        .await
        .expect("a pod holding its devices is admitted again as the agent restarts");
    plugin.update(&[("0", true), ("1", true)]);
    until(&m, (Some(2), Some(2))).await;
    let options = m
        .container_options(&p, container(&p, "app"))
        .await
        .expect("options")
        .expect("some");
    assert_eq!(options.mounts.len(), 1);
    assert!(
        plugin.allocated().is_empty(),
        "no new allocation: {:?}",
        plugin.allocated()
    );
    let other = pod("pod-b", &[], &[("app", "2")]);
    let err = m
        .admit(&other, true, |_| true)
        .await
        .expect_err("one is held by pod-a");
    assert!(err.to_string().contains("Available: 1"), "{err}");
}

#[tokio::test]
async fn a_node_taken_over_from_the_kubelet_keeps_the_kubelets_grants() {
    use base64::Engine;
    use prost::Message;
    let (_t, dir) = directory();
    std::fs::create_dir_all(&dir).expect("dir");
    let response = wasmlet_devices::proto::ContainerAllocateResponse {
        envs: [("GPU".to_string(), "1".to_string())].into(),
        ..Default::default()
    };
    let resp = base64::engine::general_purpose::STANDARD.encode(response.encode_to_vec());
    let kubelets = format!(
        r#"{{"Data":{{"PodDeviceEntries":[{{"PodUID":"pod-a","ContainerName":"app",
        "ResourceName":"{GPU}","DeviceIDs":{{"-1":["1"]}},"AllocResp":"{resp}"}}],
        "RegisteredDevices":{{"{GPU}":["0","1"]}}}},"Checksum":1}}"#
    );
    std::fs::write(dir.join("kubelet_internal_checkpoint"), kubelets).expect("write");
    let m = start(&dir);
    let p = pod("pod-a", &[], &[("app", "1")]);
    m.admit(&p, false, |_| true)
        .await
        .expect("its running pod is admitted again before the plugin is back");
    let options = m
        .container_options(&p, container(&p, "app"))
        .await
        .expect("options")
        .expect("some");
    assert_eq!(options.envs["GPU"], "1", "what the plugin told the kubelet");
    let plugin = TestPlugin::serve(
        &dir,
        "gpu",
        &[("0", true), ("1", true)],
        Behaviour::default(),
    );
    plugin.register(&dir, GPU).await.expect("registers");
    until(&m, (Some(2), Some(2))).await;
    let other = pod("pod-b", &[], &[("app", "2")]);
    let err = m
        .admit(&other, true, |_| true)
        .await
        .expect_err("device 1 is pod-a's");
    assert!(err.to_string().contains("Available: 1"), "{err}");
}
