//! `wasmlet plugin`: run and examine plugins offline, without an agent or a cluster.
//!
//! ```text
//! wasmlet plugin new --lang rust|python|ts [--world W] [--sdk DIR] DIR
//! wasmlet plugin inspect FILE.wasm
//! wasmlet plugin admit POLICY.wasm [POLICY.wasm…] --pod POD.yaml --node NODE.yaml \
//!     [--active-pods DIR] [--config KEY=VALUE…] [--source api|file|http] [--timeout-ms N]
//!     [--memory-limit QUANTITY] [--instances Reused|PerCall]
//! wasmlet plugin test POLICY.wasm CASES.yaml… [--only TEXT] [--timeout-ms N] …
//! wasmlet plugin probe HANDLER.wasm (--tcp-socket HOST:PORT | --http-get URL [--header H…]
//!     | --grpc HOST:PORT [--service S] | --exec CMD… --container ID [--endpoint E]
//!     | --custom KEY=VALUE… [--pod-ip IP] [--container ID: exec granted there])
//!     [--allow-network pod|CIDR…] [--timeout-ms N]
//! wasmlet plugin source SOURCE.wasm [--dir DIR] [--allow-url URL…] [--config KEY=VALUE…] \
//!     [--output names|yaml|json] [--timeout-ms N]
//! wasmlet plugin push FILE.wasm oci://REGISTRY/REPO:TAG [--insecure] [--username U]
//!     (password from $WASMLET_REGISTRY_PASSWORD)
//! wasmlet plugin generate-key-pair [--output-key-prefix cosign]   (password: $COSIGN_PASSWORD)
//! wasmlet plugin sign (oci://REGISTRY/REPO:TAG | FILE.wasm) --key cosign.key [--insecure] …
//! wasmlet plugin verify (oci://REGISTRY/REPO:TAG | FILE.wasm) --key cosign.pub [--insecure] …
//! wasmlet plugin verify (oci://REGISTRY/REPO:TAG | FILE.wasm) --trusted-root trusted_root.json \
//!     --certificate-identity[-regexp] ID --certificate-oidc-issuer[-regexp] ISSUER   (keyless)
//! ```
//!
//! `admit` exits 0 when every pod is admitted, 3 when one is rejected, 1 on an error
//! (a policy that raised, trapped, hit its memory limit or ran past its deadline: the
//! pod's line says `error:` and why);
//! `test` exits 0 when every case passed, 1 when one failed, 2 when a file could not be
//! read; `probe` exits 0 on success, 3 on failure, 1 when the probe errored; `source` exits 0
//! when every manifest was read, 3 when some were skipped, 1 when the source failed;
//! `verify` exits 0 when a given key or the keyless identity signed it, 3 when none did,
//! 1 on an error.

mod admit;
mod new;
mod signing;
mod test;

pub use admit::AdmitArgs;
pub use test::TestArgs;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use wasmlet_plugin_host::{Limits, PluginEngine, probe};

use admit::plugin_name;

