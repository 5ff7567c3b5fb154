//! `wasmlet run --kubeconfig` against the API server double, each agent on a simulator
//! of its own: the node registers and reports Ready, its lease is kept, several agents
//! with their own names share one API server (hollow nodes), cluster plugins roll out
//! to them (and a policy in Monitor mode is watched before it is enforced), and an
//! unusable kubeconfig stops the start with the file named.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmlet_apiserver_sim::ApiServerSim;
use wasmlet_cri_sim::{SimServer, Simulator};
use wasmlet_devices::testing::{Behaviour, TestPlugin};

const BIN: &str = env!("CARGO_BIN_EXE_wasmlet");

#[path = "support/agent.rs"]
mod agent;
use agent::Agent;

fn tempdir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("wasmlet-cluster-sim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

/// A kubeconfig naming the double.
fn kubeconfig(dir: &std::path::Path, url: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    wasmlet_apiserver_sim::write_kubeconfig(&path, url).expect("kubeconfig");
    path
}

/// The directory the nodes started in `dir` grant to pod sources from the cluster (the
/// same for every node of a test).
fn team_manifests(dir: &Path) -> PathBuf {
    dir.parent().unwrap_or(dir).join("team-manifests")
}

/// Starts `wasmlet run` as node `name` on the runtime at `endpoint`.
fn start(dir: &Path, name: &str, endpoint: &str, kubeconfig: &Path) -> Agent {
    start_with(dir, name, endpoint, kubeconfig, "")
}

/// [`start`] with `extra` lines of configuration.
fn start_with(dir: &Path, name: &str, endpoint: &str, kubeconfig: &Path, extra: &str) -> Agent {
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).expect("manifests");
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "nodeName: {name}\ncontainerRuntimeEndpoint: {endpoint}\nstaticPodPath: {}\n\
             healthzPort: 0\nreadOnlyPort: 0\nport: 0\nrootDir: {root}\ncgroupsPerQOS: false\n\
             devicePluginDir: {root}/device-plugins\n{extra}\
             fileCheckFrequency: 1s\nnodeLabels: {{pool: hollow}}\n\
             registerWithTaints: [{{key: hollow, value: 'yes', effect: NoSchedule}}]\n\
             kubeReserved: {{cpu: 500m}}\n\
             clusterPlugins: {{grants: {{directories: [{}]}}}}\n{}",
            manifests.display(),
            team_manifests(dir).display(),
            agent::TEST_RESOURCES,
            root = dir.join("root").display(),
        ),
    )
    .expect("config");
    let plugins = wasmlet_plugin_host::dev::shipped_plugin("source-file");
    let log = dir.join("agent.log");
    let child = Command::new(BIN)
        .args(["run", "--config"])
        .arg(&config)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--node-labels", "rack=r1"])
        .env("WASMLET_PLUGIN_DIR", plugins.parent().expect("plugin dir"))
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start wasmlet run");
    Agent { child, log }
}

