//! Reading a cgroup's CPU, memory and process counters, cgroup v1 and v2 alike, the
//! way cAdvisor computes what the kubelet reports:
//!
//! | value | cgroup v1 | cgroup v2 |
//! |---|---|---|
//! | CPU, cumulative ns | `cpuacct/…/cpuacct.usage` | `cpu.stat` `usage_usec` × 1000 |
//! | memory usage | `memory/…/memory.usage_in_bytes` | `memory.current` |
//! | working set | usage − `total_inactive_file` | usage − `inactive_file` |
//! | RSS | `total_rss` | `anon` |
//! | page faults | `total_pgfault`, `total_pgmajfault` | `pgfault`, `pgmajfault` |
//! | limit | `memory.limit_in_bytes` (≥ 2⁶² is none) | `memory.max` (`max` is none) |
//! | processes | `pids/…/pids.current` | `pids.current` |
//!
//! A cgroup that vanishes between two reads (its pod just removed) is a `NotFound`
//! error for the caller to leave out, never a panic.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::files::OpenFiles;

/// The cgroup filesystem of the node; the counters it reads stay open between samples
/// ([`OpenFiles`], shared by clones).
#[derive(Debug, Clone)]
pub struct Cgroups {
    root: PathBuf,
    v2: bool,
    files: Arc<OpenFiles>,
}

impl PartialEq for Cgroups {
    fn eq(&self, other: &Self) -> bool {
        self.root == other.root && self.v2 == other.v2
    }
}

impl Eq for Cgroups {}

/// Memory counters of one cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    /// All memory charged to the cgroup, page cache included.
    pub usage: u64,
    /// Usage less inactive file pages: what the kubelet evicts on.
    pub working_set: u64,
    /// Anonymous memory and swap cache.
    pub rss: u64,
    /// Minor page faults, cumulative.
    pub page_faults: u64,
    /// Major page faults, cumulative.
    pub major_page_faults: u64,
}

/// Swap a cgroup uses, and its swap limit when it has one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swap {
    /// Bytes swapped out.
    pub usage: u64,
    /// The most it may swap (`None`: no limit of its own).
    pub limit: Option<u64>,
}

/// Values of v1 limit files at or above this are "no limit" (the kernel prints
/// `PAGE_COUNTER_MAX` rounded to pages: 9223372036854771712 on 4 KiB pages).
const V1_UNLIMITED: u64 = 1 << 62;

impl Cgroups {
    /// The cgroup filesystem mounted at `root` (`/sys/fs/cgroup`), or `None` when there
    /// is none there: v2 when `cgroup.controllers` is at the root, v1 when a `memory`
    /// hierarchy is.
    pub fn detect(root: &Path) -> Option<Self> {
        if root.join("cgroup.controllers").is_file() {
            Some(Cgroups::at(root, true))
        } else if root.join("memory").is_dir() {
            Some(Cgroups::at(root, false))
        } else {
            None
        }
    }

    /// A cgroup filesystem laid out as v1 or v2 at `root` (tests build one in a
    /// temporary directory).
    pub fn at(root: &Path, v2: bool) -> Self {
        Cgroups {
            root: root.to_path_buf(),
            v2,
            files: Arc::default(),
        }
    }

    /// Closes the counters not read since the previous sweep (the collector calls it
    /// after each sample).
    pub fn sweep(&self) {
        self.files.sweep();
    }

    fn number(&self, path: &Path) -> io::Result<u64> {
        parse_number(path, &self.files.read(path)?)
    }

    /// Whether this is the unified hierarchy.
    pub fn v2(&self) -> bool {
        self.v2
    }

    fn dir(&self, controller: &str, cgroup: &str) -> PathBuf {
        let rel = cgroup.trim_start_matches('/');
        if self.v2 {
            self.root.join(rel)
        } else {
            self.root.join(controller).join(rel)
        }
    }

    /// Cumulative CPU time of `cgroup`, in nanoseconds.
    pub fn cpu_ns(&self, cgroup: &str) -> io::Result<u64> {
        if self.v2 {
            let text = self.files.read(&self.dir("cpu", cgroup).join("cpu.stat"))?;
            let usec = field(&text, "usage_usec").ok_or_else(|| missing("usage_usec"))?;
            Ok(usec.saturating_mul(1000))
        } else {
            self.number(&self.dir("cpuacct", cgroup).join("cpuacct.usage"))
        }
    }

