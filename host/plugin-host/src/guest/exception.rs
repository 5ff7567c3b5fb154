//! An exception as a guest's language runtime printed it to stderr before aborting:
//! CPython's traceback (componentize-py) and a JavaScript error with its stack
//! (componentize-js). Read from the text, so nothing in the guest has to change.

/// An exception a guest raised and did not catch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exception {
    /// Its type: `KeyError`, `TypeError`.
    pub kind: String,
    /// Its message (may be empty: a bare `raise ValueError`).
    pub message: String,
    /// Where it went, outermost call first (the order Python prints).
    pub frames: Vec<Frame>,
}

/// One call on an exception's stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The source file, as the guest names it.
    pub file: String,
    /// The line in it.
    pub line: u32,
    /// The function, when named.
    pub function: Option<String>,
}

/// Source files of the plugin SDKs and the language runtimes: a frame in them is where
/// an author's call went wrong only when no frame of the author's own is on the stack.
const SDK_FILES: [&str; 3] = ["wasmlet_plugin/", "wasmlet-plugin/", "/initializer.js"];

impl Exception {
    /// The last exception `stderr` holds, in any language this knows.
    pub fn parse(stderr: &str) -> Option<Self> {
        python(stderr).or_else(|| javascript(stderr))
    }

    /// Where the author's code raised it: the innermost frame outside the SDK (the
    /// innermost of all when every frame is the SDK's or the runtime's).
    pub fn origin(&self) -> Option<&Frame> {
        let own = |f: &&Frame| !SDK_FILES.iter().any(|s| f.file.contains(s));
        self.frames
            .iter()
            .rev()
            .find(own)
            .or_else(|| self.frames.last())
    }
}

impl std::fmt::Display for Exception {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.kind)?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        if let Some(at) = self.origin() {
            write!(f, " at {}:{}", at.file, at.line)?;
            if let Some(function) = &at.function {
                write!(f, " in {function}")?;
            }
        }
        Ok(())
    }
}

/// CPython's traceback: `Traceback (most recent call last):`, then `  File "F", line N,
/// in FN` with the source line (and carets) indented below each, then `Type: message`
/// at the margin. Of chained exceptions the last block is the one that escaped.
fn python(stderr: &str) -> Option<Exception> {
    let lines: Vec<&str> = stderr.lines().collect();
    let start = lines
        .iter()
        .rposition(|l| l.trim_end() == "Traceback (most recent call last):")?;
    let mut frames = Vec::new();
    for (i, line) in lines.iter().enumerate().skip(start + 1) {
        if let Some(rest) = line.trim_start().strip_prefix("File \"") {
            frames.extend(python_frame(rest));
        } else if line.starts_with("object address") {
            // CPython could not format the exception (no memory left to): it dumped the
            // object instead, its type on a line of its own.
            let kind = lines[i..]
                .iter()
                .find_map(|l| l.strip_prefix("object type name:"))?;
            return Some(Exception {
                kind: kind.trim().to_owned(),
                message: String::new(),
                frames,
            });
        } else if !line.starts_with(' ') && !line.trim().is_empty() {
            let (kind, message) = match line.split_once(": ") {
                Some((k, m)) => (k, m),
                None => (line.trim_end_matches(':'), ""),
            };
            return Some(Exception {
                kind: kind.trim().to_owned(),
                message: message.trim().to_owned(),
                frames,
            });
        }
    }
    None
}

/// `F", line N, in FN` (what follows `File "`).
fn python_frame(rest: &str) -> Option<Frame> {
    let (file, rest) = rest.split_once("\", line ")?;
    let (line, function) = match rest.split_once(", in ") {
        Some((n, f)) => (n, Some(f.trim().to_owned())),
        None => (rest, None),
    };
    Some(Frame {
        file: without_root(file).to_owned(),
        line: line.trim().parse().ok()?,
        function,
    })
}

