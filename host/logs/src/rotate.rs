//! Container log rotation, the kubelet's way (its container log manager).
//!
//! Every `containerLogMonitorInterval` (10 s), the log file of each running container
//! (the path `ContainerStatus` reports; only the agent's own containers, chosen by
//! label, where a runtime is shared) is looked at; one that has reached
//! `containerLogMaxSize` is rotated:
//!
//! 1. leftovers of an interrupted round are cleaned up (`*.tmp` files, and a rotated
//!    file whose compressed copy exists);
//! 2. the oldest rotated files are removed until `containerLogMaxFiles - 2` are left
//!    (with the one about to be rotated and the new live file, that makes the maximum);
//! 3. the rotated files not yet compressed are gzipped (`0.log.20240101-000004.gz`);
//! 4. the live file is renamed to `<name>.<YYYYMMDD-hhmmss>` and the runtime is told
//!    to `ReopenContainerLog` — it opens a new file at the old path. When the runtime
//!    refuses, the file is renamed back so the next round tries again.
//!
//! A log file that is missing (a reopen that failed after the rename, an agent killed
//! in between) is given back by asking the runtime to reopen it.
//!
//! Timestamps are UTC, so that names sort in the order they were made. File work runs
//! on the blocking pool; at most `containerLogMaxWorkers` containers are handled at
//! once. `kubectl logs -f` follows across a rotation ([`crate::read`]).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use wasmlet_cri::CriRuntime;
use wasmlet_cri::proto::{ContainerFilter, ContainerState, ContainerStateValue};

/// What a rotated, compressed file ends with.
pub const COMPRESSED: &str = ".gz";
/// What a file being compressed ends with until it is complete.
pub const TMP: &str = ".tmp";

/// `containerLogMaxSize` and `containerLogMaxFiles`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// A live file this large (bytes) is rotated.
    pub max_bytes: u64,
    /// Files kept per container, the live one included (at least 2).
    pub max_files: usize,
}

impl Default for Policy {
    /// The kubelet's defaults: 10Mi, 5 files.
    fn default() -> Self {
        Policy {
            max_bytes: 10 * 1024 * 1024,
            max_files: 5,
        }
    }
}

/// The policy, how often it is applied, and by how many workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// `containerLogMaxSize` / `containerLogMaxFiles`.
    pub policy: Policy,
    /// `containerLogMonitorInterval` (10 s).
    pub interval: Duration,
    /// `containerLogMaxWorkers` (1).
    pub workers: usize,
}

impl Default for Rotation {
    fn default() -> Self {
        Rotation {
            policy: Policy::default(),
            interval: Duration::from_secs(10),
            workers: 1,
        }
    }
}

