//! What a guest writes to its stdout and stderr. Each stream keeps its last
//! [`KEEP_BYTES`] (a failed call's error reads the exception the guest printed there);
//! after every call what was written goes to the host's log under the plugin's name,
//! bounded per call and rate-limited per plugin, so a chatty policy never floods the
//! node's log nor grows the agent's memory.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

/// The bytes each stream keeps: the end of a long traceback is where its exception is.
pub const KEEP_BYTES: usize = 16 << 10;

/// Lines of a plugin's output the log takes in [`LOG_WINDOW`]; the rest are counted.
pub const LOG_LINES_PER_WINDOW: u32 = 100;

/// The window [`LOG_LINES_PER_WINDOW`] is counted over.
pub const LOG_WINDOW: Duration = Duration::from_secs(10);

/// The longest line the log takes; a longer one is cut and says so.
const LOG_LINE_BYTES: usize = 1024;

/// One of a guest's output streams: the last [`KEEP_BYTES`] written, and how many bytes
/// before them were dropped.
#[derive(Clone, Default)]
pub struct Captured {
    inner: Arc<Mutex<Tail>>,
}

#[derive(Default)]
struct Tail {
    bytes: VecDeque<u8>,
    dropped: usize,
}

impl Captured {
    fn push(&self, data: &[u8]) {
        let mut tail = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        tail.bytes.extend(data);
        let over = tail.bytes.len().saturating_sub(KEEP_BYTES);
        if over > 0 {
            tail.bytes.drain(..over);
            tail.dropped += over;
        }
    }

    /// What was written since the last take, as text (invalid UTF-8 replaced), and how
    /// many bytes before it were dropped.
    pub fn take(&self) -> (String, usize) {
        let mut tail = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let bytes: Vec<u8> = tail.bytes.drain(..).collect();
        let dropped = std::mem::take(&mut tail.dropped);
        (String::from_utf8_lossy(&bytes).into_owned(), dropped)
    }
}

impl OutputStream for Captured {
    fn write(&mut self, bytes: bytes::Bytes) -> Result<(), StreamError> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(KEEP_BYTES)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Captured {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for Captured {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for Captured {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Captured {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

/// A guest's stdout and stderr.
#[derive(Clone, Default)]
pub struct GuestOutput {
    /// What it printed.
    pub stdout: Captured,
    /// What it reported: exceptions, panics.
    pub stderr: Captured,
}

impl GuestOutput {
    /// `wasi` with its stdout and stderr going here.
    pub fn attach<'a>(
        &self,
        wasi: &'a mut wasmtime_wasi::WasiCtxBuilder,
    ) -> &'a mut wasmtime_wasi::WasiCtxBuilder {
        wasi.stdout(self.stdout.clone()).stderr(self.stderr.clone())
    }
}

/// The per-plugin budget of output lines the log takes.
#[derive(Default)]
pub struct OutputLog {
    window: Mutex<Window>,
}

#[derive(Default)]
struct Window {
    started: Option<Instant>,
    logged: u32,
    dropped: u32,
}

impl OutputLog {
    /// Takes what `output` holds and logs it as `plugin`'s, line by line, within the
    /// budget; the lines past it are counted and said once the window ends.
    pub fn drain(&self, plugin: &str, output: &GuestOutput) {
        self.drain_stream(plugin, "stdout", &output.stdout);
        self.drain_stream(plugin, "stderr", &output.stderr);
    }

    /// Takes what one stream (`stream`: its name) holds and logs it as [`Self::drain`] does.
    pub fn drain_stream(&self, plugin: &str, stream: &str, captured: &Captured) {
        let (text, dropped) = captured.take();
        if dropped > 0 {
            self.line(
                plugin,
                stream,
                &format!("[{dropped} bytes of output not kept]"),
            );
        }
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            self.line(plugin, stream, line);
        }
    }

    fn line(&self, plugin: &str, stream: &str, line: &str) {
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if w.started
            .is_none_or(|s| now.duration_since(s) >= LOG_WINDOW)
        {
            if w.dropped > 0 {
                tracing::info!(target: "plugin", plugin, stream, "[{} lines of output not logged: more than {LOG_LINES_PER_WINDOW} in {LOG_WINDOW:?}]", w.dropped);
            }
            *w = Window {
                started: Some(now),
                logged: 0,
                dropped: 0,
            };
        }
        if w.logged >= LOG_LINES_PER_WINDOW {
            w.dropped += 1;
            return;
        }
        w.logged += 1;
        drop(w);
        let line = cut(line, LOG_LINE_BYTES);
        tracing::info!(target: "plugin", plugin, stream, "{line}");
    }
}

/// `text` cut to at most `max` bytes at a character boundary, marked when cut.
pub(crate) fn cut(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end]).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_keeps_its_last_bytes_and_counts_the_rest() {
        let c = Captured::default();
        c.push(&vec![b'a'; KEEP_BYTES]);
        c.push(b"end");
        let (text, dropped) = c.take();
        assert_eq!(dropped, 3);
        assert_eq!(text.len(), KEEP_BYTES);
        assert!(text.ends_with("aend"));
        assert_eq!(c.take(), (String::new(), 0));
    }

    #[test]
    fn a_long_line_is_cut_at_a_character_boundary() {
        assert_eq!(cut("héllo", 2), "h…");
        assert_eq!(cut("hello", 5), "hello");
    }
}
