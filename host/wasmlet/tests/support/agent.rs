//! A `wasmlet` process started by a test: killed when dropped, its log kept in a file.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// The node-resource settings of a test agent. The machines the suite runs on may have
/// fuller disks than the kubelet's default disk thresholds allow (a CI machine had less
/// than 10% free: DiskPressure, every API pod refused), and the shared containerd's
/// images cannot be pulled again: eviction on memory only and no image GC, as
/// `wasmlet up` configures a development node.
pub const TEST_RESOURCES: &str = "evictionHard: {memory.available: 100Mi}\n\
     imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 100\n";

/// The agent process and where its stderr goes.
pub struct Agent {
    pub child: Child,
    pub log: PathBuf,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    /// What it has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM, as systemd stops the kubelet, and waits up to `within` for the
    /// process to exit; its status, or `None` if it is still running.
    #[allow(dead_code)]
    pub fn terminate(&mut self, within: Duration) -> Option<ExitStatus> {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(sent, "kill -TERM {}", self.child.id());
        let start = Instant::now();
        while start.elapsed() < within {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}
