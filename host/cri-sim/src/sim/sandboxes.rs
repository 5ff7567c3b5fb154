//! Pod sandboxes: RunPodSandbox (an IP from the pod network unless the host's), stop
//! and remove (idempotent, taking their containers with them), status and lists.

use super::*;

/// The sandbox config RunPodSandbox needs, with its metadata, for a runtime handler
/// there is; else the runtime's error.
fn checked(
    config: Option<proto::PodSandboxConfig>,
    runtime_handler: &str,
) -> Result<(proto::PodSandboxConfig, proto::PodSandboxMetadata), Status> {
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
    Ok((config, meta))
}

/// The first N runs of a pod's sandbox fail as a CNI failure would, when its
/// annotation `FAIL_RUN_SANDBOX_ANNOTATION` says N.
fn simulated_failure(
    st: &mut State,
    config: &proto::PodSandboxConfig,
    uid: &str,
    id: &str,
) -> Result<(), Status> {
    let Some(n) = config.annotations.get(FAIL_RUN_SANDBOX_ANNOTATION) else {
        return Ok(());
    };
    let n: u32 = n.parse().map_err(|_| {
        Status::invalid_argument(format!(
            "annotation {FAIL_RUN_SANDBOX_ANNOTATION}={n:?} is not a count"
        ))
    })?;
    let served = st.sandbox_failures.entry(uid.to_owned()).or_insert(0);
    if *served < n {
        *served += 1;
        return Err(unknown(format!(
            "failed to setup network for sandbox {id:?}: plugin type=\"bridge\" failed (add): \
             simulated failure {served} of {n}"
        )));
    }
    Ok(())
}

impl Simulator {
    /// `RunPodSandbox`.
    pub(crate) async fn run_pod_sandbox(
        &self,
        config: Option<proto::PodSandboxConfig>,
        runtime_handler: &str,
    ) -> Result<String, Status> {
        self.enter("RunPodSandbox").await?;
        let (config, meta) = checked(config, runtime_handler)?;
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
        simulated_failure(&mut st, &config, &meta.uid, &id)?;
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
}

pub(super) fn matching_sandboxes<'a>(
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

pub(super) fn network_mode(config: &proto::PodSandboxConfig) -> proto::NamespaceMode {
    config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref())
        .map(|n| n.network())
        .unwrap_or(proto::NamespaceMode::Pod)
}

impl Sandbox {
    pub(super) fn status(&self) -> proto::PodSandboxStatus {
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

    pub(super) fn reencode(&mut self) {
        self.encoded = self.summary().encode_to_vec().into();
        self.listed = ListedSandbox::decode(self.encoded.clone()).unwrap_or_default();
    }

    pub(super) fn summary(&self) -> proto::PodSandbox {
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
