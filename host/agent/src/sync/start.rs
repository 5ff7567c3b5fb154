//! Starting what a sync asks for: the sandbox, containers (with CrashLoopBackOff, the
//! container's configuration, the image, the postStart hook) and images per pull policy.

use k8s_openapi::api::core::v1 as k8s;
use tokio::time::Instant;
use tracing::{debug, info, warn};
use wasmlet_cri::CriRuntime;
use wasmlet_cri::proto::{self, ImageSpec};

use super::{ERROR_RETRY, NotStarted, POST_START_TIMEOUT, SyncContext, ahead, pacing, waiting};
use crate::criconfig;
use crate::events::Event;
use wasmlet_core::pod::{self, PodKey};
use wasmlet_core::runtime::{PodRuntime, Sandbox, State};
use wasmlet_core::status::Waiting;

impl<R: CriRuntime + 'static> SyncContext<R> {
    pub(super) async fn create_sandbox(
        &self,
        pod: &k8s::Pod,
        config: &proto::PodSandboxConfig,
    ) -> Result<(String, String, Option<Sandbox>), String> {
        criconfig::kernel_hostname(pod, &self.node).map_err(|e| e.to_string())?;
        let _ = std::fs::create_dir_all(&config.log_directory);
        if let Some(cgroups) = &self.node.pod_cgroups {
            // The kubelet's words when its pod cgroup cannot be made.
            cgroups.ensure(pod).await.map_err(|e| {
                format!(
                    "failed to ensure that the pod: {} cgroups exist and are correctly applied: {e}",
                    pod::uid(pod)
                )
            })?;
        }
        let handler = pod
            .spec
            .as_ref()
            .and_then(|s| s.runtime_class_name.clone())
            .unwrap_or_default();
        let id = self
            .pacer
            .run(
                pacing::Step::Sandbox,
                self.runtime.run_pod_sandbox(config.clone(), &handler),
            )
            .await
            .map_err(|e| e.to_string())?;
        // Read once: its IP for the containers' environment, and the sandbox for the
        // status (the read back after the sync takes it from here).
        let status = self
            .runtime
            .pod_sandbox_status(&id, false)
            .await
            .ok()
            .and_then(|s| s.status);
        let sandbox = status
            .as_ref()
            .map(wasmlet_core::runtime::sandbox_from_status);
        let ip = match (&status, pod::host_network(pod)) {
            (Some(st), false) => st
                .network
                .as_ref()
                .map(|n| n.ip.clone())
                .unwrap_or_default(),
            _ => String::new(),
        };
        info!(pod = %PodKey::of(pod), sandbox = %id, ip = %ip, "created pod sandbox");
        Ok((id, ip, sandbox))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn start_container(
        &self,
        pod: &k8s::Pod,
        c: &k8s::Container,
        init: bool,
        rt: &PodRuntime,
        (sandbox_id, sandbox_config): (&str, &proto::PodSandboxConfig),
        pod_ip: &str,
        ahead: &ahead::Ahead,
    ) -> Result<String, NotStarted> {
        let previous = rt.latest(&c.name);
        // The crash-loop back-off advances when a container is about to be created
        // again, not when the agent could not even make its configuration: a
        // configuration of the agent's own that fails is not the container's crash.
        let restarting = self.crash_loop_gate(pod, c, rt.latest_exited(&c.name))?;
        let restart_count = previous.map_or(0, |p| p.restart_count + 1);
        let ahead::Ahead { env, present } = ahead;
        self.ensure_image(pod, c, present).await?;
        let retry = Instant::now() + ERROR_RETRY;
        let failed = |reason: &str, message: String| {
            // The kubelet's event for a container it could not create: `Failed`.
            self.events.record(Event::warning(
                pod,
                Some(&c.name),
                "Failed",
                format!("Error: {message}"),
            ));
            NotStarted {
                waiting: waiting(reason, message),
                retry,
                created: None,
            }
        };
        let mut config =
            criconfig::container_config_with(pod, c, init, restart_count, pod_ip, &self.node, env)
                .map_err(|e| {
                    self.failed_mount(pod, &e);
                    failed("CreateContainerConfigError", e.to_string())
                })?;
        share_target_pid(pod, c, rt, &mut config)
            .map_err(|message| failed("CreateContainerConfigError", message))?;
        if let Some(devices) = &self.devices {
            let options = devices.container_options(pod, c).await;
            let options =
                options.map_err(|e| failed("CreateContainerConfigError", e.to_string()))?;
            if let Some(options) = options {
                options.apply(&mut config);
            }
        }
        if let Some((backoff_key, failed_at)) = restarting {
            Self::lock(&self.crash_backoff).next(&backoff_key, failed_at);
        }
        let log = criconfig::log_directory(pod, &self.node).join(&config.log_path);
        let id = self
            .pacer
            .run(
                pacing::Step::Create,
                self.runtime
                    .create_container(sandbox_id, config, sandbox_config.clone()),
            )
            .await
            .map_err(|e| {
                self.metrics.start_errors.inc();
                failed("CreateContainerError", e.message().to_owned())
            })?;
        self.events.record(Event::normal(
            pod,
            Some(&c.name),
            "Created",
            format!("Created container: {}", c.name),
        ));
        // What it was created with is what it has: a resize starts from there.
        let given = wasmlet_core::resize::Amounts::of(c.resources.as_ref());
        self.allocations.set_actuated(pod::uid(pod), &c.name, given);
        let not_started = |waiting: Waiting| NotStarted {
            waiting,
            retry,
            created: Some(id.clone()),
        };
        self.run_created(pod, c, &id, &log, restart_count)
            .await
            .map_err(not_started)?;
        self.post_start(pod, c, &id, pod_ip)
            .await
            .map_err(not_started)?;
        Ok(id)
    }

    /// A volume the container's configuration could not set up: the kubelet's
    /// FailedMount event.
    fn failed_mount(&self, pod: &k8s::Pod, e: &criconfig::ConfigError) {
        if e.is_volume() {
            self.events.record(Event::warning(
                pod,
                None,
                "FailedMount",
                format!("MountVolume.SetUp failed: {e}"),
            ));
        }
    }

    /// Starts the created container `id` and links its log; else why it waits
    /// (`RunContainerError`).
    async fn run_created(
        &self,
        pod: &k8s::Pod,
        c: &k8s::Container,
        id: &str,
        log: &std::path::Path,
        restart_count: i32,
    ) -> Result<(), Waiting> {
        if let Err(e) = self
            .pacer
            .run(pacing::Step::Start, self.runtime.start_container(id))
            .await
        {
            self.metrics.start_errors.inc();
            self.events.record(Event::warning(
                pod,
                Some(&c.name),
                "Failed",
                format!("Error: {}", e.message()),
            ));
            return Err(waiting("RunContainerError", e.message().to_owned()));
        }
        self.link_log(pod, c, id, log);
        self.metrics.started_containers.inc();
        info!(pod = %PodKey::of(pod), container = %c.name, id = %id, restart_count, "started container");
        self.events.record(Event::normal(
            pod,
            Some(&c.name),
            "Started",
            format!("Started container {}", c.name),
        ));
        Ok(())
    }

    /// Runs the container's postStart hook, if it has one; a failed hook stops the
    /// container (`PostStartHookError`, as the kubelet).
    async fn post_start(
        &self,
        pod: &k8s::Pod,
        c: &k8s::Container,
        id: &str,
        pod_ip: &str,
    ) -> Result<(), Waiting> {
        let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) else {
            return Ok(());
        };
        let Err(message) = self
            .ops
            .run_hook(pod, c, hook, id, pod_ip, POST_START_TIMEOUT)
            .await
        else {
            return Ok(());
        };
        warn!(pod = %PodKey::of(pod), container = %c.name, "PostStartHook failed: {message}");
        self.events.record(Event::warning(
            pod,
            Some(&c.name),
            "FailedPostStartHook",
            message.clone(),
        ));
        let _ = self
            .runtime
            .stop_container(id, pod::grace_seconds(pod))
            .await;
        Err(waiting("PostStartHookError", message))
    }

    /// Links the container's log where log shippers read the kubelet's
    /// (`/var/log/containers`), once the log is there, as the kubelet does.
    fn link_log(&self, pod: &k8s::Pod, c: &k8s::Container, id: &str, log: &std::path::Path) {
        if !log.exists() {
            return;
        }
        let key = PodKey::of(pod);
        let link =
            criconfig::legacy_log_symlink(&self.node, (&key.name, &key.namespace), &c.name, id);
        if let Some(dir) = link.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::fs::remove_file(&link);
        if let Err(e) = std::os::unix::fs::symlink(log, &link) {
            debug!(pod = %key, container = %c.name, link = %link.display(), "log link not made: {e}");
        }
    }

    /// CrashLoopBackOff: a container that exited waits out its back-off before it is
    /// created again. `exited` is the newest instance that exited, as the kubelet's
    /// `doBackOff` looks for it: when a sync kills a running container (a failed
    /// liveness probe) and starts it again, the instance it measures from is the one
    /// before — so a container killed over and over backs off from its second kill on,
    /// as with the kubelet. `Ok(Some((key, finished)))`: it may restart now, and its
    /// back-off (under `key`) is to advance from its finish when it is created;
    /// `Ok(None)`: no instance exited before.
    fn crash_loop_gate(
        &self,
        pod: &k8s::Pod,
        c: &k8s::Container,
        exited: Option<&wasmlet_core::runtime::ContainerInfo>,
    ) -> Result<Option<(String, Instant)>, NotStarted> {
        let Some(prev) = exited else {
            return Ok(None);
        };
        let key = PodKey::of(pod);
        let backoff_key = format!("{}/{}", key.uid, c.name);
        let failed_at = self.clock.instant_of(if prev.finished_at > 0 {
            prev.finished_at
        } else {
            prev.created_at
        });
        let mut backoff = Self::lock(&self.crash_backoff);
        backoff.seed(
            &backoff_key,
            failed_at,
            u32::try_from(prev.restart_count).unwrap_or(0),
        );
        let Some(at) = backoff.retry_at(&backoff_key, failed_at, Instant::now()) else {
            return Ok(Some((backoff_key, failed_at)));
        };
        let delay = backoff.delay(&backoff_key).unwrap_or_default();
        self.events.record(Event::warning(
            pod,
            Some(&c.name),
            "BackOff",
            format!(
                "Back-off restarting failed container {} in pod {}_{}({})",
                c.name, key.name, key.namespace, key.uid
            ),
        ));
        Err(NotStarted {
            waiting: waiting(
                "CrashLoopBackOff",
                format!(
                    "back-off {}s restarting failed container={} pod={}_{}({})",
                    delay.as_secs(),
                    c.name,
                    key.name,
                    key.namespace,
                    key.uid
                ),
            ),
            retry: at,
            created: None,
        })
    }

    /// The container's image there per its pull policy: found, or pulled (with the
    /// kubelet's ImagePullBackOff between failed pulls); else why the container waits.
    /// `present`: the images this sync found present already (the others are asked for
    /// here).
    pub(super) async fn ensure_image(
        &self,
        pod: &k8s::Pod,
        c: &k8s::Container,
        present: &std::collections::HashSet<String>,
    ) -> Result<(), NotStarted> {
        let image = c.image.clone().unwrap_or_default();
        let policy = c.image_pull_policy.as_deref().unwrap_or("IfNotPresent");
        let spec = ImageSpec {
            image: image.clone(),
            ..Default::default()
        };
        let now = Instant::now();
        let not_started = |waiting: Waiting, retry: Instant| NotStarted {
            waiting,
            retry,
            created: None,
        };
        let looked_up = if present.contains(&image) {
            Ok(true)
        } else {
            self.runtime
                .image_status(spec.clone())
                .await
                .map(|s| s.is_some())
        };
        let present = match looked_up {
            Ok(p) => p,
            Err(e) => {
                let waiting = waiting("ErrImageInspect", e.message().to_owned());
                return Err(not_started(waiting, now + ERROR_RETRY));
            }
        };
        match policy {
            "Never" if !present => {
                let message =
                    format!("Container image \"{image}\" is not present with pull policy of Never");
                self.image_event(pod, c, Event::warning, "ErrImageNeverPull", message.clone());
                let waiting = waiting("ErrImageNeverPull", message);
                return Err(not_started(waiting, now + ERROR_RETRY));
            }
            "Never" | "IfNotPresent" if present => {
                let message = format!("Container image \"{image}\" already present on machine");
                self.image_event(pod, c, Event::normal, "Pulled", message);
                return Ok(());
            }
            _ => {}
        }
        let key = format!("{}/{image}", pod::uid(pod));
        let backing_off = Self::lock(&self.pull_backoff).retry_at(&key, now, now);
        if let Some(at) = backing_off {
            let message = format!("Back-off pulling image \"{image}\"");
            self.image_event(pod, c, Event::normal, "BackOff", message.clone());
            return Err(not_started(waiting("ImagePullBackOff", message), at));
        }
        self.pull(pod, c, spec, (&key, now))
            .await
            .map_err(|(waiting, retry)| not_started(waiting, retry))
    }

    /// Pulls the container's image (`key` its pull back-off's, counted from `now`); else
    /// why the container waits, and until when.
    async fn pull(
        &self,
        pod: &k8s::Pod,
        c: &k8s::Container,
        spec: ImageSpec,
        (key, now): (&str, Instant),
    ) -> Result<(), (Waiting, Instant)> {
        let image = spec.image.clone();
        let message = format!("Pulling image \"{image}\"");
        self.image_event(pod, c, Event::normal, "Pulling", message);
        let pulling = Instant::now();
        match self.runtime.pull_image(spec, None, None).await {
            Ok(_) => {
                Self::lock(&self.pull_backoff).reset(key);
                let message = format!(
                    "Successfully pulled image \"{image}\" in {:.3}s",
                    pulling.elapsed().as_secs_f64()
                );
                self.image_event(pod, c, Event::normal, "Pulled", message);
                Ok(())
            }
            Err(e) => {
                let message = format!("Failed to pull image \"{image}\": {}", e.message());
                self.image_event(pod, c, Event::warning, "Failed", message);
                let mut backoff = Self::lock(&self.pull_backoff);
                backoff.next(key, now);
                let delay = backoff.delay(key).unwrap_or(ERROR_RETRY);
                Err((waiting("ErrImagePull", e.message().to_owned()), now + delay))
            }
        }
    }

    fn image_event(
        &self,
        pod: &k8s::Pod,
        c: &k8s::Container,
        kind: fn(&k8s::Pod, Option<&str>, &str, String) -> Event,
        reason: &str,
        message: String,
    ) {
        self.events
            .record(kind(pod, Some(c.name.as_str()), reason, message));
    }
}

/// An ephemeral container aimed at another (`kubectl debug --target`) shares that
/// container's process namespace; it must be running.
fn share_target_pid(
    pod: &k8s::Pod,
    c: &k8s::Container,
    rt: &PodRuntime,
    config: &mut proto::ContainerConfig,
) -> Result<(), String> {
    let Some(target) = pod::ephemeral_target(pod, &c.name) else {
        return Ok(());
    };
    let Some(id) = rt
        .latest(target)
        .filter(|t| t.state == State::Running)
        .map(|t| t.id.clone())
    else {
        return Err(format!("target container \"{target}\" is not running"));
    };
    if let Some(ns) = config
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .and_then(|s| s.namespace_options.as_mut())
    {
        ns.pid = proto::NamespaceMode::Target as i32;
        ns.target_id = id;
    }
    Ok(())
}
