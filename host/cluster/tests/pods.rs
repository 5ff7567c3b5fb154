//! Cluster mode with the agent in the loop: an agent on the in-process CRI simulator,
//! joined through [`wasmlet_cluster::start`] to the API server double. Pods bound to
//! the node run and report status, graceful deletion ends in the final delete, the watch
//! survives breaks and 410 Gone, and an API server that goes away for a minute finds
//! everything in step when it comes back. Static pods and their mirror pods:
//! `mirror_pods.rs`.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as k8s;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};
use support::*;
use wasmlet_cri::CriRuntime;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_pod_runs_and_its_status_is_patched_with_few_requests() {
    let n = Node::start("run").await;
    let created = n.create("web", 30, "sleep 3600").await;
    n.wait(
        "web Running and Ready with its IP",
        Duration::from_secs(10),
        |p| {
            p.is_some_and(|p| {
                phase(Some(p)) == "Running"
                    && condition(p, "Ready") == "True"
                    && p["status"]["podIP"]
                        .as_str()
                        .is_some_and(|ip| !ip.is_empty())
                    && p["status"]["containerStatuses"][0]["state"]["running"].is_object()
            })
        },
    )
    .await;
    let stored = n.stored("web").expect("web");
    assert_eq!(stored["metadata"]["uid"], json!(created.metadata.uid));
    assert_eq!(stored["status"]["hostIP"], "192.168.60.10");
    assert_eq!(stored["status"]["qosClass"], "BestEffort");
    // The agent's own view carries the API's name and UID (not a static pod's).
    let mine = n.agent.ctx.statuses.pods();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].metadata.name.as_deref(), Some("web"));
    assert_eq!(mine[0].metadata.uid, created.metadata.uid);
    // Events, as `kubectl describe pod` lists them.
    wait_events(&n.client, "web", &["Pulled", "Created", "Started"]).await;
    // Settled: no more status patches, and no polling of the pod.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // One patch: the first status waits for the first sync, which started it.
    let patches = n.requests("PATCH", "/pods/web/status");
    assert_eq!(patches, 1, "status patches for one start");
    assert_eq!(n.requests("GET", "/pods/web"), 0, "no per-pod polling");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        n.requests("PATCH", "/pods/web/status"),
        patches,
        "nothing changed, nothing sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_volumes_and_env_are_read_before_the_containers_start() {
    let n = Node::start("volumes").await;
    n.api
        .create(
            "api/v1",
            "serviceaccounts",
            json!({"metadata": {"name": "default", "namespace": "default"}}),
        )
        .expect("service account");
    n.api
        .create(
            "api/v1",
            "configmaps",
            json!({"metadata": {"name": "kube-root-ca.crt", "namespace": "default"},
                "data": {"ca.crt": "-----BEGIN CERTIFICATE-----"}}),
        )
        .expect("ca");
    // A pod as the API server makes it (the service account admission adds the
    // kube-api-access volume), and a ConfigMap volume whose ConfigMap is not there yet.
    let pod: k8s::Pod = serde_json::from_value(json!({
        "metadata": {"name": "app", "namespace": "default"},
        "spec": {
            "nodeName": n.name,
            "serviceAccountName": "default",
            "volumes": [
                {"name": "kube-api-access-abcde", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}},
                {"name": "settings", "configMap": {"name": "app-settings"}}
            ],
            "containers": [{"name": "c", "image": "localhost/busybox:latest",
                "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"],
                "env": [{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "app-settings", "key": "mode"}}}],
                "volumeMounts": [
                    {"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true},
                    {"name": "settings", "mountPath": "/etc/app"}]}]
        }
    }))
    .expect("pod");
    let created = n
        .pods()
        .create(&PostParams::default(), &pod)
        .await
        .expect("create");
    wait_events(&n.client, "app", &["FailedMount"]).await;
    let waiting = n.stored("app").expect("app");
    assert_ne!(
        phase(Some(&waiting)),
        "Running",
        "no container before its volumes"
    );
    n.api
        .create(
            "api/v1",
            "configmaps",
            json!({"metadata": {"name": "app-settings", "namespace": "default"},
                "data": {"mode": "fast"}}),
        )
        .expect("settings");
    n.wait(
        "app Running once its ConfigMap exists",
        Duration::from_secs(10),
        |p| phase(p) == "Running",
    )
    .await;
    let uid = created.metadata.uid.expect("uid");
    let root = std::env::temp_dir()
        .join(format!(
            "wasmlet-cluster-pods-volumes-{}",
            std::process::id()
        ))
        .join("root/pods")
        .join(&uid)
        .join("volumes");
    let read =
        |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let token = read("kubernetes.io~projected/kube-api-access-abcde/token");
    assert!(token.starts_with("sim-token.default.default."), "{token}");
    assert_eq!(
        read("kubernetes.io~projected/kube-api-access-abcde/ca.crt"),
        "-----BEGIN CERTIFICATE-----"
    );
    assert_eq!(
        read("kubernetes.io~projected/kube-api-access-abcde/namespace"),
        "default"
    );
    assert_eq!(read("kubernetes.io~configmap/settings/mode"), "fast");
    // A token per attempt to set the volumes up (the first one failed on the ConfigMap).
    let tokens = n.requests("POST", "/serviceaccounts/default/token");
    assert!((1..=2).contains(&tokens), "{tokens} token requests");
}

