//! The agent against the in-process CRI simulator: pods start, report status, run init
//! containers in order, stop when removed, and a restarted agent adopts what runs (in
//! the cgroup an earlier version put it in, too); admission and plugins decide. Time is
//! paused: grace periods pass in milliseconds. Restarts and back-off: `restarts_sim.rs`.

mod support;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use support::*;
use wasmlet_agent::agent::{Agent, AgentOptions};
use wasmlet_agent::cgroups::fs::CgroupFs;
use wasmlet_agent::cgroups::tree::Driver;
use wasmlet_agent::cgroups::{PodCgroups, Setup};
use wasmlet_cri_sim::Simulator;

const SLEEPER: &str = r#"{"metadata":{"name":"sleeper"},"spec":{"containers":[
    {"name":"main","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent",
     "command":["sleep","3600"]}]}}"#;

#[tokio::test(start_paused = true)]
async fn a_pod_runs_reports_status_and_stops_when_removed() {
    // The pods' cgroup tree in a directory laid out as cgroup v1.
    let mut opts = options("basic");
    let cgroup_root = opts.root_dir.join("cgroup");
    let containers_dir = opts
        .pod_logs_dir
        .parent()
        .expect("parent")
        .join("containers");
    opts.pod_cgroups = Some(tree_at(&cgroup_root).await);
    let sim = Arc::new(Simulator::new());
    let agent = Agent::start(sim.clone(), opts, Arc::new(ExecChecker), None, None);
    send(&agent, vec![pod(SLEEPER)]).await;
    let p = wait_for(&agent, "sleeper", "Running", Duration::from_secs(5), |p| {
        phase(p) == "Running" && condition(p, "Ready")
    })
    .await;
    let c = container(&p, "main");
    assert!(
        c.container_id
            .as_deref()
            .is_some_and(|id| id.starts_with("wasmlet-cri-sim://") || id.contains("://"))
    );
    assert_eq!(c.restart_count, 0);
    assert!(
        p.status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .is_some()
    );
    assert_eq!(
        p.status.as_ref().and_then(|s| s.qos_class.as_deref()),
        Some("BestEffort")
    );
    let (sandboxes, containers) = sim.counts();
    assert_eq!((sandboxes, containers), (1, 1));
    let uid = p.metadata.uid.clone().expect("uid");
    // BestEffort: in its tier.
    let pod_cgroup = cgroup_root.join(format!("pids/kubepods/besteffort/pod{uid}"));
    assert_eq!(
        std::fs::read_to_string(
            cgroup_root.join(format!("cpu/kubepods/besteffort/pod{uid}/cpu.shares"))
        )
        .expect("shares"),
        "2"
    );
    assert_eq!(
        std::fs::read_to_string(pod_cgroup.join("pids.max")).expect("podPidsLimit"),
        "100"
    );
    // The container's log is linked where the kubelet links it for log shippers
    // (`/var/log/containers/<pod>_<namespace>_<container>-<id>.log`).
    let id = c
        .container_id
        .as_deref()
        .and_then(|i| i.split("://").nth(1))
        .expect("id");
    let name = p.metadata.name.as_deref().expect("name");
    let link = containers_dir.join(format!("{name}_default_main-{id}.log"));
    let target = std::fs::read_link(&link).expect("the log link");
    assert!(
        target.ends_with("main/0.log") && target.exists(),
        "{}",
        target.display()
    );

    // Removing it stops it, then removes its containers, sandbox and cgroup.
    send(&agent, vec![]).await;
    until_counts(
        &sim,
        (0, 0),
        || true,
        "not removed",
        Duration::from_secs(60),
    )
    .await;
    assert!(agent.ctx.statuses.is_empty());
    assert!(!pod_cgroup.exists(), "the pod's cgroup is removed with it");
    assert!(
        std::fs::symlink_metadata(&link).is_err(),
        "the log link goes with the container"
    );
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn init_containers_run_first_in_order() {
    let (_sim, agent) = start("init");
    send(
        &agent,
        vec![pod(
            r#"{"metadata":{"name":"inits"},"spec":{
            "initContainers":[
              {"name":"one","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent","command":["sh","-c","sleep 2"]},
              {"name":"two","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent","command":["true"]}],
            "containers":[{"name":"app","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent","command":["sleep","3600"]}]}}"#,
        )],
    )
    .await;
    let p = wait_for(
        &agent,
        "inits",
        "Pending on init",
        Duration::from_secs(1),
        |p| phase(p) == "Pending" && !condition(p, "Initialized"),
    )
    .await;
    assert_eq!(
        container(&p, "app")
            .state
            .and_then(|s| s.waiting)
            .and_then(|w| w.reason)
            .as_deref(),
        Some("PodInitializing")
    );
    let p = wait_for(&agent, "inits", "Running", Duration::from_secs(10), |p| {
        phase(p) == "Running" && condition(p, "Initialized")
    })
    .await;
    let inits = p
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.clone())
        .expect("init statuses");
    let finished = |c: &k8s::ContainerStatus| {
        c.state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map(|t| (t.exit_code, t.finished_at.clone()))
    };
    let (one, two) = (
        finished(&inits[0]).expect("one"),
        finished(&inits[1]).expect("two"),
    );
    assert_eq!((one.0, two.0), (0, 0));
    assert!(one.1 <= two.1, "one finished before two");
    agent.shutdown().await;
}

