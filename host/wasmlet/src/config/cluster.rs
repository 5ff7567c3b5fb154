//! How the node talks to its API server: node status and lease timing
//! (`nodeStatusUpdateFrequency`, `nodeStatusReportFrequency`, `nodeLeaseDurationSeconds`)
//! and request rates (`kubeAPIQPS`, `kubeAPIBurst`, `eventRecordQPS`, `eventBurst`).

use anyhow::{Result, bail};
use wasmlet_cluster::Limits;
use wasmlet_cluster::node::Timing;

use super::file::File;

/// Status and lease timing (zeros were defaulted before).
pub(super) fn timing(f: &File) -> Result<Timing> {
    let lease_seconds = match f.node_lease_duration_seconds {
        n if n > 0 => i32::try_from(n).unwrap_or(i32::MAX),
        n => bail!("nodeLeaseDurationSeconds: {n} must be more than 0"),
    };
    Ok(Timing {
        update: f.node_status_update_frequency.0,
        report: f.node_status_report_frequency.0,
        lease_seconds,
    })
}

/// A QPS / burst pair.
fn rate(
    qps_field: &str,
    qps: Option<f64>,
    burst_field: &str,
    burst: i64,
    default_qps: f64,
) -> Result<(f64, u32)> {
    let qps = match qps {
        None => default_qps,
        Some(q) if q.is_finite() && q >= 0.0 => q,
        Some(q) => bail!("{qps_field}: {q} must be 0 or more"),
    };
    let burst = match burst {
        b if b > 0 => u32::try_from(b).unwrap_or(u32::MAX),
        b => bail!("{burst_field}: {b} must be more than 0"),
    };
    Ok((qps, burst))
}

/// Request rates.
pub(super) fn limits(f: &File) -> Result<Limits> {
    let d = Limits::default();
    let (api_qps, api_burst) = rate(
        "kubeAPIQPS",
        f.kube_api_qps,
        "kubeAPIBurst",
        f.kube_api_burst,
        d.api_qps,
    )?;
    let (event_qps, event_burst) = rate(
        "eventRecordQPS",
        f.event_record_qps,
        "eventBurst",
        f.event_burst,
        d.event_qps,
    )?;
    Ok(Limits {
        api_qps,
        api_burst,
        event_qps,
        event_burst,
    })
}