/// Why one container's log was not rotated.
#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    /// A CRI call failed.
    #[error("container {id}: {source}")]
    Runtime {
        /// The container.
        id: String,
        /// The call's error.
        #[source]
        source: wasmlet_cri::CriError,
    },
    /// A file could not be read, written, renamed or removed.
    #[error("container {id}: log {path}: {source}")]
    File {
        /// The container.
        id: String,
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Round {
    /// Running containers looked at.
    pub checked: usize,
    /// Logs rotated.
    pub rotated: usize,
    /// Containers whose rotation failed (each logged with the reason).
    pub failed: usize,
}

/// Unix seconds now.
type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The container log manager: rotates the logs of a runtime's running containers.
pub struct LogManager<R> {
    runtime: Arc<R>,
    rotation: Rotation,
    selector: BTreeMap<String, String>,
    /// A label that, when a container has it, must have this value.
    owner: Option<(String, String)>,
    clock: Clock,
}

impl<R: CriRuntime + 'static> LogManager<R> {
    /// A manager for `runtime`'s containers.
    pub fn new(runtime: Arc<R>, rotation: Rotation) -> Self {
        LogManager {
            runtime,
            rotation,
            selector: BTreeMap::new(),
            owner: None,
            clock: Arc::new(|| wasmlet_cri::labels::unix_nanos() / 1_000_000_000),
        }
    }

    /// Only the containers carrying these labels (an agent's own, where the runtime is
    /// shared).
    pub fn with_selector(mut self, selector: BTreeMap<String, String>) -> Self {
        self.selector = selector;
        self
    }

    /// Only the containers whose label `key` is `value`, or that do not have it (an
    /// agent's own and those it adopted from the kubelet, where the runtime is shared).
    pub fn with_owner(mut self, key: &str, value: &str) -> Self {
        self.owner = Some((key.to_owned(), value.to_owned()));
        self
    }

    /// The same, reading the time from `clock` (Unix seconds; tests).
    pub fn with_clock(mut self, clock: impl Fn() -> i64 + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Rotates every interval until the task is dropped.
    pub fn spawn(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(self.rotation.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let round = self.round().await;
                if round.rotated > 0 || round.failed > 0 {
                    tracing::debug!(?round, "container log rotation");
                }
            }
        })
    }

    /// One round over the running containers.
    pub async fn round(&self) -> Round {
        let filter = ContainerFilter {
            state: Some(ContainerStateValue {
                state: ContainerState::ContainerRunning as i32,
            }),
            label_selector: self.selector.clone(),
            ..Default::default()
        };
        let ids: Vec<String> = match self.runtime.list_containers(Some(filter)).await {
            Ok(cs) => cs
                .into_iter()
                .filter(|c| {
                    self.owner
                        .as_ref()
                        .is_none_or(|(k, v)| c.labels.get(k).is_none_or(|l| l == v))
                })
                .map(|c| c.id)
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "container log rotation: cannot list running containers");
                return Round {
                    failed: 1,
                    ..Round::default()
                };
            }
        };
        let mut round = Round {
            checked: ids.len(),
            ..Round::default()
        };
        let mut each = futures::stream::iter(ids)
            .map(|id| async move {
                let result = self.container(&id).await;
                if let Err(e) = &result {
                    tracing::warn!(error = %e, "container log rotation failed");
                }
                result
            })
            .buffer_unordered(self.rotation.workers.max(1));
        while let Some(result) = each.next().await {
            match result {
                Ok(true) => round.rotated += 1,
                Ok(false) => {}
                Err(_) => round.failed += 1,
            }
        }
        round
    }

    /// Rotates one container's log if it is due: whether it was rotated.
    pub async fn container(&self, id: &str) -> Result<bool, RotateError> {
        let runtime_err = |source| RotateError::Runtime {
            id: id.to_owned(),
            source,
        };
        let status = self
            .runtime
            .container_status(id, false)
            .await
            .map_err(runtime_err)?;
        let Some(path) = status
            .status
            .map(|s| s.log_path)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
        else {
            return Ok(false);
        };
        let file_err = |path: &Path, source| RotateError::File {
            id: id.to_owned(),
            path: path.display().to_string(),
            source,
        };
        let size = match fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Lost after a rename whose reopen failed: the runtime makes it again.
                self.runtime
                    .reopen_container_log(id)
                    .await
                    .map_err(runtime_err)?;
                fs::metadata(&path).map_err(|e| file_err(&path, e))?.len()
            }
            Err(e) => return Err(file_err(&path, e)),
        };
        if size < self.rotation.policy.max_bytes {
            return Ok(false);
        }
        let policy = self.rotation.policy;
        let stamp = stamp((self.clock)());
        let live = path.clone();
        let rotated = tokio::task::spawn_blocking(move || rotate_files(&live, policy, &stamp))
            .await
            .map_err(|e| file_err(&path, io::Error::other(e)))?
            .map_err(|(p, e)| file_err(&p, e))?;
        let Some(rotated) = rotated else {
            // Rotated already within this second: the next round does it.
            return Ok(false);
        };
        if let Err(e) = self.runtime.reopen_container_log(id).await {
            // Put it back, so the next round tries again and nothing is lost.
            if let Err(back) = fs::rename(&rotated, &path) {
                tracing::error!(
                    container = id,
                    error = %back,
                    "cannot rename {} back to {} after a failed ReopenContainerLog",
                    rotated.display(),
                    path.display()
                );
            }
            return Err(runtime_err(e));
        }
        tracing::debug!(container = id, to = %rotated.display(), "rotated container log");
        Ok(true)
    }
}

/// `YYYYMMDD-hhmmss` (UTC) for Unix seconds.
pub fn stamp(unix_secs: i64) -> String {
    let digits: String = wasmlet_cri::labels::rfc3339_secs(unix_secs)
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    let (date, time) = digits.split_at(digits.len().min(8));
    format!("{date}-{time}")
}

/// The rotated files of the live file `path` (`<name>.*` in its directory), sorted
/// oldest first.
pub fn rotated_files(path: &Path) -> io::Result<Vec<PathBuf>> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(Vec::new());
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut found: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    found.sort();
    Ok(found)
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn ends_with(path: &Path, suffix: &str) -> bool {
    path.as_os_str().to_string_lossy().ends_with(suffix)
}

