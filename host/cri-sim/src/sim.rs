//! [`Simulator`]: the in-memory runtime. Every CRI call is a method here, answering
//! exactly what containerd answers (the contract suite in `tests/cri_contract.rs` is
//! the judge). The gRPC service and the in-process [`wasmlet_cri::CriRuntime`] impl are
//! thin wrappers over these methods.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::BuildHasher;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tonic::{Code, Status};
use wasmlet_cri::labels::selector_matches;
use wasmlet_cri::listed::{ListedContainer, ListedSandbox};
use wasmlet_cri::proto::{self, ContainerState, PodSandboxState};

use crate::image::{ImageStore, normalize_reference};
use crate::script::{FAIL_RUN_SANDBOX_ANNOTATION, Script, ScriptError};
use crate::shell::{self, End, Files, Mode, Program};

mod stats;
mod streaming;

/// How many events a slow `GetContainerEvents` consumer may fall behind before its
/// stream ends (it must then relist).
pub const EVENT_BUFFER: usize = 4096;

/// The runtime name the simulator reports in `Version`.
pub const RUNTIME_NAME: &str = "wasmlet-cri-sim";

/// The pod network: pods get addresses from 10.88.0.2 up, like the project's CNI config.
const POD_NET: [u8; 2] = [10, 88];

/// The in-memory CRI runtime. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Simulator {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Simulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.inner.lock();
        f.debug_struct("Simulator")
            .field("sandboxes", &st.sandboxes.len())
            .field("containers", &st.containers.len())
            .finish()
    }
}

struct Inner {
    state: Mutex<State>,
    faults: Mutex<Faults>,
    events: broadcast::Sender<proto::ContainerEventResponse>,
    clock: Clock,
    ids: IdGen,
    streaming: streaming::Streaming,
}

/// Runtime-wide faults: latency, outages, scripted failures of the next N calls.
#[derive(Default)]
struct Faults {
    /// The CRI version `Version` reports; `None` is `v1`.
    api_version: Option<String>,
    latency: Duration,
    method_latency: HashMap<String, Duration>,
    unavailable_until: Option<Instant>,
    fail_next: HashMap<String, (u32, Code, String)>,
}

#[derive(Default)]
struct State {
    sandboxes: HashMap<String, Sandbox>,
    containers: HashMap<String, Container>,
    /// Reserved sandbox and container names → the id holding them.
    names: HashMap<String, String>,
    images: ImageStore,
    ips: IpPool,
    /// RunPodSandbox failures served so far, per pod UID (fail-run-sandbox).
    sandbox_failures: HashMap<String, u32>,
    network_ready: bool,
}

struct Sandbox {
    id: String,
    name: String,
    config: proto::PodSandboxConfig,
    state: PodSandboxState,
    created_at: i64,
    ip: Option<Ipv4Addr>,
    runtime_handler: String,
    /// Its containers, oldest first.
    containers: Vec<String>,
    /// `summary()` in wire form, kept current, spliced into ListPodSandbox answers.
    encoded: Bytes,
    /// The lean view of `encoded` (slices of it), for lean in-process lists.
    listed: ListedSandbox,
}

struct Container {
    id: String,
    sandbox_id: String,
    name: String,
    config: proto::ContainerConfig,
    image_ref: String,
    log_path: String,
    state: ContainerState,
    created_at: i64,
    started_at: i64,
    finished_at: i64,
    exit_code: i32,
    reason: String,
    message: String,
    program: Program,
    script: Script,
    /// Its process is PID 1 of its own PID namespace (ignores SIGTERM without a trap).
    pid1: bool,
    /// When it started, on the runtime's clock.
    started: Option<Instant>,
    exited: watch::Sender<bool>,
    timer: Option<tokio::task::AbortHandle>,
    /// `summary()` in wire form, kept current, spliced into ListContainers answers.
    encoded: Bytes,
    /// The lean view of `encoded` (slices of it), for lean in-process lists.
    listed: ListedContainer,
}

/// Unix-nanosecond timestamps that follow tokio's clock, so that paused-time tests
/// see timestamps advance with `tokio::time::advance`.
struct Clock {
    base_wall: i64,
    base: Instant,
}

impl Clock {
    fn new() -> Self {
        Self {
            base_wall: wasmlet_cri::labels::unix_nanos(),
            base: Instant::now(),
        }
    }

    fn now(&self) -> i64 {
        let elapsed = Instant::now().saturating_duration_since(self.base);
        self.base_wall + i64::try_from(elapsed.as_nanos()).unwrap_or(i64::MAX)
    }
}

/// 64-hex-digit ids, like containerd's.
struct IdGen {
    seq: AtomicU64,
    seed: std::hash::RandomState,
}

impl IdGen {
    fn next(&self) -> String {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        (0..4u64)
            .map(|i| format!("{:016x}", self.seed.hash_one((n, i))))
            .collect()
    }
}

#[derive(Default)]
struct IpPool {
    next: u32,
    used: HashSet<Ipv4Addr>,
}

impl IpPool {
    fn allocate(&mut self) -> Option<Ipv4Addr> {
        // Host addresses 10.88.0.2 ..= 10.88.255.254, handed out round robin like
        // host-local IPAM, skipping those in use.
        const SPAN: u32 = 65533;
        for _ in 0..SPAN {
            let host = 2 + self.next % SPAN;
            self.next = self.next.wrapping_add(1);
            let ip = Ipv4Addr::new(
                POD_NET[0],
                POD_NET[1],
                (host >> 8) as u8,
                (host & 0xff) as u8,
            );
            if self.used.insert(ip) {
                return Some(ip);
            }
        }
        None
    }

    fn release(&mut self, ip: Ipv4Addr) {
        self.used.remove(&ip);
    }
}

