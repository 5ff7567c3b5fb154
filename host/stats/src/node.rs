//! The node's own counters: memory from the root cgroup (v1) or `/proc/meminfo` (v2,
//! whose root has no `memory.current`), CPU from the root cgroup or `/proc/stat`,
//! filesystems from `statvfs`, processes from `sysinfo` and `pid_max`, network from
//! `/proc/<pid>/net/dev`.

use std::io;
use std::path::{Path, PathBuf};

use crate::cgroup::{Cgroups, Memory, field};

/// Where the node's counters are read from (tests point it at files of their own).
#[derive(Debug, Clone)]
pub struct NodeFiles {
    /// `/proc`.
    pub proc: PathBuf,
    /// The cgroup filesystem, when there is one.
    pub cgroups: Option<Cgroups>,
    /// The `/proc` files read every sample, kept open.
    pub open: std::sync::Arc<crate::files::OpenFiles>,
}

impl Default for NodeFiles {
    fn default() -> Self {
        NodeFiles {
            proc: PathBuf::from("/proc"),
            cgroups: Cgroups::detect(Path::new("/sys/fs/cgroup")),
            open: Default::default(),
        }
    }
}

/// A filesystem's size and use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fs {
    /// Total bytes.
    pub capacity: u64,
    /// Bytes an unprivileged user may still write.
    pub available: u64,
    /// Bytes in use.
    pub used: u64,
    /// Total inodes.
    pub inodes: u64,
    /// Free inodes.
    pub inodes_free: u64,
}

/// One network interface's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interface {
    /// Its name (`eth0`).
    pub name: String,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Transmit errors.
    pub tx_errors: u64,
}

/// The interface the kubelet reports as a pod's or the node's own (cAdvisor's default).
pub const DEFAULT_INTERFACE: &str = "eth0";

impl NodeFiles {
    /// The machine's memory (`MemTotal`), in bytes.
    pub fn memory_capacity(&self) -> io::Result<u64> {
        let text = std::fs::read_to_string(self.proc.join("meminfo"))?;
        meminfo(&text, "MemTotal").ok_or_else(|| bad("meminfo", "MemTotal"))
    }

    /// The node's memory, as cAdvisor's root container: the root cgroup's on v1; on v2
    /// the root's `memory.stat` as runc reads it ([`Cgroups::root_memory_v2`]); without
    /// a cgroup filesystem from `/proc/meminfo` (usage = total − free, working set =
    /// usage − inactive file).
    pub fn memory(&self) -> io::Result<Memory> {
        if let Some(cg) = self.cgroups.as_ref() {
            if !cg.v2() {
                return cg.memory("/");
            }
            if let Some(m) = cg.root_memory_v2() {
                return Ok(m);
            }
        }
        let text = self.open.read(&self.proc.join("meminfo"))?;
        let get = |k: &str| meminfo(&text, k).ok_or_else(|| bad("meminfo", k));
        let usage = get("MemTotal")?.saturating_sub(get("MemFree")?);
        let inactive_file = meminfo(&text, "Inactive(file)").unwrap_or(0);
        let vm = std::fs::read_to_string(self.proc.join("vmstat")).unwrap_or_default();
        Ok(Memory {
            usage,
            working_set: usage.saturating_sub(inactive_file),
            rss: meminfo(&text, "AnonPages").unwrap_or(0),
            page_faults: field(&vm, "pgfault").unwrap_or(0),
            major_page_faults: field(&vm, "pgmajfault").unwrap_or(0),
        })
    }

    /// The node's swap from `/proc/meminfo`: what is used of `SwapTotal`, the rest
    /// available (none on a node without swap).
    pub fn swap(&self) -> io::Result<crate::cgroup::Swap> {
        let text = self.open.read(&self.proc.join("meminfo"))?;
        let total = meminfo(&text, "SwapTotal").unwrap_or(0);
        let free = meminfo(&text, "SwapFree").unwrap_or(0);
        Ok(crate::cgroup::Swap {
            usage: total.saturating_sub(free),
            limit: Some(total),
        })
    }

    /// The node's cumulative CPU time in nanoseconds: the root cgroup's on v1, else
    /// `/proc/stat`'s busy time (everything but idle and iowait).
    pub fn cpu_ns(&self) -> io::Result<u64> {
        if let Some(cg) = self.cgroups.as_ref().filter(|c| !c.v2())
            && let Ok(ns) = cg.cpu_ns("/")
        {
            return Ok(ns);
        }
        let text = self.open.read(&self.proc.join("stat"))?;
        proc_stat_busy_ns(&text).ok_or_else(|| bad("stat", "cpu"))
    }

