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

mod containers;
mod images;
mod sandboxes;
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

    /// `GetContainerEvents`: a receiver of every event from now on.
    pub(crate) async fn container_events(
        &self,
    ) -> Result<broadcast::Receiver<proto::ContainerEventResponse>, Status> {
        self.enter("GetContainerEvents").await?;
        Ok(self.inner.events.subscribe())
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