/// Arguments of `wasmlet plugin`.
#[derive(Debug, Args)]
pub struct PluginArgs {
    #[command(subcommand)]
    pub command: PluginCommand,
    /// Keep compiled components in DIR (the agent's `plugins.cacheDirectory` format), so
    /// that a component compiled once loads in milliseconds the next time — worth it for
    /// the megabytes of a Python or JavaScript plugin's interpreter. Nothing is kept by
    /// default.
    #[arg(long, global = true, env = "WASMLET_PLUGIN_CACHE", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

/// What to do with a plugin.
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Make a plugin project in a folder of its own (Rust, Python or TypeScript; an
    /// admission policy, a probe handler or a pod source), built with the language's own
    /// commands from the SDK packages.
    New(new::NewArgs),
    /// Which world a component implements, its imports and exports, and the
    /// capabilities it could use if granted.
    Inspect {
        /// The component file.
        file: PathBuf,
    },
    /// Decide on pods with one or more admission policies, in order (the first
    /// rejection wins), as the agent's admission chain would.
    Admit(AdmitArgs),
    /// Run a file of cases — a pod (and optionally a node, active pods, configuration)
    /// and the verdict expected — against an admission policy; report each case, with
    /// what differs when it fails.
    Test(TestArgs),
    /// Run one check with a probe handler.
    Probe(Box<ProbeArgs>),
    /// Poll a pod source once and list the pods it wants (and the manifests it
    /// skipped).
    Source(SourceArgs),
    /// Publish a component to an OCI registry (one `application/wasm` layer, config
    /// `application/vnd.wasm.config.v0+json`) for WasmletPlugins to name; prints the
    /// digest they pin.
    Push(PushArgs),
    /// Make a cosign key pair: PREFIX.key (encrypted with `COSIGN_PASSWORD`) and
    /// PREFIX.pub, for `sign` and for the nodes' `verification.publicKeys`.
    GenerateKeyPair(signing::GenerateArgs),
    /// Sign a pushed component as cosign does (the signature stored in the registry
    /// beside it), or a component file (its signature written to FILE.sig, as
    /// `cosign sign-blob` makes it).
    Sign(signing::SignArgs),
    /// Check that a key signed a pushed component or a file, as a node does before it
    /// loads it.
    Verify(signing::VerifyArgs),
    /// Compile components into the plugin cache named by `--cache-dir`, for this
    /// binary's engine: the package's precompiled plugins are made so (FILE… given),
    /// and the agent runs it to compile a plugin outside its own process (the
    /// component on standard input).
    Precompile {
        /// Component files; none: one component read from standard input.
        files: Vec<PathBuf>,
    },
}

/// Arguments of `wasmlet plugin push`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// The component file.
    pub file: PathBuf,
    /// Where to: `oci://REGISTRY/REPOSITORY:TAG`.
    pub reference: String,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// How to reach a registry.
#[derive(Debug, Args)]
pub struct RegistryArgs {
    /// Plain HTTP (a registry on loopback without TLS).
    #[arg(long)]
    pub insecure: bool,
    /// The registry user (its password from `WASMLET_REGISTRY_PASSWORD`).
    #[arg(long)]
    pub username: Option<String>,
    /// The registry password.
    #[arg(long, env = "WASMLET_REGISTRY_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
}

impl RegistryArgs {
    /// User and password, from `--username` and `WASMLET_REGISTRY_PASSWORD`.
    fn credentials(&self) -> Result<Option<(String, String)>> {
        match (&self.username, &self.password) {
            (Some(u), Some(p)) => Ok(Some((u.clone(), p.clone()))),
            (Some(_), None) => bail!("--username: give the password in WASMLET_REGISTRY_PASSWORD"),
            _ => Ok(None),
        }
    }
}

/// How `wasmlet plugin source` prints the pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SourceOutput {
    /// One line per pod: `namespace/name  origin`.
    Names,
    /// The pods as YAML documents.
    Yaml,
    /// The pods as a JSON PodList.
    Json,
}

/// Arguments of `wasmlet plugin source`.
#[derive(Debug, Args)]
pub struct SourceArgs {
    /// The pod source.
    pub source: PathBuf,
    /// A directory the source may read (preopened read-only at /manifests).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// A URL prefix the source may fetch (repeatable).
    #[arg(long = "allow-url", value_name = "URL")]
    pub allow_urls: Vec<String>,
    /// A configuration value for the source (repeatable), e.g. `url=http://…`.
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = key_value)]
    pub config: Vec<(String, String)>,
    /// How long the poll may take.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// How to print the pods.
    #[arg(long, short, value_enum, default_value_t = SourceOutput::Names)]
    pub output: SourceOutput,
}

/// Arguments of `wasmlet plugin probe`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("check").required(true).args(["tcp_socket", "http_get", "grpc", "exec", "custom"])))]
pub struct ProbeArgs {
    /// The probe handler.
    pub handler: PathBuf,
    /// A tcpSocket check of HOST:PORT (HOST is also the pod IP the handler sees).
    #[arg(long, value_name = "HOST:PORT")]
    pub tcp_socket: Option<String>,
    /// An httpGet check of this URL (`http://10.88.0.5:8080/healthz`, or `https://`);
    /// its host is also the pod IP the handler sees.
    #[arg(long, value_name = "URL")]
    pub http_get: Option<String>,
    /// A header of the httpGet check, `NAME: VALUE` (repeatable).
    #[arg(long = "header", value_name = "NAME: VALUE", requires = "http_get")]
    pub headers: Vec<String>,
    /// A grpc check (grpc.health.v1) of HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    pub grpc: Option<String>,
    /// The service the grpc check asks about (none: the server as a whole).
    #[arg(long, requires = "grpc")]
    pub service: Option<String>,
    /// A custom check: an argument KEY=VALUE for the handler (repeatable).
    #[arg(long, value_name = "KEY=VALUE", value_parser = key_value)]
    pub custom: Vec<(String, String)>,
    /// The pod IP the handler sees (for custom checks; the others take it from their
    /// address).
    #[arg(long)]
    pub pod_ip: Option<String>,
    /// An exec check: this command in `--container`, through the CRI at `--endpoint`.
    #[arg(long, num_args = 1.., allow_hyphen_values = true, requires = "container")]
    pub exec: Option<Vec<String>>,
    /// The container to exec in: the exec check's, or, with a custom check, the
    /// container the handler may run commands in (granting it exec).
    #[arg(long)]
    pub container: Option<String>,
    /// The CRI runtime's endpoint, for exec.
    #[arg(
        long,
        env = "WASMLET_CRI_ENDPOINT",
        default_value = "unix:///run/containerd/containerd.sock"
    )]
    pub endpoint: String,
    /// Network the handler may reach: `pod` (the target's address) or a CIDR
    /// (repeatable). Nothing by default.
    #[arg(long = "allow-network", value_name = "pod|CIDR")]
    pub allow_network: Vec<String>,
    /// The probe's timeout.
    #[arg(long, default_value_t = 1000)]
    pub timeout_ms: u32,
}

fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

/// Runs `wasmlet plugin`.
pub async fn run(args: PluginArgs) -> Result<ExitCode> {
    let cache = args.cache_dir.as_deref();
    match args.command {
        PluginCommand::New(a) => new::run(a),
        PluginCommand::Inspect { file } => inspect(&engine(cache)?, &file),
        PluginCommand::Admit(a) => admit::admit(engine(cache)?, a).await,
        PluginCommand::Test(a) => test::run(cache, a).await,
        PluginCommand::Probe(a) => probe(&engine(cache)?, a).await,
        PluginCommand::Source(a) => source(&engine(cache)?, a).await,
        PluginCommand::Push(a) => push(&engine(cache)?, a).await,
        PluginCommand::GenerateKeyPair(a) => signing::generate(&a),
        PluginCommand::Sign(a) => signing::sign(a).await,
        PluginCommand::Verify(a) => signing::verify(a).await,
        PluginCommand::Precompile { files } => match cache {
            Some(dir) if files.is_empty() => precompile(dir),
            Some(dir) => precompile_files(dir, &files),
            None => bail!("wasmlet plugin precompile: --cache-dir is required"),
        },
    }
}

/// The engine the offline commands run plugins in, with the compiled-component cache
/// when one is named.
fn engine(cache: Option<&Path>) -> Result<PluginEngine> {
    match cache {
        Some(dir) => {
            PluginEngine::with_cache(dir).with_context(|| format!("--cache-dir {}", dir.display()))
        }
        None => Ok(PluginEngine::new()?),
    }
}

