//! Reading a container's log file into what `kubectl logs` prints: records parsed,
//! partial lines joined, `tailLines`, `sinceTime`, `limitBytes`, `timestamps`, and
//! `follow` — which waits for the file to grow (inotify on the container's log
//! directory), moves to the new file when it is rotated (once the runtime has written
//! to it, so that nothing the old one still got is missed), and ends once the
//! container has stopped and everything it wrote has been read.
//!
//! Reading is plain blocking I/O on a thread of its own, in chunks of 64 KiB handed to
//! the caller: memory stays constant however long the file, and a client that goes away
//! ends the reader at its next chunk or within a second while following.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use crate::parse;

/// How much is handed to the caller at once.
const CHUNK: usize = 64 * 1024;

/// How often a follower without news checks whether the container still runs (the
/// kubelet's state check period).
const STATE_CHECK: Duration = Duration::from_secs(1);

/// The query of a log request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// `tailLines`: only the last N records (`None`: all).
    pub tail_lines: Option<u64>,
    /// `limitBytes`: stop after this much output.
    pub limit_bytes: Option<u64>,
    /// `sinceSeconds` / `sinceTime`, as Unix nanoseconds: records before it are skipped.
    pub since_nanos: Option<i64>,
    /// `timestamps`: each line starts with its RFC 3339 timestamp.
    pub timestamps: bool,
    /// `follow`: keep streaming until the container stops.
    pub follow: bool,
    /// `previous`: the last terminated instance.
    pub previous: bool,
}

/// What the reader asks of its caller.
pub trait Sink {
    /// Takes a chunk of output; `false` when the client is gone (reading stops).
    fn write(&mut self, chunk: Vec<u8>) -> bool;
    /// Whether the client is gone (checked while following a quiet file).
    fn closed(&self) -> bool;
    /// Whether the container still runs (checked while following a quiet file).
    fn running(&self) -> bool;
}

/// Why reading stopped early.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be read.
    #[error("failed to read log file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// The offset where the last `n` records of `f` start.
pub fn tail_start(f: &mut File, n: u64) -> io::Result<u64> {
    let len = f.metadata()?.len();
    if n == 0 {
        return Ok(len);
    }
    let mut buf = vec![0u8; CHUNK];
    let mut pos = len;
    let mut seen = 0u64;
    while pos > 0 {
        let size = usize::try_from(pos.min(CHUNK as u64)).unwrap_or(CHUNK);
        pos -= size as u64;
        f.seek(SeekFrom::Start(pos))?;
        f.read_exact(&mut buf[..size])?;
        for i in (0..size).rev() {
            let at = pos + i as u64;
            // The newline that ends the file ends the last record, it does not start one.
            if buf[i] == b'\n' && at + 1 != len {
                seen += 1;
                if seen == n {
                    return Ok(at + 1);
                }
            }
        }
    }
    Ok(0)
}

/// Turns records into output, applying `since`, `timestamps` and `limitBytes`.
struct Writer<'a, S: Sink> {
    opts: &'a LogOptions,
    sink: &'a mut S,
    out: Vec<u8>,
    remaining: Option<u64>,
    /// The sink refused, or the limit is reached.
    done: bool,
}

impl<S: Sink> Writer<'_, S> {
    fn record(&mut self, line: &[u8]) {
        if self.done {
            return;
        }
        let Ok(r) = parse::parse(line) else {
            // A line that is not a record (a runtime's stray write) is skipped, as the
            // kubelet does.
            return;
        };
        if self.opts.since_nanos.is_some_and(|since| r.time < since) {
            return;
        }
        let start = self.out.len();
        if self.opts.timestamps {
            parse::format_time(r.time, &mut self.out);
            self.out.push(b' ');
        }
        self.out.extend_from_slice(r.content);
        if !r.partial {
            self.out.push(b'\n');
        }
        if let Some(left) = &mut self.remaining {
            let wrote = (self.out.len() - start) as u64;
            if wrote >= *left {
                self.out
                    .truncate(start + usize::try_from(*left).unwrap_or(0));
                *left = 0;
                self.done = true;
                self.flush();
                return;
            }
            *left -= wrote;
        }
        if self.out.len() >= CHUNK {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.out.is_empty() {
            return;
        }
        let chunk = std::mem::replace(&mut self.out, Vec::with_capacity(CHUNK + 4096));
        if !self.sink.write(chunk) {
            self.done = true;
        }
    }
}

/// Reads every complete record from `reader` to its end; a record still being written
/// (no newline yet) stays in `pending` when following, and is taken as it is otherwise.
fn drain<S: Sink>(
    reader: &mut BufReader<File>,
    pending: &mut Vec<u8>,
    follow: bool,
    w: &mut Writer<'_, S>,
) -> io::Result<()> {
    loop {
        if w.done {
            return Ok(());
        }
        let n = reader.read_until(b'\n', pending)?;
        if n == 0 {
            if !follow && !pending.is_empty() {
                w.record(pending);
                pending.clear();
            }
            return Ok(());
        }
        if pending.last() == Some(&b'\n') {
            w.record(pending);
            pending.clear();
        }
    }
}

