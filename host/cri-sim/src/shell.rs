//! What a container's command would do, without running it.
//!
//! The simulator gives the same answers as containerd for the commands tests and
//! manifests actually use: `true`, `false`, `sleep N`, and `sh -c` scripts made of
//! `exit`, `echo`, `sleep`, `touch`, `rm`, `cat`, `test`/`[`, `trap ... TERM` and
//! `while` loops, joined with `;`, `&&`, `||`, newlines and `&`. [`interpret`] turns such
//! a command into a [`Program`]: when the process ends on its own (and with which code),
//! what it prints, which files it creates or removes over time, and whether it traps
//! SIGTERM.
//!
//! Anything else (`httpd -f`, `nc -l`, a `for` loop) is taken as a long-running server
//! when it is the container's main process, and as a successful command under `exec`.

use std::collections::HashMap;
use std::time::Duration;

/// Whether the command is a container's main process or an `ExecSync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The container's entrypoint: unknown commands run forever (servers).
    Main,
    /// An ExecSync: unknown commands succeed at once.
    Exec,
}

/// How a process ends when nothing stops it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// It exits with `code` after running for `after`.
    Exit {
        /// Run time before the exit.
        after: Duration,
        /// Exit status.
        code: i32,
    },
    /// It runs until stopped.
    Forever,
}

/// A change a process makes to its container's filesystem, at an offset from its start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// The file exists from now on, with this content.
    Write(String, Vec<u8>),
    /// The file is gone from now on.
    Remove(String),
}

/// The predicted behaviour of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// How it ends on its own.
    pub end: End,
    /// Its standard output (everything it prints before `end`).
    pub stdout: Vec<u8>,
    /// Its standard error.
    pub stderr: Vec<u8>,
    /// Filesystem changes, each at its offset from the start.
    pub effects: Vec<(Duration, Effect)>,
    /// `Some(code)` when the script traps SIGTERM and exits with `code`.
    pub on_term: Option<i32>,
}

/// The files a command can see: those its container's processes wrote, minus those they
/// removed. Paths under the image's system directories always exist.
#[derive(Debug, Clone, Default)]
pub struct Files {
    written: HashMap<String, Option<Vec<u8>>>,
}

const SYSTEM_DIRS: &[&str] = &[
    "/bin/", "/etc/", "/proc/", "/sys/", "/dev/", "/usr/", "/sbin/",
];

impl Files {
    /// Applies one effect.
    pub fn apply(&mut self, effect: &Effect) {
        match effect {
            Effect::Write(p, data) => {
                self.written.insert(p.clone(), Some(data.clone()));
            }
            Effect::Remove(p) => {
                self.written.insert(p.clone(), None);
            }
        }
    }

    /// The file's content when it exists (empty for system files).
    pub fn read(&self, path: &str) -> Option<Vec<u8>> {
        match self.written.get(path) {
            Some(state) => state.clone(),
            None if ["/", "/tmp", "/root", "/var"].contains(&path)
                || SYSTEM_DIRS
                    .iter()
                    .any(|d| path.starts_with(d) || path == d.trim_end_matches('/')) =>
            {
                Some(Vec::new())
            }
            None => None,
        }
    }
}

/// Predicts what `argv` does, starting from the files in `files`.
pub fn interpret(argv: &[String], files: &Files, mode: Mode) -> Program {
    let mut sh = Shell {
        mode,
        t: Duration::ZERO,
        status: 0,
        files: files.clone(),
        out: Program::empty(),
    };
    let end = match sh.command(argv, Redirect::None) {
        Flow::Next => End::Exit {
            after: sh.t,
            code: sh.status,
        },
        Flow::Exit(code) => End::Exit { after: sh.t, code },
        Flow::Forever => End::Forever,
    };
    sh.out.end = end;
    sh.out
}