fn ready(node: &Value) -> bool {
    node["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hollow_nodes_register_ready_and_keep_their_leases() {
    let api = ApiServerSim::new();
    let served = api
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let top = tempdir("hollow");
    let config = kubeconfig(&top, &served.url());
    let mut runtimes = Vec::new();
    let mut sims = Vec::new();
    let mut agents = Vec::new();
    for i in 1..=3 {
        let dir = top.join(format!("node-{i}"));
        std::fs::create_dir_all(&dir).expect("dir");
        let sim = Simulator::new();
        sims.push(sim.clone());
        let runtime = SimServer::serve(sim, &dir.join("cri.sock"))
            .await
            .expect("simulator");
        agents.push(start(
            &dir,
            &format!("hollow-{i}"),
            &runtime.endpoint(),
            &config,
        ));
        runtimes.push(runtime);
    }
    // Every node shows Ready within 15 s, with a lease held by itself.
    let started = Instant::now();
    for i in 1..=3 {
        let name = format!("hollow-{i}");
        loop {
            let node = api.get("api/v1", "nodes", "", &name);
            let lease = api.get(
                "apis/coordination.k8s.io/v1",
                "leases",
                "kube-node-lease",
                &name,
            );
            if let (Some(node), Some(lease)) = (node, lease)
                && ready(&node)
            {
                assert_eq!(lease["spec"]["holderIdentity"], name.as_str());
                assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
                assert!(node["metadata"]["labels"]["kubernetes.io/hostname"].is_string());
                assert!(
                    node["status"]["nodeInfo"]["containerRuntimeVersion"]
                        .as_str()
                        .is_some_and(|v| v.contains("://")),
                    "{node}"
                );
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "{name} not Ready with a lease after 15 s\n{}",
                agents[i - 1].log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    eprintln!("3 hollow nodes Ready after {:?}", started.elapsed());
    let node = api.get("api/v1", "nodes", "", "hollow-2").expect("node");
    assert_eq!(node["metadata"]["labels"]["pool"], "hollow");
    assert_eq!(node["metadata"]["labels"]["rack"], "r1");
    assert_eq!(node["spec"]["taints"][0]["key"], "hollow");
    let cpus: f64 = node["status"]["capacity"]["cpu"]
        .as_str()
        .and_then(|c| c.parse().ok())
        .expect("cpu capacity");
    assert_eq!(
        node["status"]["allocatable"]["cpu"],
        format!("{}m", cpus as u64 * 1000 - 500),
        "kubeReserved comes off allocatable"
    );

    // A pod bound to each node runs there and reports Running with its IP.
    for i in 1..=3 {
        api.create(
            "api/v1",
            "pods",
            serde_json::json!({
                "metadata": {"name": format!("work-{i}"), "namespace": "default"},
                "spec": {"nodeName": format!("hollow-{i}"), "terminationGracePeriodSeconds": 5,
                    "containers": [{"name": "c", "image": "localhost/busybox:latest",
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]}]}
            }),
        )
        .expect("create");
    }
    // A static pod on node 1 shows up as its mirror pod.
    std::fs::write(
        top.join("node-1/manifests/static.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: static}\nspec:\n  containers:\n  - {name: c, image: localhost/busybox:latest, imagePullPolicy: IfNotPresent, command: [sleep, '3600']}\n",
    )
    .expect("manifest");
    let pod = |name: &str| api.get("api/v1", "pods", "default", name);
    let running = |p: &Value| {
        p["status"]["phase"] == "Running"
            && p["status"]["podIP"]
                .as_str()
                .is_some_and(|ip| !ip.is_empty())
    };
    let started = Instant::now();
    for name in ["work-1", "work-2", "work-3", "static-hollow-1"] {
        while !pod(name).is_some_and(|p| running(&p)) {
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "{name} not Running: {:?}\n{}",
                pod(name),
                agents[0].log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let mirror = pod("static-hollow-1").expect("mirror");
    assert!(mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string());
    assert_eq!(mirror["metadata"]["ownerReferences"][0]["name"], "hollow-1");
    // kubectl delete pod: stopped, then gone.
    api.delete("api/v1", "pods", "default", "work-2", serde_json::json!({}))
        .expect("delete");
    let deleting = Instant::now();
    while pod("work-2").is_some() {
        assert!(
            deleting.elapsed() < Duration::from_secs(10),
            "work-2 still there: {:?}",
            pod("work-2")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The leases are renewed (every 10 s).
    let renew_time = |name: &str| {
        api.get(
            "apis/coordination.k8s.io/v1",
            "leases",
            "kube-node-lease",
            name,
        )
        .map(|l| l["spec"]["renewTime"].clone())
    };
    let before = renew_time("hollow-1");
    let waited = Instant::now();
    while renew_time("hollow-1") == before {
        assert!(
            waited.elapsed() < Duration::from_secs(15),
            "lease not renewed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // SIGTERM, as systemd stops the kubelet: the agent stops its loops and exits 0,
    // leaving its pods running for the next start to adopt.
    let held = sims[0].counts();
    let stopping = Instant::now();
    let status = agents[0]
        .terminate(Duration::from_secs(10))
        .unwrap_or_else(|| {
            panic!(
                "hollow-1 still running 10 s after SIGTERM\n{}",
                agents[0].log()
            )
        });
    assert!(status.success(), "{status}\n{}", agents[0].log());
    assert!(
        agents[0].log().contains("stopping (pods keep running"),
        "{}",
        agents[0].log()
    );
    assert_eq!(sims[0].counts(), held, "pods stopped with the agent");
    eprintln!("hollow-1 exited {:?} after SIGTERM", stopping.elapsed());
    drop(agents);
    for r in runtimes {
        r.stop().await;
    }
    served.stop();
}

/// `(allocatable, capacity)` of `resource` in the node's status, as the e2e_node specs
/// read them (`None` when the node does not have it).
fn device_counts(api: &ApiServerSim, node: &str, resource: &str) -> (Option<i64>, Option<i64>) {
    let node = api.get("api/v1", "nodes", "", node).unwrap_or_default();
    let read = |field: &str| {
        node["status"][field][resource]
            .as_str()
            .and_then(|q| q.parse().ok())
    };
    (read("allocatable"), read("capacity"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_plugins_devices_are_in_the_node_status_as_their_health_changes() {
    let api = ApiServerSim::new();
    let served = api
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let dir = tempdir("devices");
    let config = kubeconfig(&dir, &served.url());
    let runtime = SimServer::serve(Simulator::new(), &dir.join("cri.sock"))
        .await
        .expect("simulator");
    let extra = "nodeStatusUpdateFrequency: 1s\n";
    let _agent = start_with(&dir, "gpu-node", &runtime.endpoint(), &config, extra);
    let plugins = dir.join("root/device-plugins");
    let started = Instant::now();
    while !plugins.join("kubelet.sock").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no kubelet.sock in {}",
            plugins.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gpu = "example.com/gpu";
    let devices = [("0", true), ("1", true)];
    let mut plugin = TestPlugin::serve(&plugins, "gpu", &devices, Behaviour::default());
    plugin.register(&plugins, gpu).await.expect("registers");
    let until = |want: (Option<i64>, Option<i64>)| {
        let api = &api;
        async move {
            let started = Instant::now();
            while device_counts(api, "gpu-node", gpu) != want {
                let now = device_counts(api, "gpu-node", gpu);
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "{now:?}, not {want:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    until((Some(2), Some(2))).await;
    plugin.update(&[("0", true), ("1", false)]);
    until((Some(1), Some(2))).await;
    plugin.stop().await;
    until((Some(0), Some(2))).await;
    runtime.stop().await;
    served.stop();
}

#[test]
fn an_unusable_kubeconfig_stops_the_start_naming_the_file() {
    let dir = tempdir("badkube");
    let bad = dir.join("kubeconfig");
    std::fs::write(&bad, "clusters: [unclosed").expect("write");
    let mut agent = start(&dir, "bad", "unix:///nonexistent.sock", &bad);
    let status = agent.child.wait().expect("exits");
    assert!(!status.success());
    let log = agent.log();
    assert!(log.contains(&bad.display().to_string()), "{log}");
}

/// `wasmlet plugin push`: the digest it prints.
fn push_cli(file: &Path, reference: &str, user: &str, password: &str) -> String {
    let out = Command::new(BIN)
        .args(["plugin", "push"])
        .arg(file)
        .arg(reference)
        .args(["--insecure", "--username", user])
        .env("WASMLET_REGISTRY_PASSWORD", password)
        .output()
        .expect("wasmlet plugin push");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "push: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("digest:"))
        .map(|d| d.trim().to_owned())
        .expect("a digest line")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_pushed_and_applied_once_rolls_out_to_canary_then_all_hollow_nodes() {
    let Some((registry, user, password)) = wasmlet_fleet::dev::registry() else {
        return;
    };
    let (api, served) = plugin_double().await;
    let top = tempdir("fleet");
    let config = kubeconfig(&top, &served.url());
    let mut runtimes = Vec::new();
    let mut sims = Vec::new();
    let mut agents = Vec::new();
    for i in 1..=3 {
        let dir = top.join(format!("node-{i}"));
        std::fs::create_dir_all(&dir).expect("dir");
        let sim = Simulator::new();
        sims.push(sim.clone());
        let runtime = SimServer::serve(sim, &dir.join("cri.sock"))
            .await
            .expect("simulator");
        agents.push(start(
            &dir,
            &format!("fleet-{i}"),
            &runtime.endpoint(),
            &config,
        ));
        runtimes.push(runtime);
    }
    let log = |agents: &[Agent]| {
        agents
            .iter()
            .map(Agent::log)
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    let wait = |what: &str, agents: &[Agent], ok: &dyn Fn() -> bool| {
        let started = Instant::now();
        while !ok() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{what}: not within 20 s\n{}",
                log(agents)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    // Published once with the CLI, pulled by the nodes with a pull secret.
    let reference = format!(
        "oci://{registry}/wasmlet-e2e/deny-all-{}:v1",
        std::process::id()
    );
    let deny_all = wasmlet_plugin_host::dev::shipped_plugin("fixture-deny-all");
    let digest = push_cli(&deny_all, &reference, &user, &password);
    let b64 = |text: String| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(text)
    };
    let dockerconfig = serde_json::json!({"auths": {registry.as_str(): {"auth": b64(format!("{user}:{password}"))}}});
    api.create(
        "api/v1",
        "secrets",
        serde_json::json!({
            "metadata": {"name": "registry", "namespace": "wasmlet-system"},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": b64(dockerconfig.to_string())},
        }),
    )
    .expect("secret");

    // The canary first: only fleet-1.
    let plugin = |selector: Value| {
        serde_json::json!({
            "apiVersion": "wasmlet.dev/v1alpha1", "kind": "WasmletPlugin",
            "metadata": {"name": "deny-all"},
            "spec": {"kind": "admission", "digest": digest,
                     "source": {"oci": {"reference": reference, "pullSecret": "registry", "insecure": true}},
                     "nodeSelector": selector}
        })
    };
    let prefix = "apis/wasmlet.dev/v1alpha1";
    api.create(
        prefix,
        "wasmletplugins",
        plugin(serde_json::json!({"matchLabels": {"kubernetes.io/hostname": "fleet-1"}})),
    )
    .expect("plugin");
    // Each node's entry for the plugin, from its own WasmletNode.
    let entries = || -> Vec<Value> {
        api.list(prefix, "wasmletnodes")
            .into_iter()
            .filter_map(|o| {
                let mut e = o["status"]["plugins"]
                    .as_array()?
                    .iter()
                    .find(|e| e["name"] == "deny-all")?
                    .clone();
                e["nodeName"] = o["metadata"]["name"].clone();
                Some(e)
            })
            .collect()
    };
    let loaded_on = |nodes: &[&str]| {
        let list = entries();
        list.len() == nodes.len()
            && list.iter().all(|n| {
                n["state"] == "Loaded"
                    && nodes.contains(&n["nodeName"].as_str().unwrap_or_default())
            })
    };
    wait("the canary loads the policy", &agents, &|| {
        loaded_on(&["fleet-1"])
    });
    assert_eq!(entries()[0]["digest"], digest.as_str());

    let pod = |name: &str, node: &str| {
        api.create("api/v1", "pods", serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "localhost/busybox:latest",
                "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"]}]}
        }))
        .expect("pod");
    };
    let phase = |name: &str| {
        api.get("api/v1", "pods", "default", name)
            .map(|p| (p["status"]["phase"].clone(), p["status"]["reason"].clone()))
            .unwrap_or((Value::Null, Value::Null))
    };
    pod("on-canary", "fleet-1");
    pod("on-other", "fleet-2");
    wait("the canary refuses its pod", &agents, &|| {
        phase("on-canary") == (Value::from("Failed"), Value::from("DeniedByPolicy"))
    });
    wait("the other node runs its pod", &agents, &|| {
        phase("on-other").0 == "Running"
    });

    // Then every node: the selector goes (kubectl apply of the object without it).
    let mut all = api
        .get(prefix, "wasmletplugins", "", "deny-all")
        .expect("plugin");
    all["spec"]["nodeSelector"] = Value::Null;
    let client = kube_client(&top, &served.url()).await;
    let plugins: kube::Api<kube::api::DynamicObject> =
        kube::Api::all_with(client, &wasmlet_fleet::object::api_resource());
    plugins
        .patch(
            "deny-all",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"nodeSelector": null}})),
        )
        .await
        .expect("patch");
    wait("every node loads the policy", &agents, &|| {
        loaded_on(&["fleet-1", "fleet-2", "fleet-3"])
    });
    pod("on-third", "fleet-3");
    wait("fleet-3 refuses its pod", &agents, &|| {
        phase("on-third") == (Value::from("Failed"), Value::from("DeniedByPolicy"))
    });

    // Deleted: unloaded everywhere; pods are admitted again.
    plugins
        .delete("deny-all", &Default::default())
        .await
        .expect("delete");
    // Each node learns of the deletion from its WasmletPlugin watch, of a new pod from
    // its pod watch: the two are not ordered (in a real cluster neither), so the pod
    // comes once the nodes say they have unloaded the policy.
    wait("every node unloads the policy", &agents, &|| {
        agents.iter().all(|a| {
            a.log()
                .contains("cluster plugin unloaded plugin=\"deny-all\"")
        })
    });
    pod("after", "fleet-3");
    wait("fleet-3 runs a pod again", &agents, &|| {
        phase("after").0 == "Running"
    });

    // A pod source from the cluster, for fleet-2 only: its pods are static pods there,
    // with mirror pods in the API; deleted, they go (the mirror pod once the pod has
    // stopped, within its grace period).
    let manifests = team_manifests(&top.join("node-2"));
    std::fs::create_dir_all(&manifests).expect("team manifests");
    std::fs::write(
        manifests.join("web.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: team-web}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - {name: c, image: localhost/busybox:latest, imagePullPolicy: IfNotPresent, command: [sleep, '3600']}\n",
    )
    .expect("manifest");
    let source_file = wasmlet_plugin_host::dev::shipped_plugin("source-file");
    let source_ref = format!(
        "oci://{registry}/wasmlet-e2e/source-file-{}:v1",
        std::process::id()
    );
    let source_digest = push_cli(&source_file, &source_ref, &user, &password);
    api.create(
        prefix,
        "wasmletplugins",
        serde_json::json!({
            "apiVersion": "wasmlet.dev/v1alpha1", "kind": "WasmletPlugin",
            "metadata": {"name": "team-pods"},
            "spec": {"kind": "pod-source", "digest": source_digest,
                     "source": {"oci": {"reference": source_ref, "pullSecret": "registry", "insecure": true}},
                     "podSource": {"period": "1s"},
                     "capabilities": {"directory": manifests.to_string_lossy()},
                     "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": "fleet-2"}}}
        }),
    )
    .expect("pod source");
    let mirror = || api.get("api/v1", "pods", "default", "team-web-fleet-2");
    wait("fleet-2 runs the team's pod, mirrored", &agents, &|| {
        mirror().is_some_and(|p| {
            p["status"]["phase"] == "Running"
                && p["metadata"]["annotations"]["kubernetes.io/config.source"] == "team-pods"
        })
    });
    assert!(
        api.get("api/v1", "pods", "default", "team-web-fleet-1")
            .is_none()
    );
    plugins
        .delete("team-pods", &Default::default())
        .await
        .expect("delete");
    wait("the team's pod goes with its source", &agents, &|| {
        mirror().is_none()
    });
    drop(agents);
    for r in runtimes {
        r.stop().await;
    }
    served.stop();
}

/// The double serving the cluster-plugin CRDs and the plugin namespace.
async fn plugin_double() -> (ApiServerSim, wasmlet_apiserver_sim::Served) {
    let api = ApiServerSim::new();
    let served = api
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    for file in ["wasmletplugin-crd.yaml", "wasmletnode-crd.yaml"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../deploy")
            .join(file);
        let crd: Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(path).expect("crd")).expect("yaml");
        api.create(
            "apis/apiextensions.k8s.io/v1",
            "customresourcedefinitions",
            crd,
        )
        .expect("crd");
    }
    api.create(
        "api/v1",
        "namespaces",
        serde_json::json!({"metadata": {"name": "wasmlet-system"}}),
    )
    .expect("namespace");
    (api, served)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_in_monitor_mode_runs_every_pod_and_counts_what_it_would_reject() {
    let (api, served) = plugin_double().await;
    let top = tempdir("monitor");
    let config = kubeconfig(&top, &served.url());
    let runtime = SimServer::serve(Simulator::new(), &top.join("cri.sock"))
        .await
        .expect("simulator");
    let agent = start(&top, "watch-1", &runtime.endpoint(), &config);
    let wait = |what: &str, ok: &dyn Fn() -> bool| {
        let started = Instant::now();
        while !ok() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{what}: not within 30 s\n{}",
                agent.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let pod = |name: &str| {
        api.create("api/v1", "pods", serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": "watch-1", "containers": [{"name": "c", "image": "localhost/busybox:latest",
                "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"]}]}
        }))
        .expect("pod");
    };
    let running = |name: &str| {
        api.get("api/v1", "pods", "default", name)
            .is_some_and(|p| p["status"]["phase"] == "Running")
    };
    pod("before");
    wait("the first pod runs", &|| running("before"));

    // deny-all, watched before it is enforced.
    let deny_all = std::fs::read(wasmlet_plugin_host::dev::shipped_plugin("fixture-deny-all"))
        .expect("component");
    let digest = format!("sha256:{}", wasmlet_fleet::fetch::sha256_hex(&deny_all));
    use base64::Engine as _;
    let data = base64::engine::general_purpose::STANDARD.encode(&deny_all);
    api.create(
        "api/v1",
        "configmaps",
        serde_json::json!({"metadata": {"name": "policies", "namespace": "wasmlet-system"},
                           "binaryData": {"deny.wasm": data}}),
    )
    .expect("configmap");
    let prefix = "apis/wasmlet.dev/v1alpha1";
    api.create(
        prefix,
        "wasmletplugins",
        serde_json::json!({
            "apiVersion": "wasmlet.dev/v1alpha1", "kind": "WasmletPlugin",
            "metadata": {"name": "deny-all"},
            "spec": {"kind": "admission", "digest": digest,
                     "source": {"configMap": {"name": "policies", "key": "deny.wasm"}},
                     "admission": {"mode": "Monitor"}}
        }),
    )
    .expect("plugin");
    let node = || {
        api.get(prefix, "wasmletnodes", "", "watch-1")
            .unwrap_or(Value::Null)
    };
    let entry = || node()["status"]["plugins"][0].clone();
    // The running pod is asked about and left alone.
    wait("the audit of the running pod", &|| {
        entry()["audit"]["wouldReject"] == 1
    });
    let audit = &entry()["audit"];
    assert_eq!(audit["digest"], digest.as_str());
    assert_eq!(audit["pods"], 1);
    assert_eq!(audit["rejected"][0]["pod"], "default/before");
    assert_eq!(audit["rejected"][0]["reason"], "DeniedByPolicy");
    assert_eq!(node()["status"]["wouldReject"], 1);
    assert!(running("before"));

    // A new pod runs all the same: an event on it, a count in the node's entry.
    pod("after");
    wait("the second pod runs", &|| running("after"));
    wait(
        "the node counts the admission it would have refused",
        &|| entry()["wouldReject"] == 1,
    );
    wait("an event on the pod", &|| {
        api.list("api/v1", "events")
            .iter()
            .any(|e| e["reason"] == "PolicyWouldReject" && e["involvedObject"]["name"] == "after")
    });
    assert!(running("before") && running("after"));
    assert!(
        agent
            .log()
            .contains("Pod would be rejected by a policy in Monitor mode"),
        "{}",
        agent.log()
    );
    drop(agent);
    runtime.stop().await;
    served.stop();
}

/// A client of the double.
async fn kube_client(dir: &Path, url: &str) -> kube::Client {
    let path = kubeconfig(dir, url);
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    let _ = rustls::crypto::ring::default_provider().install_default();
    kube::Client::try_from(config).expect("client")
}
