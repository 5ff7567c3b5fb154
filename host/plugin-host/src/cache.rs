//! Compiled components kept on disk, so that an agent restart loads its plugins in
//! milliseconds instead of recompiling them.
//!
//! An entry is named by the component's sha256, a hash of the engine's compilation
//! settings (wasmtime version, target, tunables) and the sha256 of the compiled artifact
//! it holds: a component compiled under other settings is simply never looked up, and
//! an entry whose content does not match its name, or that wasmtime refuses, is removed,
//! compiled again and rewritten — never trusted blindly (but for the entry the agent's
//! compiler process names as the one it has just written). The file is the artifact as
//! wasmtime wrote it, loaded with `Component::deserialize_file`: its code and memory
//! images are mapped from the file, so only the pages a plugin runs take memory (a
//! Python or JavaScript plugin's interpreter is megabytes of code, most of it never
//! run by a policy). Writes go to a temporary file renamed into place, so a crash never
//! leaves half an entry behind.
//!
//! Beside its own directory a cache may read entries from directories it never writes
//! ([`ComponentCache::with_shipped`]): the package's components precompiled when it was
//! built. They are looked up by the same names, so an entry compiled under other
//! settings (another wasmtime, another CPU's features) is never found and the component
//! is compiled as on a machine without them; one that is refused is left in place.

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

/// A directory of compiled components, each entry for the engine configuration that
/// compiled it.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: PathBuf,
    /// A program that compiles into this cache in a process of its own
    /// ([`ComponentCache::compile_with`]).
    compiler: Option<PathBuf>,
    /// Directories of entries read, never written ([`ComponentCache::with_shipped`]).
    shipped: Vec<PathBuf>,
}

/// The arguments a compiler program is run with, the component on its standard input:
/// `<program> plugin precompile --cache-dir <dir>`. It compiles the component into the
/// cache at `<dir>` (an engine configured as this one), prints the entry's path on its
/// standard output and exits 0, or prints why not on its standard error and exits 2.
pub const COMPILER_ARGS: [&str; 3] = ["plugin", "precompile", "--cache-dir"];

/// The exit code of a compiler program that could not compile the component.
pub const COMPILER_REFUSED: i32 = 2;