fn state_name(state: ContainerState) -> &'static str {
    state.as_str_name()
}

fn reason_for(code: i32) -> &'static str {
    if code == 0 { "Completed" } else { "Error" }
}

fn unknown(message: impl Into<String>) -> Status {
    Status::new(Code::Unknown, message)
}

fn container_not_found(id: &str) -> Status {
    Status::not_found(format!(
        "an error occurred when try to find container {id:?}: not found"
    ))
}

fn sandbox_not_found(id: &str) -> Status {
    Status::not_found(format!(
        "an error occurred when try to find sandbox {id:?}: not found"
    ))
}

fn script_error(e: ScriptError) -> Status {
    Status::invalid_argument(e.to_string())
}

impl Default for Simulator {
    fn default() -> Self {
        Self::new()
    }
}

impl Simulator {
    /// A runtime holding the two images the project's containerd holds
    /// (`localhost/pause:3.9`, `localhost/busybox:latest`) and nothing else.
    pub fn new() -> Self {
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let state = State {
            network_ready: true,
            images: ImageStore::with_defaults(),
            ..State::default()
        };
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                faults: Mutex::new(Faults::default()),
                events,
                clock: Clock::new(),
                ids: IdGen {
                    seq: AtomicU64::new(0),
                    seed: std::hash::RandomState::new(),
                },
                streaming: streaming::Streaming::default(),
            }),
        }
    }

    // ------------------------------------------------------------ control (faults)

    /// Adds (or replaces) an image: `cmd` is its default command, `script` scripts every
    /// container made from it.
    pub fn add_image(&self, reference: &str, cmd: &[&str], script: Option<Script>) {
        self.inner.lock().images.add(
            reference,
            cmd.iter().map(|s| s.to_string()).collect(),
            script,
        );
    }

    /// Adds latency to every call.
    pub fn set_latency(&self, latency: Duration) {
        self.inner.faults().latency = latency;
    }

    /// Adds latency to one method (by CRI name, e.g. `"RunPodSandbox"`), replacing the
    /// global latency for it.
    pub fn set_method_latency(&self, method: &str, latency: Duration) {
        self.inner
            .faults()
            .method_latency
            .insert(method.to_owned(), latency);
    }

    /// Every call fails with UNAVAILABLE for `duration` from now, as while a runtime
    /// restarts.
    pub fn set_unavailable_for(&self, duration: Duration) {
        self.inner.faults().unavailable_until = Some(Instant::now() + duration);
    }

    /// The next `times` calls of `method` fail with `code` and `message`.
    pub fn fail_next(&self, method: &str, times: u32, code: Code, message: &str) {
        self.inner
            .faults()
            .fail_next
            .insert(method.to_owned(), (times, code, message.to_owned()));
    }

    /// Makes `Version` report another CRI API version (e.g. `v1alpha2`), as an old
    /// runtime would.
    pub fn set_runtime_api_version(&self, version: &str) {
        self.inner.faults().api_version = Some(version.to_owned());
    }

    /// Sets the NetworkReady condition reported by `Status`.
    pub fn set_network_ready(&self, ready: bool) {
        self.inner.lock().network_ready = ready;
    }

    /// The configuration container `name` was created with, newest first among
    /// containers of that name (what the agent asked the runtime for, for tests).
    pub fn container_config(&self, name: &str) -> Option<proto::ContainerConfig> {
        let st = self.inner.lock();
        st.containers
            .values()
            .filter(|c| c.config.metadata.as_ref().is_some_and(|m| m.name == name))
            .max_by_key(|c| c.created_at)
            .map(|c| c.config.clone())
    }

    /// Number of sandboxes and containers held.
    pub fn counts(&self) -> (usize, usize) {
        let st = self.inner.lock();
        (st.sandboxes.len(), st.containers.len())
    }

    /// Waits out latency, outages and scripted failures for one call.
    async fn enter(&self, method: &'static str) -> Result<(), Status> {
        let (delay, failure) = {
            let mut f = self.inner.faults();
            if let Some(until) = f.unavailable_until {
                let now = Instant::now();
                if now < until {
                    return Err(Status::unavailable(format!(
                        "simulated outage: the runtime is unavailable for another {:?}",
                        until - now
                    )));
                }
                f.unavailable_until = None;
            }
            let delay = f.method_latency.get(method).copied().unwrap_or(f.latency);
            let failure = match f.fail_next.get_mut(method) {
                Some((n, code, msg)) if *n > 0 => {
                    *n -= 1;
                    Some(Status::new(*code, msg.clone()))
                }
                _ => None,
            };
            (delay, failure)
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        failure.map_or(Ok(()), Err)
    }

    // ------------------------------------------------------------ runtime

    /// `Version`.
    pub(crate) async fn version(&self) -> Result<proto::VersionResponse, Status> {
        self.enter("Version").await?;
        let api_version = self.inner.faults().api_version.clone();
        Ok(proto::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: RUNTIME_NAME.into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
            runtime_api_version: api_version.unwrap_or_else(|| wasmlet_cri::CRI_API_VERSION.into()),
        })
    }

    /// `Status`.
    pub(crate) async fn status(&self, verbose: bool) -> Result<proto::StatusResponse, Status> {
        self.enter("Status").await?;
        let network_ready = self.inner.lock().network_ready;
        let condition = |kind: &str, ok: bool, reason: &str| proto::RuntimeCondition {
            r#type: kind.into(),
            status: ok,
            reason: if ok { String::new() } else { reason.into() },
            message: if ok {
                String::new()
            } else {
                "simulated: network plugin not ready".into()
            },
        };
        let info = if verbose {
            BTreeMap::from([(
                "config".to_string(),
                // As containerd's CRI plugin: its configuration, the sandbox image in it.
                format!(
                    "{{\"runtime\":\"{RUNTIME_NAME}\",\"sandboxImage\":\"{}\"}}",
                    crate::image::PAUSE_IMAGE
                ),
            )])
        } else {
            BTreeMap::new()
        };
        Ok(proto::StatusResponse {
            status: Some(proto::RuntimeStatus {
                conditions: vec![
                    condition("RuntimeReady", true, ""),
                    condition("NetworkReady", network_ready, "NetworkPluginNotReady"),
                ],
            }),
            info,
            ..Default::default()
        })
    }

    /// `RuntimeConfig` (the cgroupfs driver, as the project's containerd uses).
    pub(crate) async fn runtime_config(&self) -> Result<proto::RuntimeConfigResponse, Status> {
        self.enter("RuntimeConfig").await?;
        Ok(proto::RuntimeConfigResponse {
            linux: Some(proto::LinuxRuntimeConfiguration {
                cgroup_driver: proto::CgroupDriver::Cgroupfs as i32,
            }),
        })
    }

    // ------------------------------------------------------------ sandboxes

    /// `RunPodSandbox`.
    pub(crate) async fn run_pod_sandbox(
        &self,
        config: Option<proto::PodSandboxConfig>,
        runtime_handler: &str,
    ) -> Result<String, Status> {
        self.enter("RunPodSandbox").await?;
        let config =
            config.ok_or_else(|| Status::invalid_argument("sandbox config must not be nil"))?;
        let meta = config
            .metadata
            .clone()
            .ok_or_else(|| Status::invalid_argument("sandbox config must include metadata"))?;
        if meta.name.is_empty() || meta.uid.is_empty() || meta.namespace.is_empty() {
            return Err(Status::invalid_argument(
                "sandbox metadata must include name, uid and namespace",
            ));
        }
        if !matches!(runtime_handler, "" | "runc") {
            return Err(unknown(format!(
                "failed to get sandbox runtime: no runtime for {runtime_handler:?} is configured"
            )));
        }
        let id = self.inner.ids.next();
        let name = format!(
            "{}_{}_{}_{}",
            meta.name, meta.namespace, meta.uid, meta.attempt
        );
        let mut st = self.inner.lock();
        if let Some(holder) = st.names.get(&name) {
            return Err(unknown(format!(
                "failed to reserve sandbox name {name:?}: name {name:?} is reserved for {holder:?}"
            )));
        }
        if let Some(n) = config.annotations.get(FAIL_RUN_SANDBOX_ANNOTATION) {
            let n: u32 = n.parse().map_err(|_| {
                Status::invalid_argument(format!(
                    "annotation {FAIL_RUN_SANDBOX_ANNOTATION}={n:?} is not a count"
                ))
            })?;
            let served = st.sandbox_failures.entry(meta.uid.clone()).or_insert(0);
            if *served < n {
                *served += 1;
                return Err(unknown(format!(
                    "failed to setup network for sandbox {id:?}: plugin type=\"bridge\" failed (add): \
                     simulated failure {served} of {n}"
                )));
            }
        }
        let host_network = network_mode(&config) == proto::NamespaceMode::Node;
        let ip = if host_network {
            None
        } else {
            Some(st.ips.allocate().ok_or_else(|| {
                unknown(format!(
                    "failed to setup network for sandbox {id:?}: no IP addresses available"
                ))
            })?)
        };
        st.names.insert(name.clone(), id.clone());
        let sandbox = Sandbox {
            id: id.clone(),
            name,
            config,
            state: PodSandboxState::SandboxReady,
            created_at: self.inner.clock.now(),
            ip,
            runtime_handler: runtime_handler.to_owned(),
            containers: Vec::new(),
            encoded: Bytes::new(),
            listed: ListedSandbox::default(),
        };
        let mut sandbox = sandbox;
        sandbox.reencode();
        st.sandboxes.insert(id.clone(), sandbox);
        self.emit(
            &st,
            &id,
            &id,
            proto::ContainerEventType::ContainerCreatedEvent,
        );
        self.emit(
            &st,
            &id,
            &id,
            proto::ContainerEventType::ContainerStartedEvent,
        );
        Ok(id)
    }

    /// `StopPodSandbox`: kills its containers (137) and releases its IP. Idempotent.
    pub(crate) async fn stop_pod_sandbox(&self, id: &str) -> Result<(), Status> {
        self.enter("StopPodSandbox").await?;
        let mut st = self.inner.lock();
        let sandbox = st.sandboxes.get(id).ok_or_else(|| sandbox_not_found(id))?;
        let members = sandbox.containers.clone();
        for cid in &members {
            self.finish_locked(&mut st, cid, 137, "Error");
        }
        let Some(sandbox) = st.sandboxes.get_mut(id) else {
            return Ok(());
        };
        if sandbox.state == PodSandboxState::SandboxReady {
            sandbox.state = PodSandboxState::SandboxNotready;
            sandbox.reencode();
            if let Some(ip) = sandbox.ip.take() {
                st.ips.release(ip);
            }
            self.emit(
                &st,
                id,
                id,
                proto::ContainerEventType::ContainerStoppedEvent,
            );
        }
        Ok(())
    }

    /// `RemovePodSandbox`: stops it if needed, removes its containers. Idempotent.
    pub(crate) async fn remove_pod_sandbox(&self, id: &str) -> Result<(), Status> {
        self.enter("RemovePodSandbox").await?;
        let mut st = self.inner.lock();
        let Some(sandbox) = st.sandboxes.get(id) else {
            return Ok(());
        };
        let members = sandbox.containers.clone();
        for cid in &members {
            self.finish_locked(&mut st, cid, 137, "Error");
            self.remove_locked(&mut st, cid);
        }
        if let Some(sandbox) = st.sandboxes.get(id) {
            if sandbox.state == PodSandboxState::SandboxReady {
                self.emit(
                    &st,
                    id,
                    id,
                    proto::ContainerEventType::ContainerStoppedEvent,
                );
            }
            self.emit(
                &st,
                id,
                id,
                proto::ContainerEventType::ContainerDeletedEvent,
            );
        }
        if let Some(sandbox) = st.sandboxes.remove(id) {
            st.names.remove(&sandbox.name);
            if let Some(ip) = sandbox.ip {
                st.ips.release(ip);
            }
        }
        Ok(())
    }

    /// `PodSandboxStatus`.
    pub(crate) async fn pod_sandbox_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> Result<proto::PodSandboxStatusResponse, Status> {
        self.enter("PodSandboxStatus").await?;
        let st = self.inner.lock();
        let sandbox = st.sandboxes.get(id).ok_or_else(|| sandbox_not_found(id))?;
        let info = if verbose {
            BTreeMap::from([(
                "info".to_string(),
                format!(
                    "{{\"pid\":0,\"runtimeHandler\":{:?}}}",
                    sandbox.runtime_handler
                ),
            )])
        } else {
            BTreeMap::new()
        };
        Ok(proto::PodSandboxStatusResponse {
            status: Some(sandbox.status()),
            info,
            containers_statuses: Vec::new(),
            timestamp: 0,
        })
    }

    /// `ListPodSandbox`.
    pub(crate) async fn list_pod_sandbox(
        &self,
        filter: Option<proto::PodSandboxFilter>,
    ) -> Result<Vec<proto::PodSandbox>, Status> {
        self.enter("ListPodSandbox").await?;
        let st = self.inner.lock();
        let filter = filter.unwrap_or_default();
        Ok(matching_sandboxes(&st, &filter)
            .map(Sandbox::summary)
            .collect())
    }

    /// `ListPodSandbox` with no filter, in lean form.
    pub async fn list_pod_sandbox_lean(&self) -> Result<Vec<ListedSandbox>, Status> {
        self.enter("ListPodSandbox").await?;
        let st = self.inner.lock();
        Ok(st.sandboxes.values().map(|s| s.listed.clone()).collect())
    }

    /// `ListPodSandbox`, answered in wire form from each sandbox's cached encoding:
    /// what the gRPC server sends, without building and encoding the messages again.
    pub async fn list_pod_sandbox_encoded(
        &self,
        filter: Option<proto::PodSandboxFilter>,
    ) -> Result<EncodedList, Status> {
        self.enter("ListPodSandbox").await?;
        let st = self.inner.lock();
        let filter = filter.unwrap_or_default();
        let parts = matching_sandboxes(&st, &filter)
            .map(|s| s.encoded.clone())
            .collect();
        Ok(EncodedList { parts })
    }

    // ------------------------------------------------------------ containers

    /// `CreateContainer`.
    pub(crate) async fn create_container(
        &self,
        sandbox_id: &str,
        config: Option<proto::ContainerConfig>,
    ) -> Result<String, Status> {
        self.enter("CreateContainer").await?;
        let config =
            config.ok_or_else(|| Status::invalid_argument("container config must not be nil"))?;
        let meta = config
            .metadata
            .clone()
            .ok_or_else(|| Status::invalid_argument("container config must include metadata"))?;
        let image_ref = config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        if image_ref.is_empty() {
            return Err(Status::invalid_argument(
                "container config must include an image",
            ));
        }
        let id = self.inner.ids.next();
        let mut st = self.inner.lock();
        let sandbox = st
            .sandboxes
            .get(sandbox_id)
            .ok_or_else(|| sandbox_not_found(sandbox_id))?;
        if sandbox.state != PodSandboxState::SandboxReady {
            return Err(Status::not_found(format!(
                "failed to get sandbox container task: no running task found: task {sandbox_id} not found: not found"
            )));
        }
        let pod_meta = sandbox.config.metadata.clone().unwrap_or_default();
        let pod_annotations = sandbox.config.annotations.clone();
        let name = format!(
            "{}_{}_{}_{}_{}",
            meta.name, pod_meta.name, pod_meta.namespace, pod_meta.uid, meta.attempt
        );
        if let Some(holder) = st.names.get(&name) {
            return Err(unknown(format!(
                "failed to reserve container name {name:?}: name {name:?} is reserved for {holder:?}"
            )));
        }
        let image = st.images.resolve(&image_ref).ok_or_else(|| {
            Status::not_found(format!(
                "failed to resolve image {:?}: no such image",
                normalize_reference(&image_ref)
            ))
        })?;
        let script = Script::for_container(
            &config.annotations,
            &pod_annotations,
            &meta.name,
            image.script.as_ref(),
        )
        .map_err(script_error)?;
        if let Some(msg) = &script.fail_create {
            return Err(unknown(format!(
                "failed to create containerd container: {msg}"
            )));
        }
        let mut argv: Vec<String> = if config.command.is_empty() {
            image.cmd.clone()
        } else {
            config.command.clone()
        };
        argv.extend(config.args.iter().cloned());
        let program = shell::interpret(&argv, &Files::default(), Mode::Main);
        let pid1 = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .is_some_and(|n| n.pid == proto::NamespaceMode::Container as i32);
        let log_path = if config.log_path.is_empty() {
            String::new()
        } else {
            format!(
                "{}/{}",
                st.sandboxes[sandbox_id]
                    .config
                    .log_directory
                    .trim_end_matches('/'),
                config.log_path
            )
        };
        let container = Container {
            id: id.clone(),
            sandbox_id: sandbox_id.to_owned(),
            name: name.clone(),
            image_ref: image.id.clone(),
            config,
            log_path,
            state: ContainerState::ContainerCreated,
            created_at: self.inner.clock.now(),
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            program,
            script,
            pid1,
            started: None,
            exited: watch::channel(false).0,
            timer: None,
            encoded: Bytes::new(),
            listed: ListedContainer::default(),
        };
        let mut container = container;
        container.reencode();
        st.names.insert(name, id.clone());
        st.containers.insert(id.clone(), container);
        if let Some(sandbox) = st.sandboxes.get_mut(sandbox_id) {
            sandbox.containers.push(id.clone());
        }
        self.emit(
            &st,
            sandbox_id,
            &id,
            proto::ContainerEventType::ContainerCreatedEvent,
        );
        Ok(id)
    }

    /// `StartContainer`.
    pub(crate) async fn start_container(&self, id: &str) -> Result<(), Status> {
        self.enter("StartContainer").await?;
        let mut st = self.inner.lock();
        let c = st
            .containers
            .get(id)
            .ok_or_else(|| container_not_found(id))?;
        if c.state != ContainerState::ContainerCreated {
            return Err(unknown(format!(
                "failed to set starting state for container {id:?}: container is in {} state",
                state_name(c.state)
            )));
        }
        let sandbox_id = c.sandbox_id.clone();
        let ready = st
            .sandboxes
            .get(&sandbox_id)
            .is_some_and(|s| s.state == PodSandboxState::SandboxReady);
        if !ready {
            return Err(unknown(format!(
                "sandbox container {sandbox_id:?} is not running"
            )));
        }
        let now = self.inner.clock.now();
        let Some(c) = st.containers.get_mut(id) else {
            return Err(container_not_found(id));
        };
        if let Some(msg) = c.script.fail_start.clone() {
            c.state = ContainerState::ContainerExited;
            c.started_at = now;
            c.finished_at = now;
            c.exit_code = 128;
            c.reason = "StartError".into();
            c.message = msg.clone();
            c.reencode();
            c.exited.send_replace(true);
            self.emit(
                &st,
                &sandbox_id,
                id,
                proto::ContainerEventType::ContainerStoppedEvent,
            );
            return Err(unknown(format!(
                "failed to start containerd task {id:?}: {msg}"
            )));
        }
        c.state = ContainerState::ContainerRunning;
        c.started_at = now;
        c.started = Some(Instant::now());
        c.reencode();
        Self::write_start_log(&c.log_path, &c.program.stdout, &c.program.stderr, now);
        // When does it end on its own, and how?
        let natural = if c.script.run_forever {
            None
        } else {
            match (&c.program.end, c.script.exit_after) {
                (_, Some(after)) => Some((
                    after,
                    c.script.exit_code.unwrap_or(0),
                    reason_for(c.script.exit_code.unwrap_or(0)),
                )),
                (End::Exit { after, code }, None) => Some((*after, *code, reason_for(*code))),
                (End::Forever, None) => None,
            }
        };
        let end = match (natural, c.script.oom_after) {
            (Some(n), Some(oom)) if n.0 <= oom => Some(n),
            (_, Some(oom)) => Some((oom, 137, "OOMKilled")),
            (n, None) => n,
        };
        if let Some((after, code, reason)) = end {
            let sim = self.clone();
            let cid = id.to_owned();
            // Anchored now, not when the task first runs.
            let at = Instant::now() + after;
            let task = tokio::spawn(async move {
                tokio::time::sleep_until(at).await;
                let mut st = sim.inner.lock();
                sim.finish_locked(&mut st, &cid, code, reason);
            });
            c.timer = Some(task.abort_handle());
        }
        self.emit(
            &st,
            &sandbox_id,
            id,
            proto::ContainerEventType::ContainerStartedEvent,
        );
        Ok(())
    }

    /// `StopContainer`: SIGTERM, then SIGKILL after `timeout` seconds. Idempotent.
    pub(crate) async fn stop_container(&self, id: &str, timeout: i64) -> Result<(), Status> {
        self.enter("StopContainer").await?;
        let (mut exited, on_term, hang) = {
            let st = self.inner.lock();
            let c = st
                .containers
                .get(id)
                .ok_or_else(|| container_not_found(id))?;
            if c.state != ContainerState::ContainerRunning {
                return Ok(());
            }
            (c.exited.subscribe(), c.term_exit_code(), c.script.hang_stop)
        };
        if hang {
            std::future::pending::<()>().await;
        }
        if timeout > 0 {
            match on_term {
                Some(code) => {
                    let mut st = self.inner.lock();
                    self.finish_locked(&mut st, id, code, reason_for(code));
                    return Ok(());
                }
                None => {
                    let grace = Duration::from_secs(timeout.unsigned_abs());
                    let _ = tokio::time::timeout(grace, exited.wait_for(|done| *done)).await;
                }
            }
        }
        let mut st = self.inner.lock();
        self.finish_locked(&mut st, id, 137, "Error");
        Ok(())
    }

    /// `RemoveContainer`: kills it if it runs. Idempotent.
    pub(crate) async fn remove_container(&self, id: &str) -> Result<(), Status> {
        self.enter("RemoveContainer").await?;
        let mut st = self.inner.lock();
        if st.containers.contains_key(id) {
            self.finish_locked(&mut st, id, 137, "Error");
            self.remove_locked(&mut st, id);
        }
        Ok(())
    }

    /// `ListContainers`.
    pub(crate) async fn list_containers(
        &self,
        filter: Option<proto::ContainerFilter>,
    ) -> Result<Vec<proto::Container>, Status> {
        self.enter("ListContainers").await?;
        let st = self.inner.lock();
        let filter = filter.unwrap_or_default();
        Ok(matching_containers(&st, &filter)
            .into_iter()
            .map(Container::summary)
            .collect())
    }

    /// `ListContainers` with no filter, in lean form.
    pub async fn list_containers_lean(&self) -> Result<Vec<ListedContainer>, Status> {
        self.enter("ListContainers").await?;
        let st = self.inner.lock();
        Ok(st.containers.values().map(|c| c.listed.clone()).collect())
    }

    /// `ListContainers`, answered in wire form from each container's cached encoding.
    pub async fn list_containers_encoded(
        &self,
        filter: Option<proto::ContainerFilter>,
    ) -> Result<EncodedList, Status> {
        self.enter("ListContainers").await?;
        let st = self.inner.lock();
        let filter = filter.unwrap_or_default();
        let parts = matching_containers(&st, &filter)
            .into_iter()
            .map(|c| c.encoded.clone())
            .collect();
        Ok(EncodedList { parts })
    }

    /// `ContainerStatus`.
    pub(crate) async fn container_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> Result<proto::ContainerStatusResponse, Status> {
        self.enter("ContainerStatus").await?;
        let st = self.inner.lock();
        let c = st
            .containers
            .get(id)
            .ok_or_else(|| container_not_found(id))?;
        let info = if verbose {
            BTreeMap::from([(
                "info".to_string(),
                format!("{{\"sandboxID\":{:?},\"pid\":0}}", c.sandbox_id),
            )])
        } else {
            BTreeMap::new()
        };
        Ok(proto::ContainerStatusResponse {
            status: Some(c.status()),
            info,
        })
    }

    /// `UpdateContainerResources`.
    pub(crate) async fn update_container_resources(
        &self,
        id: &str,
        resources: Option<proto::LinuxContainerResources>,
    ) -> Result<(), Status> {
        self.enter("UpdateContainerResources").await?;
        let mut st = self.inner.lock();
        let c = st
            .containers
            .get_mut(id)
            .ok_or_else(|| container_not_found(id))?;
        if c.state == ContainerState::ContainerExited {
            return Err(unknown(format!(
                "failed to update resources: container {id:?} is in CONTAINER_EXITED state"
            )));
        }
        let linux = c.config.linux.get_or_insert_with(Default::default);
        linux.resources = resources;
        Ok(())
    }

    /// `ExecSync`: predicts the command's output and exit code, taking as long as the
    /// command would.
    pub(crate) async fn exec_sync(
        &self,
        id: &str,
        cmd: &[String],
        timeout_secs: i64,
    ) -> Result<proto::ExecSyncResponse, Status> {
        self.enter("ExecSync").await?;
        let (program, latency) = self
            .exec_program(id, cmd)
            .map_err(|e| e.status("failed to exec in container: "))?;
        let limit = (timeout_secs > 0).then(|| Duration::from_secs(timeout_secs.unsigned_abs()));
        let (took, code) = match program.end {
            End::Exit { after, code } => (Some(after + latency), code),
            End::Forever => (None, 0),
        };
        match (took, limit) {
            (Some(took), Some(limit)) if took <= limit => tokio::time::sleep(took).await,
            (Some(took), None) => tokio::time::sleep(took).await,
            (_, Some(limit)) => {
                tokio::time::sleep(limit).await;
                return Err(Status::deadline_exceeded(format!(
                    "failed to exec in container: timeout {timeout_secs}s exceeded: context deadline exceeded"
                )));
            }
            (None, None) => std::future::pending::<()>().await,
        }
        Ok(proto::ExecSyncResponse {
            stdout: program.stdout,
            stderr: program.stderr,
            exit_code: code,
        })
    }

    /// `GetContainerEvents`: a receiver of every event from now on.
    pub(crate) async fn container_events(
        &self,
    ) -> Result<broadcast::Receiver<proto::ContainerEventResponse>, Status> {
        self.enter("GetContainerEvents").await?;
        Ok(self.inner.events.subscribe())
    }

    // ------------------------------------------------------------ images

    /// `ListImages`.
    pub(crate) async fn list_images(
        &self,
        filter: Option<proto::ImageFilter>,
    ) -> Result<Vec<proto::Image>, Status> {
        self.enter("ListImages").await?;
        let st = self.inner.lock();
        let wanted = filter
            .and_then(|f| f.image)
            .map(|i| i.image)
            .filter(|i| !i.is_empty());
        Ok(match wanted {
            Some(reference) => st
                .images
                .resolve(&reference)
                .map(|i| i.to_proto())
                .into_iter()
                .collect(),
            None => st.images.all().map(|i| i.to_proto()).collect(),
        })
    }

    /// `ImageStatus`.
    pub(crate) async fn image_status(
        &self,
        image: Option<proto::ImageSpec>,
    ) -> Result<Option<proto::Image>, Status> {
        self.enter("ImageStatus").await?;
        let reference = image.map(|i| i.image).unwrap_or_default();
        Ok(self
            .inner
            .lock()
            .images
            .resolve(&reference)
            .map(|i| i.to_proto()))
    }

    /// `PullImage`: any reference whose registry host ends in `.invalid` fails like an
    /// unresolvable registry; anything else "downloads" (after the method's latency).
    pub(crate) async fn pull_image(
        &self,
        image: Option<proto::ImageSpec>,
    ) -> Result<String, Status> {
        self.enter("PullImage").await?;
        let reference = image.map(|i| i.image).unwrap_or_default();
        if reference.is_empty() {
            return Err(Status::invalid_argument(
                "image reference must not be empty",
            ));
        }
        let normalized = normalize_reference(&reference);
        let host = normalized.split('/').next().unwrap_or_default();
        if host.ends_with(".invalid") {
            return Err(unknown(format!(
                "failed to pull and unpack image {normalized:?}: failed to resolve reference {normalized:?}: \
                 failed to do request: Head \"https://{host}/v2/\": dial tcp: lookup {host}: no such host"
            )));
        }
        let mut st = self.inner.lock();
        if let Some(existing) = st.images.resolve(&reference) {
            return Ok(existing.id.clone());
        }
        Ok(st.images.add(&reference, vec!["sh".into()], None))
    }

    /// `RemoveImage`. Idempotent.
    pub(crate) async fn remove_image(&self, image: Option<proto::ImageSpec>) -> Result<(), Status> {
        self.enter("RemoveImage").await?;
        let reference = image.map(|i| i.image).unwrap_or_default();
        self.inner.lock().images.remove(&reference);
        Ok(())
    }

    // ------------------------------------------------------------ internals

    /// What an exec of `cmd` in the running container `id` runs, with the script's
    /// forced exit code applied, and the script's exec latency: one answer for ExecSync
    /// and a streamed Exec alike.
    fn exec_program(&self, id: &str, cmd: &[String]) -> Result<(Program, Duration), NotRunning> {
        let st = self.inner.lock();
        let c = running_locked(&st, id)?;
        let ran = c.started.map(|s| s.elapsed()).unwrap_or_default();
        let mut program = shell::interpret(cmd, &c.files_at(ran), Mode::Exec);
        let forced = match (c.script.exec_exit, c.script.exec_fail_after) {
            (_, Some(after)) if ran >= after => Some(1),
            (code, _) => code,
        };
        if let (Some(code), End::Exit { after, .. }) = (forced, &program.end) {
            program.end = End::Exit {
                after: *after,
                code,
            };
        }
        Ok((program, c.script.exec_latency.unwrap_or_default()))
    }

    /// Marks a running container exited (no-op otherwise) and announces it.
    fn finish_locked(&self, st: &mut State, id: &str, code: i32, reason: &str) {
        let now = self.inner.clock.now();
        let Some(c) = st.containers.get_mut(id) else {
            return;
        };
        if c.state != ContainerState::ContainerRunning {
            return;
        }
        c.state = ContainerState::ContainerExited;
        c.finished_at = now;
        c.exit_code = code;
        c.reason = reason.to_owned();
        c.reencode();
        c.exited.send_replace(true);
        if let Some(timer) = c.timer.take() {
            timer.abort();
        }
        let sandbox_id = c.sandbox_id.clone();
        self.emit(
            st,
            &sandbox_id,
            id,
            proto::ContainerEventType::ContainerStoppedEvent,
        );
    }

    fn remove_locked(&self, st: &mut State, id: &str) {
        let Some(c) = st.containers.remove(id) else {
            return;
        };
        if let Some(timer) = &c.timer {
            timer.abort();
        }
        st.names.remove(&c.name);
        if let Some(sandbox) = st.sandboxes.get_mut(&c.sandbox_id) {
            sandbox.containers.retain(|x| x != id);
        }
        self.emit(
            st,
            &c.sandbox_id,
            id,
            proto::ContainerEventType::ContainerDeletedEvent,
        );
    }

    /// Publishes an event about `container_id` (a container, or the sandbox itself).
    fn emit(
        &self,
        st: &State,
        sandbox_id: &str,
        container_id: &str,
        kind: proto::ContainerEventType,
    ) {
        if self.inner.events.receiver_count() == 0 {
            return;
        }
        let sandbox = st.sandboxes.get(sandbox_id);
        let event = proto::ContainerEventResponse {
            container_id: container_id.to_owned(),
            container_event_type: kind as i32,
            created_at: self.inner.clock.now(),
            pod_sandbox_status: sandbox.map(Sandbox::status),
            containers_statuses: sandbox
                .map(|s| {
                    s.containers
                        .iter()
                        .filter_map(|c| st.containers.get(c))
                        .map(Container::status)
                        .collect()
                })
                .unwrap_or_default(),
        };
        // No receiver left is not an error: events are best effort by contract.
        let _ = self.inner.events.send(event);
    }
}