/// Watches the directory holding `path` for writes, creations and renames.
fn watch(path: &Path) -> Option<(notify::INotifyWatcher, mpsc::Receiver<()>)> {
    use notify::Watcher;
    let (tx, rx) = mpsc::channel();
    let mut watcher = notify::INotifyWatcher::new(
        move |_: notify::Result<notify::Event>| {
            let _ = tx.send(());
        },
        notify::Config::default(),
    )
    .ok()?;
    watcher
        .watch(path.parent()?, notify::RecursiveMode::NonRecursive)
        .ok()?;
    Some((watcher, rx))
}

/// Streams the log at `path` to `sink` as `opts` asks. `file` is the log, already
/// opened by the caller (so that a missing file is the caller's clear error).
pub fn read<S: Sink>(
    path: &Path,
    mut file: File,
    opts: &LogOptions,
    sink: &mut S,
) -> Result<(), ReadError> {
    let io_err = |source| ReadError::Io {
        path: path.display().to_string(),
        source,
    };
    // Watch before reading, so that nothing written meanwhile is missed.
    let watcher = if opts.follow { watch(path) } else { None };
    let start = match opts.tail_lines {
        Some(n) => tail_start(&mut file, n).map_err(io_err)?,
        None => 0,
    };
    file.seek(SeekFrom::Start(start)).map_err(io_err)?;
    let mut inode = file.metadata().map_err(io_err)?.ino();
    let mut reader = BufReader::with_capacity(CHUNK, file);
    let mut w = Writer {
        opts,
        remaining: opts.limit_bytes,
        sink,
        out: Vec::with_capacity(CHUNK + 4096),
        done: false,
    };
    let mut pending = Vec::new();
    loop {
        drain(&mut reader, &mut pending, opts.follow, &mut w).map_err(io_err)?;
        if !opts.follow || w.done {
            break;
        }
        w.flush();
        // Rotated: the path names a new file. The runtime may still be writing to the
        // old one until it has reopened; once the new one holds something, the old one
        // is complete: read what is left of it, then go on from the start of the new.
        if let Ok(meta) = std::fs::metadata(path)
            && meta.ino() != inode
            && meta.len() > 0
            && let Ok(next) = File::open(path)
        {
            drain(&mut reader, &mut pending, false, &mut w).map_err(io_err)?;
            inode = meta.ino();
            pending.clear();
            reader = BufReader::with_capacity(CHUNK, next);
            continue;
        }
        // Without inotify (out of watches), the file is read again every state check.
        let woke = match &watcher {
            Some((_, rx)) => rx.recv_timeout(STATE_CHECK).is_ok(),
            None => {
                std::thread::sleep(STATE_CHECK);
                false
            }
        };
        if let Some((_, rx)) = &watcher {
            // One read answers a burst of events.
            while rx.try_recv().is_ok() {}
        }
        if w.sink.closed() {
            return Ok(());
        }
        if !woke && !w.sink.running() {
            // Stopped: whatever it wrote last is read, then the stream ends.
            drain(&mut reader, &mut pending, false, &mut w).map_err(io_err)?;
            break;
        }
    }
    w.flush();
    Ok(())
}

/// Gathers a finished read's output.
struct Gather(Vec<u8>);

impl Sink for Gather {
    fn write(&mut self, chunk: Vec<u8>) -> bool {
        self.0.extend_from_slice(&chunk);
        true
    }
    fn closed(&self) -> bool {
        false
    }
    fn running(&self) -> bool {
        false
    }
}