/// A file as the author named it: componentize-py puts each `-p` folder of the build at
/// a numbered root (`/0/app.py` is the plugin's `app.py`, `/1/wasmlet_plugin/…` the SDK).
fn without_root(file: &str) -> &str {
    let Some(rest) = file.strip_prefix('/') else {
        return file;
    };
    match rest.split_once('/') {
        Some((n, path)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => path,
        _ => file,
    }
}

/// A JavaScript error as componentize-js's runtime prints an uncaught one: its message,
/// `Stack:`, then `function@file:line:column` per frame, innermost first. The runtime
/// leaves out the type; the SDK prints `Type: message` on the line before (see
/// plugins/js/src/errors.js), which is where the type is read from (`Error` when absent).
fn javascript(stderr: &str) -> Option<Exception> {
    let lines: Vec<&str> = stderr.lines().collect();
    let stack = lines.iter().rposition(|l| l.trim_end() == "Stack:")?;
    let message = lines.get(stack.checked_sub(1)?)?.trim();
    let announced = stack
        .checked_sub(2)
        .and_then(|i| lines[i].trim().strip_suffix(message))
        .and_then(|p| p.strip_suffix(": "))
        .filter(|kind| !kind.is_empty() && !kind.contains(' '));
    let mut frames: Vec<Frame> = lines[stack + 1..]
        .iter()
        .map_while(|l| javascript_frame(l.trim()))
        .collect();
    frames.reverse();
    Some(Exception {
        kind: announced.unwrap_or("Error").to_owned(),
        message: message.to_owned(),
        frames,
    })
}

/// `function@file:line:column` (the function may be empty).
fn javascript_frame(text: &str) -> Option<Frame> {
    let (function, place) = text.split_once('@')?;
    let mut parts = place.rsplitn(3, ':');
    let _column = parts.next()?;
    let line = parts.next()?.parse().ok()?;
    let file = parts.next()?;
    Some(Frame {
        file: file.to_owned(),
        line,
        function: (!function.is_empty()).then(|| function.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_ERROR: &str = r#"Traceback (most recent call last):
  File "/work/wasmlet_plugin/admission.py", line 40, in admit
    verdict = self.decide(pod, node)
              ^^^^^^^^^^^^^^^^^^^^^^
  File "app.py", line 11, in decide
    return lookup({})
           ^^^^^^^^^^
  File "app.py", line 5, in lookup
    return d["missing"]
           ~^^^^^^^^^^^
KeyError: 'missing'
thread '<unnamed>' panicked at src/lib.rs:1:1:
Python function threw exception
"#;

    #[test]
    fn a_python_traceback_gives_type_message_and_the_authors_line() {
        let e = Exception::parse(KEY_ERROR).expect("an exception");
        assert_eq!(e.kind, "KeyError");
        assert_eq!(e.message, "'missing'");
        assert_eq!(e.frames.len(), 3);
        assert_eq!(e.to_string(), "KeyError: 'missing' at app.py:5 in lookup");
    }

    #[test]
    fn the_sdks_frames_give_way_to_the_authors() {
        let stderr = "Traceback (most recent call last):\n  File \"app.py\", line 7, in decide\n    return reject(1, 2)\n  File \"/sdk/wasmlet_plugin/admission.py\", line 20, in reject\n    raise TypeError(\"reason must be a str\")\nTypeError: reason must be a str\n";
        let e = Exception::parse(stderr).expect("an exception");
        assert_eq!(
            e.to_string(),
            "TypeError: reason must be a str at app.py:7 in decide"
        );
    }

    #[test]
    fn of_chained_exceptions_the_last_is_read() {
        let stderr = "Traceback (most recent call last):\n  File \"app.py\", line 2, in f\nKeyError: 'a'\n\nDuring handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \"app.py\", line 4, in f\nValueError\n";
        let e = Exception::parse(stderr).expect("an exception");
        assert_eq!((e.kind.as_str(), e.message.as_str()), ("ValueError", ""));
        assert_eq!(e.to_string(), "ValueError at app.py:4 in f");
    }

    /// What componentize-js's runtime prints for an uncaught TypeError, after the SDK's
    /// `Type: message` line, with the bundle's places read back through its source map.
    const TYPE_ERROR: &str = r#"TypeError: can't access property "x", d.missing is undefined
can't access property "x", d.missing is undefined
Stack:
  lookup@app.ts:4:10
  admission<@app.ts:8:3
  admit@wasmlet-plugin/admission.js:84:16
  export_admission_0_1_0$admit@/tmp/77885e6f63bc/sources/initializer.js:2183:17

Redirecting call to abort() to mozalloc_abort
"#;

    #[test]
    fn a_javascript_error_gives_type_message_and_the_authors_line() {
        let e = Exception::parse(TYPE_ERROR).expect("an exception");
        assert_eq!(e.kind, "TypeError");
        assert_eq!(e.frames.len(), 4);
        assert_eq!(e.frames[0].line, 2183);
        assert_eq!(
            e.to_string(),
            r#"TypeError: can't access property "x", d.missing is undefined at app.ts:4 in lookup"#
        );
    }

    #[test]
    fn a_javascript_error_without_the_sdks_line_is_an_error() {
        let e = Exception::parse("boom\nStack:\n  @app.js:3:9\n").expect("an exception");
        assert_eq!(e.to_string(), "Error: boom at app.js:3");
    }

    #[test]
    fn componentize_pys_numbered_roots_are_dropped() {
        let e = Exception::parse("Traceback (most recent call last):\n  File \"/0/app.py\", line 5, in lookup\nKeyError: 'k'\n").expect("an exception");
        assert_eq!(e.to_string(), "KeyError: 'k' at app.py:5 in lookup");
        assert_eq!(without_root("/work/app.py"), "/work/app.py");
    }

    #[test]
    fn an_exception_cpython_could_not_format_is_read_from_its_dump() {
        let stderr = "Traceback (most recent call last):\n  File \"/0/app.py\", line 9, in decide\nobject address  : 0x4829b8\nobject refcount : 2\nobject type     : 0x373230\nobject type name: MemoryError\nobject repr     : MemoryError()\nlost sys.stderr\n";
        let e = Exception::parse(stderr).expect("an exception");
        assert_eq!(e.to_string(), "MemoryError at app.py:9 in decide");
    }

    #[test]
    fn text_without_an_exception_is_none() {
        assert_eq!(Exception::parse("deciding on web\n"), None);
        assert_eq!(Exception::parse(""), None);
    }
}