/// Why a container cannot be exec'd into or attached to.
enum NotRunning {
    /// No such container.
    Unknown(Status),
    /// It is in this state.
    State(&'static str),
}

impl NotRunning {
    /// The runtime's answer, its message after `prefix` (each call words it its own way).
    fn status(self, prefix: &str) -> Status {
        match self {
            NotRunning::Unknown(s) => s,
            NotRunning::State(state) => unknown(format!("{prefix}container is in {state} state")),
        }
    }
}

/// The container `id`, if it runs.
fn running_locked<'a>(st: &'a State, id: &str) -> Result<&'a Container, NotRunning> {
    let c = st
        .containers
        .get(id)
        .ok_or_else(|| NotRunning::Unknown(container_not_found(id)))?;
    if c.state != ContainerState::ContainerRunning {
        return Err(NotRunning::State(state_name(c.state)));
    }
    Ok(c)
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // State is updated field by field under the lock; a panic mid-update would be a
        // simulator bug that the next assertion reveals, so keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn faults(&self) -> MutexGuard<'_, Faults> {
        self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A list answer in wire form: the encoded items of a `List*Response`'s repeated
/// field 1, in order. [`crate::fastlist`] writes them out as the response message.
#[derive(Debug, Clone, Default)]
pub struct EncodedList {
    /// One encoded `PodSandbox` or `Container` per item.
    pub parts: Vec<Bytes>,
}