impl Program {
    fn empty() -> Self {
        Self {
            end: End::Forever,
            stdout: Vec::new(),
            stderr: Vec::new(),
            effects: Vec::new(),
            on_term: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Next,
    Exit(i32),
    Forever,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Redirect {
    None,
    Stderr,
    File(String, bool),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    /// `;`, newline, `&&`, `||`, `&`, `|`
    Op(&'static str),
    /// `>`, `>>`, `>&2`, `2>&1`, `2>`
    Redir(&'static str),
}

struct Shell {
    mode: Mode,
    t: Duration,
    status: i32,
    files: Files,
    out: Program,
}

impl Shell {
    fn write(&mut self, redirect: &Redirect, data: &[u8]) {
        match redirect {
            Redirect::None => self.out.stdout.extend_from_slice(data),
            Redirect::Stderr => self.out.stderr.extend_from_slice(data),
            Redirect::File(path, append) => {
                let mut content = if *append {
                    self.files.read(path).unwrap_or_default()
                } else {
                    Vec::new()
                };
                content.extend_from_slice(data);
                self.effect(Effect::Write(path.clone(), content));
            }
        }
    }

    fn effect(&mut self, effect: Effect) {
        self.files.apply(&effect);
        self.out.effects.push((self.t, effect));
    }

    /// Runs one simple command.
    fn command(&mut self, argv: &[String], redirect: Redirect) -> Flow {
        let Some(cmd) = argv.first() else {
            return Flow::Next;
        };
        let name = cmd.rsplit('/').next().unwrap_or(cmd);
        let args = &argv[1..];
        match name {
            "sh" | "ash" | "bash" | "dash" => self.shell(args, redirect),
            "exit" => Flow::Exit(
                args.first()
                    .and_then(|a| a.parse().ok())
                    .unwrap_or(self.status),
            ),
            "true" | ":" => self.set(0),
            "false" => self.set(1),
            "sleep" => self.sleep(args),
            "echo" | "printf" => self.echo(name == "echo", args, &redirect),
            "touch" => {
                for path in args.iter().filter(|a| !a.starts_with('-')) {
                    let content = self.files.read(path).unwrap_or_default();
                    self.effect(Effect::Write(path.clone(), content));
                }
                self.set(0)
            }
            "rm" => self.rm(args),
            "mkdir" | "cd" | "export" | "set" | "wait" | "kill" | "ulimit" | "umask" => self.set(0),
            "cat" => self.each_file(
                args,
                |path, data| match data {
                    Some(data) => Ok(data),
                    None => Err(format!(
                        "cat: can't open '{path}': No such file or directory\n"
                    )),
                },
                &redirect,
            ),
            "ls" => self.each_file(
                args,
                |path, data| match data {
                    Some(_) => Ok(format!("{path}\n").into_bytes()),
                    None => Err(format!("ls: {path}: No such file or directory\n")),
                },
                &redirect,
            ),
            "test" | "[" => {
                let mut words: Vec<&str> = args.iter().map(String::as_str).collect();
                if name == "[" && words.last() == Some(&"]") {
                    words.pop();
                }
                let ok = self.test(&words);
                self.set(if ok { 0 } else { 1 })
            }
            "trap" => self.trap(args),
            "exec" => match self.command(args, redirect) {
                Flow::Next => Flow::Exit(self.status),
                other => other,
            },
            _ => match self.mode {
                Mode::Main => Flow::Forever,
                Mode::Exec => self.set(0),
            },
        }
    }

    /// `sh -c SCRIPT`; a shell with no script and no stdin reads EOF and exits.
    fn shell(&mut self, args: &[String], redirect: Redirect) -> Flow {
        match args.iter().position(|a| a == "-c") {
            Some(i) => match args.get(i + 1) {
                Some(script) => self.script(script),
                None => self.fail(redirect, "sh: -c requires an argument", 2),
            },
            None => Flow::Exit(0),
        }
    }

    /// `sleep N` (time moves on), `sleep infinity` (forever).
    fn sleep(&mut self, args: &[String]) -> Flow {
        match args.first().map(String::as_str) {
            Some("infinity") => Flow::Forever,
            Some(arg) => match parse_sleep(arg) {
                Some(d) => {
                    self.t += d;
                    self.set(0)
                }
                None => self.fail(
                    Redirect::Stderr,
                    &format!("sleep: invalid number '{arg}'"),
                    1,
                ),
            },
            None => self.fail(Redirect::Stderr, "sleep: missing operand", 1),
        }
    }

    /// `echo` (a newline after, unless `-n`) and `printf` (none).
    fn echo(&mut self, echo: bool, args: &[String], redirect: &Redirect) -> Flow {
        let (newline, words) = match args.first().map(String::as_str) {
            Some("-n") => (false, &args[1..]),
            _ => (echo, args),
        };
        let mut text = words.join(" ");
        if newline {
            text.push('\n');
        }
        self.write(redirect, text.as_bytes());
        self.set(0)
    }

    /// `rm [-f] PATH…`.
    fn rm(&mut self, args: &[String]) -> Flow {
        let force = args.iter().any(|a| a.starts_with('-') && a.contains('f'));
        let mut status = 0;
        for path in args.iter().filter(|a| !a.starts_with('-')) {
            if self.files.read(path).is_some() {
                self.effect(Effect::Remove(path.clone()));
            } else if !force {
                let msg = format!("rm: can't remove '{path}': No such file or directory\n");
                self.write(&Redirect::Stderr, msg.as_bytes());
                status = 1;
            }
        }
        self.set(status)
    }

    /// A command over files (`cat`, `ls`): what `each` makes of every path (and its
    /// content, if it exists) is written out, or its error to stderr (status 1).
    fn each_file(
        &mut self,
        args: &[String],
        each: impl Fn(&str, Option<Vec<u8>>) -> Result<Vec<u8>, String>,
        redirect: &Redirect,
    ) -> Flow {
        let mut status = 0;
        for path in args.iter().filter(|a| !a.starts_with('-')) {
            match each(path, self.files.read(path)) {
                Ok(out) => self.write(redirect, &out),
                Err(msg) => {
                    self.write(&Redirect::Stderr, msg.as_bytes());
                    status = 1;
                }
            }
        }
        self.set(status)
    }

    /// `trap BODY SIG...`: records the exit code a TERM would produce.
    fn trap(&mut self, args: &[String]) -> Flow {
        if let Some((body, sigs)) = args.split_first()
            && sigs
                .iter()
                .any(|s| matches!(s.as_str(), "TERM" | "SIGTERM" | "15"))
        {
            let words = tokenize(body);
            self.out.on_term = match words.as_slice() {
                [Token::Word(e)] if e == "exit" => Some(0),
                [Token::Word(e), Token::Word(n), ..] if e == "exit" => n.parse().ok().or(Some(0)),
                [] => None,
                _ => Some(143),
            };
        }
        self.set(0)
    }

    fn set(&mut self, status: i32) -> Flow {
        self.status = status;
        Flow::Next
    }

    fn fail(&mut self, redirect: Redirect, msg: &str, status: i32) -> Flow {
        let redirect = if redirect == Redirect::None {
            Redirect::Stderr
        } else {
            redirect
        };
        self.write(&redirect, format!("{msg}\n").as_bytes());
        self.set(status)
    }

    fn test(&self, words: &[&str]) -> bool {
        match words {
            ["!", rest @ ..] => !self.test(rest),
            [] => false,
            [s] => !s.is_empty(),
            ["-e" | "-f" | "-d" | "-r" | "-x", path] => self.files.read(path).is_some(),
            ["-s", path] => self.files.read(path).is_some_and(|d| !d.is_empty()),
            ["-z", s] => s.is_empty(),
            ["-n", s] => !s.is_empty(),
            [a, "=" | "==", b] => a == b,
            [a, "!=", b] => a != b,
            [a, op @ ("-eq" | "-ne" | "-lt" | "-le" | "-gt" | "-ge"), b] => {
                let (Ok(a), Ok(b)) = (a.parse::<i64>(), b.parse::<i64>()) else {
                    return false;
                };
                match *op {
                    "-eq" => a == b,
                    "-ne" => a != b,
                    "-lt" => a < b,
                    "-le" => a <= b,
                    "-gt" => a > b,
                    _ => a >= b,
                }
            }
            _ => false,
        }
    }

    /// Runs an `sh -c` script.
    fn script(&mut self, text: &str) -> Flow {
        let tokens = tokenize(text);
        let mut i = 0;
        // What joined the previous command to this one.
        let mut joiner: &str = ";";
        while i < tokens.len() {
            // Collect one simple command: words and redirections up to an operator.
            let mut words = Vec::new();
            let mut redirect = Redirect::None;
            while let Some(tok) = tokens.get(i) {
                match tok {
                    Token::Word(w) => words.push(w.clone()),
                    Token::Redir(r) => match *r {
                        ">&2" => redirect = Redirect::Stderr,
                        "2>&1" => {}
                        ">" | ">>" | "2>" => {
                            i += 1;
                            if let Some(Token::Word(path)) = tokens.get(i)
                                && *r != "2>"
                            {
                                redirect = Redirect::File(path.clone(), *r == ">>");
                            }
                        }
                        _ => {}
                    },
                    Token::Op(_) => break,
                }
                i += 1;
            }
            let op = match tokens.get(i) {
                Some(Token::Op(op)) => *op,
                _ => ";",
            };
            i += 1;
            let run = match joiner {
                "&&" => self.status == 0,
                "||" => self.status != 0,
                _ => true,
            };
            joiner = op;
            if !run || words.is_empty() {
                continue;
            }
            if matches!(words[0].as_str(), "while" | "until") {
                // A loop: the script never gets past it.
                return Flow::Forever;
            }
            if op == "&" {
                // Backgrounded: its side effects happen, its time and its end do not.
                let (t, status) = (self.t, self.status);
                let _ = self.command(&words, redirect);
                self.t = t;
                self.status = status;
                continue;
            }
            match self.command(&words, redirect) {
                Flow::Next => {}
                other => return other,
            }
        }
        Flow::Next
    }
}

/// `sleep` arguments: seconds with an optional fraction and an optional s/m/h/d suffix.
fn parse_sleep(arg: &str) -> Option<Duration> {
    let (num, unit) = match arg.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => arg.split_at(i),
        None => (arg, "s"),
    };
    let n: f64 = num
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)?;
    let scale = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(n * scale))
}

/// Splits a script into words, operators and redirections, honouring quotes and escapes.
fn tokenize(text: &str) -> Vec<Token> {
    let mut lexer = Lexer {
        tokens: Vec::new(),
        word: String::new(),
        in_word: false,
        chars: text.chars().peekable(),
    };
    while let Some(c) = lexer.chars.next() {
        lexer.take(c);
    }
    lexer.flush();
    lexer.tokens
}

/// The tokenizer's state: the tokens so far and the word being read.
struct Lexer<'a> {
    tokens: Vec<Token>,
    word: String,
    in_word: bool,
    chars: std::iter::Peekable<std::str::Chars<'a>>,
}

impl Lexer<'_> {
    /// Ends the word being read, if any.
    fn flush(&mut self) {
        if self.in_word {
            self.tokens
                .push(Token::Word(std::mem::take(&mut self.word)));
            self.in_word = false;
        }
    }

