//! Probe handlers: components of the `probe-handler` world, each check in a fresh
//! instance (checks are seconds apart; nothing a check leaves behind reaches the next,
//! and no socket outlives its check).
//!
//! Capabilities are granted per handler ([`Grants`]): `exec` in the probed container
//! through the runtime, and TCP and HTTP (`wasi:sockets`, `wasi:http`) to the addresses
//! granted (`pod` = the probed pod's own address, or CIDRs). Everything else is refused —
//! a connect to an address not granted fails inside the guest with "access denied", a
//! request with `HTTP-request-denied`. HTTPS peers are not verified, as the kubelet's
//! probes do not verify them (see [`crate::http`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::sockets::SocketAddrUse;

use crate::backend::World;
use crate::call::plugin_store;
use crate::engine::PluginEngine;
use crate::error::PluginError;
use crate::host::PluginState;
use crate::http::{HttpAccess, TlsVerification};
use crate::limits::Limits;
use crate::loaded::{CallResult, Loaded, Plugin};
use crate::world::probe as bindings;

pub(crate) mod exec;

pub use bindings::exports::wasmlet::plugin::probe::{
    Action, GrpcAction, HttpGetAction, Outcome, ProbeKind, Target, TcpSocketAction,
};
pub use exec::{ContainerExec, ExecOutput};

/// How long past the probe's timeout a check may run before it is cut off.
pub const PROBE_GRACE: Duration = Duration::from_millis(500);

pub use crate::network::NetworkGrant;

/// What a handler may use besides computing. Nothing by default.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// Run commands in the probed container.
    pub exec: bool,
    /// Open TCP connections and send HTTP requests to these addresses.
    pub network: Vec<NetworkGrant>,
}

impl bindings::wasmlet::plugin::exec::Host for PluginState {
    async fn exec_sync(
        &mut self,
        command: Vec<String>,
        timeout_ms: u32,
    ) -> Result<ExecOutput, String> {
        let Some(exec) = self.exec.clone() else {
            return Err(format!(
                "exec is not granted to plugin {} (grant it in its configuration)",
                self.plugin
            ));
        };
        exec.exec_sync(command, Duration::from_millis(u64::from(timeout_ms)))
            .await
    }
}

/// A loaded probe handler.
pub struct ProbeHandler {
    loaded: Loaded,
    pre: bindings::ProbeHandlerPre<PluginState>,
    grants: Grants,
}

impl Plugin for ProbeHandler {
    fn loaded(&self) -> &Loaded {
        &self.loaded
    }
}

impl std::fmt::Debug for ProbeHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeHandler")
            .field("name", &self.name())
            .field("grants", &self.grants)
            .finish()
    }
}

impl PluginEngine {
    /// Compiles the component at `path` as probe handler `name`, checking that it
    /// implements the `probe-handler` world. A check's deadline is the probe's own
    /// timeout plus [`PROBE_GRACE`]; `limits.deadline` does not apply.
    pub fn load_probe(
        &self,
        name: &str,
        path: &Path,
        config: BTreeMap<String, String>,
        limits: Limits,
        grants: Grants,
    ) -> Result<ProbeHandler, PluginError> {
        let (loaded, pre) = self.load_as(
            name,
            path,
            World::Probe,
            config,
            limits,
            bindings::ProbeHandlerPre::new,
        )?;
        Ok(ProbeHandler {
            loaded,
            pre,
            grants,
        })
    }
}

impl ProbeHandler {
    /// Makes one check in a fresh instance, cut off at the probe's timeout plus
    /// [`PROBE_GRACE`]. `exec` runs commands in the probed container; it reaches the
    /// guest only if the handler is granted `exec`.
    pub async fn check(
        &self,
        target: &Target,
        exec: Option<Arc<dyn ContainerExec>>,
    ) -> Result<Outcome, PluginError> {
        const CALL: &str = "check";
        let started = Instant::now();
        // The handler bounds its own work by the probe's timeout (a connect, an exec);
        // the call's deadline, a little later, only stops a handler that does not.
        let timeout = Duration::from_millis(u64::from(target.timeout_ms.max(1)));
        let deadline = timeout + PROBE_GRACE;
        let _running = self.loaded.running();
        let mut store = plugin_store(&self.loaded.engine, self.state(target, exec, deadline));
        let result = async {
            let handler = self.pre.instantiate_async(&mut store).await?;
            self.loaded.instantiated(started);
            handler
                .wasmlet_plugin_probe()
                .call_check(&mut store, target)
                .await
        }
        .await;
        let result = self
            .loaded
            .finish(&mut store, CALL, deadline, result)
            .map(|outcome| match outcome {
                Outcome::Error(why) => Outcome::Error(self.loaded.in_authors_words(why)),
                other => other,
            });
        self.loaded.record(
            started,
            match &result {
                Ok(Outcome::Success(_)) => CallResult::Passed,
                Ok(Outcome::Failure(_)) => CallResult::Failed,
                Ok(Outcome::Error(_)) | Err(_) => CallResult::Error,
            },
        );
        result
    }

    fn state(
        &self,
        target: &Target,
        exec: Option<Arc<dyn ContainerExec>>,
        deadline: Duration,
    ) -> PluginState {
        let mut wasi = WasiCtxBuilder::new();
        let mut access = None;
        if !self.grants.network.is_empty() {
            let pod_ip = target.pod_ip.parse::<IpAddr>().ok();
            access = Some(Arc::new(HttpAccess {
                network: self.grants.network.clone(),
                pod_ip,
                urls: Vec::new(),
                tls: TlsVerification::Skip,
            }));
            let grants = self.grants.network.clone();
            let plugin = self.name().to_owned();
            // Names may be looked up (a handler's code connects as any program does);
            // what it reaches is still only the addresses granted.
            wasi.allow_tcp(true)
                .allow_udp(false)
                .allow_ip_name_lookup(true)
                .socket_addr_check(move |addr, use_| {
                    // Connecting binds an ephemeral local port first (0.0.0.0:0); that
                    // reaches nothing. Every address the guest talks to must be granted.
                    let ephemeral = matches!(use_, SocketAddrUse::TcpBind)
                        && addr.port() == 0
                        && addr.ip().is_unspecified();
                    let ok = ephemeral || grants.iter().any(|g| g.contains(addr.ip(), pod_ip));
                    if !ok {
                        tracing::warn!(%plugin, %addr, "a probe handler's connection refused: the address is outside its network grant");
                    }
                    Box::pin(async move { ok })
                });
        }
        let mut state = self.loaded.state(deadline, Some(wasi));
        state.exec = exec.filter(|_| self.grants.exec);
        state.http_hooks.access = access;
        state
    }
}