fn matching_sandboxes<'a>(
    st: &'a State,
    filter: &'a proto::PodSandboxFilter,
) -> impl Iterator<Item = &'a Sandbox> {
    let id = resolve_id(&filter.id, &st.sandboxes);
    st.sandboxes
        .values()
        .filter(move |s| id.as_deref().is_none_or(|id| s.id == id))
        .filter(|s| {
            filter
                .state
                .as_ref()
                .is_none_or(|v| v.state == s.state as i32)
        })
        .filter(|s| selector_matches(&filter.label_selector, &s.config.labels))
}

fn matching_containers<'a>(st: &'a State, filter: &proto::ContainerFilter) -> Vec<&'a Container> {
    let id = resolve_id(&filter.id, &st.containers);
    let sandbox = resolve_id(&filter.pod_sandbox_id, &st.sandboxes);
    let matches = |c: &&Container| {
        id.as_deref().is_none_or(|id| c.id == id)
            && sandbox.as_deref().is_none_or(|s| c.sandbox_id == s)
            && filter
                .state
                .as_ref()
                .is_none_or(|v| v.state == c.state as i32)
            && selector_matches(&filter.label_selector, &c.config.labels)
    };
    // With a sandbox filter, walk only that sandbox's containers.
    match &sandbox {
        Some(sid) => st
            .sandboxes
            .get(sid)
            .map(|s| {
                s.containers
                    .iter()
                    .filter_map(|c| st.containers.get(c))
                    .filter(matches)
                    .collect()
            })
            .unwrap_or_default(),
        None => st.containers.values().filter(matches).collect(),
    }
}