    /// Whether the next character is `c` (taken if so).
    fn next_is(&mut self, c: char) -> bool {
        self.chars.next_if_eq(&c).is_some()
    }

    fn take(&mut self, c: char) {
        match c {
            '\'' => {
                self.in_word = true;
                for c in self.chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    self.word.push(c);
                }
            }
            '"' => self.double_quoted(),
            '\\' => {
                self.in_word = true;
                if let Some(n) = self.chars.next()
                    && n != '\n'
                {
                    self.word.push(n);
                }
            }
            ' ' | '\t' => self.flush(),
            '#' if !self.in_word => {
                // A comment runs to the end of the line.
                if self.chars.by_ref().any(|c| c == '\n') {
                    self.tokens.push(Token::Op(";"));
                }
            }
            ';' | '\n' => {
                self.flush();
                self.tokens.push(Token::Op(";"));
            }
            '&' => {
                self.flush();
                let op = if self.next_is('&') { "&&" } else { "&" };
                self.tokens.push(Token::Op(op));
            }
            '|' => {
                self.flush();
                // A pipe runs its commands one after the other here.
                let op = if self.next_is('|') { "||" } else { ";" };
                self.tokens.push(Token::Op(op));
            }
            '>' => self.redirect(),
            _ => {
                self.in_word = true;
                self.word.push(c);
            }
        }
    }

    /// A double-quoted string: backslash escapes the next character.
    fn double_quoted(&mut self) {
        self.in_word = true;
        while let Some(c) = self.chars.next() {
            match c {
                '"' => break,
                '\\' => {
                    if let Some(n) = self.chars.next() {
                        self.word.push(n);
                    }
                }
                _ => self.word.push(c),
            }
        }
    }

    /// `>`, `>>`, `2>`, `1>`, `>&2` and `2>&1` (a `1` or `2` just read is the
    /// descriptor, not a word).
    fn redirect(&mut self) {
        let fd2 = self.word == "2" && self.in_word;
        let fd1 = self.word == "1" && self.in_word;
        if fd2 || fd1 {
            self.word.clear();
            self.in_word = false;
        } else {
            self.flush();
        }
        let redirect = if self.next_is('&') {
            match (fd2, self.chars.next()) {
                (true, _) => "2>&1",
                (false, Some('2')) => ">&2",
                _ => "2>&1",
            }
        } else if self.next_is('>') {
            if fd2 { "2>" } else { ">>" }
        } else if fd2 {
            "2>"
        } else {
            ">"
        };
        self.tokens.push(Token::Redir(redirect));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(argv: &[&str], mode: Mode) -> Program {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        interpret(&argv, &Files::default(), mode)
    }

    fn exit(after_ms: u64, code: i32) -> End {
        End::Exit {
            after: Duration::from_millis(after_ms),
            code,
        }
    }

    #[test]
    fn simple_commands() {
        assert_eq!(run(&["true"], Mode::Main).end, exit(0, 0));
        assert_eq!(run(&["/bin/false"], Mode::Main).end, exit(0, 1));
        assert_eq!(run(&["sleep", "2"], Mode::Main).end, exit(2000, 0));
        assert_eq!(run(&["sleep", "infinity"], Mode::Main).end, End::Forever);
        assert_eq!(
            run(&["httpd", "-f", "-p", "80"], Mode::Main).end,
            End::Forever
        );
        assert_eq!(run(&["httpd", "-f"], Mode::Exec).end, exit(0, 0));
        assert_eq!(run(&["sh"], Mode::Main).end, exit(0, 0));
    }

    #[test]
    fn scripts_sleep_exit_and_echo() {
        let p = run(
            &["sh", "-c", "echo out; echo err >&2; sleep 0.5; exit 7"],
            Mode::Exec,
        );
        assert_eq!(p.end, exit(500, 7));
        assert_eq!(p.stdout, b"out\n");
        assert_eq!(p.stderr, b"err\n");
        assert_eq!(
            run(&["sh", "-c", "sleep 1; exit 1"], Mode::Main).end,
            exit(1000, 1)
        );
        assert_eq!(
            run(&["sh", "-c", "false && exit 3; exit 4"], Mode::Main).end,
            exit(0, 4)
        );
        assert_eq!(
            run(&["sh", "-c", "false || exit 3; exit 4"], Mode::Main).end,
            exit(0, 3)
        );
        assert_eq!(
            run(&["sh", "-c", "echo \"a  b\" 'c;d'"], Mode::Exec).stdout,
            b"a  b c;d\n"
        );
    }

    #[test]
    fn loops_and_servers_run_forever() {
        let p = run(
            &[
                "sh",
                "-c",
                "trap 'exit 0' TERM; while true; do sleep 1; done",
            ],
            Mode::Main,
        );
        assert_eq!(p.end, End::Forever);
        assert_eq!(p.on_term, Some(0));
        assert_eq!(
            run(&["sh", "-c", "httpd -f -p 8080"], Mode::Main).end,
            End::Forever
        );
        assert_eq!(
            run(&["sh", "-c", "sleep 3600 & wait"], Mode::Main).end,
            exit(0, 0)
        );
        assert_eq!(
            run(&["sh", "-c", "echo hi; exec httpd -f"], Mode::Main).end,
            End::Forever
        );
    }

    #[test]
    fn files_appear_and_disappear_over_time() {
        let p = run(
            &[
                "sh",
                "-c",
                "touch /tmp/healthy; sleep 30; rm -f /tmp/healthy; sleep 600",
            ],
            Mode::Main,
        );
        assert_eq!(
            p.effects,
            vec![
                (Duration::ZERO, Effect::Write("/tmp/healthy".into(), vec![])),
                (
                    Duration::from_secs(30),
                    Effect::Remove("/tmp/healthy".into())
                ),
            ]
        );
        assert_eq!(p.end, exit(630_000, 0));

        let mut files = Files::default();
        let cat =
            |files: &Files| interpret(&["cat".into(), "/tmp/healthy".into()], files, Mode::Exec);
        assert_eq!(cat(&files).end, exit(0, 1));
        files.apply(&p.effects[0].1);
        assert_eq!(cat(&files).end, exit(0, 0));
        let test = interpret(
            &[
                "sh".into(),
                "-c".into(),
                "[ -f /tmp/healthy ] && echo yes".into(),
            ],
            &files,
            Mode::Exec,
        );
        assert_eq!(test.stdout, b"yes\n");
        files.apply(&p.effects[1].1);
        assert_eq!(cat(&files).end, exit(0, 1));
    }

    #[test]
    fn redirects_write_files() {
        let p = run(&["sh", "-c", "echo ok > /tmp/x; cat /tmp/x"], Mode::Exec);
        assert_eq!(p.stdout, b"ok\n");
        assert_eq!(p.end, exit(0, 0));
        let p = run(&["sh", "-c", "cat /nope 2>/dev/null || exit 5"], Mode::Exec);
        assert_eq!(p.end, exit(0, 5));
    }
}