    /// `cgroup`'s memory limit (`None`: unlimited or unreadable).
    pub fn memory_limit(&self, cgroup: &str) -> Option<u64> {
        let dir = self.dir("memory", cgroup);
        if self.v2 {
            limit(&dir.join("memory.max"))
        } else {
            limit(&dir.join("memory.limit_in_bytes"))
        }
    }

    /// The root cgroup's memory on v2, which has no `memory.current`: as runc (and so
    /// cAdvisor and the kubelet) emulates it, usage is the root's `anon` + `file` of
    /// `memory.stat`, the working set that less `inactive_file`. `None` on v1 or when
    /// the root's `memory.stat` cannot be read.
    pub fn root_memory_v2(&self) -> Option<Memory> {
        if !self.v2 {
            return None;
        }
        let stat = self.files.read(&self.root.join("memory.stat")).ok()?;
        let [anon, file, inactive, faults, major] = fields(
            &stat,
            ["anon", "file", "inactive_file", "pgfault", "pgmajfault"],
        );
        let usage = anon.saturating_add(file);
        Some(Memory {
            usage,
            working_set: usage.saturating_sub(inactive),
            rss: anon,
            page_faults: faults,
            major_page_faults: major,
        })
    }

    /// `cgroup`'s swap, where the kernel accounts it per cgroup: v2's
    /// `memory.swap.current` and `memory.swap.max`; v1's memory+swap counters less the
    /// memory ones. `None` without swap accounting.
    pub fn swap(&self, cgroup: &str) -> Option<Swap> {
        let dir = self.dir("memory", cgroup);
        if self.v2 {
            let usage = self.number(&dir.join("memory.swap.current")).ok()?;
            let limit = self
                .files
                .read(&dir.join("memory.swap.max"))
                .ok()
                .and_then(|t| t.trim().parse().ok());
            return Some(Swap { usage, limit });
        }
        let both = self.number(&dir.join("memory.memsw.usage_in_bytes")).ok()?;
        let memory = self.number(&dir.join("memory.usage_in_bytes")).ok()?;
        let limit = limit(&dir.join("memory.memsw.limit_in_bytes"))
            .zip(limit(&dir.join("memory.limit_in_bytes")))
            .map(|(both, memory)| both.saturating_sub(memory));
        Some(Swap {
            usage: both.saturating_sub(memory),
            limit,
        })
    }

    /// Memory counters of `cgroup` (its limit is [`Cgroups::memory_limit`]: it changes
    /// seldom, and is read seldom).
    pub fn memory(&self, cgroup: &str) -> io::Result<Memory> {
        let dir = self.dir("memory", cgroup);
        if self.v2 {
            let usage = self.number(&dir.join("memory.current"))?;
            let stat = self.files.read(&dir.join("memory.stat"))?;
            let [inactive, anon, faults, major] =
                fields(&stat, ["inactive_file", "anon", "pgfault", "pgmajfault"]);
            Ok(Memory {
                usage,
                working_set: usage.saturating_sub(inactive),
                rss: anon,
                page_faults: faults,
                major_page_faults: major,
            })
        } else {
            let usage = self.number(&dir.join("memory.usage_in_bytes"))?;
            let stat = self.files.read(&dir.join("memory.stat"))?;
            let [inactive, rss, faults, major] = fields(
                &stat,
                [
                    "total_inactive_file",
                    "total_rss",
                    "total_pgfault",
                    "total_pgmajfault",
                ],
            );
            Ok(Memory {
                usage,
                working_set: usage.saturating_sub(inactive),
                rss,
                page_faults: faults,
                major_page_faults: major,
            })
        }
    }

    /// How many processes (tasks) `cgroup` holds, from the pids controller.
    pub fn processes(&self, cgroup: &str) -> io::Result<u64> {
        self.number(&self.dir("pids", cgroup).join("pids.current"))
    }

    /// One process in `cgroup` or any cgroup below it (to read the network of the
    /// namespace it runs in), or `None` when it holds none.
    pub fn any_process(&self, cgroup: &str) -> Option<u32> {
        first_pid(&self.dir("memory", cgroup), 3)
    }
}

/// Where a process runs, from its `/proc/<pid>/cgroup`: its CPU-accounting and memory
/// cgroups (one path on v2; on v1 each hierarchy has its own, and they can differ).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessCgroups {
    /// The cgroup CPU time is charged to.
    pub cpu: Option<String>,
    /// The cgroup memory is charged to.
    pub memory: Option<String>,
}