/// `Pods should contain environment variables for services`: the `kubernetes` Service
/// in every pod, the namespace's Services with enableServiceLinks, from one watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_get_the_service_variables_from_one_watch() {
    let n = Node::start("services").await;
    n.api
        .create(
            "api/v1",
            "services",
            json!({"metadata": {"name": "fooservice", "namespace": "default"},
                "spec": {"ports": [{"port": 8765, "protocol": "TCP", "targetPort": 8080}]}}),
        )
        .expect("service");
    // The node's watch has seen the Service before the pods come (a Service made a
    // moment before a pod may otherwise reach the node after it, as with the kubelet).
    let services = n.agent.ctx.services.clone().expect("a Service source");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !services
        .services("default", true)
        .await
        .unwrap_or_default()
        .iter()
        .any(|s| s.metadata.name.as_deref() == Some("fooservice"))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "fooservice never seen"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pod = |name: &str, links: bool| -> k8s::Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": n.name, "enableServiceLinks": links,
                "containers": [{"name": name, "image": "localhost/busybox:latest",
                    "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"]}]}
        }))
        .expect("pod")
    };
    for (name, links) in [("linked", true), ("unlinked", false)] {
        n.pods()
            .create(&PostParams::default(), &pod(name, links))
            .await
            .expect("create");
    }
    n.wait("linked Running", Duration::from_secs(10), |p| {
        phase(p) == "Running"
    })
    .await;
    n.wait("unlinked Running", Duration::from_secs(10), |p| {
        phase(p) == "Running"
    })
    .await;
    let env = |name: &str| -> BTreeMap<String, String> {
        n.cri
            .container_config(name)
            .expect("created")
            .envs
            .into_iter()
            .map(|e| (e.key, e.value))
            .collect()
    };
    let linked = env("linked");
    assert_eq!(linked["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
    assert_eq!(linked["KUBERNETES_SERVICE_PORT"], "443");
    assert_eq!(linked["KUBERNETES_PORT"], "tcp://10.96.0.1:443");
    assert_eq!(linked["FOOSERVICE_SERVICE_HOST"], "10.96.0.2");
    assert_eq!(linked["FOOSERVICE_PORT_8765_TCP"], "tcp://10.96.0.2:8765");
    let unlinked = env("unlinked");
    assert_eq!(unlinked["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
    assert!(!unlinked.contains_key("FOOSERVICE_SERVICE_HOST"));
    // One list and one watch of Services for the node, never a read per pod.
    let reads: Vec<_> = n
        .api
        .requests()
        .into_iter()
        .filter(|(m, p)| m == "GET" && p.contains("/services"))
        .collect();
    assert!(reads.len() <= 2, "{reads:?}");
    assert!(
        reads.iter().all(|(_, p)| p == "/api/v1/services"),
        "{reads:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deleted_gracefully_is_stopped_and_then_deleted_for_good() {
    let n = Node::start("delete").await;
    // It stops on SIGTERM: the final delete comes well before its 20 s are up.
    n.create(
        "doomed",
        20,
        "trap 'exit 0' TERM; while true; do sleep 1; done",
    )
    .await;
    n.create("stays", 20, "sleep 3600").await;
    for name in ["doomed", "stays"] {
        n.wait(&format!("{name} Running"), Duration::from_secs(10), |p| {
            phase(p) == "Running"
        })
        .await;
    }
    assert_eq!(n.running_containers().await.len(), 2);
    // kubectl delete pod: the API server marks it (grace 20 s) and the agent takes over.
    n.pods()
        .delete("doomed", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(
        n.stored("doomed")
            .is_some_and(|p| p["metadata"]["deletionTimestamp"].is_string()),
        "a bound pod is deleted gracefully"
    );
    n.wait(
        "doomed gone from the API server",
        Duration::from_secs(8),
        |p| p.is_none(),
    )
    .await;
    let running = n.running_containers().await;
    assert_eq!(running.len(), 1, "{running:?}");
    assert_eq!(running[0].0, "stays");
    let all = n.cri.list_containers(None).await.expect("list");
    assert!(
        all.iter()
            .all(|c| c.labels.get("io.kubernetes.pod.name").map(String::as_str) != Some("doomed")),
        "doomed's containers are removed before the final delete"
    );
    // One final delete with grace 0 went through (the user's, then the agent's).
    assert_eq!(n.requests("DELETE", "/pods/doomed"), 2);
    wait_events(&n.client, "doomed", &["Killing"]).await;
    // The agent forgets it; the other pod is untouched.
    let started = Instant::now();
    while n.agent.ctx.statuses.len() != 1 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the agent still holds doomed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(phase(n.stored("stays").as_ref()), "Running");
}

/// `Deleted pods handling`: a pod deleted through the API reaches a final phase before
/// the agent lets it go — Failed when a container ended non-zero (restartPolicy Always
/// too), Succeeded when all ended 0, Failed when it never started — seen while a
/// finalizer holds the object, as the node conformance tests hold it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_pods_end_in_a_final_phase_before_they_go() {
    let n = Node::start("final-phase").await;
    let held = |name: &str, policy: &str, command: &str, image: &str| -> k8s::Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default",
                "finalizers": ["example.com/hold"]},
            "spec": {"nodeName": n.name, "restartPolicy": policy,
                "terminationGracePeriodSeconds": 10,
                "containers": [{"name": "c", "image": image,
                    "imagePullPolicy": "Never", "command": ["sh", "-c", command]}]}
        }))
        .expect("pod")
    };
    let cases = [
        (
            "fails",
            "Always",
            "trap 'exit 1' TERM; while true; do sleep 1; done",
            "localhost/busybox:latest",
            "Running",
            "Failed",
        ),
        (
            "succeeds",
            "Always",
            "trap 'exit 0' TERM; while true; do sleep 1; done",
            "localhost/busybox:latest",
            "Running",
            "Succeeded",
        ),
        (
            "on-failure",
            "OnFailure",
            "trap 'exit 2' TERM; while true; do sleep 1; done",
            "localhost/busybox:latest",
            "Running",
            "Failed",
        ),
        (
            "pending",
            "Always",
            "sleep 3600",
            "localhost/no-such-image:1",
            "Pending",
            "Failed",
        ),
    ];
    for (name, policy, command, image, _, _) in cases {
        n.pods()
            .create(&PostParams::default(), &held(name, policy, command, image))
            .await
            .expect("create");
    }
    for (name, _, _, _, before, _) in cases {
        n.wait(&format!("{name} {before}"), Duration::from_secs(10), |p| {
            phase(p) == before
        })
        .await;
    }
    for (name, ..) in cases {
        n.pods()
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete");
    }
    for (name, _, _, _, _, after) in cases {
        n.wait(&format!("{name} {after}"), Duration::from_secs(15), |p| {
            phase(p) == after
        })
        .await;
    }
    // The finalizer off: gone.
    for (name, ..) in cases {
        n.pods()
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .expect("unhold");
        n.wait(&format!("{name} gone"), Duration::from_secs(10), |p| {
            p.is_none()
        })
        .await;
    }
}