impl ComponentCache {
    /// Uses (and creates) `dir`.
    pub fn new(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_owned(),
            compiler: None,
            shipped: Vec::new(),
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

    /// Also looks for entries in `dir`, which this cache never writes nor removes from —
    /// components precompiled for the package (`wasmlet plugin precompile --cache-dir`
    /// by the same binary). An entry there is used as one of the cache's own would be,
    /// after the same checks.
    #[must_use]
    pub fn with_shipped(mut self, dir: PathBuf) -> Self {
        self.shipped.push(dir);
        self
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the names of the entries for a component with this sha256 compiled by
    /// `engine` start with (the artifact's own sha256 and `.cwasm` follow).
    fn entry_prefix(&self, engine: &Engine, component_sha256: &str) -> PathBuf {
        self.dir
            .join(format!("{component_sha256}-{}-", engine_key(engine)))
    }

    /// The component for `wasm` (a component's bytes, whose sha256 is `digest`), from
    /// the cache when a valid entry exists, compiled and stored otherwise.
    pub fn load(
        &self,
        engine: &Engine,
        wasm: &[u8],
        digest: &str,
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        let path = self.entry_prefix(engine, digest);
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
        prefix: &Path,
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        let refused = match read_entry(engine, prefix, Refused::Remove) {
            Ok(component) => return Ok((component, CacheOutcome::Hit)),
            Err(why) => why,
        };
        if let Some(component) = self.read_shipped(engine, prefix) {
            return Ok((component, CacheOutcome::Hit));
        }
        let from_compiler = match self.compile_elsewhere(wasm) {
            // The compiler process wrote the entry it names: mapped as it is. One that
            // names none, or one that does not load: read as any entry is.
            Some(Ok(named)) => match named
                .and_then(|name| self.entry_just_written(engine, prefix, &name))
                .map_or_else(|| read_entry(engine, prefix, Refused::Remove), Ok)
            {
                Ok(component) => Some(component),
                Err(why) => {
                    let why = why.unwrap_or_else(|| "no entry was written".to_owned());
                    tracing::warn!(entry = %prefix.display(), %why, "the compiler process's entry does not load; compiling here");
                    None
                }
            },
            Some(Err(refused)) => return Err(refused),
            None => None,
        };
        let component = match from_compiler {
            Some(c) => c,
            None => compile_into(engine, wasm, prefix)?,
        };
        match refused {
            Some(why) => {
                tracing::warn!(entry = %prefix.display(), %why, "recompiled a refused cache entry");
                Ok((component, CacheOutcome::Replaced(why)))
            }
            None => Ok((component, CacheOutcome::Miss)),
        }
    }
}

impl ComponentCache {
    /// What a compiler process does: the path of the entry for `wasm` (whose sha256 is
    /// `digest`) — a whole one already there, else compiled and written now — without
    /// loading it.
    pub fn compile_entry(
        &self,
        engine: &Engine,
        wasm: &[u8],
        digest: &str,
    ) -> wasmtime::Result<PathBuf> {
        let prefix = self.entry_prefix(engine, digest);
        let flight = in_flight(&prefix);
        let guard = flight.lock().unwrap_or_else(|e| e.into_inner());
        let found = entries(&prefix).into_iter().find_map(|(path, sum)| {
            let is_whole = whole(&path, &sum).is_ok();
            if !is_whole {
                let _ = std::fs::remove_file(&path);
            }
            is_whole.then_some(path)
        });
        let path = match found {
            Some(path) => Ok(path),
            None => engine
                .precompile_component(wasm)
                .and_then(|artifact| Ok(write_entry(&prefix, &artifact)?)),
        };
        drop(guard);
        landed(&prefix, flight);
        path
    }

    /// The component in the entry the compiler process named (`name`, as it printed
    /// it), if it is one of `prefix`'s and loads. Not checksummed: the process that
    /// wrote it exited a moment ago, so what the file holds is what it wrote (the
    /// checksum finds entries damaged since, by a crash or the disk).
    fn entry_just_written(&self, engine: &Engine, prefix: &Path, name: &str) -> Option<Component> {
        let file = Path::new(name.trim()).file_name()?.to_str()?;
        let start = prefix.file_name()?.to_str()?;
        if !(file.starts_with(start) && file.ends_with(".cwasm")) {
            return None;
        }
        // SAFETY: as in `deserialize`: the compiler process wrote the file from
        // `precompile_component` of an engine configured as this one (the name carries
        // its settings' hash, and wasmtime checks them again in the header).
        #[allow(unsafe_code)]
        let mapped = unsafe { Component::deserialize_file(engine, self.dir.join(file)) };
        mapped
            .inspect_err(|e| tracing::warn!(entry = file, error = %e, "the entry the compiler process wrote does not load"))
            .ok()
    }

    /// The component in a shipped directory's entry named as `prefix`'s, if one loads.
    fn read_shipped(&self, engine: &Engine, prefix: &Path) -> Option<Component> {
        let name = prefix.file_name()?;
        self.shipped.iter().find_map(|dir| {
            let shipped = dir.join(name);
            match read_entry(engine, &shipped, Refused::Keep) {
                Ok(component) => Some(component),
                Err(None) => None,
                Err(Some(why)) => {
                    tracing::warn!(entry = %shipped.display(), %why, "a precompiled component of the package does not load; compiling it");
                    None
                }
            }
        })
    }
}

/// A hash of `engine`'s compilation settings (the wasmtime version among them).
/// `DefaultHasher::new()` has fixed keys: the same settings hash the same in every run of
/// this binary.
pub(crate) fn engine_key(engine: &Engine) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// Compiles `wasm`, stores the artifact as an entry and loads it from there (mapped, as
/// a hit would be); from memory when the entry cannot be written.
fn compile_into(engine: &Engine, wasm: &[u8], prefix: &Path) -> wasmtime::Result<Component> {
    let artifact = engine.precompile_component(wasm)?;
    match write_entry(prefix, &artifact) {
        Ok(path) => {
            // SAFETY: as in `deserialize`: this process just wrote the file from
            // `precompile_component` of this engine.
            #[allow(unsafe_code)]
            let mapped = unsafe { Component::deserialize_file(engine, &path) };
            match mapped {
                Ok(component) => return Ok(component),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "a compiled component does not load from its entry; loading it from memory");
                }
            }
        }
        Err(e) => {
            tracing::warn!(entry = %prefix.display(), error = %e, "cannot store a compiled component; continuing without");
        }
    }
    deserialize(engine, &artifact)
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
    /// written the entry (with the path it printed, if any), `Some(Err)` when it refused
    /// the component (why, in its words), `None` when it could not be run or died (this
    /// process compiles instead).
    fn compile_elsewhere(&self, wasm: &[u8]) -> Option<wasmtime::Result<Option<String>>> {
        let program = self.compiler.as_ref()?;
        let run = || -> std::io::Result<std::process::Output> {
            let mut child = std::process::Command::new(program)
                .args(COMPILER_ARGS)
                .arg(&self.dir)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()?;
            if let Some(mut stdin) = child.stdin.take() {
                stdin.write_all(wasm)?;
            }
            child.wait_with_output()
        };
        match run() {
            Ok(out) if out.status.success() => {
                let printed = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                Some(Ok((!printed.is_empty()).then_some(printed)))
            }
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

/// The entries whose names start with `prefix`, each with the artifact sha256 its name
/// gives.
fn entries(prefix: &Path) -> Vec<(PathBuf, String)> {
    let (Some(dir), Some(start)) = (prefix.parent(), prefix.file_name().and_then(|n| n.to_str()))
    else {
        return Vec::new();
    };
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let sum = name.strip_prefix(start)?.strip_suffix(".cwasm")?.to_owned();
            Some((e.path(), sum))
        })
        .collect()
}

/// What becomes of an entry that is refused.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// Removed: the cache's own directory, where a new entry replaces it.
    Remove,
    /// Left where it is: a directory the cache only reads.
    Keep,
}