/// An exact id, or the one id that starts with `prefix` (containerd's truncated ids).
/// `None` for an empty filter; `Some(prefix)` unchanged when nothing (or several) match,
/// so that the filter matches nothing.
fn resolve_id<V>(prefix: &str, map: &HashMap<String, V>) -> Option<String> {
    if prefix.is_empty() {
        return None;
    }
    if map.contains_key(prefix) {
        return Some(prefix.to_owned());
    }
    let mut found = map.keys().filter(|k| k.starts_with(prefix));
    match (found.next(), found.next()) {
        (Some(one), None) => Some(one.clone()),
        _ => Some(prefix.to_owned()),
    }
}

fn network_mode(config: &proto::PodSandboxConfig) -> proto::NamespaceMode {
    config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref())
        .map(|n| n.network())
        .unwrap_or(proto::NamespaceMode::Pod)
}

impl Sandbox {
    fn status(&self) -> proto::PodSandboxStatus {
        let options = self
            .config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.clone())
            .unwrap_or_default();
        proto::PodSandboxStatus {
            id: self.id.clone(),
            metadata: self.config.metadata.clone(),
            state: self.state as i32,
            created_at: self.created_at,
            network: Some(proto::PodSandboxNetworkStatus {
                ip: self.ip.map(|ip| ip.to_string()).unwrap_or_default(),
                additional_ips: Vec::new(),
            }),
            linux: Some(proto::LinuxPodSandboxStatus {
                namespaces: Some(proto::Namespace {
                    options: Some(options),
                }),
            }),
            labels: self.config.labels.clone(),
            annotations: self.config.annotations.clone(),
            runtime_handler: self.runtime_handler.clone(),
        }
    }

    fn reencode(&mut self) {
        self.encoded = self.summary().encode_to_vec().into();
        self.listed = ListedSandbox::decode(self.encoded.clone()).unwrap_or_default();
    }

    fn summary(&self) -> proto::PodSandbox {
        proto::PodSandbox {
            id: self.id.clone(),
            metadata: self.config.metadata.clone(),
            state: self.state as i32,
            created_at: self.created_at,
            labels: self.config.labels.clone(),
            annotations: self.config.annotations.clone(),
            runtime_handler: self.runtime_handler.clone(),
        }
    }
}

