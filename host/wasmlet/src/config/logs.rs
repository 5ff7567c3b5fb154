//! Container log rotation's part of the configuration: `containerLogMaxSize` (10Mi),
//! `containerLogMaxFiles` (5), `containerLogMaxWorkers` (1) and
//! `containerLogMonitorInterval` (10s), checked as the kubelet checks them.

use std::time::Duration;

use anyhow::{Result, bail};
use wasmlet_logs::{Policy, Rotation};
use wasmlet_plugin_host::convert::{parse_duration, parse_quantity};

/// The fields as written.
#[derive(Debug, Default)]
pub(super) struct LogFields {
    pub max_size: Option<serde_yaml_ng::Value>,
    pub max_files: Option<i64>,
    pub max_workers: Option<i64>,
    pub monitor_interval: Option<String>,
}

/// The rotation the fields ask for.
pub(super) fn rotation(f: LogFields) -> Result<Rotation> {
    let d = Rotation::default();
    let max_bytes = match f.max_size {
        None => d.policy.max_bytes,
        Some(v) => {
            let text = match v {
                serde_yaml_ng::Value::String(s) => s,
                serde_yaml_ng::Value::Number(n) => n.to_string(),
                other => bail!("containerLogMaxSize: {other:?} is not a quantity"),
            };
            match parse_quantity(&text, 0) {
                Ok(0) => bail!("containerLogMaxSize: {text:?} must be more than 0"),
                Ok(n) => n,
                Err(e) => bail!("containerLogMaxSize: {e}"),
            }
        }
    };
    let max_files = match f.max_files {
        None => d.policy.max_files,
        Some(n) if n > 1 => usize::try_from(n).unwrap_or(usize::MAX),
        Some(n) => bail!("containerLogMaxFiles: {n} must be greater than 1"),
    };
    let workers = match f.max_workers {
        None => d.workers,
        Some(n) if n >= 1 => usize::try_from(n).unwrap_or(usize::MAX),
        Some(n) => bail!("containerLogMaxWorkers: {n} must be greater than or equal to 1"),
    };
    let interval = match f.monitor_interval.as_deref() {
        None => d.interval,
        Some(t) => {
            let i = parse_duration(t)
                .map_err(|e| anyhow::anyhow!("containerLogMonitorInterval: {e}"))?;
            if i < Duration::from_secs(3) {
                bail!(
                    "containerLogMonitorInterval: {t} must be a positive time duration greater than or equal to 3s"
                );
            }
            i
        }
    };
    Ok(Rotation {
        policy: Policy {
            max_bytes,
            max_files,
        },
        interval,
        workers,
    })
}
