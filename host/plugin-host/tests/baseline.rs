//! Large components are compiled by wasmtime's baseline compiler, Winch, on an engine of
//! its own: they decide as cranelift's do, are cut off at their deadline (the epoch
//! advances on both engines), and keep their compiled code in the cache. A fixture is
//! made large by a custom section of padding, which the component's code never sees.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{admission, load_admission, node, plugin, pod, usage};
use wasmlet_plugin_host::backend::{BASELINE_FROM_BYTES, Compiler};
use wasmlet_plugin_host::*;

fn baseline_available() -> bool {
    cfg!(any(target_arch = "x86_64", target_arch = "aarch64"))
}

/// `fixture` with a custom section appended that brings it to the baseline compiler's
/// size, written to `dir`.
fn padded(fixture: &str, dir: &Path) -> PathBuf {
    let mut wasm = std::fs::read(plugin(fixture)).expect("read fixture");
    let name = b"wasmlet-test-padding";
    let payload = vec![0u8; BASELINE_FROM_BYTES];
    let mut content = leb128(name.len());
    content.extend_from_slice(name);
    content.extend_from_slice(&payload);
    wasm.push(0); // a custom section
    wasm.extend(leb128(content.len()));
    wasm.extend(content);
    let path = dir.join(format!("{fixture}.wasm"));
    std::fs::write(&path, wasm).expect("write");
    path
}

fn leb128(mut n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wasmlet-baseline-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

fn limits(deadline: Duration) -> Limits {
    Limits {
        deadline,
        ..Limits::default()
    }
}

#[tokio::test]
async fn a_large_component_decides_as_the_small_one_does() {
    let dir = scratch("decides");
    let engine = PluginEngine::new().expect("engine");
    let small = load_admission(
        &engine,
        "deny-all",
        &plugin("fixture-deny-all"),
        Limits::default(),
    );
    let large = load_admission(
        &engine,
        "deny-all",
        &padded("fixture-deny-all", &dir),
        Limits::default(),
    );
    assert_eq!(small.compiler(), Compiler::Cranelift);
    let expected = if baseline_available() {
        Compiler::Winch
    } else {
        Compiler::Cranelift
    };
    assert_eq!(large.compiler(), expected);
    let args = (pod(Vec::new()), node(), usage(&[]));
    for _ in 0..3 {
        let a = small
            .admit(&admission(&args.0, &args.1, &args.2))
            .await
            .expect("admit");
        let b = large
            .admit(&admission(&args.0, &args.1, &args.2))
            .await
            .expect("admit");
        assert!(matches!(&a, Verdict::Reject(_)), "{a:?}");
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }
    let inspected = engine
        .inspect(&padded("fixture-deny-all", &dir))
        .expect("inspect");
    assert_eq!(inspected.compiler, expected);
    assert_eq!(inspected.world, Some("admission-policy"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The epoch ticks for the baseline engine too: a spinning guest compiled by Winch is
/// cut off at its deadline, and the agent goes on.
#[tokio::test]
async fn a_large_component_that_spins_is_cut_off_at_its_deadline() {
    let dir = scratch("spin");
    let engine = PluginEngine::new().expect("engine");
    let spin = load_admission(
        &engine,
        "fixture-spin",
        &padded("fixture-spin", &dir),
        limits(Duration::from_millis(200)),
    );
    let args = (pod(Vec::new()), node(), usage(&[]));
    let started = Instant::now();
    let request = admission(&args.0, &args.1, &args.2);
    let call = spin.admit(&request);
    let err = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("cut off (the baseline engine's epoch advances)")
        .expect_err("spins");
    assert!(matches!(err, PluginError::Deadline { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A large component's compiled code goes to the cache like any other: the second load
/// takes it from there, and the entry is the baseline engine's, not cranelift's.
#[test]
fn a_large_component_loads_from_the_cache() {
    let dir = scratch("cache");
    let cache = dir.join("cache");
    let path = padded("fixture-deny-all", &dir);
    let engine = || PluginEngine::with_cache(&cache).expect("engine");
    let load = || load_admission(&engine(), "deny-all", &path, Limits::default());
    assert_eq!(load().load_outcome(), &CacheOutcome::Miss);
    assert_eq!(load().load_outcome(), &CacheOutcome::Hit);
    // The small one compiled into the same cache has an entry of another engine.
    load_admission(
        &engine(),
        "small",
        &plugin("fixture-deny-all"),
        Limits::default(),
    );
    let keys: std::collections::BTreeSet<String> = std::fs::read_dir(&cache)
        .expect("cache")
        .flatten()
        .map(|e| {
            let name = e.file_name().into_string().expect("utf-8");
            name.split('-').nth(1).expect("engine key").to_owned()
        })
        .collect();
    assert_eq!(
        keys.len(),
        if baseline_available() { 2 } else { 1 },
        "{keys:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