/// `Pod readiness gates`: a pod with readiness gates runs, but is Ready only once every
/// gate's condition — set by others on the pod's status — is True, and not Ready again
/// when one turns False.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_follows_the_readiness_gates_set_through_the_api() {
    let n = Node::start("gates").await;
    let gated: k8s::Pod = serde_json::from_value(json!({
        "metadata": {"name": "gated", "namespace": "default"},
        "spec": {"nodeName": n.name,
            "readinessGates": [{"conditionType": "example.com/one"}, {"conditionType": "example.com/two"}],
            "containers": [{"name": "c", "image": "localhost/busybox:latest",
                "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"]}]}
    }))
    .expect("pod");
    n.pods()
        .create(&PostParams::default(), &gated)
        .await
        .expect("create");
    let ready = |p: Option<&Value>| -> Option<String> {
        p?["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Ready")
            .and_then(|c| c["status"].as_str().map(str::to_owned))
    };
    n.wait("gated Running", Duration::from_secs(10), |p| {
        phase(p) == "Running"
    })
    .await;
    assert_eq!(ready(n.stored("gated").as_ref()).as_deref(), Some("False"));
    let set = |one: &str, two: &str| {
        json!({"status": {"conditions": [
            {"type": "example.com/one", "status": one},
            {"type": "example.com/two", "status": two},
        ]}})
    };
    let pods = n.pods();
    let patch = |body: Value| {
        let pods = pods.clone();
        async move {
            pods.patch_status(
                "gated",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Strategic(body),
            )
            .await
            .expect("patch the gates")
        }
    };
    patch(set("True", "False")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(ready(n.stored("gated").as_ref()).as_deref(), Some("False"));
    patch(set("True", "True")).await;
    n.wait("gated Ready", Duration::from_secs(10), |p| {
        ready(p).as_deref() == Some("True")
    })
    .await;
    patch(set("False", "True")).await;
    n.wait("gated not Ready again", Duration::from_secs(10), |p| {
        ready(p).as_deref() == Some("False")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_resumes_after_breaks_and_relists_after_410() {
    let n = Node::start("watch").await;
    n.create("one", 5, "sleep 3600").await;
    n.wait("one Running", Duration::from_secs(10), |p| {
        phase(p) == "Running"
    })
    .await;
    // The connection drops: a pod created meanwhile is not missed.
    n.api.end_watches();
    n.create("two", 5, "sleep 3600").await;
    n.wait("two Running", Duration::from_secs(10), |p| {
        phase(p) == "Running"
    })
    .await;
    // The history is compacted and the watch breaks: the watcher's resourceVersion is
    // too old (410 Gone), so it lists again. A pod deleted for good meanwhile (grace 0)
    // is stopped; one created meanwhile starts; nothing is duplicated.
    n.api.compact();
    n.api.end_watches();
    n.pods()
        .delete(
            "one",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .expect("force delete");
    n.create("three", 5, "sleep 3600").await;
    n.wait("three Running", Duration::from_secs(15), |p| {
        phase(p) == "Running"
    })
    .await;
    let started = Instant::now();
    loop {
        let running: Vec<String> = n
            .running_containers()
            .await
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        let mut sorted = running.clone();
        sorted.sort();
        if sorted == ["three", "two"] {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "running: {running:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let names: Vec<String> = n
        .agent
        .ctx
        .statuses
        .pods()
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(names, ["two", "three"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_away_for_a_minute_finds_everything_in_step_when_back() {
    let mut n = Node::start("outage").await;
    n.create("steady", 5, "sleep 3600").await;
    n.create("short", 5, "sleep 3; exit 0").await;
    n.wait("steady Running", Duration::from_secs(10), |p| {
        phase(p) == "Running"
    })
    .await;
    n.wait("short Running", Duration::from_secs(10), |p| {
        phase(p) == "Running"
    })
    .await;
    let before = n.running_containers().await;

    // The API server goes away for a minute. Meanwhile `short` finishes and a static
    // pod is added.
    n.served.take().expect("served").stop();
    n.set_static(vec![static_pod("latest")]).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let during: Vec<(String, String)> = n
        .running_containers()
        .await
        .into_iter()
        .filter(|(p, _)| p == "steady")
        .collect();
    assert_eq!(
        during,
        before
            .iter()
            .filter(|(p, _)| p == "steady")
            .cloned()
            .collect::<Vec<_>>(),
        "pods keep running, untouched, while the API server is away"
    );
    assert_eq!(
        phase(n.stored("short").as_ref()),
        "Running",
        "the API server has not heard of it yet"
    );

    // Back on the same address, with what it had.
    n.served = Some(n.api.serve(n.addr).await.expect("serve again"));
    n.wait("short Succeeded", Duration::from_secs(20), |p| {
        phase(p) == "Succeeded"
    })
    .await;
    let mirror = format!("etcd-{}", n.name);
    n.wait(&format!("{mirror} Running"), Duration::from_secs(20), |p| {
        phase(p) == "Running"
    })
    .await;
    assert_eq!(phase(n.stored("steady").as_ref()), "Running");
    assert_eq!(
        n.stored("steady").expect("steady")["status"]["containerStatuses"][0]["restartCount"],
        0
    );
    // The lease is renewed again.
    let renew_time = || {
        n.api
            .get(
                "apis/coordination.k8s.io/v1",
                "leases",
                "kube-node-lease",
                &n.name,
            )
            .and_then(|l| l["spec"]["renewTime"].as_str().map(str::to_owned))
    };
    let last = renew_time();
    let started = Instant::now();
    while renew_time() == last {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the lease was not renewed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The node lists the runtime's images in its status, largest first, with their names
/// and sizes (the scheduler's ImageLocality reads them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_status_lists_its_images() {
    let n = Node::start("images").await;
    let listed = n.cri.list_images(None).await.expect("images");
    assert!(!listed.is_empty());
    let started = Instant::now();
    let images = loop {
        let node = n.api.get("api/v1", "nodes", "", &n.name);
        if let Some(images) = node.as_ref().and_then(|n| n["status"]["images"].as_array()) {
            break images.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no images in {node:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(images.len(), listed.len());
    let sizes: Vec<i64> = images
        .iter()
        .map(|i| i["sizeBytes"].as_i64().unwrap_or(-1))
        .collect();
    assert!(
        sizes.windows(2).all(|w| w[0] >= w[1]),
        "largest first: {sizes:?}"
    );
    assert!(
        images.iter().any(|i| i["names"]
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n == "localhost/busybox:latest"))),
        "{images:#?}"
    );
}

/// In-place resize end to end through the API: `pods/resize` on the double, the agent
/// allocating and applying it to the running container, the status reporting it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_resized_through_the_api_runs_on_with_its_new_resources() {
    let n = Node::start("resize").await;
    let resources = |cpu: &str| json!({"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"cpu": cpu, "memory": "64Mi"}});
    let pod: k8s::Pod = serde_json::from_value(json!({
        "metadata": {"name": "rz", "namespace": "default"},
        "spec": {"nodeName": n.name, "containers": [{"name": "c", "image": "localhost/busybox:latest",
            "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"],
            "resources": resources("100m")}]}
    }))
    .expect("pod");
    n.pods()
        .create(&PostParams::default(), &pod)
        .await
        .expect("create");
    let status_cpu = |p: Option<&Value>| -> Option<String> {
        p?["status"]["containerStatuses"][0]["resources"]["limits"]["cpu"]
            .as_str()
            .map(str::to_owned)
    };
    n.wait(
        "rz Running with its resources",
        Duration::from_secs(10),
        |p| phase(p) == "Running" && status_cpu(p).as_deref() == Some("100m"),
    )
    .await;
    let first =
        n.stored("rz").expect("rz")["status"]["containerStatuses"][0]["containerID"].clone();
    let resize = json!({"spec": {"containers": [{"name": "c", "resources": resources("300m")}]}});
    n.pods()
        .patch_subresource(
            "resize",
            "rz",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Strategic(resize),
        )
        .await
        .expect("resize");
    n.wait("rz resized", Duration::from_secs(10), |p| {
        status_cpu(p).as_deref() == Some("300m")
            && p.is_some_and(|p| {
                p["status"]["containerStatuses"][0]["allocatedResources"]["cpu"] == "300m"
            })
    })
    .await;
    let stored = n.stored("rz").expect("rz");
    let c = &stored["status"]["containerStatuses"][0];
    assert_eq!(
        (&c["containerID"], &c["restartCount"]),
        (&first, &json!(0)),
        "in place"
    );
    let id = first
        .as_str()
        .and_then(|s| s.split("://").nth(1))
        .expect("id");
    let runtime = n.cri.container_status(id, false).await.expect("status");
    let linux = runtime
        .status
        .and_then(|s| s.resources)
        .and_then(|r| r.linux);
    assert_eq!(linux.map(|l| l.cpu_quota), Some(30_000));
    let conditions = stored["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        !conditions
            .iter()
            .any(|c| c["type"] == "PodResizeInProgress" || c["type"] == "PodResizePending"),
        "{conditions:?}"
    );
}
