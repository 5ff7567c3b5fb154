//! Containers: create, start (the image's script run as its program), stop with a
//! grace period, remove, status, lists, resource updates and ExecSync.

use super::*;

/// The container's name in its sandbox (`<name>_<pod>_<namespace>_<uid>_<attempt>`, as
/// containerd's CRI makes it) if it is free and the sandbox ready, with the sandbox's
/// annotations.
fn reserve_name(
    st: &State,
    sandbox_id: &str,
    meta: &proto::ContainerMetadata,
) -> Result<(String, BTreeMap<String, String>), Status> {
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
    let name = format!(
        "{}_{}_{}_{}_{}",
        meta.name, pod_meta.name, pod_meta.namespace, pod_meta.uid, meta.attempt
    );
    if let Some(holder) = st.names.get(&name) {
        return Err(unknown(format!(
            "failed to reserve container name {name:?}: name {name:?} is reserved for {holder:?}"
        )));
    }
    Ok((name, sandbox.config.annotations.clone()))
}

/// When a started container ends on its own, and how (after, exit code, reason): as
/// its script or program says, or OOM-killed first if its script says so.
fn planned_end(c: &Container) -> Option<(Duration, i32, &'static str)> {
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
    match (natural, c.script.oom_after) {
        (Some(n), Some(oom)) if n.0 <= oom => Some(n),
        (_, Some(oom)) => Some((oom, 137, "OOMKilled")),
        (n, None) => n,
    }
}

/// The container config CreateContainer needs, with its metadata and image, or the
/// runtime's InvalidArgument.
fn checked(
    config: Option<proto::ContainerConfig>,
) -> Result<(proto::ContainerConfig, proto::ContainerMetadata, String), Status> {
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
    Ok((config, meta, image_ref))
}

/// What the container runs: its command (else the image's) and arguments, read by the
/// simulator's shell.
fn program(config: &proto::ContainerConfig, image_cmd: &[String]) -> shell::Program {
    let mut argv: Vec<String> = if config.command.is_empty() {
        image_cmd.to_vec()
    } else {
        config.command.clone()
    };
    argv.extend(config.args.iter().cloned());
    shell::interpret(&argv, &Files::default(), Mode::Main)
}

/// Whether the container has a PID namespace of its own (its process is PID 1).
fn own_pid_namespace(config: &proto::ContainerConfig) -> bool {
    config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref())
        .is_some_and(|n| n.pid == proto::NamespaceMode::Container as i32)
}

/// The container's log: its path under the sandbox's log directory (none if unset).
fn log_path(sandbox: &proto::PodSandboxConfig, config: &proto::ContainerConfig) -> String {
    if config.log_path.is_empty() {
        return String::new();
    }
    format!(
        "{}/{}",
        sandbox.log_directory.trim_end_matches('/'),
        config.log_path
    )
}

impl Simulator {
    /// `CreateContainer`.
    pub(crate) async fn create_container(
        &self,
        sandbox_id: &str,
        config: Option<proto::ContainerConfig>,
    ) -> Result<String, Status> {
        self.enter("CreateContainer").await?;
        let (config, meta, image_ref) = checked(config)?;
        let id = self.inner.ids.next();
        let mut st = self.inner.lock();
        let (name, pod_annotations) = reserve_name(&st, sandbox_id, &meta)?;
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
        let program = program(&config, &image.cmd);
        let pid1 = own_pid_namespace(&config);
        let log_path = log_path(&st.sandboxes[sandbox_id].config, &config);
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
        let end = planned_end(c);
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
        // As containerd answers: the image by its first tag while the image is there
        // (whatever name the container was created with), else that name.
        let mut status = c.status();
        if let Some(tag) = st.images.resolve(&c.image_ref).and_then(|i| i.tags.first()) {
            status.image = Some(proto::ImageSpec {
                image: tag.clone(),
                ..Default::default()
            });
        }
        Ok(proto::ContainerStatusResponse {
            status: Some(status),
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
}

pub(super) fn matching_containers<'a>(
    st: &'a State,
    filter: &proto::ContainerFilter,
) -> Vec<&'a Container> {
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

impl Container {
    /// The exit code SIGTERM produces, or `None` when the process ignores it.
    pub(super) fn term_exit_code(&self) -> Option<i32> {
        match self.script.on_term {
            Some(scripted) => scripted,
            None => self
                .program
                .on_term
                .or(if self.pid1 { None } else { Some(143) }),
        }
    }

    /// The container's files after it has run for `ran`.
    pub(super) fn files_at(&self, ran: Duration) -> Files {
        let mut files = Files::default();
        for (_, effect) in self.program.effects.iter().filter(|(at, _)| *at <= ran) {
            files.apply(effect);
        }
        files
    }

    pub(super) fn status(&self) -> proto::ContainerStatus {
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

    pub(super) fn reencode(&mut self) {
        self.encoded = self.summary().encode_to_vec().into();
        self.listed = ListedContainer::decode(self.encoded.clone()).unwrap_or_default();
    }

    pub(super) fn summary(&self) -> proto::Container {
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
