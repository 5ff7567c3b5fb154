//! Compiled components kept on disk, so that an agent restart loads its plugins in
//! milliseconds instead of recompiling them.
//!
//! An entry is named by the component's sha256 and a hash of the engine's compilation
//! settings (wasmtime version, target, tunables): a component compiled under other
//! settings is simply never looked up. Each file starts with the sha256 of the artifact
//! that follows; an entry whose checksum does not match, or that wasmtime refuses, is
//! compiled again and rewritten — never trusted blindly. Writes go to a temporary file
//! renamed into place, so a crash never leaves half an entry behind.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// How a component was obtained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from a valid cache entry.
    Hit,
    /// No entry: compiled and stored.
    Miss,
    /// An entry existed but was refused (the reason says why); compiled and stored again.
    Replaced(String),
}

/// A directory of compiled components for one engine configuration.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: PathBuf,
    engine_key: String,
    /// A program that compiles into this cache in a process of its own
    /// ([`ComponentCache::compile_with`]).
    compiler: Option<PathBuf>,
}

/// The arguments a compiler program is run with, the component on its standard input:
/// `<program> plugin precompile --cache-dir <dir>`. It compiles the component into the
/// cache at `<dir>` (an engine configured as this one) and exits 0, or prints why not
/// and exits 2.
pub const COMPILER_ARGS: [&str; 3] = ["plugin", "precompile", "--cache-dir"];

/// The exit code of a compiler program that could not compile the component.
pub const COMPILER_REFUSED: i32 = 2;

impl ComponentCache {
    /// Uses (and creates) `dir` for components compiled by `engine`.
    pub fn new(dir: &Path, engine: &Engine) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        // DefaultHasher::new() has fixed keys: the same settings hash the same in every
        // run of this binary; the wasmtime version is part of what is hashed.
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(Self {
            dir: dir.to_owned(),
            engine_key: format!("{:016x}", hasher.finish()),
            compiler: None,
        })
    }

    /// Compiles what is not in the cache by running `program` (see [`COMPILER_ARGS`])
    /// instead of in this process: the compiler's code and its peak memory stay out of a
    /// long-running agent, and a component that makes the compiler blow up takes down
    /// that process, not the agent. If the program cannot be run, this process compiles.
    #[must_use]
    pub fn compile_with(mut self, program: PathBuf) -> Self {
        self.compiler = Some(program);
        self
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the entry for a component with this sha256 lives.
    pub fn entry_path(&self, component_sha256: &str) -> PathBuf {
        self.dir
            .join(format!("{component_sha256}-{}.cwasm", self.engine_key))
    }

    /// The component for `wasm` (a component's bytes, whose sha256 is `digest`), from
    /// the cache when a valid entry exists, compiled and stored otherwise.
    pub fn load(
        &self,
        engine: &Engine,
        wasm: &[u8],
        digest: &str,
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        let path = self.entry_path(digest);
        // One compilation per entry at a time in this process: a second load of the
        // same component (another plugin using it, another hollow node) waits for the
        // first and then finds its entry.
        // Loads that waited take the component the one before them loaded, when it
        // is for the same engine, instead of reading and checking the entry again.
        let flight = in_flight(&path);
        let mut loaded = flight.lock().unwrap_or_else(|e| e.into_inner());
        let result = match loaded.as_ref() {
            Some(c) if Engine::same(c.engine(), engine) => Ok((c.clone(), CacheOutcome::Hit)),
            _ => self.load_entry(engine, wasm, &path),
        };
        if let Ok((component, _)) = &result {
            *loaded = Some(component.clone());
        }
        drop(loaded);
        landed(&path, flight);
        result
    }

    fn load_entry(
        &self,
        engine: &Engine,
        wasm: &[u8],
        path: &Path,
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        let refused = match read_entry(engine, path) {
            Ok(component) => return Ok((component, CacheOutcome::Hit)),
            Err(why) => why,
        };
        let from_compiler = match self.compile_elsewhere(wasm) {
            // The compiler process wrote the entry: read as any entry is.
            Some(Ok(())) => match read_entry(engine, path) {
                Ok(component) => Some(component),
                Err(why) => {
                    let why = why.unwrap_or_else(|| "no entry was written".to_owned());
                    tracing::warn!(path = %path.display(), %why, "the compiler process's entry does not load; compiling here");
                    None
                }
            },
            Some(Err(refused)) => return Err(refused),
            None => None,
        };
        let component = match from_compiler {
            Some(c) => c,
            None => {
                let artifact = engine.precompile_component(wasm)?;
                let component = deserialize(engine, &artifact)?;
                if let Err(e) = write_entry(path, &artifact) {
                    tracing::warn!(path = %path.display(), error = %e, "cannot store a compiled component; continuing without");
                }
                component
            }
        };
        match refused {
            Some(why) => {
                tracing::warn!(path = %path.display(), %why, "recompiled a refused cache entry");
                Ok((component, CacheOutcome::Replaced(why)))
            }
            None => Ok((component, CacheOutcome::Miss)),
        }
    }
}

