//! Graceful node shutdown, as the kubelet's node shutdown manager does it
//! (`shutdownGracePeriod`, `shutdownGracePeriodCriticalPods`,
//! `shutdownGracePeriodByPodPriority`): the agent holds a *delay* inhibitor lock of
//! systemd-logind, so that a shutdown of the machine waits for it; when logind announces
//! one (`PrepareForShutdown(true)`) the node stops admitting pods and reports itself not
//! ready, stops its pods group by group — lowest priority first, each group within its
//! grace period — marks them Failed (`Terminated`, "Pod was terminated in response to
//! imminent node shutdown."), and releases the lock so the shutdown goes on. A shutdown
//! called off (`PrepareForShutdown(false)`) takes the lock again.
//!
//! Where to start:
//! - [`plan`]: the pure part — the priority groups from the configuration, which pod
//!   goes in which group and with what grace period;
//! - [`logind`]: logind's and systemd's D-Bus interfaces as the manager uses them;
//! - [`manager`]: the loop on the system bus ([`Manager`]), the state admission and the
//!   node status read ([`ShutdownState`]), and the seam to the agent's pods ([`Pods`],
//!   [`AgentPods`]).

pub mod logind;
pub mod manager;
pub mod plan;

pub use manager::{AgentPods, Manager, Pods, SessionError, ShutdownState};
pub use plan::{Group, PodInfo};
