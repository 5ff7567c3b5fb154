//! One policy in three languages: `restricted-pods` in Rust, Python (componentize-py)
//! and TypeScript (componentize-js), measured as the agent runs them — component size,
//! loading with and without the compiled-component cache, instance start, decisions
//! beside 110 active pods, and the host memory a loaded plugin costs.
//!
//! `cargo bench -p wasmlet-bench --bench plugin_languages` (or `cargo xtask bench
//! plugin_languages`). Builds the Python and TypeScript versions with the pinned
//! toolchains (`scripts/plugin-toolchains.sh`); without them it says so and stops.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as k8s;
use serde_json::json;
use wasmlet_bench::{Budget, Gap, Samples, fmt, header, row, time_paced};
use wasmlet_plugin_host::dev::{lang_plugin_named, lang_toolchains, shipped_plugin};
use wasmlet_plugin_host::*;

/// The policy in each language: (language, component).
fn versions() -> Vec<(&'static str, PathBuf)> {
    vec![
        ("Rust", shipped_plugin("restricted-pods")),
        ("Python", lang_plugin_named("restricted-pods-python")),
        ("TypeScript", lang_plugin_named("restricted-pods-js")),
    ]
}

fn smoke() -> bool {
    std::env::args().any(|a| a == "--smoke")
}

fn temp(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wasmlet-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The pod under admission (its JSON too: restricted-pods reads hostPID and hostIPC
/// there), the node, and the usage of the 110 pods it already runs.
struct Scene {
    pod: Arc<Pod>,
    json: Arc<str>,
    node: Arc<Node>,
    load: NodeLoad,
}

fn k8s_pod(i: usize) -> k8s::Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("app-{i}"), "namespace": "default", "uid": format!("uid-{i}")},
        "spec": {"containers": [
            {"name": "app", "image": "registry.example/app:1.2.3",
             "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}},
            {"name": "sidecar", "image": "registry.example/proxy:2.0", "ports": [{"containerPort": 8080}]}]},
    }))
    .expect("pod")
}

fn scene() -> Scene {
    let active: Vec<Pod> = (0..110)
        .map(|i| convert::pod(&k8s_pod(i), "api").expect("pod"))
        .collect();
    let candidate = k8s_pod(999);
    let node: k8s::Node = serde_json::from_value(json!({
        "metadata": {"name": "node-1", "labels": {"kubernetes.io/os": "linux"}},
        "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "250"}},
    }))
    .expect("node");
    Scene {
        json: serde_json::to_string(&candidate).expect("json").into(),
        pod: Arc::new(convert::pod(&candidate, "api").expect("pod")),
        node: Arc::new(convert::node(&node).expect("node")),
        load: convert::load(&active),
    }
}

impl Scene {
    /// One decision on a new admission (the pod's JSON made on request, as the agent
    /// makes it); the policy must admit the pod.
    async fn admits(&self, plugin: &AdmissionPlugin) {
        let json = self.json.clone();
        let admission = Admission::new(
            self.pod.clone(),
            self.node.clone(),
            self.load.clone(),
            move || json.to_string(),
        );
        let v = plugin.admit(&admission).await.expect("admit");
        assert!(matches!(v, Verdict::Admit), "{v:?}");
    }
}

fn load(engine: &PluginEngine, path: &Path, instances: InstanceMode) -> AdmissionPlugin {
    let limits = Limits {
        instances,
        ..Limits::default()
    };
    engine
        .load_admission("restricted-pods", path, BTreeMap::new(), limits)
        .expect("load")
}

fn seconds(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// `WASMLET_BENCH_AGENT_BIN`: the `wasmlet` binary whose `plugin precompile` compiles
/// for a node (the agent's compiler process); without it that column is left out.
fn compiler_bin() -> Option<PathBuf> {
    std::env::var_os("WASMLET_BENCH_AGENT_BIN").map(PathBuf::from)
}

/// The shortest and longest of `rounds` loads, each on an engine `engine` makes afresh.
fn cold_loads(rounds: usize, path: &Path, engine: impl Fn() -> PluginEngine) -> String {
    let times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let engine = engine();
            let t = Instant::now();
            load(&engine, path, InstanceMode::Reused);
            t.elapsed()
        })
        .collect();
    format!(
        "{}–{}",
        seconds(*times.iter().min().expect("a load")),
        seconds(*times.iter().max().expect("a load"))
    )
}