/// An agent on `sim` running the sleeper pod, and the pod once Running.
async fn run_sleeper(sim: &Arc<Simulator>, opts: AgentOptions) -> (Agent<Simulator>, k8s::Pod) {
    let agent = Agent::start(sim.clone(), opts, Arc::new(ExecChecker), None, None);
    send(&agent, vec![pod(SLEEPER)]).await;
    let running = wait_for(&agent, "sleeper", "Running", Duration::from_secs(5), |p| {
        phase(p) == "Running"
    })
    .await;
    (agent, running)
}

#[tokio::test(start_paused = true)]
async fn a_restarted_agent_adopts_running_pods_without_restarting_them() {
    let sim = Arc::new(Simulator::new());
    let opts = options("adopt");
    let (agent, before) = run_sleeper(&sim, opts.clone()).await;
    agent.shutdown().await;

    let (agent, after) = run_sleeper(&sim, opts).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(before.metadata.uid, after.metadata.uid);
    assert_eq!(
        container(&before, "main").container_id,
        container(&after, "main").container_id,
        "the same container, not a new one"
    );
    assert_eq!(container(&after, "main").restart_count, 0);
    assert_eq!(sim.counts(), (1, 1));
    agent.shutdown().await;
}

/// The tree on a directory laid out as cgroup v1.
async fn tree_at(root: &std::path::Path) -> Arc<PodCgroups> {
    for c in ["cpu", "memory", "pids"] {
        std::fs::create_dir_all(root.join(c)).expect("mkdir");
    }
    let setup = Setup {
        driver: Driver::Cgroupfs,
        cgroup_root: "/".into(),
        pids_limit: Some(100),
        capacity: (2000, 4 << 30),
        reserved: (0, 0),
        enforce_pods: true,
        reserved_cgroups: Vec::new(),
        kubepods_pids: None,
        hugepages: Vec::new(),
        cpus: None,
    };
    let tree = PodCgroups::with(CgroupFs::at(root, false), setup, None)
        .await
        .expect("tree");
    Arc::new(tree)
}

