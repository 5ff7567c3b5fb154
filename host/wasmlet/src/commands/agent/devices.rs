//! The device plugins' manager: served on `devicePluginDir/kubelet.sock` while the agent
//! runs, its resources in the node status.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::error;
use wasmlet_devices::Manager;
use wasmlet_devices::registration::{bind, serve};

use crate::config::Config;

/// Serves device plugin registrations, unless `devicePluginDir` is empty. A socket
/// that cannot be served is an error in the log naming it, and the node runs on
/// without device plugins (its static pods do not wait on them).
pub(super) fn start(config: &Config, stopped: CancellationToken) -> Option<Arc<Manager>> {
    let dir = config.device_plugin_dir.as_ref()?;
    let listener = match bind(dir) {
        Ok(l) => l,
        Err(e) => {
            error!(error = %e, "device plugins are off: their registration socket cannot be served");
            return None;
        }
    };
    let manager = Manager::new(dir);
    let serving = manager.clone();
    tokio::spawn(async move {
        let until = async move {
            stopped.cancelled().await;
        };
        if let Err(e) = serve(serving, listener, until).await {
            error!(error = %e, "device plugin registrations stopped");
        }
    });
    Some(manager)
}

/// The devices as the node status carries them.
pub(super) fn for_status(manager: Option<&Manager>) -> wasmlet_cluster::node::Devices {
    let Some(m) = manager else {
        return wasmlet_cluster::node::Devices::default();
    };
    let c = m.capacity();
    wasmlet_cluster::node::Devices {
        capacity: c.capacity,
        allocatable: c.allocatable,
        removed: c.removed,
    }
}
