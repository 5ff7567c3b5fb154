//! The systemd cgroup driver: the tree's cgroups are slices made and set through
//! systemd's D-Bus API as transient units, as the kubelet makes them (through runc's
//! systemd manager): `StartTransientUnit` with the slice's parent in `Wants=`, all
//! accounting on and no default dependencies, then the resources as unit properties
//! (`SetUnitProperties`, runtime); `StopUnit` removes one.
//!
//! The properties are computed apart from the bus ([`slice_properties`],
//! [`resource_properties`]) so that they can be checked against the kubelet's without a
//! systemd.

use zbus::zvariant::{OwnedObjectPath, Value};

use super::tree::CgroupName;
use super::values::{self, Max, QUOTA_PERIOD, Settings, shares_to_weight};

/// A unit property's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prop {
    /// A string (`s`).
    Str(String),
    /// A list of strings (`as`).
    Strs(Vec<String>),
    /// A boolean (`b`).
    Bool(bool),
    /// An unsigned 64-bit number (`t`).
    U64(u64),
    /// Bytes (`ay`).
    Bytes(Vec<u8>),
}

impl Prop {
    fn value(&self) -> Value<'_> {
        match self {
            Prop::Str(s) => Value::from(s.as_str()),
            Prop::Strs(v) => Value::from(v.iter().map(String::as_str).collect::<Vec<_>>()),
            Prop::Bool(b) => Value::from(*b),
            Prop::U64(n) => Value::from(*n),
            Prop::Bytes(b) => Value::from(b.as_slice()),
        }
    }
}

