//! Node resources end to end: `wasmlet run --kubeconfig` on the real containerd with
//! pod cgroups, usage sampled every second, and an eviction threshold set for the test
//! just below what the machine has left. Read through the API server double's node
//! proxy as `kubectl get --raw /api/v1/nodes/NODE/proxy/...` does:
//! - `/stats/summary` and `/metrics/resource` of a running busybox pod show CPU and
//!   memory that agree with its cgroup files;
//! - a pod that allocates 800 MB crosses `memory.available` and is evicted (Failed,
//!   `Evicted`, the kubelet's message, an `Evicted` event), the node reports
//!   MemoryPressure, and its neighbour keeps running.
//!
//! containerd comes from `WASMLET_CRI_ENDPOINT` (`cargo xtask test` starts it); without
//! it the test is skipped, unless `WASMLET_REQUIRE_CONTAINERD=1`.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/containerd.rs"]
mod containerd;

use cluster::{busybox, client_from, phase, remove_pods, running, wait_pod};
use containerd::endpoint;

const NODE: &str = "stats-e2e";
const MI: u64 = 1 << 20;

/// A kubelet path through the double's node proxy.
async fn get(client: &kube::Client, path: &str) -> String {
    let request = http::Request::get(format!("/api/v1/nodes/{NODE}/proxy{path}"))
        .body(Vec::new())
        .expect("request");
    client.request_text(request).await.expect(path)
}

/// A number from a cgroup v1 file of the memory or cpuacct hierarchy.
fn cgroup_number(controller: &str, cgroup: &str, file: &str) -> u64 {
    let p = Path::new("/sys/fs/cgroup")
        .join(controller)
        .join(cgroup.trim_start_matches('/'))
        .join(file);
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .parse()
        .expect("number")
}