/// The log at `path` read as `opts` asks (never following), all at once: for small
/// reads, such as the end of a log a termination message is taken from.
pub fn read_to_vec(path: &Path, opts: &LogOptions) -> Result<Vec<u8>, ReadError> {
    let file = File::open(path).map_err(|source| ReadError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let opts = LogOptions {
        follow: false,
        ..opts.clone()
    };
    let mut out = Gather(Vec::new());
    read(path, file, &opts, &mut out)?;
    Ok(out.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[derive(Default)]
    struct Collect {
        out: Vec<u8>,
        running: Arc<AtomicBool>,
    }

    impl Sink for Collect {
        fn write(&mut self, chunk: Vec<u8>) -> bool {
            self.out.extend_from_slice(&chunk);
            true
        }
        fn closed(&self) -> bool {
            false
        }
        fn running(&self) -> bool {
            self.running.load(Ordering::SeqCst)
        }
    }

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("wasmlet-logs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        d
    }

    const LOG: &str = "2024-01-01T00:00:01.000000000Z stdout F one\n\
                       2024-01-01T00:00:02.000000000Z stderr P tw\n\
                       2024-01-01T00:00:02.500000000Z stderr F o\n\
                       not a record\n\
                       2024-01-01T00:00:03.000000000Z stdout F three\n";

    fn read_with(opts: LogOptions) -> String {
        let d = dir("opts");
        let path = d.join("0.log");
        std::fs::write(&path, LOG).expect("write");
        let mut c = Collect::default();
        read(&path, File::open(&path).expect("open"), &opts, &mut c).expect("read");
        String::from_utf8(c.out).expect("utf-8")
    }

    #[test]
    fn every_option_shapes_the_output() {
        assert_eq!(read_with(LogOptions::default()), "one\ntwo\nthree\n");
        let tail = |n| {
            read_with(LogOptions {
                tail_lines: Some(n),
                ..Default::default()
            })
        };
        assert_eq!(tail(1), "three\n");
        assert_eq!(
            tail(2),
            "three\n",
            "the stray line counts as a record, as upstream"
        );
        assert_eq!(
            tail(3),
            "o\nthree\n",
            "a partial line's tail starts mid-line"
        );
        assert_eq!(tail(0), "");
        assert_eq!(tail(100), "one\ntwo\nthree\n");
        let since = parse::parse_time(b"2024-01-01T00:00:02Z");
        assert_eq!(
            read_with(LogOptions {
                since_nanos: since,
                ..Default::default()
            }),
            "two\nthree\n"
        );
        assert_eq!(
            read_with(LogOptions {
                limit_bytes: Some(6),
                ..Default::default()
            }),
            "one\ntw"
        );
        assert_eq!(
            read_with(LogOptions {
                timestamps: true,
                tail_lines: Some(1),
                ..Default::default()
            }),
            "2024-01-01T00:00:03.000000000Z three\n"
        );
    }

    #[test]
    fn tail_of_a_file_larger_than_a_chunk() {
        let d = dir("big");
        let path = d.join("0.log");
        let mut f = File::create(&path).expect("create");
        for i in 0..20_000 {
            writeln!(f, "2024-01-01T00:00:00Z stdout F line {i:05}").expect("write");
        }
        drop(f);
        let mut c = Collect::default();
        let opts = LogOptions {
            tail_lines: Some(3),
            ..Default::default()
        };
        read(&path, File::open(&path).expect("open"), &opts, &mut c).expect("read");
        assert_eq!(c.out, b"line 19997\nline 19998\nline 19999\n");
    }

    #[test]
    fn follow_reads_new_lines_across_a_rotation_until_the_container_stops() {
        let d = dir("follow");
        let path = d.join("0.log");
        std::fs::write(&path, "2024-01-01T00:00:01Z stdout F before\n").expect("write");
        let running = Arc::new(AtomicBool::new(true));
        let mut c = Collect {
            out: Vec::new(),
            running: running.clone(),
        };
        let opts = LogOptions {
            follow: true,
            ..Default::default()
        };
        let reader = {
            let path = path.clone();
            std::thread::spawn(move || {
                read(&path, File::open(&path).expect("open"), &opts, &mut c).expect("read");
                c.out
            })
        };
        let append = |text: &str| {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&path)
                .expect("open");
            f.write_all(text.as_bytes()).expect("append");
        };
        std::thread::sleep(Duration::from_millis(100));
        append("2024-01-01T00:00:02Z stdout F after\n");
        // Half a record, then the rest: never printed in two pieces.
        append("2024-01-01T00:00:03Z stdout F hal");
        std::thread::sleep(Duration::from_millis(100));
        append("ves\n");
        std::thread::sleep(Duration::from_millis(100));
        // Rotation: the file is renamed away and a new, empty one takes its place; the
        // runtime writes to the old one once more before it reopens.
        let old = d.join("0.log.20240101-000004");
        std::fs::rename(&path, &old).expect("rotate");
        File::create(&path).expect("reopened");
        std::thread::sleep(Duration::from_millis(100));
        let mut late = std::fs::OpenOptions::new()
            .append(true)
            .open(&old)
            .expect("old");
        late.write_all(b"2024-01-01T00:00:04.5Z stdout F late\n")
            .expect("late write");
        std::thread::sleep(Duration::from_millis(100));
        append("2024-01-01T00:00:05Z stdout F rotated\n");
        std::thread::sleep(Duration::from_millis(200));
        running.store(false, Ordering::SeqCst);
        append("2024-01-01T00:00:06Z stdout F last words\n");
        let out = reader.join().expect("reader");
        assert_eq!(
            String::from_utf8_lossy(&out),
            "before\nafter\nhalves\nlate\nrotated\nlast words\n"
        );
    }
}
