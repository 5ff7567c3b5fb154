//! The agent's plugins: the configured `plugins:` section, or — where it says nothing —
//! the shipped ones: the kubelet's admission checks, the four probe kinds and the file
//! source for `staticPodPath`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use wasmlet_plugin_host::PluginEngine;
use wasmlet_plugin_host::chain::AdmissionChain;
use wasmlet_plugin_host::config::PluginsConfig;
use wasmlet_plugin_host::kinds::{PodSources, ProbeHandlers};
use wasmlet_plugin_host::watch::AdmissionDirectory;

use crate::config::Config;

/// The name of the source that reads `staticPodPath` (the kubelet's `file`).
pub const STATIC_SOURCE: &str = "file";

/// Where the installed package keeps the shipped plugins.
const PACKAGED_DIR: &str = "/usr/lib/wasmlet/plugins";

/// The subdirectory of the shipped plugins' directory that holds them precompiled for
/// the binary beside them (`wasmlet plugin precompile --cache-dir <dir>/compiled`).
pub const PRECOMPILED: &str = "compiled";

/// Where the shipped plugins are: `$WASMLET_PLUGIN_DIR`, `plugins/` beside the binary,
/// the package's `/usr/lib/wasmlet/plugins`, or the plugins workspace's build output in
/// this source tree.
pub fn shipped_dir() -> Result<PathBuf> {
    let candidates: Vec<PathBuf> = std::env::var_os("WASMLET_PLUGIN_DIR")
        .map(PathBuf::from)
        .into_iter()
        .chain(
            std::env::current_exe()
                .ok()
                .and_then(|e| e.parent().map(|d| d.join("plugins"))),
        )
        .chain(std::iter::once(PathBuf::from(PACKAGED_DIR)))
        .chain(std::iter::once(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../plugins/target/wasm32-wasip2/release"),
        ))
        .collect();
    for dir in &candidates {
        if dir.join("source_file.wasm").is_file() {
            return Ok(dir.clone());
        }
    }
    bail!(
        "the shipped plugins are not built (looked in {}): build them with \
         `rustup target add wasm32-wasip2 && (cd plugins && cargo build --release)`, \
         or set WASMLET_PLUGIN_DIR",
        candidates
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn shipped_section(dir: &Path, config: &Config) -> String {
    let f = |name: &str| dir.join(format!("{name}.wasm")).display().to_string();
    let mut yaml = format!(
        "admission:\n\
         - {{name: resource-fit, file: {rf}}}\n\
         - {{name: node-affinity, file: {na}}}\n\
         - {{name: node-ports, file: {np}}}\n\
         - {{name: taint-toleration, file: {tt}}}\n\
         - {{name: sysctls, file: {sc}, config: {{allowed-unsafe-sysctls: '{unsafe}'}}}}\n",
        rf = f("resource_fit"),
        na = f("node_affinity"),
        np = f("node_ports"),
        tt = f("taint_toleration"),
        sc = f("sysctls"),
        unsafe = config.allowed_unsafe_sysctls.join(","),
    );
    yaml.push_str(&shipped_probes(dir));
    yaml.push_str(&shipped_sources(dir, config));
    yaml
}

/// The kubelet probes any address a probe names; so do the shipped handlers.
fn shipped_probes(dir: &Path) -> String {
    let f = |name: &str| dir.join(format!("{name}.wasm")).display().to_string();
    format!(
        "probes:\n\
         - {{name: probe-exec, file: {ex}, kinds: [exec], exec: true}}\n\
         - {{name: probe-http-get, file: {hg}, kinds: [httpGet], network: [pod, 0.0.0.0/0, '::/0']}}\n\
         - {{name: probe-tcp-socket, file: {tc}, kinds: [tcpSocket], network: [pod, 0.0.0.0/0, '::/0']}}\n\
         - {{name: probe-grpc, file: {gr}, kinds: [grpc], network: [pod, 0.0.0.0/0, '::/0']}}\n",
        ex = f("probe_exec"),
        hg = f("probe_http_get"),
        tc = f("probe_tcp_socket"),
        gr = f("probe_grpc"),
    )
}

fn shipped_sources(dir: &Path, config: &Config) -> String {
    match &config.static_pod_path {
        Some(path) => format!(
            "sources:\n- {{name: {STATIC_SOURCE}, file: {}, directory: {}, period: {}ms}}\n",
            dir.join("source_file.wasm").display(),
            path.display(),
            config.file_check_frequency.as_millis()
        ),
        None => String::new(),
    }
}

fn parse(yaml: &str) -> Result<PluginsConfig> {
    serde_yaml_ng::from_str(yaml).context("the shipped plugin configuration")
}

/// The plugins section the agent runs with: the configured one with the shipped probe
/// handlers and static pod source added where it names none, or all shipped plugins.
pub fn effective(config: &Config) -> Result<PluginsConfig> {
    let mut plugins = match &config.plugins {
        None => parse(&shipped_section(&shipped_dir()?, config))?,
        Some(p) => {
            let mut p = p.clone();
            if p.probes.is_empty() {
                p.probes = parse(&shipped_probes(&shipped_dir()?))?.probes;
            }
            if p.sources.is_empty() && config.static_pod_path.is_some() {
                p.sources = parse(&shipped_sources(&shipped_dir()?, config))?.sources;
            }
            p
        }
    };
    plugins
        .cache_directory
        .get_or_insert_with(|| config.root_dir.join("plugin-cache"));
    Ok(plugins)
}

/// The loaded plugins, following their files.
pub struct Loaded {
    /// The engine (and its metrics).
    pub engine: PluginEngine,
    /// The admission chain.
    pub chain: Arc<AdmissionChain>,
    /// Probe handlers.
    pub probes: Arc<ProbeHandlers>,
    /// Pod sources.
    pub sources: Arc<PodSources>,
    _admission: AdmissionDirectory,
}

/// Loads `plugins`. A plugin that does not load is logged and unavailable until a good
/// version appears; only an invalid configuration is an error.
pub async fn load(plugins: &PluginsConfig) -> Result<Loaded> {
    let engine = match &plugins.cache_directory {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("plugins.cacheDirectory: {}", dir.display()))?;
            let engine = PluginEngine::with_cache(dir)?;
            // The package's plugins precompiled by this binary: a new node loads them
            // without compiling.
            let engine = match shipped_dir().map(|d| d.join(PRECOMPILED)) {
                Ok(compiled) if compiled.is_dir() => engine.with_shipped_cache(compiled),
                _ => engine,
            };
            // Plugins missing from the cache are compiled by this binary in a process
            // of its own: the compiler's code and peak memory never join the agent's.
            match std::env::current_exe() {
                Ok(exe) => engine.compile_with(exe),
                Err(_) => engine,
            }
        }
        None => PluginEngine::new()?,
    };
    let engine = match plugins.signed_directory().map_err(anyhow::Error::msg)? {
        Some((dir, verifier)) => engine.verify_files(dir, Arc::new(verifier)),
        None => engine,
    };
    let chain = Arc::new(AdmissionChain::new(engine.clone()));
    // The three kinds load side by side: on a new node each plugin is compiled first (in
    // a process of its own), which the machine's cores share.
    let (admission, probes, sources) = tokio::join!(
        AdmissionDirectory::start(chain.clone(), plugins, true),
        ProbeHandlers::start(&engine, plugins, true),
        PodSources::start(&engine, plugins, true)
    );
    let admission = admission.context("plugins.admission")?;
    let probes = Arc::new(probes.context("plugins.probes")?);
    let sources = Arc::new(sources.context("plugins.sources")?);
    Ok(Loaded {
        engine,
        chain,
        probes,
        sources,
        _admission: admission,
    })
}
