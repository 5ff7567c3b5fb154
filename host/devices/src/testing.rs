//! A device plugin for tests (the `testing` feature): a real gRPC server on a unix socket in the device
//! plugin directory that registers with the manager's `kubelet.sock`, as the e2e_node
//! suite's test plugin does — its calls recorded, its devices' health changed at will,
//! its options and failures chosen by the test.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::proto;
use crate::proto::device_plugin_server::{DevicePlugin, DevicePluginServer};
use crate::proto::registration_client::RegistrationClient;
use crate::registration::{SOCKET, VERSION, dial};
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

/// What the plugin does.
#[derive(Clone, Default)]
pub struct Behaviour {
    /// GetDevicePluginOptions fails with this.
    pub options_fail: Option<String>,
    /// ListAndWatch fails at once with this.
    pub list_fails: Option<String>,
    /// The options it answers with.
    pub options: proto::DevicePluginOptions,
    /// The devices it would rather give, in order.
    pub preferred: Vec<String>,
}

struct Shared {
    calls: Mutex<Vec<String>>,
    devices: watch::Sender<Vec<(String, bool)>>,
    behaviour: Behaviour,
    allocated: Mutex<Vec<Vec<String>>>,
    pre_started: Mutex<Vec<Vec<String>>>,
    /// Cancelled when the plugin stops: its server and streams end.
    stopped: CancellationToken,
}

/// A running test plugin.
pub struct TestPlugin {
    shared: Arc<Shared>,
    served: Option<tokio::task::JoinHandle<()>>,
    /// Its socket's name in the directory.
    pub endpoint: String,
}

#[derive(Clone)]
struct Service(Arc<Shared>);

impl Shared {
    fn called(&self, what: &str) {
        self.calls.lock().expect("calls").push(what.to_owned());
    }
}

fn list(devices: &[(String, bool)]) -> proto::ListAndWatchResponse {
    proto::ListAndWatchResponse {
        devices: devices
            .iter()
            .map(|(id, ok)| proto::Device {
                id: id.clone(),
                health: if *ok { "Healthy" } else { "Unhealthy" }.into(),
                topology: None,
            })
            .collect(),
    }
}

type ListStream =
    tokio_stream::wrappers::ReceiverStream<Result<proto::ListAndWatchResponse, Status>>;

#[tonic::async_trait]
impl DevicePlugin for Service {
    async fn get_device_plugin_options(
        &self,
        _: Request<proto::Empty>,
    ) -> Result<Response<proto::DevicePluginOptions>, Status> {
        self.0.called("GetDevicePluginOptions");
        match &self.0.behaviour.options_fail {
            Some(e) => Err(Status::unknown(e.clone())),
            None => Ok(Response::new(self.0.behaviour.options)),
        }
    }

    type ListAndWatchStream = ListStream;

    async fn list_and_watch(
        &self,
        _: Request<proto::Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        self.0.called("ListAndWatch");
        if let Some(e) = &self.0.behaviour.list_fails {
            return Err(Status::unknown(e.clone()));
        }
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut devices = self.0.devices.subscribe();
        let stopped = self.0.stopped.clone();
        tokio::spawn(async move {
            loop {
                let now = list(&devices.borrow_and_update());
                if tx.send(Ok(now)).await.is_err() {
                    return;
                }
                tokio::select! {
                    changed = devices.changed() => if changed.is_err() { return },
                    () = stopped.cancelled() => return,
                }
            }
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            rx,
        )))
    }

    async fn get_preferred_allocation(
        &self,
        _: Request<proto::PreferredAllocationRequest>,
    ) -> Result<Response<proto::PreferredAllocationResponse>, Status> {
        self.0.called("GetPreferredAllocation");
        Ok(Response::new(proto::PreferredAllocationResponse {
            container_responses: vec![proto::ContainerPreferredAllocationResponse {
                device_i_ds: self.0.behaviour.preferred.clone(),
            }],
        }))
    }

    async fn allocate(
        &self,
        request: Request<proto::AllocateRequest>,
    ) -> Result<Response<proto::AllocateResponse>, Status> {
        self.0.called("Allocate");
        let mut responses = Vec::new();
        for r in request.into_inner().container_requests {
            self.0
                .allocated
                .lock()
                .expect("allocated")
                .push(r.devices_ids.clone());
            responses.push(proto::ContainerAllocateResponse {
                envs: BTreeMap::from([("TEST_DEVICES".into(), r.devices_ids.join(","))]),
                mounts: r
                    .devices_ids
                    .iter()
                    .map(|id| proto::Mount {
                        container_path: format!("/devices/{id}"),
                        host_path: format!("/tmp/test-device-{id}"),
                        read_only: false,
                    })
                    .collect(),
                ..Default::default()
            });
        }
        Ok(Response::new(proto::AllocateResponse {
            container_responses: responses,
        }))
    }

    async fn pre_start_container(
        &self,
        request: Request<proto::PreStartContainerRequest>,
    ) -> Result<Response<proto::PreStartContainerResponse>, Status> {
        self.0.called("PreStartContainer");
        let ids = request.into_inner().devices_ids;
        self.0.pre_started.lock().expect("pre_started").push(ids);
        Ok(Response::new(proto::PreStartContainerResponse {}))
    }
}

