//! The guest's side of a call: what it printed and, when the call failed, why — in the
//! words its author reads. A Python, JavaScript or Rust guest that raises, throws or
//! panics prints the exception to its stderr and then aborts, which wasmtime reports as
//! an `unreachable` trap with a backtrace of the language runtime's own functions; and a
//! guest whose allocator found no memory aborts the same way. [`Failure`] reads the
//! exception (type, message, the author's file and line) from the stderr the call left
//! and names the memory limit when it refused a growth.

mod bundle;
mod exception;
mod limits;
mod output;

pub use bundle::BundleMap;
pub use exception::{Exception, Frame};
pub use limits::{Limiter, Refused};
pub use output::{Captured, GuestOutput, KEEP_BYTES, LOG_LINES_PER_WINDOW, LOG_WINDOW, OutputLog};

pub(crate) use output::cut;

/// The longest a failure's one-line summary gets (a rejection's message, an event).
pub const SUMMARY_BYTES: usize = 512;

/// What a failed call left in its store, read once the call is over.
#[derive(Debug, Default)]
pub(crate) struct Context {
    /// The guest's stderr during the call (its last [`KEEP_BYTES`]).
    pub stderr: String,
    /// The memory growth the limit refused, if any.
    pub refused: Option<Refused>,
}

/// Why a guest's call failed, as far as the guest and its limits say.
#[derive(Debug, Clone, Default)]
pub struct Failure {
    /// The exception the guest printed before aborting, when it printed one.
    pub exception: Option<Exception>,
    /// The memory growth the plugin's memory limit refused during the call.
    pub memory: Option<Refused>,
    /// The trap or host error, without wasmtime's backtrace.
    pub trap: String,
    /// What the guest wrote to stderr during the call (its last [`KEEP_BYTES`]): the
    /// whole traceback, a panic message.
    pub stderr: String,
}

impl Failure {
    /// The failure `error` is, read with what the guest left (`context`); places in a
    /// JavaScript bundle are read back through its source map (`bundle`).
    pub(crate) fn new(
        context: Context,
        error: &wasmtime::Error,
        bundle: Option<&BundleMap>,
    ) -> Self {
        let stderr = match bundle {
            Some(map) => map.rewrite(&context.stderr),
            None => context.stderr,
        };
        Self {
            exception: Exception::parse(&stderr),
            memory: context.refused,
            trap: trap_text(error),
            stderr,
        }
    }

    /// The failure in one line of at most [`SUMMARY_BYTES`]: the exception and where it
    /// was raised, the memory limit it hit, else the guest's last word on stderr (a Rust
    /// panic's message) or the trap.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(e) = &self.exception {
            parts.push(e.to_string());
        }
        if let Some(m) = &self.memory {
            parts.push(m.to_string());
        }
        if parts.is_empty() {
            match last_words(&self.stderr) {
                Some(words) => parts.push(format!("{words} ({})", self.trap)),
                None => parts.push(self.trap.clone()),
            }
        }
        cut(&parts.join("; "), SUMMARY_BYTES).into_owned()
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.summary())
    }
}

/// The trap's own words (`wasm trap: …`), or the innermost error's, never the backtrace
/// wasmtime attaches as context.
fn trap_text(error: &wasmtime::Error) -> String {
    match error.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => trap.to_string(),
        None => error.root_cause().to_string(),
    }
}

/// The last lines a guest wrote to stderr before it aborted, when they say something
/// (a Rust panic: `panicked at src/lib.rs:9:5:` and its message on the next line).
fn last_words(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
        .collect();
    let panic = lines.iter().rposition(|l| l.contains("panicked at "));
    let words = match panic {
        Some(i) => {
            let at = lines[i].split("panicked at ").nth(1).unwrap_or_default();
            let message = lines.get(i + 1).copied().unwrap_or_default();
            format!("panicked at {}: {message}", at.trim_end_matches(':'))
        }
        None => (*lines.last()?).to_owned(),
    };
    Some(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rust_panic_is_said_with_its_place_and_message() {
        let stderr = "\nthread '<unnamed>' panicked at src/lib.rs:9:5:\nno labels on this pod\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        let f = Failure {
            trap: "wasm trap: wasm `unreachable` instruction executed".into(),
            stderr: stderr.into(),
            ..Failure::default()
        };
        assert_eq!(
            f.summary(),
            "panicked at src/lib.rs:9:5: no labels on this pod (wasm trap: wasm `unreachable` instruction executed)"
        );
    }

    #[test]
    fn a_silent_trap_is_the_trap() {
        let f = Failure {
            trap: "wasm trap: integer divide by zero".into(),
            ..Failure::default()
        };
        assert_eq!(f.summary(), "wasm trap: integer divide by zero");
    }

    #[test]
    fn the_memory_limit_is_named_beside_the_exception() {
        let f = Failure {
            exception: Exception::parse(
                "Traceback (most recent call last):\n  File \"app.py\", line 3, in decide\n    x = bytearray(1 << 30)\nMemoryError\n",
            ),
            memory: Some(Refused {
                current: 16 << 20,
                desired: (1 << 30) + (16 << 20),
                limit: 64 << 20,
            }),
            ..Failure::default()
        };
        assert_eq!(
            f.summary(),
            "MemoryError at app.py:3 in decide; memory limit of 64 MiB reached: the guest, at 16 MiB, asked for 1040 MiB"
        );
    }
}