    /// `pid_max` and the processes running (the kubelet's rlimit stats and PID
    /// pressure signal).
    pub fn processes(&self) -> io::Result<(u64, u64)> {
        let max = std::fs::read_to_string(self.proc.join("sys/kernel/pid_max"))?;
        let max = max.trim().parse().map_err(|_| bad("pid_max", "value"))?;
        Ok((max, running_processes(&self.proc)))
    }

    /// The network interfaces (loopback left out) of the namespace process `pid` runs
    /// in; `None` reads the agent's own, the node's.
    pub fn network(&self, pid: Option<u32>) -> io::Result<Vec<Interface>> {
        let path = match pid {
            Some(p) => self.proc.join(p.to_string()).join("net/dev"),
            None => self.proc.join("self/net/dev"),
        };
        Ok(net_dev(&self.open.read(&path)?))
    }
}

/// The running processes: `sysinfo`'s count for the real `/proc`, else the numeric
/// entries of the given one.
fn running_processes(proc: &Path) -> u64 {
    if proc == Path::new("/proc") {
        return u64::from(rustix::system::sysinfo().procs);
    }
    std::fs::read_dir(proc)
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.parse::<u32>().is_ok())
                })
                .count() as u64
        })
        .unwrap_or(0)
}

/// The size and use of the filesystem `path` is on.
pub fn filesystem(path: &Path) -> io::Result<Fs> {
    let st = rustix::fs::statvfs(path).map_err(io::Error::from)?;
    let unit = st.f_frsize.max(1);
    Ok(Fs {
        capacity: st.f_blocks.saturating_mul(unit),
        available: st.f_bavail.saturating_mul(unit),
        used: st.f_blocks.saturating_sub(st.f_bfree).saturating_mul(unit),
        inodes: st.f_files,
        inodes_free: st.f_ffree,
    })
}

/// Bytes and inodes used under `path` (a log directory, an emptyDir): blocks actually
/// allocated, as `du` counts them. Files that vanish while walking are skipped.
pub fn disk_usage(path: &Path) -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path)?;
    let mut bytes = meta.blocks() * 512;
    let mut inodes = 1;
    if meta.is_dir() {
        let mut stack = vec![path.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let Ok(m) = e.metadata() else { continue };
                bytes += m.blocks() * 512;
                inodes += 1;
                if m.is_dir() {
                    stack.push(e.path());
                }
            }
        }
    }
    Ok((bytes, inodes))
}

fn bad(file: &str, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("/proc/{file}: no {what}"),
    )
}

/// A `/proc/meminfo` value in bytes (`MemTotal:  16384 kB`).
pub fn meminfo(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(':')?;
        let mut parts = rest.split_whitespace();
        let v: u64 = parts.next()?.parse().ok()?;
        Some(if parts.next() == Some("kB") {
            v * 1024
        } else {
            v
        })
    })
}

/// Busy CPU time from `/proc/stat`'s `cpu` line (user nice system idle iowait irq
/// softirq steal, in USER_HZ = 100 ticks per second), in nanoseconds.
pub fn proc_stat_busy_ns(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|n| n.parse().ok())
        .collect();
    if v.len() < 4 {
        return None;
    }
    let busy: u64 = v
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, n)| n)
        .sum();
    Some(busy * 10_000_000)
}