#[tokio::test(start_paused = true)]
async fn a_pod_an_earlier_version_put_in_its_cgroup_stays_there_and_leaves_cleanly() {
    let sim = Arc::new(Simulator::new());
    let mut opts = options("migrate");
    let cgroups = opts.root_dir.join("cgroup");
    opts.pod_cgroups = Some(tree_at(&cgroups).await);
    let (agent, before) = run_sleeper(&sim, opts.clone()).await;
    agent.shutdown().await;
    // As an earlier wasmlet left it: the pod's cgroup in /wasmlet/pod<uid>.
    let uid = before.metadata.uid.clone().expect("uid");
    for c in ["cpu", "memory", "pids"] {
        let legacy = cgroups.join(c).join("wasmlet");
        std::fs::create_dir_all(&legacy).expect("mkdir");
        std::fs::rename(
            cgroups
                .join(c)
                .join(format!("kubepods/besteffort/pod{uid}")),
            legacy.join(format!("pod{uid}")),
        )
        .expect("move");
    }

    // Upgraded: the pod is adopted where it runs, housekeeping leaves its cgroup alone.
    opts.pod_cgroups = Some(tree_at(&cgroups).await);
    let (agent, after) = run_sleeper(&sim, opts).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        container(&before, "main").container_id,
        container(&after, "main").container_id
    );
    let legacy = cgroups.join(format!("pids/wasmlet/pod{uid}"));
    assert!(
        legacy.is_dir(),
        "housekeeping kept the running pod's cgroup"
    );
    assert!(
        !cgroups
            .join(format!("pids/kubepods/besteffort/pod{uid}"))
            .exists()
    );
    let tree = agent.ctx.node.pod_cgroups.clone().expect("tree");
    assert_eq!(tree.pod_cgroup(&uid), Some(format!("/wasmlet/pod{uid}")));

    // Removed, it leaves from there.
    send(&agent, vec![]).await;
    let left = || !legacy.exists();
    until_counts(&sim, (0, 0), left, "not removed", Duration::from_secs(60)).await;
    for c in ["cpu", "memory", "pids"] {
        assert!(!cgroups.join(c).join(format!("wasmlet/pod{uid}")).exists());
    }
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_runtime_going_away_marks_the_node_not_ready_and_the_agent_carries_on() {
    let (sim, agent) = start("outage");
    send(&agent, vec![pod(SLEEPER)]).await;
    let before = wait_for(&agent, "sleeper", "Running", Duration::from_secs(5), |p| {
        phase(p) == "Running"
    })
    .await;
    sim.set_unavailable_for(Duration::from_secs(30));
    let started = tokio::time::Instant::now();
    while agent.runtime_state.ready() {
        assert!(started.elapsed() < Duration::from_secs(10), "still ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let node = agent.node_object();
    let ready = &node.status.and_then(|s| s.conditions).expect("conditions")[0];
    assert_eq!(ready.status, "False");
    assert!(
        ready
            .message
            .as_deref()
            .is_some_and(|m| m.contains("container runtime is down")),
        "{ready:?}"
    );
    // A pod added during the outage starts once the runtime is back.
    let other = SLEEPER.replace("sleeper", "later");
    send(&agent, vec![pod(SLEEPER), pod(&other)]).await;
    wait_for(
        &agent,
        "later",
        "Running after the outage",
        Duration::from_secs(90),
        |p| phase(p) == "Running",
    )
    .await;
    assert!(agent.runtime_state.ready());
    let after = wait_for(&agent, "sleeper", "Running", Duration::from_secs(5), |p| {
        phase(p) == "Running"
    })
    .await;
    assert_eq!(
        container(&before, "main").container_id,
        container(&after, "main").container_id,
        "the outage restarted nothing"
    );
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn admission_rejects_with_the_plugins_reason_and_the_rest_runs() {
    let engine = wasmlet_plugin_host::PluginEngine::new().expect("engine");
    let chain = Arc::new(wasmlet_plugin_host::chain::AdmissionChain::new(engine));
    // restricted-pods reads the whole pod as JSON (made only when a policy asks).
    for name in ["resource-fit", "restricted-pods"] {
        chain
            .push(
                name,
                &wasmlet_plugin_host::dev::shipped_plugin(name),
                Default::default(),
                Default::default(),
                wasmlet_plugin_host::chain::FailurePolicy::Fail,
            )
            .expect("the policy loads");
    }
    let (sim, agent, events) = start_admitting("admission", chain);
    let greedy = r#"{"metadata":{"name":"greedy"},"spec":{"containers":[
        {"name":"c","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent",
         "command":["sleep","3600"],"resources":{"requests":{"cpu":"64"}}}]}}"#;
    let invalid = r#"{"metadata":{"name":"twins"},"spec":{"containers":[
        {"name":"c","image":"i"},{"name":"c","image":"i"}]}}"#;
    let peeker = r#"{"metadata":{"name":"peeker"},"spec":{"hostPID":true,"containers":[
        {"name":"c","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent",
         "command":["sleep","3600"]}]}}"#;
    send(
        &agent,
        vec![pod(greedy), pod(invalid), pod(peeker), pod(SLEEPER)],
    )
    .await;
    wait_for(&agent, "sleeper", "Running", Duration::from_secs(5), |p| {
        phase(p) == "Running"
    })
    .await;
    let p = wait_for(&agent, "greedy", "rejected", Duration::from_secs(5), |p| {
        phase(p) == "Failed"
    })
    .await;
    let status = p.status.expect("status");
    assert_eq!(status.reason.as_deref(), Some("OutOfcpu"));
    let rejected: Vec<_> = events
        .events()
        .into_iter()
        .filter(|e| e.pod.name.starts_with("greedy"))
        .collect();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(
        (rejected[0].kind, rejected[0].reason.as_str()),
        (wasmlet_agent::events::Kind::Warning, "OutOfcpu"),
        "an event with the plugin's reason"
    );
    assert!(
        status.message.as_deref().is_some_and(
            |m| m.starts_with("Pod was rejected: Node didn't have enough resource: cpu")
        ),
        "{:?}",
        status.message
    );
    let p = wait_for(&agent, "peeker", "rejected", Duration::from_secs(5), |p| {
        phase(p) == "Failed"
    })
    .await;
    let status = p.status.expect("status");
    assert_eq!(status.reason.as_deref(), Some("RestrictedPod"));
    assert_eq!(
        status.message.as_deref(),
        Some("Pod was rejected: spec.hostPID is set, which namespace default does not allow")
    );
    assert!(
        agent
            .ctx
            .statuses
            .pods()
            .iter()
            .all(|p| p.metadata.name.as_deref() != Some("twins-node-admission")),
        "an invalid pod is not accepted"
    );
    assert_eq!(sim.counts(), (1, 1), "only the admitted, valid pod runs");
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_policy_rejects_with_what_went_wrong_in_the_authors_words() {
    let engine = wasmlet_plugin_host::PluginEngine::new().expect("engine");
    let chain = Arc::new(wasmlet_plugin_host::chain::AdmissionChain::new(engine));
    chain
        .push(
            "buggy",
            &wasmlet_plugin_host::dev::shipped_plugin("fixture-panic"),
            Default::default(),
            Default::default(),
            wasmlet_plugin_host::chain::FailurePolicy::Fail,
        )
        .expect("the policy loads");
    let (sim, agent, events) = start_admitting("buggy", chain);
    send(&agent, vec![pod(SLEEPER)]).await;
    let p = wait_for(
        &agent,
        "sleeper",
        "rejected",
        Duration::from_secs(10),
        |p| phase(p) == "Failed",
    )
    .await;
    let said = "plugin buggy: admit failed: panicked at fixtures/panic/src/lib.rs:9:9: policy \
                bug while looking at pod sleeper-node-buggy (wasm trap: wasm `unreachable` \
                instruction executed)";
    let status = p.status.expect("status");
    assert_eq!(status.reason.as_deref(), Some("AdmissionPluginError"));
    assert_eq!(status.message, Some(format!("Pod was rejected: {said}")));
    let event = events
        .events()
        .into_iter()
        .find(|e| e.reason == "AdmissionPluginError")
        .expect("a rejection event");
    assert!(event.message.contains(said), "{event:?}");
    assert!(!event.message.contains("backtrace"), "{event:?}");
    assert_eq!(sim.counts(), (0, 0), "nothing runs");
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_in_monitor_mode_admits_and_leaves_an_event_of_what_it_would_reject() {
    use wasmlet_plugin_host::chain::{AdmissionChain, FailurePolicy, LinkSpec, Mode};
    let engine = wasmlet_plugin_host::PluginEngine::new().expect("engine");
    let chain = Arc::new(AdmissionChain::new(engine));
    let spec = LinkSpec {
        path: wasmlet_plugin_host::dev::shipped_plugin("restricted-pods"),
        config: Default::default(),
        limits: Default::default(),
        failure_policy: FailurePolicy::Fail,
        mode: Mode::Monitor,
    };
    chain
        .install("restricted", spec)
        .await
        .expect("the policy loads");
    let (sim, agent, events) = start_admitting("monitor", chain);
    let peeker = r#"{"metadata":{"name":"peeker"},"spec":{"hostPID":true,"containers":[
        {"name":"c","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent",
         "command":["sleep","3600"]}]}}"#;
    send(&agent, vec![pod(peeker), pod(SLEEPER)]).await;
    for name in ["peeker", "sleeper"] {
        wait_for(&agent, name, "Running", Duration::from_secs(10), |p| {
            phase(p) == "Running"
        })
        .await;
    }
    let said: Vec<_> = events
        .events()
        .into_iter()
        .filter(|e| e.reason == wasmlet_agent::syncloop::WOULD_REJECT_REASON)
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].pod.name.starts_with("peeker"), "{said:?}");
    assert_eq!(said[0].kind, wasmlet_agent::events::Kind::Warning);
    assert_eq!(
        said[0].message,
        "restricted (Monitor mode) would reject the pod: RestrictedPod: spec.hostPID is set, \
         which namespace default does not allow"
    );
    assert_eq!(sim.counts(), (2, 2), "both pods run");
    agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_pod_picks_a_custom_probe_kind_by_annotation() {
    let (_sim, agent) = start("custom");
    send(
        &agent,
        vec![pod(r#"{"metadata":{"name":"custom","annotations":{
                "probe.wasmlet.io/c.readinessProbe":"answers ok=yes",
                "probe.wasmlet.io/d.readinessProbe":"answers ok=no"}},
              "spec":{"containers":[
                {"name":"c","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent",
                 "command":["sleep","3600"],"readinessProbe":{"periodSeconds":1}},
                {"name":"d","image":"localhost/busybox:latest","imagePullPolicy":"IfNotPresent",
                 "command":["sleep","3600"],"readinessProbe":{"periodSeconds":1}}]}}"#)],
    )
    .await;
    let p = wait_for(&agent, "custom", "c ready", Duration::from_secs(10), |p| {
        container(p, "c").ready
    })
    .await;
    assert!(!container(&p, "d").ready);
    let ready = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .expect("Ready condition");
    assert_eq!(
        ready.message.as_deref(),
        Some("containers with unready status: [d]")
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_of_a_source_the_cluster_adds_run_and_go_with_it() {
    use wasmlet_plugin_host::config::{PluginsConfig, SourceConfig};
    use wasmlet_plugin_host::kinds::{ClusterSource, PodSources};

    let opts = options("cluster-source");
    let manifests = opts.root_dir.join("team-manifests");
    std::fs::create_dir_all(&manifests).expect("manifests");
    std::fs::write(
        manifests.join("web.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - {name: main, image: localhost/busybox:latest, imagePullPolicy: IfNotPresent, command: [sleep, '3600']}\n",
    )
    .expect("manifest");
    let engine = wasmlet_plugin_host::PluginEngine::new().expect("engine");
    let sources = Arc::new(
        PodSources::start(&engine, &PluginsConfig::default(), false)
            .await
            .expect("sources"),
    );
    let sim = Arc::new(Simulator::new());
    let agent = Agent::start(
        sim.clone(),
        opts,
        Arc::new(ExecChecker),
        None,
        Some(sources.clone()),
    );
    // What the fleet does for a WasmletPlugin of kind pod-source.
    let entry: SourceConfig = serde_json::from_value(serde_json::json!({
        "name": "team-pods",
        "file": wasmlet_plugin_host::dev::shipped_plugin("source-file"),
        "directory": manifests,
        "period": "1s",
    }))
    .expect("entry");
    let spec = entry.spec(std::path::Path::new("/"), 0).expect("spec");
    let source = engine
        .load_source(
            "team-pods",
            &spec.path,
            spec.config,
            spec.limits,
            spec.grants,
        )
        .expect("loads");
    sources.set_cluster(ClusterSource {
        source: Arc::new(source),
        period: spec.period,
        directory: Some(manifests.clone()),
    });
    let web = wait_for(&agent, "web", "Running", Duration::from_secs(10), |p| {
        phase(p) == "Running"
    })
    .await;
    let annotations = web.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get("kubernetes.io/config.source")
            .map(String::as_str),
        Some("team-pods")
    );
    // A manifest written later is picked up (the directory is watched).
    std::fs::write(
        manifests.join("db.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: db}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - {name: main, image: localhost/busybox:latest, imagePullPolicy: IfNotPresent, command: [sleep, '3600']}\n",
    )
    .expect("manifest");
    wait_for(&agent, "db", "Running", Duration::from_secs(10), |p| {
        phase(p) == "Running"
    })
    .await;

    assert_eq!(sim.counts(), (2, 2));

    // The object is deleted: the source and its pods go.
    sources.remove_cluster("team-pods");
    let gone = || agent.ctx.statuses.is_empty();
    let what = "the source's pods are still there";
    until_counts(&sim, (0, 0), gone, what, Duration::from_secs(30)).await;
    agent.shutdown().await;
}