/// The component in an entry whose name starts with `prefix`; else why the entry was
/// refused, or `None` when there is none.
fn read_entry(
    engine: &Engine,
    prefix: &Path,
    refused_entry: Refused,
) -> Result<Component, Option<String>> {
    let mut refused = None;
    for (path, sum) in entries(prefix) {
        let why = match whole(&path, &sum) {
            Ok(()) => {
                // SAFETY: as in `deserialize`; the file's content is the artifact its
                // name's checksum was taken of.
                #[allow(unsafe_code)]
                match unsafe { Component::deserialize_file(engine, &path) } {
                    Ok(component) => return Ok(component),
                    Err(e) => format!("wasmtime refused it: {e}"),
                }
            }
            Err(why) => why,
        };
        if refused_entry == Refused::Remove {
            let _ = std::fs::remove_file(&path);
        }
        refused = Some(why);
    }
    Err(refused)
}

/// Whether the entry at `path` holds what its name's checksum `sum` says; why not.
fn whole(path: &Path, sum: &str) -> Result<(), String> {
    match file_sha256(path) {
        Ok(actual) if actual == sum => Ok(()),
        Ok(_) => Err("its checksum does not match its content".to_owned()),
        Err(e) => Err(format!("it cannot be read: {e}")),
    }
}

/// The sha256 of a file, read in blocks (the file's pages are not kept by this process).
fn file_sha256(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
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

/// Writes `artifact` as the entry `<prefix><its sha256>.cwasm` and returns its path.
fn write_entry(prefix: &Path, artifact: &[u8]) -> std::io::Result<PathBuf> {
    let with = |tail: String| {
        let mut name = prefix.as_os_str().to_owned();
        name.push(tail);
        PathBuf::from(name)
    };
    let tmp = with(format!("tmp{}", std::process::id()));
    // Not synced to disk: after a crash an entry may be cut short or empty, and then its
    // checksum does not match its name, it is refused and compiled again. Syncing the
    // tens of megabytes of a Python plugin's code cost its first load 20–100 ms.
    // The checksum is taken while the file is written (each 30–40 ms for a Python
    // plugin's 42 MB here).
    let (sum, written) = std::thread::scope(|s| {
        let sum = s.spawn(|| sha256_hex(artifact));
        let written = std::fs::File::create(&tmp).and_then(|mut f| f.write_all(artifact));
        (sum.join(), written)
    });
    let sum = sum.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    written?;
    let path = with(format!("{sum}.cwasm"));
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// The sha256 of `bytes`, in lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}
