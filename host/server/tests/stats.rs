//! `/stats/summary`, `/metrics/resource` and `/metrics/cadvisor` as metrics-server and
//! `kubectl get --raw /api/v1/nodes/NODE/proxy/stats/summary` read them: through the
//! API server double's node proxy, and directly with a token that may read `nodes/stats`
//! and `nodes/metrics` only. The node runs on the simulator, whose containers report a
//! steady 4 MiB and 1 ms of CPU per second through ListContainerStats.

mod support;

use std::time::Duration;

use support::{NODE, node, raw, run_pod};
use wasmlet_stats::Summary;

/// A GET through the API server (kube's client, the double's admin credentials).
async fn via_api(n: &support::Node, path: &str) -> String {
    let request = http::Request::get(format!("/api/v1/nodes/{NODE}/proxy{path}"))
        .body(Vec::new())
        .expect("request");
    n.client.request_text(request).await.expect(path)
}

/// Waits until a sample shows the pod named `pod` with a CPU rate on each container
/// (two samples of it).
async fn sampled(n: &support::Node, pod: &str) {
    for _ in 0..100 {
        if let Some(s) = n.stats.latest()
            && let Some(p) = s.summary.pod("default", pod)
            && !p.containers.is_empty()
            && p.containers
                .iter()
                .all(|c| c.cpu.as_ref().is_some_and(|c| c.usage_nano_cores.is_some()))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no sample of {pod}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_and_usage_metrics_the_kubelets_way() {
    let mut n = node("stats").await;
    let pod = run_pod(
        &n,
        "usage",
        serde_json::json!([
            {"name": "app", "image": "localhost/busybox:latest", "command": ["sleep", "3600"]},
            {"name": "side", "image": "localhost/busybox:latest", "command": ["sleep", "3600"]},
        ]),
    )
    .await;
    sampled(&n, &pod).await;

    // The Summary, as `kubectl get --raw …/proxy/stats/summary` prints it.
    let text = via_api(&n, "/stats/summary").await;
    let summary: Summary = serde_json::from_str(&text).expect("a Summary");
    let json: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(summary.node.node_name, NODE);
    let mem = summary.node.memory.as_ref().expect("node memory");
    assert!(mem.working_set_bytes.unwrap_or(0) > 0, "{text}");
    assert!(
        mem.available_bytes.is_some(),
        "available = capacity − working set"
    );
    let cpu = summary.node.cpu.as_ref().expect("node cpu");
    assert!(cpu.usage_core_nano_seconds.unwrap_or(0) > 0);
    let fs = summary.node.fs.as_ref().expect("nodefs");
    assert!(fs.capacity_bytes.unwrap_or(0) > 0 && fs.inodes.unwrap_or(0) > 0);
    let image_fs = json["node"]["runtime"]["imageFs"].clone();
    assert!(image_fs["usedBytes"].as_u64().is_some(), "{image_fs}");
    assert!(json["node"]["rlimit"]["maxpid"].as_i64().unwrap_or(0) > 0);

    let p = summary.pod("default", &pod).expect("the pod");
    let names: Vec<&str> = p.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["app", "side"]);
    for c in &p.containers {
        let m = c.memory.as_ref().expect("container memory");
        assert_eq!(m.working_set_bytes, Some(4 << 20));
        let rate = c
            .cpu
            .as_ref()
            .and_then(|c| c.usage_nano_cores)
            .expect("rate");
        // 1 ms per second is a millicore: 1,000,000 nanocores (sample timing jitter
        // aside).
        assert!((500_000..2_000_000).contains(&rate), "{rate}");
        let layer = c.rootfs.as_ref().expect("writable layer");
        assert_eq!(layer.used_bytes, Some(4096));
    }
    // Without pod cgroups the pod is the sum of its containers.
    let pm = p.memory.as_ref().expect("pod memory");
    assert_eq!(pm.working_set_bytes, Some(8 << 20));
    let eph = &json["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .find(|x| x["podRef"]["name"] == pod.as_str())
        .expect("pod json")["ephemeral-storage"];
    assert!(eph["usedBytes"].as_u64().unwrap_or(0) >= 8192, "{eph}");

    let small: serde_json::Value =
        serde_json::from_str(&via_api(&n, "/stats/summary?only_cpu_and_memory=true").await)
            .expect("json");
    assert!(small["node"]["memory"].is_object());
    assert!(small["node"].get("fs").is_none(), "{small}");

    // What metrics-server scrapes.
    let text = via_api(&n, "/metrics/resource").await;
    let line = |name: &str| -> Option<String> {
        text.lines()
            .find(|l| l.starts_with(name) && !l.starts_with('#'))
            .map(str::to_owned)
    };
    let app = format!(
        "container_memory_working_set_bytes{{container=\"app\",namespace=\"default\",pod=\"{pod}\"}} 4194304 "
    );
    assert!(text.contains(&app), "{text}");
    assert!(
        text.contains(&format!(
            "pod_memory_working_set_bytes{{namespace=\"default\",pod=\"{pod}\"}} 8388608 "
        )),
        "{text}"
    );
    assert!(
        text.contains(
            "# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds"
        ),
        "{text}"
    );
    let node_cpu = line("node_cpu_usage_seconds_total ").expect("node cpu");
    let parts: Vec<&str> = node_cpu.split(' ').collect();
    assert_eq!(parts.len(), 3, "value and timestamp: {node_cpu}");
    assert!(parts[1].parse::<f64>().expect("value") > 0.0);
    assert!(parts[2].parse::<i64>().expect("ms") > 1_700_000_000_000);
    assert!(line("node_memory_working_set_bytes ").is_some(), "{text}");
    // The node's swap (this machine's /proc/meminfo; 0 without swap), as the kubelet.
    assert!(line("node_swap_usage_bytes ").is_some(), "{text}");
    assert!(line("container_start_time_seconds{").is_some(), "{text}");
    assert!(line("scrape_error ").is_none(), "hidden since 1.31: {text}");
    assert_eq!(
        line("resource_scrape_error ").as_deref(),
        Some("resource_scrape_error 0")
    );

    // cAdvisor's names and labels: the container with its image, the pod's own line.
    let text = via_api(&n, "/metrics/cadvisor").await;
    let mine: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("container_memory_working_set_bytes{") && l.contains(&pod))
        .collect();
    assert_eq!(mine.len(), 3, "pod + 2 containers: {mine:?}");
    assert!(
        mine.iter()
            .any(|l| l.contains("container=\"app\"")
                && l.contains("image=\"localhost/busybox:latest\"")),
        "{mine:?}"
    );
    assert!(
        mine.iter().any(|l| l.contains("container=\"\"")),
        "{mine:?}"
    );
    assert!(
        text.contains("container_cpu_usage_seconds_total{container=\"\",cpu=\"total\",id=\"/\"")
    );

    // Directly, as metrics-server reaches the node: `nodes/stats` and `nodes/metrics`
    // are their own subresources.
    n.api.add_token("scraper-token", "scraper", &[]);
    n.api.allow("scraper", "get", "metrics");
    let t = Some("scraper-token");
    let (code, body) = raw(&n, "/metrics/resource", t).await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = raw(&n, "/stats/summary", t).await;
    assert_eq!(
        (code, body.trim()),
        (
            403,
            "Forbidden (user=scraper, verb=get, resource=nodes, subresource=stats)"
        )
    );

    n.served.stop();
    if let Some(a) = n.apiserver.take() {
        a.stop();
    }
    n.agent.shutdown().await;
    let _ = std::fs::remove_dir_all(&n.dir);
}