/// How long a node has been idle when a new version arrives, in the full run: long
/// enough for memory freed before to have gone back to this machine's hypervisor, so
/// that the compile pays for faulting in fresh memory as a node's first compile does.
const QUIET_BEFORE_A_NEW_VERSION: Duration = Duration::from_secs(10);

/// As a node loads a version it has not compiled: the agent's compiler process writes
/// the entry into an empty cache, the agent maps it.
fn node_loads(rounds: usize, path: &Path) -> String {
    let Some(bin) = compiler_bin() else {
        return "—".to_owned();
    };
    let cache = temp("lang-node-cache");
    let loads = cold_loads(rounds, path, || {
        if !smoke() {
            std::thread::sleep(QUIET_BEFORE_A_NEW_VERSION);
        }
        let _ = std::fs::remove_dir_all(&cache);
        PluginEngine::with_cache(&cache)
            .expect("engine")
            .compile_with(bin.clone())
    });
    let _ = std::fs::remove_dir_all(&cache);
    loads
}

/// Size, compiling on load (a fresh engine each time, no cache; then as a node does it,
/// in its compiler process), and loading from the compiled-component cache.
fn loading(versions: &[(&str, PathBuf)]) {
    let rounds = if smoke() { 1 } else { 3 };
    println!("\n### Loading\n");
    println!(
        "| language | component | compiled | load, compiling in this process (min–max of {rounds}) | as a node: its compiler process after a quiet spell, the entry mapped | load from the cache p50 / max |"
    );
    println!("|---|---|---|---|---|---|");
    let cache = temp("lang-cache");
    for (lang, path) in versions {
        let size = std::fs::metadata(path).map_or(0, |m| m.len());
        let cold = cold_loads(rounds, path, || PluginEngine::new().expect("engine"));
        let node = node_loads(rounds, path);
        let cached = PluginEngine::with_cache(&cache).expect("engine");
        load(&cached, path, InstanceMode::Reused);
        let mut hits = Vec::new();
        for _ in 0..if smoke() { 2 } else { 20 } {
            let t = Instant::now();
            load(&cached, path, InstanceMode::Reused);
            hits.push(t.elapsed());
        }
        let hits = Samples::new(hits);
        let compiled: u64 = std::fs::read_dir(&cache)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.metadata().map_or(0, |m| m.len()))
            .max()
            .unwrap_or(0);
        let _ = std::fs::remove_dir_all(&cache);
        std::fs::create_dir_all(&cache).expect("cache");
        println!(
            "| {lang} | {:.2} MB | {:.1} MB | {cold} | {node} | {} / {} |",
            size as f64 / 1e6,
            compiled as f64 / 1e6,
            fmt(hits.percentile(50.0)),
            fmt(hits.percentile(100.0)),
        );
    }
    let _ = std::fs::remove_dir_all(&cache);
}

/// Decisions: the first on a new instance, then warm (a reused instance, the admission
/// default) and on a fresh instance each.
async fn decisions(versions: &[(&str, PathBuf)], scene: &Scene) {
    let budget = Budget::from_args(5_000);
    let cache = temp("lang-decisions");
    let engine = PluginEngine::with_cache(&cache).expect("engine");
    header("restricted-pods on one pod beside 110 active pods");
    for (lang, path) in versions {
        let first = load(&engine, path, InstanceMode::Reused);
        let t = Instant::now();
        scene.admits(&first).await;
        println!(
            "| {lang}: the first decision (instance start included) | {} | | | |",
            fmt(t.elapsed())
        );
        let warm = load(&engine, path, InstanceMode::Reused);
        let fresh = load(&engine, path, InstanceMode::PerCall);
        let few = Budget::from_args(500);
        let (ms1, ms5) = (Duration::from_millis(1), Duration::from_millis(5));
        for (plugin, budget, gap, what) in [
            (&warm, budget, Gap::None, "warm instance, back to back"),
            (
                &warm,
                budget,
                Gap::Sleep(ms1),
                "warm instance, a decision every ~1 ms",
            ),
            (
                &fresh,
                few,
                Gap::None,
                "a fresh instance per decision, back to back",
            ),
            (
                &fresh,
                few,
                Gap::Sleep(ms5),
                "a fresh instance per decision (made ahead), every ~5 ms",
            ),
        ] {
            let s = time_paced(budget, gap, || scene.admits(plugin)).await;
            row(&format!("{lang}: {what}"), &s);
        }
    }
    let _ = std::fs::remove_dir_all(&cache);
}