/// A named property.
pub type Property = (&'static str, Prop);

/// The parent slice of `name`'s slice: `kubepods-burstable.slice` for a burstable pod,
/// the root slice `-.slice` for `kubepods`.
pub fn parent_unit(name: &CgroupName) -> String {
    let parent = name.parent();
    if parent.parts().is_empty() {
        "-.slice".into()
    } else {
        parent.systemd_unit()
    }
}

/// The properties a slice is started with.
pub fn slice_properties(name: &CgroupName, v2: bool) -> Vec<Property> {
    vec![
        (
            "Description",
            Prop::Str(format!("wasmlet cgroup {}", name.systemd_unit())),
        ),
        ("Wants", Prop::Strs(vec![parent_unit(name)])),
        ("MemoryAccounting", Prop::Bool(true)),
        ("CPUAccounting", Prop::Bool(true)),
        (
            if v2 {
                "IOAccounting"
            } else {
                "BlockIOAccounting"
            },
            Prop::Bool(true),
        ),
        ("TasksAccounting", Prop::Bool(true)),
        ("DefaultDependencies", Prop::Bool(false)),
    ]
}

/// The unit properties for `settings`, as runc's systemd driver gives them for the
/// kubelet's resource configurations: cgroup v1 `MemoryLimit`/`CPUShares`, v2
/// `MemoryMax`/`CPUWeight`; the CFS quota as `CPUQuotaPerSecUSec` rounded up to a whole
/// percent of a CPU (systemd keeps percents: a child must still fit its own quota), with
/// its period; `TasksMax`. A limit that is absent is not a property at all (a new slice
/// has none): the kubelet leaves it out of the resource configuration, and runc sets
/// only what is there.
pub fn resource_properties(settings: &Settings, v2: bool) -> Vec<Property> {
    let mut props = Vec::new();
    if let Some(Max::Of(m)) = settings.memory {
        let name = if v2 { "MemoryMax" } else { "MemoryLimit" };
        props.push((name, Prop::U64(m)));
    }
    if let Some(shares) = settings.cpu_shares {
        props.push(if v2 {
            ("CPUWeight", Prop::U64(shares_to_weight(shares)))
        } else {
            ("CPUShares", Prop::U64(shares))
        });
    }
    if let Some(Max::Of(quota)) = settings.cpu_quota {
        props.push(("CPUQuotaPeriodUSec", Prop::U64(QUOTA_PERIOD)));
        let per_sec = quota.saturating_mul(1_000_000) / QUOTA_PERIOD;
        props.push((
            "CPUQuotaPerSecUSec",
            Prop::U64(per_sec.div_ceil(10_000) * 10_000),
        ));
    }
    if let Some(Max::Of(pids)) = settings.pids {
        props.push(("TasksMax", Prop::U64(pids)));
    }
    // systemd must own the cpuset it realizes, or it writes it back empty (the kubelet
    // gives `kubepods` its CPUs so on v2).
    if let Some(mask) = settings
        .cpuset
        .as_deref()
        .filter(|_| v2)
        .and_then(values::cpu_mask)
    {
        props.push(("AllowedCPUs", Prop::Bytes(mask)));
    }
    props
}

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
trait Manager {
    fn start_transient_unit(
        &self,
        name: &str,
        mode: &str,
        properties: &[(&str, Value<'_>)],
        aux: &[(&str, &[(&str, Value<'_>)])],
    ) -> zbus::Result<OwnedObjectPath>;

    fn set_unit_properties(
        &self,
        name: &str,
        runtime: bool,
        properties: &[(&str, Value<'_>)],
    ) -> zbus::Result<()>;

    fn stop_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;

    fn reset_failed_unit(&self, name: &str) -> zbus::Result<()>;

    #[zbus(property)]
    fn version(&self) -> zbus::Result<String>;
}

/// What went wrong reaching systemd or asking it for a slice, with zbus's or the
/// socket's error kept as the source.
#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    /// Neither way answered: what the system bus said, then the private socket.
    #[error("the system bus: {bus}; {PRIVATE_SOCKET}: {private}")]
    Unreachable {
        /// Over the system bus.
        bus: Box<SystemdError>,
        /// On the private socket.
        private: Box<SystemdError>,
    },
    /// The private socket could not be opened.
    #[error("{0}")]
    Socket(#[source] std::io::Error),
    /// The D-Bus connection could not be made.
    #[error("{0}")]
    Connect(#[source] zbus::Error),
    /// Connected, but systemd did not answer.
    #[error("systemd did not answer: {0}")]
    NoAnswer(#[source] zbus::Error),
    /// No answer within the deadline.
    #[error("no answer within {0:?}")]
    Timeout(std::time::Duration),
    /// systemd refused or failed a call about a unit (`starting`, `setting`,
    /// `stopping`).
    #[error("{action} {unit}: {source}")]
    Unit {
        /// What was asked.
        action: &'static str,
        /// The unit.
        unit: String,
        /// systemd's answer.
        #[source]
        source: zbus::Error,
    },
}

/// A connection to systemd's manager.
#[derive(Debug, Clone)]
pub struct Systemd {
    manager: ManagerProxy<'static>,
}

/// Where systemd listens to root without the system bus.
const PRIVATE_SOCKET: &str = "/run/systemd/private";

/// How long connecting to systemd (and its first answer) may take, each way.
const CONNECT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// How long one call to systemd's manager may take.
const CALL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

impl Systemd {
    /// Connects over the system bus (`DBUS_SYSTEM_BUS_ADDRESS`, else
    /// `/run/dbus/system_bus_socket`), else systemd's private socket, and asks for
    /// systemd's version to know it answers; each way within `CONNECT_DEADLINE`. The
    /// error says what was tried.
    pub async fn connect() -> Result<Systemd, SystemdError> {
        let bus = async {
            let connection = zbus::connection::Builder::system()
                .map_err(SystemdError::Connect)?
                .method_timeout(CALL_DEADLINE)
                .build()
                .await
                .map_err(SystemdError::Connect)?;
            Self::over(connection).await
        };
        let bus_error = match within(bus).await {
            Ok(s) => {
                tracing::info!("systemd reached over the system bus");
                return Ok(s);
            }
            Err(e) => e,
        };
        match within(Self::private(std::path::Path::new(PRIVATE_SOCKET))).await {
            Ok(s) => {
                tracing::info!(
                    socket = PRIVATE_SOCKET,
                    "systemd reached on its private socket (the system bus: {bus_error})"
                );
                Ok(s)
            }
            Err(e) => Err(SystemdError::Unreachable {
                bus: Box::new(bus_error),
                private: Box::new(e),
            }),
        }
    }

    /// systemd's manager on its private socket at `path` (a peer-to-peer connection,
    /// whose messages carry systemd's name as their sender: see `super::private_bus`).
    pub async fn private(path: &std::path::Path) -> Result<Systemd, SystemdError> {
        let stream = tokio::net::UnixStream::connect(path)
            .await
            .map_err(SystemdError::Socket)?;
        Self::private_stream(stream).await
    }

    /// systemd's manager as a peer on `stream` (its private socket, connected).
    pub async fn private_stream(stream: tokio::net::UnixStream) -> Result<Systemd, SystemdError> {
        let connection = zbus::connection::Builder::socket(super::private_bus::split(stream))
            .p2p()
            .method_timeout(CALL_DEADLINE)
            .build()
            .await
            .map_err(SystemdError::Connect)?;
        Self::over(connection).await
    }

    /// systemd's manager over `connection`, once it answered.
    pub async fn over(connection: zbus::Connection) -> Result<Systemd, SystemdError> {
        let manager = ManagerProxy::new(&connection)
            .await
            .map_err(SystemdError::Connect)?;
        let version = manager.version().await.map_err(SystemdError::NoAnswer)?;
        tracing::debug!(%version, "connected to systemd");
        Ok(Systemd { manager })
    }

    /// Makes `name`'s slice if it is not there and sets `settings` on it.
    pub async fn ensure(
        &self,
        name: &CgroupName,
        settings: &Settings,
        v2: bool,
    ) -> Result<(), SystemdError> {
        let unit = name.systemd_unit();
        let start = slice_properties(name, v2);
        let values: Vec<(&str, Value<'_>)> = start.iter().map(|(k, v)| (*k, v.value())).collect();
        match self
            .manager
            .start_transient_unit(&unit, "replace", &values, &[])
            .await
        {
            Ok(_) => {}
            Err(zbus::Error::MethodError(name, _, _))
                if name.as_str() == "org.freedesktop.systemd1.UnitExists" => {}
            Err(source) => {
                return Err(SystemdError::Unit {
                    action: "starting",
                    unit,
                    source,
                });
            }
        }
        let resources = resource_properties(settings, v2);
        if resources.is_empty() {
            return Ok(());
        }
        let values: Vec<(&str, Value<'_>)> =
            resources.iter().map(|(k, v)| (*k, v.value())).collect();
        self.manager
            .set_unit_properties(&unit, true, &values)
            .await
            .map_err(|source| SystemdError::Unit {
                action: "setting",
                unit: unit.clone(),
                source,
            })
    }

    /// Stops `name`'s slice (systemd removes its cgroup); one already gone is fine.
    pub async fn stop(&self, name: &CgroupName) -> Result<(), SystemdError> {
        let unit = name.systemd_unit();
        match self.manager.stop_unit(&unit, "replace").await {
            Ok(_) => Ok(()),
            Err(zbus::Error::MethodError(name, _, _))
                if name.as_str() == "org.freedesktop.systemd1.NoSuchUnit" =>
            {
                Ok(())
            }
            Err(source) => {
                let _ = self.manager.reset_failed_unit(&unit).await;
                Err(SystemdError::Unit {
                    action: "stopping",
                    unit,
                    source,
                })
            }
        }
    }
}

/// `attempt`, or an error once [`CONNECT_DEADLINE`] has passed.
async fn within<T>(
    attempt: impl std::future::Future<Output = Result<T, SystemdError>>,
) -> Result<T, SystemdError> {
    tokio::time::timeout(CONNECT_DEADLINE, attempt)
        .await
        .unwrap_or(Err(SystemdError::Timeout(CONNECT_DEADLINE)))
}

#[cfg(test)]
mod tests {
    use super::super::tree::Qos;
    use super::*;

    const UID: &str = "4b1e0c9a-6f2d-4c1b-9a3e-0f5d2c7b8e11";

    fn get<'a>(props: &'a [Property], name: &str) -> Option<&'a Prop> {
        props.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
    }

    #[test]
    fn slices_want_their_parent_and_account_everything() {
        let kubepods = CgroupName::kubepods("/");
        let pod = kubepods.pod(Qos::Burstable, UID);
        assert_eq!(
            parent_unit(&pod),
            "kubepods-burstable.slice",
            "a slice's parent is named by its prefix"
        );
        assert_eq!(
            parent_unit(&kubepods.tier(Qos::Burstable)),
            "kubepods.slice"
        );
        assert_eq!(parent_unit(&kubepods), "-.slice");
        let props = slice_properties(&pod, false);
        assert_eq!(
            get(&props, "Wants"),
            Some(&Prop::Strs(vec!["kubepods-burstable.slice".into()]))
        );
        for on in [
            "MemoryAccounting",
            "CPUAccounting",
            "BlockIOAccounting",
            "TasksAccounting",
        ] {
            assert_eq!(get(&props, on), Some(&Prop::Bool(true)), "{on}");
        }
        assert_eq!(get(&props, "DefaultDependencies"), Some(&Prop::Bool(false)));
        let v2 = slice_properties(&pod, true);
        assert_eq!(get(&v2, "IOAccounting"), Some(&Prop::Bool(true)));
        assert_eq!(get(&v2, "BlockIOAccounting"), None);
    }

    #[test]
    fn resources_are_the_properties_runc_gives_systemd() {
        // A Guaranteed pod of 250m CPU and 128 MiB, podPidsLimit 1024.
        let s = Settings {
            cpu_shares: Some(256),
            cpu_quota: Some(Max::Of(25_000)),
            memory: Some(Max::Of(128 << 20)),
            pids: Some(Max::Of(1024)),
            hugetlb: Vec::new(),
            cpuset: None,
        };
        let v1 = resource_properties(&s, false);
        assert_eq!(get(&v1, "MemoryLimit"), Some(&Prop::U64(128 << 20)));
        assert_eq!(get(&v1, "CPUShares"), Some(&Prop::U64(256)));
        assert_eq!(get(&v1, "CPUQuotaPeriodUSec"), Some(&Prop::U64(100_000)));
        assert_eq!(get(&v1, "CPUQuotaPerSecUSec"), Some(&Prop::U64(250_000)));
        assert_eq!(get(&v1, "TasksMax"), Some(&Prop::U64(1024)));
        let v2 = resource_properties(&s, true);
        assert_eq!(get(&v2, "MemoryMax"), Some(&Prop::U64(128 << 20)));
        assert_eq!(get(&v2, "CPUWeight"), Some(&Prop::U64(10)));
        assert_eq!(get(&v2, "CPUShares"), None);
        // 5m of CPU is 0.5 % of a second: rounded up to 1 %.
        let small = Settings {
            cpu_quota: Some(Max::Of(1_000)),
            ..Settings::default()
        };
        assert_eq!(
            get(&resource_properties(&small, false), "CPUQuotaPerSecUSec"),
            Some(&Prop::U64(10_000))
        );
        let none = Settings {
            cpu_quota: Some(Max::Unlimited),
            memory: Some(Max::Unlimited),
            pids: Some(Max::Unlimited),
            ..Settings::default()
        };
        // No quota, no memory limit, no pids limit (a Burstable pod's CPU without a
        // limit, podPidsLimit unset): none of them, the period included.
        assert!(resource_properties(&none, false).is_empty());
        assert!(resource_properties(&Settings::default(), false).is_empty());
        let kubepods = Settings {
            cpuset: Some("0-1".into()),
            ..Settings::default()
        };
        assert_eq!(
            get(&resource_properties(&kubepods, true), "AllowedCPUs"),
            Some(&Prop::Bytes(vec![0b11]))
        );
        assert!(
            resource_properties(&kubepods, false).is_empty(),
            "v1: not systemd's"
        );
    }
}
