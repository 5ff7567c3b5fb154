//! The plugin directory: files added, replaced (atomically and in place), broken and
//! removed while pods are admitted in a loop.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{node, plugin};
use wasmlet_plugin_host::*;

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wasmlet-watch-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("admission")).expect("dir");
    dir
}

/// Writes `from`'s bytes to `to` the safe way: a temporary file renamed into place.
fn install_atomically(from: &Path, to: &Path) {
    let tmp = to.with_extension("tmp");
    std::fs::copy(from, &tmp).expect("copy");
    std::fs::rename(&tmp, to).expect("rename");
}

async fn admit(chain: &AdmissionChain) -> String {
    let (verdict, _) = chain
        .admit(&common::admission(
            &common::pod(Vec::new()),
            &node(),
            &common::usage(&[]),
        ))
        .await;
    match verdict {
        Verdict::Admit => "Admit".into(),
        Verdict::Reject(r) => r.reason,
    }
}

/// Polls until the chain's verdict is `want` or `limit` passes; returns how long it took.
async fn until(chain: &AdmissionChain, want: &str, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let got = admit(chain).await;
        if got == want {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "still {got:?} after {limit:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn config(dir: &Path, yaml: &str) -> PluginsConfig {
    let mut c: PluginsConfig = serde_yaml_ng::from_str(yaml).expect("config");
    c.directory = Some(dir.to_owned());
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_drives_the_chain_under_load() {
    let dir = temp_dir("load");
    let policy = dir.join("admission/policy.wasm");
    install_atomically(&plugin("node-ports"), &policy);
    let chain = Arc::new(AdmissionChain::new(PluginEngine::new().expect("engine")));
    let _watching = AdmissionDirectory::start(
        chain.clone(),
        &config(&dir, "admission: [{name: policy}]"),
        false,
    )
    .await
    .expect("start");
    assert_eq!(chain.names(), ["policy"]);
    assert_eq!(admit(&chain).await, "Admit");

    // Admissions in a loop on both workers; any plugin error is a failed call.
    let stop = Arc::new(AtomicBool::new(false));
    let (calls, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut workers = Vec::new();
    for _ in 0..2 {
        let (chain, stop, calls, failed) =
            (chain.clone(), stop.clone(), calls.clone(), failed.clone());
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if admit(&chain).await == chain::PLUGIN_ERROR_REASON {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                calls.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        }));
    }

    // Renamed into place: the new decision is served well within a second.
    install_atomically(&plugin("fixture-deny-all"), &policy);
    let took = until(&chain, "DeniedByPolicy", Duration::from_secs(1)).await;
    eprintln!("atomic replace served after {took:?}");

    // A broken version is refused; the old one keeps serving.
    let broken = dir.join("broken.bin");
    std::fs::write(&broken, b"\0asm\x0d\0\x01\0 truncated").expect("write");
    install_atomically(&broken, &policy);
    tokio::time::sleep(watch::SETTLE * 3).await;
    assert_eq!(admit(&chain).await, "DeniedByPolicy");

    // Copied in place (several write events, the first may see half a file).
    std::fs::copy(plugin("node-ports"), &policy).expect("copy");
    until(&chain, "Admit", Duration::from_secs(1)).await;

    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.expect("worker");
    }
    assert!(calls.load(Ordering::Relaxed) > 100, "the load ran");
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "no call failed during the swaps"
    );

    // A new file joins after the configured links; removing it removes the link.
    let extra = dir.join("admission/fixture_deny_all.wasm");
    install_atomically(&plugin("fixture-deny-all"), &extra);
    until(&chain, "DeniedByPolicy", Duration::from_secs(1)).await;
    assert_eq!(chain.names(), ["policy", "fixture-deny-all"]);
    std::fs::remove_file(&extra).expect("remove");
    until(&chain, "Admit", Duration::from_secs(1)).await;
    assert_eq!(chain.names(), ["policy"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_plugin_that_does_not_load_follows_its_failure_policy() {
    let dir = temp_dir("missing");
    let chain = Arc::new(AdmissionChain::new(PluginEngine::new().expect("engine")));
    let watching = AdmissionDirectory::start(
        chain.clone(),
        &config(
            &dir,
            "admission: [{name: required}, {name: optional, failurePolicy: Ignore}]",
        ),
        false,
    )
    .await
    .expect("a missing plugin does not stop the start");
    assert_eq!(chain.names(), ["required", "optional"]);
    let why = chain.unavailable("required").expect("unavailable");
    assert!(
        why.contains("plugin required") && why.contains("required.wasm"),
        "{why}"
    );
    assert_eq!(admit(&chain).await, chain::PLUGIN_ERROR_REASON);

    // The file appears: the link comes alive in place.
    install_atomically(&plugin("node-ports"), &dir.join("admission/required.wasm"));
    until(&chain, "Admit", Duration::from_secs(1)).await;
    assert!(chain.current("required").is_some());

    // Its file goes away: a required plugin stays in the chain, unavailable.
    std::fs::remove_file(dir.join("admission/required.wasm")).expect("remove");
    until(&chain, chain::PLUGIN_ERROR_REASON, Duration::from_secs(1)).await;
    assert_eq!(chain.names(), ["required", "optional"]);
    let why = chain.unavailable("required").expect("unavailable");
    assert!(why.contains("is missing"), "{why}");
    install_atomically(&plugin("node-ports"), &dir.join("admission/required.wasm"));
    until(&chain, "Admit", Duration::from_secs(1)).await;

    // A rescan (SIGHUP, an API call) picks up what the watcher did not see.
    drop(watching);
    let watching = AdmissionDirectory::start(
        chain.clone(),
        &config(&dir, "admission: [{name: required}]"),
        false,
    )
    .await
    .expect("restart");
    std::fs::copy(
        plugin("fixture-deny-all"),
        dir.join("admission/required.wasm"),
    )
    .expect("copy");
    watching.rescan();
    until(&chain, "DeniedByPolicy", Duration::from_secs(1)).await;

    let bad = config(&dir, "admission: [{name: x, timeout: soon}]");
    let err = AdmissionDirectory::start(chain.clone(), &bad, false)
        .await
        .err()
        .expect("invalid config");
    assert_eq!(
        err.to_string(),
        "plugins.admission[0].timeout: invalid duration \"soon\" (expected e.g. 500ms, 1s, 1m30s)"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Polls `check` until it is true or `limit` passes.
async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    check()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_handlers_follow_their_files_by_kind() {
    let dir = temp_dir("probes");
    std::fs::create_dir_all(dir.join("probes")).expect("dir");
    let file = dir.join("probes/tcp.wasm");
    install_atomically(&plugin("probe-tcp-socket"), &file);
    let config = config(
        &dir,
        "probes:\n- name: tcp\n  file: tcp.wasm\n  kinds: [tcpSocket]\n  network: [pod]\n",
    );
    let engine = PluginEngine::new().expect("engine");
    let handlers = ProbeHandlers::start(&engine, &config, false)
        .await
        .expect("start");
    let first = handlers.for_kind("tcpSocket").expect("loaded");
    assert_eq!(
        handlers.for_kind("httpGet").expect_err("none"),
        NoHandler::NotConfigured("httpGet".into())
    );

    // A new version renamed into place replaces it; the holder of the old one keeps it.
    install_atomically(&plugin("probe-http-get"), &file);
    let swapped = eventually(Duration::from_secs(2), || {
        handlers
            .for_kind("tcpSocket")
            .is_ok_and(|h| h.digest() != first.digest())
    })
    .await;
    assert!(swapped, "the new version is served");
    let second = handlers.for_kind("tcpSocket").expect("loaded");

    // A broken version is refused; the last good one keeps serving.
    std::fs::write(dir.join("probes/tcp.tmp"), b"\0asm garbage").expect("write");
    std::fs::rename(dir.join("probes/tcp.tmp"), &file).expect("rename");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        handlers
            .for_kind("tcpSocket")
            .expect("still loaded")
            .digest(),
        second.digest()
    );

    // Removed: probes of its kind fail, saying so.
    std::fs::remove_file(&file).expect("rm");
    let gone = eventually(Duration::from_secs(2), || {
        handlers.for_kind("tcpSocket").is_err()
    })
    .await;
    assert!(gone);
    assert_eq!(
        handlers
            .for_kind("tcpSocket")
            .expect_err("gone")
            .to_string(),
        "probe handler tcp (for tcpSocket probes) is not loaded"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_sources_load_from_configuration() {
    let dir = temp_dir("sources");
    std::fs::create_dir_all(dir.join("sources")).expect("dir");
    std::fs::create_dir_all(dir.join("manifests")).expect("dir");
    std::fs::write(
        dir.join("manifests/web.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: a, image: nginx}]}\n",
    )
    .expect("write");
    install_atomically(
        &plugin("source-file"),
        &dir.join("sources/source_file.wasm"),
    );
    let yaml = format!(
        "sources:\n- name: source-file\n  directory: {}\n  period: 5s\n",
        dir.join("manifests").display()
    );
    let engine = PluginEngine::new().expect("engine");
    let sources = PodSources::start(&engine, &config(&dir, &yaml), false)
        .await
        .expect("start");
    let [(name, spec)] = sources.configured() else {
        panic!("one source")
    };
    assert_eq!(name, "source-file");
    assert_eq!(spec.period, Duration::from_secs(5));
    let snapshot = sources
        .get("source-file")
        .expect("loaded")
        .poll()
        .await
        .expect("poll");
    assert_eq!(snapshot.pods.len(), 1);

    let twice = config(
        &dir,
        "probes:\n- name: a\n  kinds: [exec]\n- name: b\n  kinds: [grpc, exec]\n",
    );
    let Err(error) = ProbeHandlers::start(&engine, &twice, false).await else {
        panic!("two handlers for one kind")
    };
    assert_eq!(
        error.to_string(),
        "plugins.probes[1].kinds: exec probes are already checked by a"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Signs `wasm`'s bytes into `wasm.sig` with `key` (what `wasmlet plugin sign FILE`
/// writes).
fn sign(key: &[u8], wasm: &Path) {
    let signer = wasmlet_signing::keys::signer(key, b"pw").expect("signer");
    let bytes = std::fs::read(wasm).expect("read");
    let signature = wasmlet_signing::keys::sign_blob(&signer, &bytes).expect("sign");
    std::fs::write(format!("{}.sig", wasm.display()), signature).expect("write");
}

/// A chain whose engine loads the components under `dir` only with a signature by the
/// key in `dir/release.pub`, following `dir`'s admission directory (policy `policy`).
async fn signed_chain(dir: &Path) -> (Arc<AdmissionChain>, AdmissionDirectory) {
    let verifier = wasmlet_signing::Verifier::load(&wasmlet_signing::Verification {
        public_keys: vec![dir.join("release.pub")],
        required: true,
        ..Default::default()
    })
    .expect("keys")
    .expect("enabled");
    let engine = PluginEngine::new()
        .expect("engine")
        .verify_files(dir.to_owned(), Arc::new(verifier));
    let chain = Arc::new(AdmissionChain::new(engine));
    let watching = AdmissionDirectory::start(
        chain.clone(),
        &config(dir, "admission: [{name: policy}]"),
        false,
    )
    .await
    .expect("start");
    (chain, watching)
}

/// Installs `plugin` as the live policy with `staged`'s signature made by `key` (none
/// without a key).
fn install_signed(plugin_file: &Path, key: Option<&[u8]>, staged: &Path, live: &Path) {
    std::fs::copy(plugin_file, staged).expect("copy");
    let live_sig = format!("{}.sig", live.display());
    match key {
        Some(k) => {
            sign(k, staged);
            std::fs::copy(format!("{}.sig", staged.display()), &live_sig).expect("sig");
        }
        None => {
            let _ = std::fs::remove_file(&live_sig);
        }
    }
    install_atomically(staged, live);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_that_requires_signatures_loads_only_what_its_key_signed() {
    let dir = temp_dir("signed");
    let (release, release_pub) = wasmlet_signing::keys::generate(b"pw").expect("key");
    let (rogue, _) = wasmlet_signing::keys::generate(b"pw").expect("key");
    std::fs::write(dir.join("release.pub"), release_pub).expect("pub");
    let (staged, live) = (dir.join("staged.wasm"), dir.join("admission/policy.wasm"));

    // Signed by the release key: loads.
    install_signed(
        &plugin("node-ports"),
        Some(release.as_bytes()),
        &staged,
        &live,
    );
    let (chain, _watching) = signed_chain(&dir).await;
    until(&chain, "Admit", Duration::from_secs(2)).await;
    let serving = chain
        .current("policy")
        .expect("serving")
        .digest()
        .to_owned();

    // Refused, each, the signed version serving on: a version signed by another key,
    // and an unsigned one (its signature file gone).
    for key in [Some(rogue.as_bytes()), None] {
        install_signed(&plugin("fixture-deny-all"), key, &staged, &live);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(admit(&chain).await, "Admit");
        assert_eq!(chain.current("policy").expect("serving").digest(), serving);
    }

    // A new process reading the directory: the unsigned file is refused, naming why.
    let (chain, _again) = signed_chain(&dir).await;
    let why = chain.unavailable("policy").expect("unavailable");
    assert!(why.contains("signature refused: not signed: no "), "{why}");

    // Signed by the release key after all: it swaps in.
    install_signed(
        &plugin("fixture-deny-all"),
        Some(release.as_bytes()),
        &staged,
        &live,
    );
    until(&chain, "DeniedByPolicy", Duration::from_secs(2)).await;
    let _ = std::fs::remove_dir_all(&dir);
}
