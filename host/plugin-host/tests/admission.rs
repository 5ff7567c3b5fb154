//! Admission plugins built from `plugins/` (wasm32-wasip2), loaded and called through
//! the host, with the kubelet's verdicts.

mod common;

use std::collections::BTreeMap;

use common::{admission, node, plugin, pod, resources, usage};
use wasmlet_plugin_host::*;

fn container(name: &str, ports: &[(u16, &str, &str)]) -> Container {
    Container {
        name: name.into(),
        image: "localhost/busybox:latest".into(),
        requests: resources(),
        limits: resources(),
        ports: ports
            .iter()
            .map(|(port, ip, protocol)| ContainerPort {
                name: None,
                container_port: *port,
                host_port: Some(*port),
                host_ip: (*ip).into(),
                protocol: common::protocol(protocol),
            })
            .collect(),
        privileged: false,
        restartable: false,
    }
}

fn node_ports() -> AdmissionPlugin {
    let engine = PluginEngine::new().expect("engine");
    engine
        .load_admission(
            "node-ports",
            &plugin("node-ports"),
            BTreeMap::new(),
            Limits::default(),
        )
        .expect("load node-ports")
}

fn rejected(reason: &str, message: &str) -> Verdict {
    Verdict::Reject(Rejection {
        reason: reason.into(),
        message: message.into(),
    })
}

const NODE_PORTS: &str =
    "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports";

/// Host ports held on the node: (address, protocol, port).
type Held = &'static [(&'static str, &'static str, u16)];

struct Case {
    what: &'static str,
    containers: Vec<Container>,
    held: Held,
    admit: bool,
}

#[tokio::test]
async fn node_ports_gives_the_kubelets_verdicts() {
    let p = node_ports();
    let case = |what, containers, held, admit| Case {
        what,
        containers,
        held,
        admit,
    };
    let cases = [
        case(
            "no host ports",
            vec![container("a", &[])],
            &[("0.0.0.0", "TCP", 80)],
            true,
        ),
        case(
            "free port",
            vec![container("a", &[(8080, "", "TCP")])],
            &[("0.0.0.0", "TCP", 80)],
            true,
        ),
        case(
            "taken on every address",
            vec![container("a", &[(80, "", "TCP")])],
            &[("0.0.0.0", "TCP", 80)],
            false,
        ),
        case(
            "wildcard wants a port held on one address",
            vec![container("a", &[(80, "", "")])],
            &[("10.0.0.1", "TCP", 80)],
            false,
        ),
        case(
            "different addresses",
            vec![container("a", &[(80, "10.0.0.2", "TCP")])],
            &[("10.0.0.1", "TCP", 80)],
            true,
        ),
        case(
            "different protocol",
            vec![container("a", &[(53, "", "UDP")])],
            &[("0.0.0.0", "TCP", 53)],
            true,
        ),
        case(
            "two containers of the pod want the same port",
            vec![
                container("a", &[(9000, "", "TCP")]),
                container("b", &[(9000, "", "TCP")]),
            ],
            &[],
            false,
        ),
    ];
    for c in cases {
        let verdict = p
            .admit(&admission(&pod(c.containers), &node(), &usage(c.held)))
            .await
            .expect(c.what);
        let want = if c.admit {
            Verdict::Admit
        } else {
            rejected("NodePorts", NODE_PORTS)
        };
        assert_eq!(format!("{verdict:?}"), format!("{want:?}"), "{}", c.what);
    }
}

