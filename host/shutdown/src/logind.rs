//! systemd-logind's manager (`org.freedesktop.login1`) and the one call to systemd's
//! manager the shutdown manager makes, on the system bus: what the kubelet uses.

use zbus::zvariant::OwnedFd;

/// logind's manager.
#[zbus::proxy(
    interface = "org.freedesktop.login1.Manager",
    default_service = "org.freedesktop.login1",
    default_path = "/org/freedesktop/login1"
)]
pub(crate) trait Login1 {
    /// Takes an inhibitor lock: held until the returned descriptor is closed.
    fn inhibit(&self, what: &str, who: &str, why: &str, mode: &str) -> zbus::Result<OwnedFd>;

    /// How long a delay lock may hold a shutdown back (`InhibitDelayMaxSec`), in µs.
    #[zbus(property(emits_changed_signal = "false"), name = "InhibitDelayMaxUSec")]
    fn inhibit_delay_max_usec(&self) -> zbus::Result<u64>;

    /// Sent with `true` when a shutdown begins, `false` when it is called off.
    #[zbus(signal)]
    fn prepare_for_shutdown(&self, start: bool) -> zbus::Result<()>;
}

/// systemd's manager, for reloading logind's configuration.
#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
pub(crate) trait Systemd1 {
    /// Sends `signal` to the processes of `unit` (`who`: `main`, `control`, `all`).
    fn kill_unit(&self, unit: &str, who: &str, signal: i32) -> zbus::Result<()>;
}

/// The lock's owner, reason and mode, as the kubelet takes it (`systemd-inhibit --list`
/// shows them).
pub const INHIBIT: (&str, &str, &str, &str) = (
    "shutdown",
    "kubelet",
    "Kubelet needs time to handle node shutdown",
    "delay",
);

/// Where the longer `InhibitDelayMaxSec` is written, as the kubelet writes it.
pub const LOGIND_DROP_IN: &str = "/etc/systemd/logind.conf.d/99-kubelet.conf";

/// The drop-in's text for a delay of `seconds`.
pub fn drop_in(seconds: u64) -> String {
    format!("# Kubelet logind override\n[Login]\nInhibitDelayMaxSec={seconds}\n")
}