/// The interfaces of a `/proc/net/dev` table, loopback left out.
pub fn net_dev(text: &str) -> Vec<Interface> {
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let name = name.trim();
            if name == "lo" {
                return None;
            }
            let n: Vec<u64> = rest
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            (n.len() >= 12).then(|| Interface {
                name: name.to_owned(),
                rx_bytes: n[0],
                rx_errors: n[2],
                tx_bytes: n[8],
                tx_errors: n[10],
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::tempdir;

    #[test]
    fn meminfo_and_proc_stat_parse() {
        let m =
            "MemTotal:       24576000 kB\nMemFree:         1000 kB\nInactive(file):   2000 kB\n";
        assert_eq!(meminfo(m, "MemTotal"), Some(24_576_000 * 1024));
        assert_eq!(meminfo(m, "Inactive(file)"), Some(2_048_000));
        assert_eq!(meminfo(m, "Mem"), None);
        let s = "cpu  100 5 50 9000 30 1 2 3 0 0\ncpu0 50 2 25 4500 15 0 1 1 0 0\n";
        // user + nice + system + irq + softirq + steal = 161 ticks of 10 ms.
        assert_eq!(proc_stat_busy_ns(s), Some(161 * 10_000_000));
        assert_eq!(proc_stat_busy_ns("intr 5\n"), None);
    }

    #[test]
    fn net_dev_leaves_out_loopback() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
            face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
            lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0\n  \
            eth0: 5000      40    2    0    0     0          0         0     7000      50    1    0    0     0       0          0\n";
        assert_eq!(
            net_dev(text),
            vec![Interface {
                name: "eth0".into(),
                rx_bytes: 5000,
                rx_errors: 2,
                tx_bytes: 7000,
                tx_errors: 1,
            }]
        );
    }

    #[test]
    fn node_memory_on_v2_is_the_roots_anon_and_file_as_runc_reads_it() {
        let dir = tempdir();
        let cg = dir.path().join("cgroup");
        std::fs::create_dir_all(&cg).expect("mkdir");
        std::fs::write(cg.join("cgroup.controllers"), "cpu memory\n").expect("write");
        // The head of a Debian 12 VM's root memory.stat (6.1), its counts made round.
        std::fs::write(
            cg.join("memory.stat"),
            "anon 100000000\nfile 200000000\nkernel 50000000\nkernel_stack 1000\n\
             shmem 0\nactive_anon 90000000\ninactive_anon 10000000\n\
             active_file 120000000\ninactive_file 80000000\npgfault 5000\npgmajfault 7\n",
        )
        .expect("write");
        let files = NodeFiles {
            proc: dir.path().join("proc"),
            cgroups: Cgroups::detect(&cg),
            open: Default::default(),
        };
        let m = files.memory().expect("memory");
        assert_eq!((m.usage, m.working_set), (300_000_000, 220_000_000));
        assert_eq!(
            (m.rss, m.page_faults, m.major_page_faults),
            (100_000_000, 5000, 7)
        );
    }

    #[test]
    fn node_memory_without_cgroups_comes_from_meminfo() {
        let dir = tempdir();
        let proc = dir.path().join("proc");
        std::fs::create_dir_all(proc.join("sys/kernel")).expect("mkdir");
        std::fs::write(
            proc.join("meminfo"),
            "MemTotal: 1000 kB\nMemFree: 200 kB\nInactive(file): 300 kB\nAnonPages: 100 kB\n",
        )
        .expect("write");
        std::fs::write(proc.join("vmstat"), "pgfault 9\npgmajfault 2\n").expect("write");
        std::fs::write(proc.join("stat"), "cpu  1 0 1 5 0 0 0 0\n").expect("write");
        std::fs::write(proc.join("sys/kernel/pid_max"), "4194304\n").expect("write");
        std::fs::create_dir_all(proc.join("1")).expect("mkdir");
        std::fs::create_dir_all(proc.join("77")).expect("mkdir");
        let files = NodeFiles {
            proc,
            cgroups: None,
            open: Default::default(),
        };
        let m = files.memory().expect("memory");
        assert_eq!(m.usage, 800 * 1024);
        assert_eq!(m.working_set, 500 * 1024);
        assert_eq!(
            (m.rss, m.page_faults, m.major_page_faults),
            (100 * 1024, 9, 2)
        );
        assert_eq!(files.memory_capacity().expect("total"), 1000 * 1024);
        assert_eq!(files.cpu_ns().expect("cpu"), 20_000_000);
        assert_eq!(files.processes().expect("procs"), (4_194_304, 2));
    }

    #[test]
    fn disk_usage_counts_allocated_blocks() {
        let dir = tempdir();
        std::fs::create_dir_all(dir.path().join("a/b")).expect("mkdir");
        std::fs::write(dir.path().join("a/b/f"), vec![1u8; 10_000]).expect("write");
        let (bytes, inodes) = disk_usage(dir.path()).expect("du");
        assert!(bytes >= 10_000, "{bytes}");
        assert_eq!(inodes, 4);
        let fs = filesystem(dir.path()).expect("statvfs");
        assert!(fs.capacity > 0 && fs.available <= fs.capacity && fs.inodes > 0);
        assert!(disk_usage(&dir.path().join("gone")).is_err());
    }
}
