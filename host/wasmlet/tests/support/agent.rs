//! A `wasmlet` process started by a test: killed when dropped, its log kept in a file.

use std::path::PathBuf;
use std::process::Child;

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
}