impl ProcessCgroups {
    /// Reads `text` (a `/proc/<pid>/cgroup`) as `v2` or v1 lays it out.
    pub fn parse(text: &str, v2: bool) -> Self {
        let path = |wanted: &dyn Fn(&str, &str) -> bool| {
            text.lines().find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                wanted(id, controllers).then(|| path.to_owned())
            })
        };
        if v2 {
            let unified = path(&|id, controllers| id == "0" && controllers.is_empty());
            ProcessCgroups {
                cpu: unified.clone(),
                memory: unified,
            }
        } else {
            let has = |name: &'static str| {
                move |_: &str, controllers: &str| controllers.split(',').any(|c| c == name)
            };
            ProcessCgroups {
                cpu: path(&has("cpuacct")),
                memory: path(&has("memory")),
            }
        }
    }
}

/// The first pid in `dir`'s `cgroup.procs`, else in its children's, `depth` levels down.
fn first_pid(dir: &Path, depth: u32) -> Option<u32> {
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs"))
        && let Some(pid) = text.lines().find_map(|l| l.trim().parse().ok())
    {
        return Some(pid);
    }
    if depth == 0 {
        return None;
    }
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .find_map(|e| first_pid(&e.path(), depth - 1))
}

fn read(path: &Path) -> io::Result<String> {
    std::fs::read_to_string(path)
}

fn parse_number(path: &Path, text: &str) -> io::Result<u64> {
    text.trim().parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a number: {:?}", path.display(), text.trim()),
        )
    })
}

fn limit(path: &Path) -> Option<u64> {
    let text = read(path).ok()?;
    let v: u64 = text.trim().parse().ok()?;
    (v < V1_UNLIMITED).then_some(v)
}

fn missing(key: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("no {key} in cpu.stat"))
}

/// The values of `keys` in a flat-keyed file, in one pass (0 for a key not there).
pub fn fields<const N: usize>(text: &str, keys: [&str; N]) -> [u64; N] {
    let mut out = [0; N];
    let mut found = 0;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(' ') else {
            continue;
        };
        if let Some(i) = keys.iter().position(|key| *key == k) {
            out[i] = v.trim().parse().unwrap_or(0);
            found += 1;
            if found == N {
                break;
            }
        }
    }
    out
}