#[tokio::test]
async fn a_file_that_is_not_a_component_is_refused_by_name() {
    let engine = PluginEngine::new().expect("engine");
    let dir = std::env::temp_dir().join(format!("wasmlet-plugin-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let bogus = dir.join("bogus.wasm");
    let cases: [(&[u8], &str); 3] = [
        (b"\0asm not really", "not a WebAssembly file"),
        (b"apiVersion: v1\n", "not a WebAssembly file"),
        // The smallest core module: what a wasm32-wasip1 build produces.
        (
            b"\0asm\x01\0\0\0",
            "a core WebAssembly module, not a component",
        ),
    ];
    for (bytes, why) in cases {
        std::fs::write(&bogus, bytes).expect("write");
        let err = engine
            .load_admission("bogus", &bogus, BTreeMap::new(), Limits::default())
            .expect_err("not a component");
        let text = err.to_string();
        assert!(text.starts_with("plugin bogus: cannot load"), "{text}");
        assert!(text.contains("bogus.wasm"), "{text}");
        assert!(text.contains(why), "{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn load(engine: &PluginEngine, fixture: &str, limits: Limits) -> AdmissionPlugin {
    engine
        .load_admission(fixture, &plugin(fixture), BTreeMap::new(), limits)
        .expect("load fixture")
}

#[tokio::test]
async fn bad_guests_are_cut_off_and_the_host_keeps_serving() {
    bad_guests(InstanceMode::PerCall).await;
}

#[tokio::test]
async fn bad_guests_are_cut_off_with_reused_instances_too() {
    bad_guests(InstanceMode::Reused).await;
}

async fn bad_guests(instances: InstanceMode) {
    let engine = PluginEngine::new().expect("engine");
    let limits = Limits {
        deadline: std::time::Duration::from_millis(200),
        memory_bytes: 16 << 20,
        instances,
    };
    let args = (pod(vec![container("a", &[])]), node(), usage(&[]));

    let spin = load(&engine, "fixture-spin", limits.clone());
    let started = std::time::Instant::now();
    let err = spin
        .admit(&admission(&args.0, &args.1, &args.2))
        .await
        .expect_err("spins");
    assert!(matches!(err, PluginError::Deadline { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "plugin fixture-spin: admit exceeded its deadline of 200ms"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    let bomb = load(&engine, "fixture-memory-bomb", limits.clone());
    let err = bomb
        .admit(&admission(&args.0, &args.1, &args.2))
        .await
        .expect_err("exhausts memory");
    assert!(matches!(err, PluginError::Call { .. }), "{err}");
    // The trap is an abort in the allocator; the error names the limit that caused it.
    let text = err.to_string();
    assert!(
        text.starts_with("plugin fixture-memory-bomb: admit failed: memory limit of 16 MiB reached: the guest, at "),
        "{err}"
    );
    assert!(!text.contains("wasm backtrace"), "{err}");

    let panics = load(&engine, "fixture-panic", limits.clone());
    let err = panics
        .admit(&admission(&args.0, &args.1, &args.2))
        .await
        .expect_err("panics");
    // The panic's place and message, from what the guest printed before it aborted.
    let PluginError::Call { failure, .. } = &err else {
        panic!("a call error: {err}");
    };
    assert!(
        failure.exception.is_none() && failure.memory.is_none(),
        "{failure:?}"
    );
    assert!(
        failure.stderr.contains("policy bug while looking at pod"),
        "{failure:?}"
    );
    assert_eq!(
        err.to_string(),
        "plugin fixture-panic: admit failed: panicked at fixtures/panic/src/lib.rs:9:9: \
         policy bug while looking at pod web (wasm trap: wasm `unreachable` instruction executed)"
    );

    // The engine, and the plugins that behave, keep working.
    let good = engine
        .load_admission("node-ports", &plugin("node-ports"), BTreeMap::new(), limits)
        .expect("load");
    let verdict = good
        .admit(&admission(&args.0, &args.1, &args.2))
        .await
        .expect("admit");
    assert!(matches!(verdict, Verdict::Admit));
    for _ in 0..3 {
        let verdict = good
            .admit(&admission(&args.0, &args.1, &args.2))
            .await
            .expect("admit again");
        assert!(matches!(verdict, Verdict::Admit));
    }
    // A trapped plugin is not poisoned: its instance is thrown away.
    let again = spin
        .admit(&admission(&args.0, &args.1, &args.2))
        .await
        .expect_err("still spins");
    assert!(matches!(again, PluginError::Deadline { .. }));
}

/// The epoch (a guest's deadline check and yield) advances only while a call is under
/// way: an idle agent has no thread waking every 10 ms.
#[tokio::test]
async fn the_epoch_advances_only_while_a_call_is_under_way() {
    let engine = PluginEngine::new().expect("engine");
    let limits = Limits {
        deadline: std::time::Duration::from_millis(100),
        ..Limits::default()
    };
    let spin = load(&engine, "fixture-spin", limits);
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert_eq!(engine.epoch_ticks(), 0, "ticks with no call under way");

    let args = (pod(vec![container("a", &[])]), node(), usage(&[]));
    let err = spin
        .admit(&admission(&args.0, &args.1, &args.2))
        .await
        .expect_err("spins");
    assert!(matches!(err, PluginError::Deadline { .. }), "{err}");
    let during = engine.epoch_ticks();
    assert!(during >= 5, "{during} ticks in a 100 ms call");

    // The tick under way when the call ended may still land; then the thread sleeps.
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    let after = engine.epoch_ticks();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(engine.epoch_ticks(), after, "ticks after the call ended");

    // And it starts again with the next call.
    let err = spin
        .admit(&admission(&args.0, &args.1, &args.2))
        .await
        .expect_err("spins again");
    assert!(matches!(err, PluginError::Deadline { .. }), "{err}");
    assert!(engine.epoch_ticks() >= after + 5);
}

#[test]
fn concurrent_loads_of_one_component_compile_it_once() {
    let dir = std::env::temp_dir().join(format!("wasmlet-plugin-flight-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = plugin("taint-toleration");
    // Four nodes in one process, each its own engine on one cache directory.
    let outcomes: Vec<CacheOutcome> = std::thread::scope(|s| {
        let loads: Vec<_> = (0..4)
            .map(|i| {
                let (dir, path) = (&dir, &path);
                s.spawn(move || {
                    PluginEngine::with_cache(dir)
                        .expect("engine")
                        .load_admission(&format!("n{i}"), path, BTreeMap::new(), Limits::default())
                        .expect("load")
                        .load_outcome()
                        .clone()
                })
            })
            .collect();
        loads
            .into_iter()
            .map(|l| l.join().expect("thread"))
            .collect()
    });
    let compiled = outcomes
        .iter()
        .filter(|o| **o == CacheOutcome::Miss)
        .count();
    assert_eq!(compiled, 1, "{outcomes:?}");
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, CacheOutcome::Miss | CacheOutcome::Hit))
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn compiled_components_are_cached_and_bad_entries_replaced() {
    let dir = std::env::temp_dir().join(format!("wasmlet-plugin-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let load = || {
        // A new engine each time: what an agent restart does.
        let engine = PluginEngine::with_cache(&dir).expect("engine");
        load(&engine, "node-ports", Limits::default())
    };
    let first = load();
    assert_eq!(first.load_outcome(), &CacheOutcome::Miss);
    assert_eq!(first.digest().len(), 64);
    let second = load();
    assert_eq!(second.load_outcome(), &CacheOutcome::Hit);
    assert_eq!(second.digest(), first.digest());

    let entries: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = &entries[0];
    assert!(
        entry
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(first.digest()))
    );

    // One flipped byte: refused, recompiled, and the plugin still decides. (Written
    // beside and renamed over it: the loaded components map the entry's file, which is
    // only ever replaced whole, never written in place.)
    let mut bytes = std::fs::read(entry).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(dir.join("corrupt.tmp"), &bytes).expect("corrupt");
    std::fs::rename(dir.join("corrupt.tmp"), entry).expect("corrupt");
    let third = load();
    assert!(
        matches!(third.load_outcome(), CacheOutcome::Replaced(why) if why.contains("checksum")),
        "{:?}",
        third.load_outcome()
    );
    let verdict = third
        .admit(&admission(
            &pod(vec![container("a", &[])]),
            &node(),
            &usage(&[]),
        ))
        .await
        .expect("admit");
    assert!(matches!(verdict, Verdict::Admit));
    // ... and the entry was rewritten.
    assert_eq!(load().load_outcome(), &CacheOutcome::Hit);

    // A truncated entry likewise.
    std::fs::write(dir.join("short.tmp"), b"short").expect("truncate");
    std::fs::rename(dir.join("short.tmp"), entry).expect("truncate");
    assert!(matches!(load().load_outcome(), CacheOutcome::Replaced(_)));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `.cwasm` entries of `dir`.
fn cwasm_entries(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect()
}

#[test]
fn precompiled_components_of_a_package_are_read_where_they_are_and_never_changed() {
    let dir = std::env::temp_dir().join(format!("wasmlet-shipped-cache-{}", std::process::id()));
    let (shipped, own) = (dir.join("shipped"), dir.join("own"));
    let _ = std::fs::remove_dir_all(&dir);
    let wasm = std::fs::read(plugin("node-ports")).expect("component");
    PluginEngine::with_cache(&shipped)
        .expect("engine")
        .precompile_into_cache(&wasm)
        .expect("precompile");
    let entry = cwasm_entries(&shipped).pop().expect("a shipped entry");
    let load = || {
        let engine = PluginEngine::with_cache(&own).expect("engine");
        load(
            &engine.with_shipped_cache(shipped.clone()),
            "node-ports",
            Limits::default(),
        )
    };
    // Found there: nothing compiled, nothing written to the node's own cache.
    assert_eq!(load().load_outcome(), &CacheOutcome::Hit);
    assert!(cwasm_entries(&own).is_empty());

    // A damaged one (another build's, a bad copy) is passed over and left as it is: the
    // component is compiled into the node's cache, which serves from then on.
    let mut bytes = std::fs::read(&entry).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&entry, &bytes).expect("damage");
    assert_eq!(load().load_outcome(), &CacheOutcome::Miss);
    assert_eq!(std::fs::read(&entry).expect("still there"), bytes);
    assert_eq!(cwasm_entries(&own).len(), 1);
    assert_eq!(load().load_outcome(), &CacheOutcome::Hit);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "current_thread")]
async fn a_long_call_yields_to_the_other_tasks() {
    let engine = PluginEngine::new().expect("engine");
    let limits = Limits {
        deadline: std::time::Duration::from_millis(300),
        ..Limits::default()
    };
    let spin = load(&engine, "fixture-spin", limits);
    let ticks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = ticks.clone();
    // On this one-thread runtime the ticker only runs when the guest yields.
    let ticker = tokio::spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let args = (pod(vec![container("a", &[])]), node(), usage(&[]));
    let err = spin
        .admit(&admission(&args.0, &args.1, &args.2))
        .await
        .expect_err("spins");
    ticker.abort();
    assert!(matches!(err, PluginError::Deadline { .. }), "{err}");
    let ticks = ticks.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        ticks >= 5,
        "the ticker ran only {ticks} times during a 300 ms call"
    );
}

/// The message of a `fixture-counter` verdict: `call N`, N the calls its instance served.
async fn count(plugin: &AdmissionPlugin) -> String {
    let args = (pod(vec![container("a", &[])]), node(), usage(&[]));
    match plugin.admit(&admission(&args.0, &args.1, &args.2)).await {
        Ok(Verdict::Reject(r)) if r.reason == "Counted" => r.message,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_fresh_instance_serves_one_call_and_the_next_is_made_ahead() {
    let engine = PluginEngine::new().expect("engine");
    let fresh = load(
        &engine,
        "fixture-counter",
        Limits {
            instances: InstanceMode::PerCall,
            ..Limits::default()
        },
    );
    let reused = load(&engine, "fixture-counter", Limits::default());
    assert_eq!(fresh.spare_instances(), 0, "none before the first call");
    for n in 1..=4 {
        // Whatever an instance keeps never reaches the next call...
        assert_eq!(count(&fresh).await, "call 1");
        // ...as it does when instances are reused.
        assert_eq!(count(&reused).await, format!("call {n}"));
        // The next fresh instance is made on a background task while nothing is called.
        let made = std::time::Instant::now();
        while fresh.spare_instances() == 0 {
            assert!(
                made.elapsed() < std::time::Duration::from_secs(5),
                "no spare"
            );
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert_eq!(fresh.spare_instances(), 1);
    }
    assert_eq!(reused.spare_instances(), 0);

    // Calls that come faster than spares are made still get an instance each.
    let calls = (0..20).map(|_| count(&fresh));
    for message in futures::future::join_all(calls).await {
        assert_eq!(message, "call 1");
    }
}

#[tokio::test(start_paused = true)]
async fn reused_instances_unused_for_a_while_are_dropped() {
    let engine = PluginEngine::new().expect("engine");
    let reused = load(&engine, "fixture-counter", Limits::default());
    assert_eq!(count(&reused).await, "call 1");
    assert_eq!(reused.idle_instances(), 1);
    // Used again within its lifetime, it is kept past the first lifetime's end...
    tokio::time::sleep(IDLE_INSTANCE_LIFETIME / 2).await;
    assert_eq!(count(&reused).await, "call 2");
    tokio::time::sleep(IDLE_INSTANCE_LIFETIME / 2 + std::time::Duration::from_millis(1)).await;
    tokio::time::sleep(IDLE_INSTANCE_LIFETIME / 4).await;
    assert_eq!(reused.idle_instances(), 1);
    assert_eq!(
        count(&reused).await,
        "call 3",
        "the instance in use was kept"
    );
    // ... and after a quiet spell none is kept: the next decision makes a new one.
    tokio::time::sleep(IDLE_INSTANCE_LIFETIME * 3).await;
    assert_eq!(reused.idle_instances(), 0);
    assert_eq!(count(&reused).await, "call 1");
    assert_eq!(reused.idle_instances(), 1);
}

#[tokio::test]
async fn a_policy_reads_each_field_of_the_pod_and_node_it_asks_for() {
    let engine = PluginEngine::new().expect("engine");
    let describe = load(&engine, "fixture-describe", Limits::default());
    let cpu = |milli_cpu| ResourceList {
        milli_cpu,
        ..resources()
    };
    let with_cpu = |name, milli_cpu| Container {
        requests: cpu(milli_cpu),
        ..container(name, &[])
    };
    let pod = Pod {
        labels: vec![("app".into(), "web".into())],
        annotations: vec![("note".into(), "x".into())],
        init_containers: vec![with_cpu("init", 250)],
        overhead: cpu(10),
        node_selector: vec![("zone".into(), "z1".into())],
        required_node_affinity: vec![NodeSelectorTerm {
            match_expressions: Vec::new(),
            match_fields: Vec::new(),
        }],
        tolerations: vec![Toleration {
            key: "k".into(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect: None,
            toleration_seconds: None,
        }],
        host_network: true,
        priority: 7,
        static_pod: true,
        source: "file".into(),
        ..pod(vec![with_cpu("a", 100), with_cpu("b", 200)])
    };
    let node = Node {
        labels: vec![("zone".into(), "z1".into()), ("disk".into(), "ssd".into())],
        taints: vec![Taint {
            key: "dedicated".into(),
            value: "batch".into(),
            effect: TaintEffect::NoSchedule,
        }],
        allocatable: cpu(4000),
        ..node()
    };
    let mut load = usage(&[("0.0.0.0", "TCP", 80), ("10.0.0.1", "UDP", 53)]);
    load.usage.requested = cpu(500);
    let admission = Admission::new(pod, node, load, || r#"{"kind":"Pod"}"#.to_owned());
    let Ok(Verdict::Reject(r)) = describe.admit(&admission).await else {
        panic!("no description");
    };
    let want = [
        "uid uid-1",
        "name web",
        "namespace default",
        "labels app=web",
        "annotations note=x",
        "containers a,b",
        "init-containers init",
        "overhead 10m",
        // The app containers (300m) outweigh the init container (250m); overhead on top.
        "requests 310m 0B",
        "node-selector zone=z1",
        "affinity terms 1",
        "tolerations 1",
        "host-network true",
        "priority 7",
        "static true",
        "source file",
        "whole default/web",
        r#"json {"kind":"Pod"}"#,
        "node node-1",
        "node labels zone=z1,disk=ssd",
        r#"node label zone Some("z1")"#,
        "taints 1",
        "allocatable 4000m",
        "usage 2 pods 500m",
        "host ports 2",
        "node whole node-1",
    ];
    assert_eq!(r.reason, "Described");
    assert_eq!(r.message.lines().collect::<Vec<_>>(), want);
}

#[tokio::test]
async fn every_call_and_load_is_counted_per_plugin() {
    let engine = PluginEngine::new().expect("engine");
    let ports = load(&engine, "node-ports", Limits::default());
    let spin = load(
        &engine,
        "fixture-spin",
        Limits {
            deadline: std::time::Duration::from_millis(50),
            ..Limits::default()
        },
    );
    let free = (
        pod(vec![container("a", &[(80, "", "TCP")])]),
        node(),
        usage(&[]),
    );
    let taken = usage(&[("0.0.0.0", "TCP", 80)]);
    for _ in 0..3 {
        ports
            .admit(&admission(&free.0, &free.1, &free.2))
            .await
            .expect("admit");
    }
    ports
        .admit(&admission(&free.0, &free.1, &taken))
        .await
        .expect("reject");
    spin.admit(&admission(&free.0, &free.1, &free.2))
        .await
        .expect_err("deadline");
    let missing = std::path::Path::new("/nonexistent/x.wasm");
    let _ = engine.load_admission("gone", missing, BTreeMap::new(), Limits::default());

    let mut registry = prometheus_client::registry::Registry::default();
    engine.metrics().register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    for line in [
        r#"wasmlet_plugin_calls_total{plugin="node-ports",kind="admission",result="admit"} 3"#,
        r#"wasmlet_plugin_calls_total{plugin="node-ports",kind="admission",result="reject"} 1"#,
        r#"wasmlet_plugin_calls_total{plugin="fixture-spin",kind="admission",result="error"} 1"#,
        r#"wasmlet_plugin_call_duration_seconds_count{plugin="node-ports",kind="admission"} 4"#,
        r#"wasmlet_plugin_loads_total{plugin="node-ports",kind="admission",result="loaded"} 1"#,
        r#"wasmlet_plugin_loads_total{plugin="gone",kind="admission",result="refused"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
    }
    // Reused instances: only the first call of each plugin instantiated.
    assert!(
        text.lines().any(|l| l
            == r#"wasmlet_plugin_instantiation_duration_seconds_count{plugin="node-ports",kind="admission"} 1"#),
        "{text}"
    );
}