/// Gzips `path` into `path.gz` (written as `path.tmp` until complete, as the kubelet
/// does) and removes `path`.
pub fn compress(path: &Path) -> io::Result<()> {
    let tmp = with_suffix(path, TMP);
    let result = (|| {
        let mut from = File::open(path)?;
        let mut gz = flate2::write::GzEncoder::new(
            BufWriter::with_capacity(64 * 1024, File::create(&tmp)?),
            flate2::Compression::default(),
        );
        io::copy(&mut from, &mut gz)?;
        let mut out = gz.finish()?;
        out.flush()?;
        out.get_ref().sync_all()?;
        fs::rename(&tmp, with_suffix(path, COMPRESSED))?;
        fs::remove_file(path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// The file work of one rotation of the live file `path`: clean up, remove the excess,
/// compress, rename the live file to `<path>.<stamp>`. Returns the rotated file's
/// path, or `None` when that name is taken (rotated twice within a second). An error
/// names the file it is about.
pub fn rotate_files(
    path: &Path,
    policy: Policy,
    stamp: &str,
) -> Result<Option<PathBuf>, (PathBuf, io::Error)> {
    let at = |p: &Path| {
        let p = p.to_owned();
        move |e| (p, e)
    };
    let mut rotated = rotated_files(path).map_err(at(path))?;
    // Leftovers: a compression that did not finish, or one that finished but whose
    // source was not removed yet.
    let mut kept = Vec::with_capacity(rotated.len());
    for file in &rotated {
        let stale = ends_with(file, TMP)
            || (!ends_with(file, COMPRESSED) && rotated.contains(&with_suffix(file, COMPRESSED)));
        if stale {
            remove(file).map_err(at(file))?;
        } else {
            kept.push(file.clone());
        }
    }
    rotated = kept;
    // Oldest first, so a `kubectl logs` reading a newer one is not cut off.
    let keep = policy.max_files.saturating_sub(2);
    let excess = rotated.len().saturating_sub(keep);
    for file in rotated.drain(..excess) {
        remove(&file).map_err(at(&file))?;
    }
    for file in rotated.iter().filter(|f| !ends_with(f, COMPRESSED)) {
        compress(file).map_err(at(file))?;
    }
    let target = with_suffix(path, &format!(".{stamp}"));
    if target.exists() || with_suffix(&target, COMPRESSED).exists() {
        return Ok(None);
    }
    fs::rename(path, &target).map_err(at(path))?;
    Ok(Some(target))
}

fn remove(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("wasmlet-rotate-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).expect("dir");
        d
    }

    fn names(d: &Path) -> Vec<String> {
        let mut n: Vec<String> = fs::read_dir(d)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    }

    #[test]
    fn stamps_are_utc_and_sort_in_time_order() {
        assert_eq!(stamp(0), "19700101-000000");
        assert_eq!(stamp(1_704_067_204), "20240101-000004");
        assert!(stamp(1_704_067_204) < stamp(1_704_067_205));
    }

    #[test]
    fn rotation_keeps_max_files_and_compresses_all_but_the_newest() {
        let d = dir("keep");
        let live = d.join("0.log");
        let policy = Policy {
            max_bytes: 1,
            max_files: 3,
        };
        for (i, s) in ["20240101-000001", "20240101-000002", "20240101-000003"]
            .iter()
            .enumerate()
        {
            fs::write(&live, format!("generation {i}\n")).expect("write");
            let to = rotate_files(&live, policy, s)
                .expect("rotate")
                .expect("rotated");
            assert_eq!(to, d.join(format!("0.log.{s}")));
            // The runtime's reopen.
            fs::write(&live, "").expect("reopen");
        }
        assert_eq!(
            names(&d),
            ["0.log", "0.log.20240101-000002.gz", "0.log.20240101-000003"],
            "live + newest rotated + max_files-2 compressed; the oldest removed"
        );
        let mut text = String::new();
        flate2::read::GzDecoder::new(File::open(d.join("0.log.20240101-000002.gz")).expect("gz"))
            .read_to_string(&mut text)
            .expect("gunzip");
        assert_eq!(text, "generation 1\n");
        assert_eq!(
            fs::read_to_string(d.join("0.log.20240101-000003")).expect("newest"),
            "generation 2\n"
        );
    }

    #[test]
    fn leftovers_are_cleaned_and_a_taken_name_waits() {
        let d = dir("leftovers");
        let live = d.join("0.log");
        fs::write(&live, "x\n").expect("live");
        fs::write(d.join("0.log.20240101-000001.tmp"), "half").expect("tmp");
        fs::write(d.join("0.log.20240101-000002"), "done").expect("src");
        fs::write(d.join("0.log.20240101-000002.gz"), "gz").expect("gz");
        // Another container's files are not touched.
        fs::write(d.join("1.log"), "other").expect("other");
        let policy = Policy::default();
        let none = rotate_files(&live, policy, "20240101-000002").expect("rotate");
        assert_eq!(none, None, "the name is taken by a compressed file");
        assert_eq!(names(&d), ["0.log", "0.log.20240101-000002.gz", "1.log"]);
        let to = rotate_files(&live, policy, "20240101-000003").expect("rotate");
        assert_eq!(to, Some(d.join("0.log.20240101-000003")));
        assert!(!live.exists());
    }

    #[test]
    fn two_files_keep_only_the_last_rotation() {
        let d = dir("two");
        let live = d.join("0.log");
        let policy = Policy {
            max_bytes: 1,
            max_files: 2,
        };
        for s in ["20240101-000001", "20240101-000002"] {
            fs::write(&live, s).expect("write");
            rotate_files(&live, policy, s).expect("rotate");
        }
        assert_eq!(names(&d), ["0.log.20240101-000002"]);
    }
}