type Flight = Arc<Mutex<Option<Component>>>;
type Flights = std::collections::HashMap<PathBuf, Flight>;

/// Entries being loaded in this process, each with the lock its loads take turns on and
/// the component the last of them loaded (dropped with the flight when nobody waits).
static IN_FLIGHT: LazyLock<Mutex<Flights>> = LazyLock::new(Default::default);

fn in_flight(path: &Path) -> Flight {
    IN_FLIGHT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(path.to_owned())
        .or_default()
        .clone()
}

/// Forgets the lock of `path` when no other load holds it.
fn landed(path: &Path, flight: Flight) {
    let mut flights = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
    // Ours and the map's: nobody else is waiting.
    if Arc::strong_count(&flight) == 2 {
        flights.remove(path);
    }
}

impl ComponentCache {
    /// Runs the compiler program on `wasm`, if there is one: `Some(Ok)` once it has
    /// written the entry, `Some(Err)` when it refused the component (why, in its words),
    /// `None` when it could not be run or died (this process compiles instead).
    fn compile_elsewhere(&self, wasm: &[u8]) -> Option<wasmtime::Result<()>> {
        let program = self.compiler.as_ref()?;
        let run = || -> std::io::Result<std::process::Output> {
            let mut child = std::process::Command::new(program)
                .args(COMPILER_ARGS)
                .arg(&self.dir)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()?;
            if let Some(mut stdin) = child.stdin.take() {
                stdin.write_all(wasm)?;
            }
            child.wait_with_output()
        };
        match run() {
            Ok(out) if out.status.success() => Some(Ok(())),
            Ok(out) if out.status.code() == Some(COMPILER_REFUSED) => {
                let why = String::from_utf8_lossy(&out.stderr).trim().to_owned();
                Some(Err(wasmtime::Error::msg(why)))
            }
            Ok(out) => {
                tracing::warn!(program = %program.display(), status = %out.status, stderr = %String::from_utf8_lossy(&out.stderr).trim(), "the plugin compiler process failed; compiling in the agent");
                None
            }
            Err(e) => {
                tracing::warn!(program = %program.display(), error = %e, "cannot run the plugin compiler process; compiling in the agent");
                None
            }
        }
    }
}

/// The component in the entry at `path`; else why it was refused, or `None` when
/// there is no entry.
fn read_entry(engine: &Engine, path: &Path) -> Result<Component, Option<String>> {
    match std::fs::read(path) {
        Ok(bytes) => match verified(&bytes) {
            Some(artifact) => {
                deserialize(engine, artifact).map_err(|e| Some(format!("wasmtime refused it: {e}")))
            }
            None => Err(Some("its checksum does not match its content".to_owned())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(None),
        Err(e) => Err(Some(format!("it cannot be read: {e}"))),
    }
}

/// The artifact inside an entry, when the entry's leading checksum matches it.
fn verified(entry: &[u8]) -> Option<&[u8]> {
    if entry.len() < 32 {
        return None;
    }
    let (sum, artifact) = entry.split_at(32);
    (Sha256::digest(artifact).as_slice() == sum).then_some(artifact)
}

#[allow(unsafe_code)]
fn deserialize(engine: &Engine, artifact: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: wasmtime requires that the bytes come from `precompile_component` of a
    // compatible engine. They do: this module wrote them (from `precompile_component`),
    // the entry name includes the engine's compatibility hash, and the checksum checked
    // by `verified` rules out corruption since; wasmtime also re-checks the header's
    // version and settings and refuses what does not match.
    unsafe { Component::deserialize(engine, artifact) }
}

fn write_entry(path: &Path, artifact: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(&Sha256::digest(artifact))?;
    file.write_all(artifact)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// The sha256 of `bytes`, in lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