/// The value of `key` in a flat-keyed file (`key value` per line: memory.stat,
/// cpu.stat).
pub fn field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::tempdir;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    #[test]
    fn a_process_cgroup_per_controller() {
        let v1 = "12:pids:/\n4:memory:/system.slice/wasmlet.service\n2:cpu,cpuacct:/system.slice\n0::/\n";
        assert_eq!(
            ProcessCgroups::parse(v1, false),
            ProcessCgroups {
                cpu: Some("/system.slice".into()),
                memory: Some("/system.slice/wasmlet.service".into()),
            }
        );
        let v2 = "0::/system.slice/wasmlet.service\n";
        let both = Some("/system.slice/wasmlet.service".to_owned());
        assert_eq!(
            ProcessCgroups::parse(v2, true),
            ProcessCgroups {
                cpu: both.clone(),
                memory: both,
            }
        );
        assert_eq!(ProcessCgroups::parse("", true), ProcessCgroups::default());
    }

    #[test]
    fn v1_working_set_is_usage_less_inactive_file() {
        let dir = tempdir();
        let root = dir.path();
        write(
            &root.join("memory/wasmlet/podu1/memory.usage_in_bytes"),
            "10485760\n",
        );
        write(
            &root.join("memory/wasmlet/podu1/memory.stat"),
            "cache 1\nrss 2\ninactive_file 5\ntotal_cache 4194304\ntotal_rss 6291456\n\
             total_inactive_file 3145728\ntotal_pgfault 1200\ntotal_pgmajfault 3\n",
        );
        write(
            &root.join("memory/wasmlet/podu1/memory.limit_in_bytes"),
            "9223372036854771712\n",
        );
        write(
            &root.join("cpuacct/wasmlet/podu1/cpuacct.usage"),
            "123456789\n",
        );
        write(&root.join("pids/wasmlet/podu1/pids.current"), "4\n");
        write(&root.join("memory/wasmlet/podu1/c1/cgroup.procs"), "4242\n");
        write(&root.join("memory/wasmlet/podu1/cgroup.procs"), "");
        let cg = Cgroups::detect(root).expect("v1");
        assert!(!cg.v2());
        let m = cg.memory("/wasmlet/podu1").expect("memory");
        assert_eq!(
            m,
            Memory {
                usage: 10_485_760,
                working_set: 10_485_760 - 3_145_728,
                rss: 6_291_456,
                page_faults: 1200,
                major_page_faults: 3,
            }
        );
        assert_eq!(cg.cpu_ns("/wasmlet/podu1").expect("cpu"), 123_456_789);
        assert_eq!(cg.processes("/wasmlet/podu1").expect("pids"), 4);
        assert_eq!(cg.any_process("/wasmlet/podu1"), Some(4242));
        assert_eq!(
            cg.memory_limit("/wasmlet/podu1"),
            None,
            "2^63 rounded: no limit"
        );
        write(
            &root.join("memory/wasmlet/podu1/memory.limit_in_bytes"),
            "67108864\n",
        );
        assert_eq!(cg.memory_limit("/wasmlet/podu1"), Some(64 << 20));
    }

    #[test]
    fn swap_is_read_where_the_kernel_accounts_it() {
        let dir = tempdir();
        let root = dir.path();
        write(&root.join("cgroup.controllers"), "cpu memory\n");
        // A container as the kubelet 1.33 leaves it on v2 (NoSwap), and its pod.
        write(&root.join("kubepods/podp/c/memory.swap.current"), "0\n");
        write(&root.join("kubepods/podp/c/memory.swap.max"), "0\n");
        write(&root.join("kubepods/podp/memory.swap.current"), "4096\n");
        write(&root.join("kubepods/podp/memory.swap.max"), "max\n");
        let cg = Cgroups::detect(root).expect("v2");
        assert_eq!(
            cg.swap("/kubepods/podp/c"),
            Some(Swap {
                usage: 0,
                limit: Some(0)
            })
        );
        assert_eq!(
            cg.swap("/kubepods/podp"),
            Some(Swap {
                usage: 4096,
                limit: None
            })
        );
        assert_eq!(
            cg.swap("/kubepods/none"),
            None,
            "no accounting: no swap stats"
        );
        let v1 = tempdir();
        let mem = v1.path().join("memory/kubepods/podq");
        write(&mem.join("memory.usage_in_bytes"), "1000\n");
        write(&mem.join("memory.memsw.usage_in_bytes"), "1500\n");
        write(&mem.join("memory.limit_in_bytes"), "4000\n");
        write(&mem.join("memory.memsw.limit_in_bytes"), "4000\n");
        let cg = Cgroups::detect(v1.path()).expect("v1");
        assert_eq!(
            cg.swap("/kubepods/podq"),
            Some(Swap {
                usage: 500,
                limit: Some(0)
            })
        );
    }

    #[test]
    fn v2_reads_the_unified_files() {
        let dir = tempdir();
        let root = dir.path();
        write(&root.join("cgroup.controllers"), "cpu memory pids\n");
        write(&root.join("wasmlet/podu1/memory.current"), "8388608\n");
        write(
            &root.join("wasmlet/podu1/memory.stat"),
            "anon 4194304\nfile 4194304\ninactive_file 1048576\npgfault 77\npgmajfault 1\n",
        );
        write(&root.join("wasmlet/podu1/memory.max"), "max\n");
        write(
            &root.join("wasmlet/podu1/cpu.stat"),
            "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n",
        );
        let cg = Cgroups::detect(root).expect("v2");
        assert!(cg.v2());
        let m = cg.memory("wasmlet/podu1").expect("memory");
        assert_eq!(m.working_set, 8_388_608 - 1_048_576);
        assert_eq!(m.rss, 4_194_304);
        assert_eq!((m.page_faults, m.major_page_faults), (77, 1));
        assert_eq!(cg.memory_limit("wasmlet/podu1"), None);
        assert_eq!(cg.cpu_ns("wasmlet/podu1").expect("cpu"), 2_500_000);
    }

    #[test]
    fn a_vanished_cgroup_is_not_found_and_never_negative() {
        let dir = tempdir();
        let root = dir.path();
        std::fs::create_dir_all(root.join("memory")).expect("mkdir");
        let cg = Cgroups::detect(root).expect("v1");
        let e = cg.memory("/wasmlet/gone").expect_err("gone");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert_eq!(cg.any_process("/wasmlet/gone"), None);
        // Inactive file above usage (racy reads) clamps to 0.
        write(&root.join("memory/x/memory.usage_in_bytes"), "100\n");
        write(
            &root.join("memory/x/memory.stat"),
            "total_inactive_file 200\n",
        );
        assert_eq!(cg.memory("x").expect("memory").working_set, 0);
        assert!(Cgroups::detect(&root.join("nothing")).is_none());
    }
}