fn memory_stat(cgroup: &str, key: &str) -> u64 {
    let p = Path::new("/sys/fs/cgroup/memory")
        .join(cgroup.trim_start_matches('/'))
        .join("memory.stat");
    let text = std::fs::read_to_string(&p).expect("memory.stat");
    wasmlet_stats::cgroup::field(&text, key).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_matches_the_cgroups_and_a_memory_hog_is_evicted() {
    let Some(endpoint) = endpoint() else { return };
    if !Path::new("/sys/fs/cgroup/memory/memory.stat").exists() {
        eprintln!("skipped: no cgroup v1 memory hierarchy here");
        return;
    }
    let double = cluster::Double::start("wasmlet-stats-e2e", &endpoint, NODE).await;
    // memory.available as the agent computes it, now: the hog's 800 MB take the node
    // below a threshold 400 MiB under it. The rest of the machine may move by some
    // 360 MiB either way (a CI machine's page cache does) without changing the outcome.
    let files = wasmlet_stats::node::NodeFiles::default();
    let total = files.memory_capacity().expect("MemTotal");
    let available = total - files.memory().expect("memory").working_set;
    let threshold_mi = (available - 400 * MI) / MI;
    let extra = format!(
        "cgroupsPerQOS: true\ncgroupRoot: /{NODE}\nhousekeepingInterval: 1s\n\
         evictionHard: {{memory.available: {threshold_mi}Mi}}\n\
         evictionPressureTransitionPeriod: 1m\nnodeStatusUpdateFrequency: 2s\n\
         imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 100\n"
    );
    let agent = cluster::start_agent(
        &double.dir,
        &endpoint,
        &double.kubeconfig,
        &double.client_ca,
        NODE,
        &extra,
    );
    let client = client_from(&double.kubeconfig).await;
    let api = &double.api;

    // A neighbour within its requests, which eviction ranks last.
    let mut idle = busybox(
        "idle",
        "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 3600",
    );
    idle["resources"] = serde_json::json!({"requests": {"memory": "64Mi"}});
    api.create("api/v1", "pods", cluster::pod(NODE, "idle", "Never", idle))
        .expect("idle");
    let pod = wait_pod(api, &agent, "idle", Duration::from_secs(60), running).await;
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_owned();
    let cgroup = format!("/{NODE}/kubepods/burstable/pod{uid}");

    // Two samples with the pod in them (a CPU rate needs two).
    let deadline = Instant::now() + Duration::from_secs(30);
    let summary: Value = loop {
        let s: Value = serde_json::from_str(&get(&client, "/stats/summary").await).expect("json");
        let rated = s["pods"].as_array().into_iter().flatten().any(|p| {
            p["podRef"]["uid"] == uid.as_str()
                && p["containers"][0]["cpu"]["usageNanoCores"].is_u64()
        });
        if rated {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "no sample of the pod: {s}\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(summary["node"]["nodeName"], NODE);
    assert!(
        summary["node"]["memory"]["workingSetBytes"]
            .as_u64()
            .unwrap_or(0)
            > 0
    );
    assert!(summary["node"]["fs"]["capacityBytes"].as_u64().unwrap_or(0) > 0);
    assert!(
        summary["node"]["runtime"]["imageFs"]["usedBytes"]
            .as_u64()
            .unwrap_or(0)
            > 0
    );
    let p = summary["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .find(|p| p["podRef"]["uid"] == uid.as_str())
        .expect("the pod")
        .clone();
    // Memory agrees with the pod cgroup's files (an idle pod: within 2 MiB).
    let usage = cgroup_number("memory", &cgroup, "memory.usage_in_bytes");
    let ws = usage.saturating_sub(memory_stat(&cgroup, "total_inactive_file"));
    let reported = p["memory"]["workingSetBytes"]
        .as_u64()
        .expect("pod working set");
    assert!(
        reported > 0 && reported.abs_diff(ws) < 2 * MI,
        "summary {reported}, cgroup {ws}"
    );
    // CPU: the counter read then is at most what the cgroup says now, and it ran.
    let cpu = p["cpu"]["usageCoreNanoSeconds"].as_u64().expect("pod cpu");
    let now_cpu = cgroup_number("cpuacct", &cgroup, "cpuacct.usage");
    assert!(cpu > 0 && cpu <= now_cpu, "summary {cpu}, cgroup {now_cpu}");
    // The `pods` system container: the parent of every pod cgroup, read from its files.
    let pods = summary["node"]["systemContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == "pods")
        .unwrap_or_else(|| panic!("a pods system container: {}", summary["node"]));
    let root = format!("/{NODE}/kubepods");
    let root_cpu = pods["cpu"]["usageCoreNanoSeconds"]
        .as_u64()
        .expect("pods cpu");
    // Read in the same sample as the pod's (just before it): at least most of it.
    assert!(
        root_cpu >= cpu / 2 && root_cpu <= cgroup_number("cpuacct", &root, "cpuacct.usage"),
        "pods {root_cpu}, the pod {cpu}"
    );
    assert!(
        pods["memory"]["workingSetBytes"].as_u64().unwrap_or(0) >= reported / 2,
        "{pods}"
    );
    assert!(pods.get("rootfs").is_none() && pods.get("logs").is_none());
    let c = &p["containers"][0];
    assert_eq!(c["name"], "idle");
    assert!(
        c["memory"]["workingSetBytes"].as_u64().unwrap_or(0) > 0,
        "{c}"
    );
    assert!(
        c["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap_or(0) > 0,
        "{c}"
    );
    assert!(
        c["rootfs"]["usedBytes"].is_u64(),
        "writable layer from the CRI: {c}"
    );
    assert!(c["logs"]["usedBytes"].is_u64(), "{c}");
    assert!(
        p["process_stats"]["process_count"].as_u64().unwrap_or(0) >= 1,
        "{p}"
    );

    let metrics = get(&client, "/metrics/resource").await;
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with("container_memory_working_set_bytes{container=\"idle\",namespace=\"default\",pod=\"idle\"}")
        })
        .unwrap_or_else(|| panic!("no idle line: {metrics}"));
    let value: f64 = line
        .split(' ')
        .nth(1)
        .expect("value")
        .parse()
        .expect("float");
    assert!(value > 0.0, "{line}");
    assert!(metrics.contains("resource_scrape_error 0"), "{metrics}");

    // The hog: 800 MB held by the shell, below the threshold.
    let hog = busybox(
        "hog",
        "x=$(head -c 800000000 /dev/zero | tr '\\0' a); echo held; sleep 3600",
    );
    api.create("api/v1", "pods", cluster::pod(NODE, "hog", "Never", hog))
        .expect("hog");
    let deadline = Instant::now() + Duration::from_secs(90);
    let evicted = loop {
        let p = api.get("api/v1", "pods", "default", "hog");
        if let Some(p) = p.as_ref().filter(|p| phase(p) == "Failed") {
            break p.clone();
        }
        if Instant::now() > deadline {
            // What the node saw, to tell a machine whose free memory moved by more than
            // the margins from an agent that did not act.
            let s: Value =
                serde_json::from_str(&get(&client, "/stats/summary").await).unwrap_or_default();
            panic!(
                "hog not evicted within 90 s (threshold {threshold_mi}Mi, node memory now {}): {}\n--- agent log ---\n{}",
                s["node"]["memory"],
                p.map(|p| p["status"].to_string()).unwrap_or_default(),
                agent.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(evicted["status"]["reason"], "Evicted", "{evicted}");
    let message = evicted["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!(
            "The node was low on resource: memory. Threshold quantity: {threshold_mi}Mi, available: "
        )) && message.contains("Container hog was using ")
            && message.ends_with("request is 0, has larger consumption of memory. "),
        "{message}"
    );
    // Events gather for a moment before they are written.
    let events: kube::Api<k8s_openapi::api::core::v1::Event> =
        kube::Api::namespaced(client.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let list = events.list(&Default::default()).await.expect("events");
        let found = list.items.iter().any(|e| {
            e.reason.as_deref() == Some("Evicted")
                && e.involved_object.name.as_deref() == Some("hog")
                && e.type_.as_deref() == Some("Warning")
        });
        if found {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no Evicted event: {:?}",
            list.items
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The node said so.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let node = api.get("api/v1", "nodes", "", NODE).expect("node");
        let pressed = node["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "MemoryPressure" && c["status"] == "True");
        if pressed {
            break;
        }
        assert!(Instant::now() < deadline, "no MemoryPressure: {node}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Its neighbour keeps running.
    let idle = api.get("api/v1", "pods", "default", "idle").expect("idle");
    assert!(running(&idle), "{idle}");
    assert_eq!(phase(&idle), "Running");

    drop(agent);
    remove_pods(&endpoint, NODE).await;
    let _ = std::fs::remove_dir_all(&double.dir);
}