/// `wasmlet plugin precompile`: exit 0 once the component is in the cache (the entry's
/// path on stdout, for the agent that ran it), 2 (and why, on stderr) when it does not
/// compile.
fn precompile(cache_dir: &std::path::Path) -> Result<ExitCode> {
    use std::io::Read as _;
    let mut wasm = Vec::new();
    std::io::stdin()
        .read_to_end(&mut wasm)
        .context("reading the component from standard input")?;
    let engine = wasmlet_plugin_host::PluginEngine::with_cache(cache_dir)?;
    match engine.precompile_into_cache(&wasm) {
        Ok(entry) => {
            println!("{}", entry.display());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{e:#}");
            Ok(ExitCode::from(
                u8::try_from(wasmlet_plugin_host::cache::COMPILER_REFUSED).unwrap_or(2),
            ))
        }
    }
}

/// `wasmlet plugin precompile --cache-dir DIR FILE…`: each component compiled into the
/// cache; the first that does not compile is an error naming its file.
fn precompile_files(cache_dir: &Path, files: &[PathBuf]) -> Result<ExitCode> {
    let engine = PluginEngine::with_cache(cache_dir)
        .with_context(|| format!("--cache-dir {}", cache_dir.display()))?;
    for file in files {
        let wasm = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        engine
            .precompile_into_cache(&wasm)
            .with_context(|| format!("{} does not compile", file.display()))?;
    }
    println!(
        "{} component(s) compiled into {}",
        files.len(),
        cache_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

async fn push(engine: &PluginEngine, args: PushArgs) -> Result<ExitCode> {
    let inspection = engine
        .inspect(&args.file)
        .with_context(|| format!("{}", args.file.display()))?;
    let Some(world) = inspection.world else {
        bail!(
            "{}: not a wasmlet plugin (it exports none of the plugin worlds); `wasmlet plugin inspect` shows what it is",
            args.file.display()
        );
    };
    let component =
        std::fs::read(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let credentials = args.registry.credentials()?;
    let pushed = wasmlet_fleet::publish::push(
        &component,
        &args.reference,
        args.registry.insecure,
        credentials,
        Some(&format!("wasmlet:plugin/{world}@0.1.0")),
    )
    .await
    .map_err(|e| anyhow::anyhow!(e))?;
    println!("pushed:   {}", pushed.manifest_url);
    println!("world:    wasmlet:plugin/{world}@0.1.0");
    println!("digest:   {}", pushed.digest);
    println!("# in a WasmletPlugin:");
    println!("#   digest: {}", pushed.digest);
    println!(
        "#   source: {{oci: {{reference: {}{}}}}}",
        args.reference,
        if args.registry.insecure {
            ", insecure: true"
        } else {
            ""
        }
    );
    Ok(ExitCode::SUCCESS)
}

async fn source(engine: &PluginEngine, args: SourceArgs) -> Result<ExitCode> {
    use wasmlet_plugin_host::source::SourceGrants;
    if let Some(dir) = &args.dir
        && !dir.is_dir()
    {
        bail!("--dir {}: not a directory", dir.display());
    }
    let source = engine.load_source(
        &plugin_name(&args.source),
        &args.source,
        args.config.into_iter().collect(),
        Limits {
            deadline: std::time::Duration::from_millis(args.timeout_ms),
            ..Limits::default()
        },
        SourceGrants {
            directory: args.dir,
            urls: args.allow_urls,
        },
    )?;
    let snapshot = source.poll().await?;
    match args.output {
        SourceOutput::Names => {
            for p in &snapshot.pods {
                let namespace = p.pod.metadata.namespace.as_deref().unwrap_or("default");
                let name = p.pod.metadata.name.as_deref().unwrap_or_default();
                println!("{namespace}/{name}\t{}", p.origin);
            }
        }
        SourceOutput::Yaml => {
            for p in &snapshot.pods {
                println!("# {}", p.origin);
                print!("{}", serde_yaml_ng::to_string(&p.pod)?);
                println!("---");
            }
        }
        SourceOutput::Json => {
            let items: Vec<_> = snapshot.pods.iter().map(|p| &p.pod).collect();
            let list = serde_json::json!({"apiVersion": "v1", "kind": "PodList", "items": items});
            println!("{}", serde_json::to_string_pretty(&list)?);
        }
    }
    for problem in &snapshot.problems {
        eprintln!("skipped {problem}");
    }
    Ok(if snapshot.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}

fn inspect(engine: &PluginEngine, file: &Path) -> Result<ExitCode> {
    let i = engine.inspect(file)?;
    println!("file:         {}", file.display());
    println!("size:         {} bytes", i.size);
    println!("sha256:       {}", i.digest);
    println!("compiler:     {}", i.compiler.name());
    println!(
        "world:        {}",
        i.world
            .map(|w| format!("wasmlet:plugin/{w}@0.1.0"))
            .unwrap_or_else(|| "none of wasmlet's (not loadable as a plugin)".into())
    );
    println!(
        "capabilities: {}",
        if i.capabilities.is_empty() {
            "none".to_owned()
        } else {
            format!("{} (each denied unless granted)", i.capabilities.join(", "))
        }
    );
    println!("exports:");
    for e in &i.exports {
        println!("  {e}");
    }
    println!("imports:");
    for e in &i.imports {
        println!("  {e}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Exec through a CRI runtime, for the exec probe.
struct CriExec {
    client: wasmlet_cri::CriClient,
    container: String,
}

impl probe::ContainerExec for CriExec {
    fn exec_sync(
        &self,
        command: Vec<String>,
        timeout: std::time::Duration,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<probe::ExecOutput, String>> + Send + '_>>
    {
        Box::pin(async move {
            use wasmlet_cri::CriRuntime;
            let r = self
                .client
                .exec_sync(&self.container, command, timeout)
                .await
                .map_err(|e| e.to_string())?;
            Ok(probe::ExecOutput {
                exit_code: r.exit_code,
                stdout: r.stdout,
                stderr: r.stderr,
            })
        })
    }
}

/// Commands in `container` through the CRI runtime at `endpoint`.
async fn cri_exec(endpoint: &str, container: &str) -> Result<Arc<dyn probe::ContainerExec>> {
    let client =
        wasmlet_cri::CriClient::connect_with(endpoint, wasmlet_cri::ClientOptions::default())
            .await?;
    Ok(Arc::new(CriExec {
        client,
        container: container.to_owned(),
    }))
}

/// `HOST:PORT` (IPv6 in brackets) split, naming the flag in the error.
fn host_port(flag: &str, text: &str) -> Result<(String, u16)> {
    text.rsplit_once(':')
        .and_then(|(h, p)| Some((h.trim_matches(['[', ']']).to_owned(), p.parse().ok()?)))
        .ok_or_else(|| anyhow::anyhow!("{flag} {text:?}: expected HOST:PORT"))
}

/// The httpGet action of `--http-get URL` and its `--header`s.
fn http_get_action(url: &str, headers: &[String]) -> Result<(probe::Action, String)> {
    let (scheme, rest) = url
        .split_once("://")
        .filter(|(s, _)| matches!(*s, "http" | "https"))
        .ok_or_else(|| anyhow::anyhow!("--http-get {url:?}: expected http://HOST[:PORT]/PATH"))?;
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    let default_port = if scheme == "https" { 443 } else { 80 };
    let (host, port) = if authority.ends_with(']') || !authority.contains(':') {
        (authority.trim_matches(['[', ']']).to_owned(), default_port)
    } else {
        host_port("--http-get", authority)?
    };
    let headers = headers
        .iter()
        .map(|h| {
            h.split_once(':')
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                .ok_or_else(|| anyhow::anyhow!("--header {h:?}: expected NAME: VALUE"))
        })
        .collect::<Result<Vec<_>>>()?;
    let action = probe::Action::HttpGet(probe::HttpGetAction {
        scheme: scheme.to_ascii_uppercase(),
        host: String::new(),
        port,
        path: if path.is_empty() {
            "/".into()
        } else {
            path.into()
        },
        headers,
    });
    Ok((action, host))
}

async fn probe(engine: &PluginEngine, args: Box<ProbeArgs>) -> Result<ExitCode> {
    let network = args
        .allow_network
        .iter()
        .map(|g| {
            g.parse()
                .map_err(|e: String| anyhow::anyhow!("--allow-network: {e}"))
        })
        .collect::<Result<Vec<probe::NetworkGrant>>>()?;
    let exec = match &args.container {
        Some(container) => Some(cri_exec(&args.endpoint, container).await?),
        None => None,
    };
    let (action, pod_ip) = if let Some(hostport) = &args.tcp_socket {
        let (host, port) = host_port("--tcp-socket", hostport)?;
        let action = probe::Action::TcpSocket(probe::TcpSocketAction {
            host: String::new(),
            port,
        });
        (action, host)
    } else if let Some(url) = &args.http_get {
        http_get_action(url, &args.headers)?
    } else if let Some(hostport) = &args.grpc {
        let (host, port) = host_port("--grpc", hostport)?;
        let action = probe::Action::Grpc(probe::GrpcAction {
            host: String::new(),
            port,
            service: args.service.clone(),
        });
        (action, host)
    } else if let Some(command) = &args.exec {
        (probe::Action::Exec(command.clone()), String::new())
    } else {
        (probe::Action::Custom(args.custom.clone()), String::new())
    };
    let pod_ip = args.pod_ip.clone().unwrap_or(pod_ip);
    let grants = probe::Grants {
        exec: exec.is_some(),
        network,
    };
    let handler = engine.load_probe(
        &plugin_name(&args.handler),
        &args.handler,
        BTreeMap::new(),
        Limits::default(),
        grants,
    )?;
    let target = probe::Target {
        pod_namespace: "default".into(),
        pod_name: "offline".into(),
        pod_uid: String::new(),
        container_name: args.container.unwrap_or_default(),
        pod_ip,
        kind: probe::ProbeKind::Liveness,
        action,
        timeout_ms: args.timeout_ms,
    };
    Ok(match handler.check(&target, exec).await? {
        probe::Outcome::Success(m) => {
            println!(
                "success{}",
                if m.is_empty() {
                    String::new()
                } else {
                    format!(": {m}")
                }
            );
            ExitCode::SUCCESS
        }
        probe::Outcome::Failure(m) => {
            println!("failure: {m}");
            ExitCode::from(3)
        }
        probe::Outcome::Error(m) => {
            println!("error: {m}");
            ExitCode::FAILURE
        }
    })
}