/// What a loaded plugin costs the host: resident memory after loading it from the
/// cache, after 1,000 warm decisions, and after 20 decisions on fresh instances. Each
/// language in a process of its own (this benchmark run again with `--memory-of N`),
/// measured as the growth of its RSS, anonymous and file-backed.
fn memory(versions: &[(&str, PathBuf)]) {
    println!("\n### Host memory per loaded plugin (RSS growth, a process per language)\n");
    println!(
        "| language | loaded (from the cache) | + 1,000 warm decisions | + 20 fresh instances | then idle past the instances' lifetime: all it holds (a large plugin's code paged out) | the next decision |"
    );
    println!("|---|---|---|---|---|---|");
    let cache = temp("lang-memory");
    for (_, path) in versions {
        let warmup = PluginEngine::with_cache(&cache).expect("engine");
        load(&warmup, path, InstanceMode::Reused);
    }
    for (i, (lang, _)) in versions.iter().enumerate() {
        let out = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args(std::env::args().skip(1))
            .args(["--memory-of", &i.to_string(), "--cache"])
            .arg(&cache)
            .output()
            .expect("run the measuring process");
        let row = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{lang}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        println!("| {lang} | {}", row.trim());
    }
    let _ = std::fs::remove_dir_all(&cache);
}

/// RSS, anonymous and file-backed, in MiB.
fn rss() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    (kib("RssAnon:"), kib("RssFile:") + kib("RssShmem:"))
}

/// In the measuring process: loads version `index` from `cache`, decides, prints a row.
async fn memory_of(index: usize, cache: &Path) {
    let (_, path) = &versions()[index];
    let scene = scene();
    let engine = PluginEngine::with_cache(cache).expect("engine");
    let growth = |from: (f64, f64)| {
        let now = rss();
        format!(
            "{:.1} MiB (anon {:.1}, file {:.1})",
            now.0 + now.1 - from.0 - from.1,
            now.0 - from.0,
            now.1 - from.1
        )
    };
    let before = rss();
    let plugin = load(&engine, path, InstanceMode::Reused);
    let loaded = growth(before);
    let after_load = rss();
    for _ in 0..if smoke() { 3 } else { 1_000 } {
        scene.admits(&plugin).await;
    }
    let decided = growth(after_load);
    let after_decisions = rss();
    let fresh = load(&engine, path, InstanceMode::PerCall);
    for _ in 0..20 {
        scene.admits(&fresh).await;
    }
    let fresh_row = growth(after_decisions);
    // Idle: the warm instance expires and, for a large plugin, its code leaves the
    // resident set (its pages shared with no other mapping: the per-call copy goes).
    // What the plugin holds then, all of it since before it was loaded.
    drop(fresh);
    let (idle, next) = if smoke() {
        ("—".to_owned(), "—".to_owned())
    } else {
        // An idle instance goes on the expiry pass after it has been unused for the
        // lifetime: up to twice the lifetime after its last call.
        tokio::time::sleep(IDLE_INSTANCE_LIFETIME * 2 + Duration::from_secs(1)).await;
        let idle = growth(before);
        let t = Instant::now();
        scene.admits(&plugin).await;
        (idle, fmt(t.elapsed()))
    };
    println!("{loaded} | {decided} | {fresh_row} | {idle} | {next} |");
}

fn arg_after(flag: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1).cloned())
}

async fn run() {
    if let (Some(index), Some(cache)) = (arg_after("--memory-of"), arg_after("--cache")) {
        return memory_of(index.parse().expect("--memory-of N"), Path::new(&cache)).await;
    }
    if lang_toolchains().is_none() {
        return;
    }
    let versions = versions();
    let scene = scene();
    loading(&versions);
    decisions(&versions, &scene).await;
    memory(&versions);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // On a worker, as the agent's sync loop is.
    tokio::spawn(run()).await.expect("benchmark");
}
