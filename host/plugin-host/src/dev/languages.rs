//! Plugins written in Python and JavaScript/TypeScript: the templates and examples of
//! this repository, built on first use by their SDK's build script with the pinned
//! toolchains `scripts/plugin-toolchains.sh` installs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

use super::plugins_dir;

/// A language with an SDK beside the Rust one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    /// componentize-py, with `plugins/python`.
    Python,
    /// componentize-js, with `plugins/js` (TypeScript is checked, then bundled).
    Js,
}

/// A plugin of this repository written in Python or JavaScript.
#[derive(Debug, Clone, Copy)]
pub struct LangPlugin {
    /// Its name, which is also its component's file stem.
    pub name: &'static str,
    pub lang: Lang,
    /// `admission-policy`, `probe-handler` or `pod-source`.
    pub world: &'static str,
    /// Its source, relative to the repository: the directory of `app.py`, or the entry
    /// module of a JavaScript plugin.
    pub source: &'static str,
}

const fn plugin(
    name: &'static str,
    lang: Lang,
    world: &'static str,
    source: &'static str,
) -> LangPlugin {
    LangPlugin {
        name,
        lang,
        world,
        source,
    }
}

/// The directory the tests keep these plugins compiled in (`wasmlet plugin --cache-dir`,
/// `PluginEngine::with_cache`): each is megabytes of interpreter, seconds to compile.
pub fn lang_cache_dir() -> PathBuf {
    plugins_dir().join("target/lang-cache")
}

/// Every template and example in Python and JavaScript.
pub const LANG_PLUGINS: &[LangPlugin] = &[
    plugin(
        "restricted-pods-python",
        Lang::Python,
        "admission-policy",
        "plugins/examples/restricted-pods-python",
    ),
    plugin(
        "restricted-pods-js",
        Lang::Js,
        "admission-policy",
        "plugins/examples/restricted-pods-js/app.ts",
    ),
    plugin(
        "python-admission-policy",
        Lang::Python,
        "admission-policy",
        "templates/python/admission-policy",
    ),
    plugin(
        "python-probe-handler",
        Lang::Python,
        "probe-handler",
        "templates/python/probe-handler",
    ),
    plugin(
        "python-pod-source",
        Lang::Python,
        "pod-source",
        "templates/python/pod-source",
    ),
    plugin(
        "js-admission-policy",
        Lang::Js,
        "admission-policy",
        "templates/js/admission-policy/app.ts",
    ),
    plugin(
        "js-probe-handler",
        Lang::Js,
        "probe-handler",
        "templates/js/probe-handler/app.ts",
    ),
    plugin(
        "js-pod-source",
        Lang::Js,
        "pod-source",
        "templates/js/pod-source/app.ts",
    ),
    // Policies with bugs, for the tests of what an author is shown.
    plugin(
        "python-raises",
        Lang::Python,
        "admission-policy",
        "plugins/fixtures/python/raises",
    ),
    plugin(
        "python-memory-hog",
        Lang::Python,
        "admission-policy",
        "plugins/fixtures/python/memory-hog",
    ),
    plugin(
        "python-connect",
        Lang::Python,
        "probe-handler",
        "plugins/fixtures/python/connect",
    ),
    plugin(
        "js-throws",
        Lang::Js,
        "admission-policy",
        "plugins/fixtures/js/throws/app.ts",
    ),
];

fn repo() -> PathBuf {
    plugins_dir().join("..")
}

/// Installs the toolchains if needed (`scripts/plugin-toolchains.sh`, once per process)
/// and returns the directory of `componentize-py`. `None` when they cannot be installed —
/// a panic instead when `WASMLET_REQUIRE_PLUGIN_LANGS=1` (CI).
pub fn lang_toolchains() -> Option<&'static Path> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let script = repo().join("scripts/plugin-toolchains.sh");
            let out = Command::new(&script).output();
            let found = out
                .as_ref()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim().to_owned()));
            if found.is_none() {
                let why = match &out {
                    Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
                    Err(e) => e.to_string(),
                };
                assert!(
                    std::env::var("WASMLET_REQUIRE_PLUGIN_LANGS").as_deref() != Ok("1"),
                    "WASMLET_REQUIRE_PLUGIN_LANGS=1 but {} failed: {why}",
                    script.display()
                );
                eprintln!("no Python/JavaScript plugin toolchains ({why}): skipped");
            }
            found
        })
        .as_deref()
}

/// The newest modification time of the files under `path`.
fn newest(path: &Path) -> SystemTime {
    let Ok(meta) = std::fs::metadata(path) else {
        return SystemTime::UNIX_EPOCH;
    };
    if !meta.is_dir() {
        return meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    }
    std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name() != "node_modules" && e.file_name() != "__pycache__")
        .map(|e| newest(&e.path()))
        .max()
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// [`lang_plugin`] for the plugin of [`LANG_PLUGINS`] called `name`.
///
/// # Panics
/// If there is none of that name, or it cannot be built.
pub fn lang_plugin_named(name: &str) -> PathBuf {
    let plugin = LANG_PLUGINS
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("{name}: not one of LANG_PLUGINS"));
    lang_plugin(plugin)
}

/// Builds `plugin` (unless its component is newer than its source, its SDK and the WIT)
/// and returns the component's path, `plugins/target/lang/<name>.wasm`.
///
/// # Panics
/// If the toolchains are missing or the build fails.
pub fn lang_plugin(plugin: &LangPlugin) -> PathBuf {
    let bin = lang_toolchains().expect("the plugin toolchains (scripts/plugin-toolchains.sh)");
    let repo = repo();
    let source = repo.join(plugin.source);
    let out_dir = plugins_dir().join("target/lang");
    let out = out_dir.join(format!("{}.wasm", plugin.name));
    let (sdk, mut command) = match plugin.lang {
        Lang::Python => {
            let mut c = Command::new(repo.join("plugins/python/build.sh"));
            let path = std::env::var("PATH").unwrap_or_default();
            c.env("PATH", format!("{}:{path}", bin.display()));
            (repo.join("plugins/python/wasmlet_plugin"), c)
        }
        Lang::Js => {
            let mut c = Command::new("node");
            c.arg(repo.join("plugins/js/build.mjs"));
            (repo.join("plugins/js/src"), c)
        }
    };
    // One build at a time in a process (each takes both cores); processes building at
    // once each write their own file, and the last rename wins.
    static BUILDING: Mutex<()> = Mutex::new(());
    let _one = BUILDING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let inputs = [newest(&source), newest(&sdk), newest(&repo.join("wit"))];
    let built = std::fs::metadata(&out).and_then(|m| m.modified()).ok();
    if built.is_some_and(|b| inputs.iter().all(|i| *i < b)) {
        return out;
    }
    std::fs::create_dir_all(&out_dir).expect("plugins/target/lang");
    let partial = out_dir.join(format!("{}.{}.partial", plugin.name, std::process::id()));
    let status = command
        .arg(plugin.world)
        .arg(&source)
        .arg(&partial)
        .status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "building {} ({}) failed",
        plugin.name,
        plugin.source
    );
    std::fs::rename(&partial, &out).expect("rename the built component");
    out
}