impl TestPlugin {
    /// Serves a plugin with `devices` (ID, healthy) on `<dir>/<name>.sock`.
    pub fn serve(dir: &Path, name: &str, devices: &[(&str, bool)], behaviour: Behaviour) -> Self {
        let devices: Vec<(String, bool)> = devices
            .iter()
            .map(|(id, ok)| ((*id).to_owned(), *ok))
            .collect();
        let shared = Arc::new(Shared {
            calls: Mutex::new(Vec::new()),
            devices: watch::channel(devices).0,
            behaviour,
            allocated: Mutex::new(Vec::new()),
            pre_started: Mutex::new(Vec::new()),
            stopped: CancellationToken::new(),
        });
        let endpoint = format!("{name}.sock");
        let listener = UnixListener::bind(dir.join(&endpoint)).expect("bind the plugin's socket");
        let served = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(DevicePluginServer::new(Service(shared.clone())))
                .serve_with_incoming_shutdown(
                    UnixListenerStream::new(listener),
                    shared.stopped.clone().cancelled_owned(),
                ),
        );
        let served = tokio::spawn(async move {
            let _ = served.await;
        });
        TestPlugin {
            shared,
            served: Some(served),
            endpoint,
        }
    }

    /// Registers with the agent's `kubelet.sock` in `dir` for `resource`.
    pub async fn register(&self, dir: &Path, resource: &str) -> Result<(), Status> {
        let channel = dial(dir.join(SOCKET))
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        RegistrationClient::new(channel)
            .register(proto::RegisterRequest {
                version: VERSION.into(),
                endpoint: self.endpoint.clone(),
                resource_name: resource.into(),
                options: None,
            })
            .await
            .map(|_| ())
    }

    /// Changes its devices' health (sent on ListAndWatch).
    pub fn update(&self, devices: &[(&str, bool)]) {
        let devices = devices
            .iter()
            .map(|(id, ok)| ((*id).to_owned(), *ok))
            .collect();
        self.shared.devices.send_replace(devices);
    }

    /// The calls it got, in order.
    pub fn calls(&self) -> Vec<String> {
        self.shared.calls.lock().expect("calls").clone()
    }

    /// The device IDs of each Allocate.
    pub fn allocated(&self) -> Vec<Vec<String>> {
        self.shared.allocated.lock().expect("allocated").clone()
    }

    /// The device IDs of each PreStartContainer.
    pub fn pre_started(&self) -> Vec<Vec<String>> {
        self.shared.pre_started.lock().expect("pre_started").clone()
    }

    /// Stops serving (its streams end).
    pub async fn stop(&mut self) {
        self.shared.stopped.cancel();
        if let Some(served) = self.served.take() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), served).await;
        }
    }
}

impl Drop for TestPlugin {
    /// A dropped plugin stops serving, as after [`TestPlugin::stop`].
    fn drop(&mut self) {
        self.shared.stopped.cancel();
    }
}

/// A manager serving registrations on `dir` until the test's runtime ends.
pub fn serve_manager(dir: &Path) -> Arc<crate::manager::Manager> {
    let manager = crate::manager::Manager::new(dir);
    let listener = crate::registration::bind(dir).expect("bind kubelet.sock");
    tokio::spawn(crate::registration::serve(
        manager.clone(),
        listener,
        std::future::pending(),
    ));
    manager
}

/// `resource`'s (allocatable, capacity) as the node status would report them now,
/// `None` when the node does not have it.
pub fn counts(m: &crate::manager::Manager, resource: &str) -> (Option<u64>, Option<u64>) {
    let c = m.capacity();
    (
        c.allocatable.get(resource).copied(),
        c.capacity.get(resource).copied(),
    )
}

/// Waits (5 s at most) until `resource`'s counts are `want`.
pub async fn until_counts(
    m: &crate::manager::Manager,
    resource: &str,
    want: (Option<u64>, Option<u64>),
) {
    for _ in 0..100 {
        if counts(m, resource) == want {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{resource} stayed {:?}, not {want:?}", counts(m, resource));
}
