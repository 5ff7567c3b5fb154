//! The agent's compiler process, played by shell scripts: what the cache does with its
//! answers (an entry written, named or not, a refusal, no answer at all).

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use common::plugin;
use wasmlet_plugin_host::*;

/// A directory of compiler scripts and of the caches they compile into.
struct Compilers {
    top: PathBuf,
    component: PathBuf,
}

impl Compilers {
    fn new(tag: &str) -> Self {
        let top = std::env::temp_dir().join(format!(
            "wasmlet-plugin-compiler-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&top);
        std::fs::create_dir_all(&top).expect("dir");
        Self {
            top,
            component: plugin("taint-toleration"),
        }
    }

    /// A compiler program: a shell script run as `<script> plugin precompile --cache-dir
    /// DIR` with the component on its stdin.
    fn script(&self, name: &str, body: &str) -> PathBuf {
        let p = self.top.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("script");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        p
    }

    /// Loads the component on an engine with an empty cache named `cache` that compiles
    /// with `compiler`.
    fn load(&self, cache: &str, compiler: PathBuf) -> Result<AdmissionPlugin, PluginError> {
        PluginEngine::with_cache(&self.cache(cache))
            .expect("engine")
            .compile_with(compiler)
            .load_admission("p", &self.component, BTreeMap::new(), Limits::default())
    }

    fn cache(&self, name: &str) -> PathBuf {
        self.top.join("caches").join(name)
    }

    /// A cache this process's engine compiled the component into (as `wasmlet plugin
    /// precompile` does), and its entry's file name.
    fn made(&self) -> (PathBuf, String) {
        let made = self.top.join("made");
        let wasm = std::fs::read(&self.component).expect("wasm");
        PluginEngine::with_cache(&made)
            .expect("engine")
            .precompile_into_cache(&wasm)
            .expect("precompiled");
        let [entry] = <[String; 1]>::try_from(entries(&made)).expect("one entry");
        (made, entry)
    }
}

impl Drop for Compilers {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.top);
    }
}

/// The names of the `.cwasm` entries in `dir`.
fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().into_string().expect("name"))
        .filter(|n| n.ends_with(".cwasm"))
        .collect()
}

#[test]
fn a_compiler_process_compiles_refuses_or_is_done_without() {
    let compilers = Compilers::new("answers");

    // A compiler that refuses: its words are the load's error.
    let refusing = compilers.script(
        "refusing",
        "cat >/dev/null; echo 'no: the component is too clever' >&2; exit 2",
    );
    let err = compilers.load("refused", refusing).expect_err("refused");
    assert!(
        err.to_string().contains("no: the component is too clever"),
        "{err}"
    );

    // One that cannot be run, or dies without an answer: the process compiles itself.
    let missing = compilers.top.join("no-such-compiler");
    let loaded = compilers.load("missing", missing).expect("compiled here");
    assert_eq!(*loaded.load_outcome(), CacheOutcome::Miss);
    let dying = compilers.script("dying", "cat >/dev/null; kill -9 $$");
    let loaded = compilers.load("dying", dying).expect("compiled here");
    assert_eq!(*loaded.load_outcome(), CacheOutcome::Miss);

    // One that compiles (here: it copies an entry this process's engine wrote) and
    // names nothing: the entry it wrote is found, checked, and loads.
    let (made, _) = compilers.made();
    let copying = compilers.script(
        "copying",
        &format!(
            "cat >/dev/null; touch {}/ran; cp {}/*.cwasm \"$4\"/",
            compilers.top.display(),
            made.display()
        ),
    );
    let loaded = compilers.load("compiled", copying).expect("loads");
    assert_eq!(*loaded.load_outcome(), CacheOutcome::Miss);
    assert!(
        compilers.top.join("ran").exists(),
        "the compiler process ran"
    );

    // A compiler that says it is done but wrote nothing: compiled here.
    let saying_done = compilers.script("done", "cat >/dev/null; exit 0");
    let loaded = compilers
        .load("nothing-written", saying_done)
        .expect("compiled here");
    assert_eq!(*loaded.load_outcome(), CacheOutcome::Miss);
}

#[test]
fn the_entry_a_compiler_process_names_is_mapped_as_it_is() {
    // The compiler copies the entry under a wrong checksum — which a check would refuse
    // and replace — and prints a name: the entry's, which is then mapped as it is, or
    // a file that is not one of the component's entries, which is ignored (the cache's
    // entries are checked as always).
    let compilers = Compilers::new("named");
    let (made, entry) = compilers.made();
    let (stem, _) = entry
        .rsplit_once('-')
        .expect("<component>-<engine>-<artifact>.cwasm");
    let renamed = format!("{stem}-{}.cwasm", "0".repeat(64));
    for (cache, printed, left) in [
        ("named", format!("\"$4/{renamed}\""), &renamed),
        ("elsewhere", "/etc/passwd".to_owned(), &entry),
    ] {
        let body = format!(
            "cat >/dev/null; cp {}/{entry} \"$4\"/{renamed}; echo {printed}",
            made.display()
        );
        let compiler = compilers.script(cache, &body);
        let loaded = compilers.load(cache, compiler).expect("loads");
        assert_eq!(*loaded.load_outcome(), CacheOutcome::Miss);
        assert_eq!(
            entries(&compilers.cache(cache)),
            std::slice::from_ref(left),
            "{cache}"
        );
    }
}
