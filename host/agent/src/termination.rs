//! The termination message of an exited container, read as the kubelet reads it: the
//! file mounted at its `terminationMessagePath`, or the end of its log.

use wasmlet_core::runtime::{
    ContainerInfo, State, TERMINATION_MESSAGE_PATH_ANNOTATION,
    TERMINATION_MESSAGE_POLICY_ANNOTATION, container_from_status,
};
use wasmlet_cri::proto;

/// A container as ContainerStatus reports it, in `sandbox_id`, its termination message
/// read when it has exited.
pub fn observed(s: &proto::ContainerStatus, sandbox_id: &str) -> ContainerInfo {
    container_from_status(s, sandbox_id, &termination_message(s))
}

/// At most this much of a termination message file is read (its end).
pub const MAX_TERMINATION_MESSAGE: u64 = 4096;
/// `FallbackToLogsOnError` reads at most this many of the log's last lines …
pub const TERMINATION_LOG_LINES: u64 = 80;
/// … and at most this many bytes of them.
pub const TERMINATION_LOG_BYTES: u64 = 2048;

/// The termination message of an exited container, the kubelet's way: the file mounted
/// at its `terminationMessagePath` (its last 4 KiB), or — with `FallbackToLogsOnError`,
/// a non-zero exit and nothing in the file — the end of its log (the last 80 lines, at
/// most 2 KiB).
pub fn termination_message(s: &proto::ContainerStatus) -> String {
    if State::from_cri(s.state) != State::Exited {
        return String::new();
    }
    let path = s
        .annotations
        .get(TERMINATION_MESSAGE_PATH_ANNOTATION)
        .filter(|p| !p.is_empty());
    let fallback = s
        .annotations
        .get(TERMINATION_MESSAGE_POLICY_ANNOTATION)
        .is_some_and(|p| p == "FallbackToLogsOnError")
        && s.exit_code != 0
        && s.reason != "ContainerCannotRun";
    let file = path.and_then(|p| s.mounts.iter().find(|m| &m.container_path == p));
    let written = match file {
        Some(m) => match read_end(std::path::Path::new(&m.host_path), MAX_TERMINATION_MESSAGE) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return format!("Error on reading termination log {}: {e}", m.host_path),
        },
        None => String::new(),
    };
    if !written.is_empty() || !fallback || s.log_path.is_empty() {
        return written;
    }
    let opts = wasmlet_logs::LogOptions {
        tail_lines: Some(TERMINATION_LOG_LINES),
        limit_bytes: Some(TERMINATION_LOG_BYTES),
        ..Default::default()
    };
    match wasmlet_logs::read::read_to_vec(std::path::Path::new(&s.log_path), &opts) {
        Ok(out) => String::from_utf8_lossy(&out).into_owned(),
        Err(wasmlet_logs::read::ReadError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            String::new()
        }
        Err(e) => format!("Error on reading the container's log: {e}"),
    }
}

/// The last `max` bytes of the file at `path`.
fn read_end(path: &std::path::Path, max: u64) -> std::io::Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(max)))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn termination_messages_come_from_the_file_or_the_logs_end() {
        let dir = std::env::temp_dir().join(format!("wasmlet-termination-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("0.termination-log");
        let log = dir.join("0.log");
        let mut text = String::new();
        for i in 0..100 {
            text.push_str(&format!("2024-01-01T00:00:00Z stdout F line {i}\n"));
        }
        std::fs::write(&log, text).expect("log");
        let status = |policy: &str, exit_code: i32| proto::ContainerStatus {
            state: proto::ContainerState::ContainerExited as i32,
            exit_code,
            annotations: [
                (
                    TERMINATION_MESSAGE_PATH_ANNOTATION.to_string(),
                    "/dev/termination-log".to_string(),
                ),
                (
                    TERMINATION_MESSAGE_POLICY_ANNOTATION.to_string(),
                    policy.to_string(),
                ),
            ]
            .into(),
            mounts: vec![proto::Mount {
                container_path: "/dev/termination-log".into(),
                host_path: file.display().to_string(),
                ..Default::default()
            }],
            log_path: log.display().to_string(),
            ..Default::default()
        };
        std::fs::write(&file, "OK").expect("message");
        assert_eq!(
            termination_message(&status("FallbackToLogsOnError", 0)),
            "OK"
        );
        assert_eq!(termination_message(&status("File", 1)), "OK");
        std::fs::write(&file, "").expect("empty");
        assert_eq!(termination_message(&status("File", 1)), "");
        assert_eq!(
            termination_message(&status("FallbackToLogsOnError", 0)),
            "",
            "a success never reads the log"
        );
        let tail = termination_message(&status("FallbackToLogsOnError", 1));
        assert!(
            tail.starts_with("line 20\n") && tail.ends_with("line 99\n"),
            "{tail}"
        );
        assert_eq!(tail.lines().count(), 80);
        // Longer than 4 KiB: its end is kept.
        std::fs::write(&file, format!("{}END", "x".repeat(5000))).expect("long");
        let long = termination_message(&status("File", 0));
        assert_eq!(long.len(), 4096);
        assert!(long.ends_with("END"));
        // Chatty logs: at most 2 KiB of the last 80 lines.
        let mut text = String::new();
        for i in 0..100 {
            text.push_str(&format!(
                "2024-01-01T00:00:00Z stdout F {i:03} {}\n",
                "y".repeat(60)
            ));
        }
        std::fs::write(&log, text).expect("log");
        std::fs::write(&file, "").expect("empty");
        assert_eq!(
            termination_message(&status("FallbackToLogsOnError", 2)).len(),
            2048
        );
    }
}