impl Container {
    /// The exit code SIGTERM produces, or `None` when the process ignores it.
    fn term_exit_code(&self) -> Option<i32> {
        match self.script.on_term {
            Some(scripted) => scripted,
            None => self
                .program
                .on_term
                .or(if self.pid1 { None } else { Some(143) }),
        }
    }

    /// The container's files after it has run for `ran`.
    fn files_at(&self, ran: Duration) -> Files {
        let mut files = Files::default();
        for (_, effect) in self.program.effects.iter().filter(|(at, _)| *at <= ran) {
            files.apply(effect);
        }
        files
    }

    fn status(&self) -> proto::ContainerStatus {
        proto::ContainerStatus {
            id: self.id.clone(),
            metadata: self.config.metadata.clone(),
            state: self.state as i32,
            created_at: self.created_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            exit_code: self.exit_code,
            image: self.config.image.clone(),
            image_ref: self.image_ref.clone(),
            reason: self.reason.clone(),
            message: self.message.clone(),
            labels: self.config.labels.clone(),
            annotations: self.config.annotations.clone(),
            mounts: self.config.mounts.clone(),
            log_path: self.log_path.clone(),
            resources: Some(proto::ContainerResources {
                linux: Some(
                    self.config
                        .linux
                        .as_ref()
                        .and_then(|l| l.resources.clone())
                        .unwrap_or_default(),
                ),
            }),
            ..Default::default()
        }
    }

    fn reencode(&mut self) {
        self.encoded = self.summary().encode_to_vec().into();
        self.listed = ListedContainer::decode(self.encoded.clone()).unwrap_or_default();
    }

    fn summary(&self) -> proto::Container {
        proto::Container {
            id: self.id.clone(),
            pod_sandbox_id: self.sandbox_id.clone(),
            metadata: self.config.metadata.clone(),
            image: self.config.image.clone(),
            image_ref: self.image_ref.clone(),
            state: self.state as i32,
            created_at: self.created_at,
            labels: self.config.labels.clone(),
            annotations: self.config.annotations.clone(),
            image_id: String::new(),
        }
    }
}
