//! A sample as Prometheus text, the kubelet's two usage endpoints:
//!
//! - [`resource`] — `/metrics/resource`, what metrics-server scrapes: upstream's
//!   metric names, HELP texts with their stability, `container`/`pod`/`namespace`
//!   labels, and each sample's own timestamp (milliseconds) so rates are computed over
//!   the time the values were read, not the time they were scraped.
//! - [`cadvisor`] — `/metrics/cadvisor`, the cAdvisor metrics dashboards use most (CPU,
//!   memory, filesystem, network, start time) with cAdvisor's labels: `container`
//!   (empty for the pod's own cgroup), `id` (the cgroup), `image`, `name`, `namespace`,
//!   `pod`.

use std::fmt::Write;

use crate::collect::Sample;

/// Writes `# HELP` and `# TYPE`.
fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Escapes a label value as the text format wants.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Writes one line: `name{labels} value [timestamp]`; labels sorted by name.
fn line(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64, ms: Option<i64>) {
    out.push_str(name);
    if !labels.is_empty() {
        let mut sorted = labels.to_vec();
        sorted.sort_by_key(|(k, _)| *k);
        out.push('{');
        for (i, (k, v)) in sorted.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"{}\"", escape(v));
        }
        out.push('}');
    }
    let _ = write!(out, " {value}");
    if let Some(ms) = ms {
        let _ = write!(out, " {ms}");
    }
    out.push('\n');
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Seconds since the epoch of an RFC 3339 time, for `*_start_time_seconds`.
fn start_seconds(rfc3339: &str) -> Option<f64> {
    wasmlet_agent::time::parse_rfc3339(rfc3339)
        .filter(|s| *s > 0)
        .map(|s| s as f64)
}

/// `/metrics/resource`: `None` (no sample yet) gives `resource_scrape_error 1` and
/// nothing else.
pub fn resource(sample: Option<&Sample>) -> String {
    let mut out = String::with_capacity(4096);
    let errors = if sample.is_some() { 0.0 } else { 1.0 };
    let (ms, s) = match sample {
        Some(s) => (Some(s.at / 1_000_000), &s.summary),
        None => (None, &Default::default()),
    };
    container_families(&mut out, &s.pods, ms);
    node_and_pod_families(&mut out, s, ms);
    scrape_errors(&mut out, errors);
    out
}

/// The containers' CPU, working set and start time.
fn container_families(out: &mut String, pods: &[crate::summary::PodStats], ms: Option<i64>) {
    type Get = fn(&crate::summary::ContainerStats) -> Option<f64>;
    let families: [(&str, &str, &str, Get, bool); 3] = [
        (
            "container_cpu_usage_seconds_total",
            "counter",
            "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
            |c| c.cpu.as_ref()?.usage_core_nano_seconds.map(seconds),
            true,
        ),
        (
            "container_memory_working_set_bytes",
            "gauge",
            "[STABLE] Current working set of the container in bytes",
            |c| c.memory.as_ref()?.working_set_bytes.map(|v| v as f64),
            true,
        ),
        (
            "container_start_time_seconds",
            "gauge",
            "[STABLE] Start time of the container since unix epoch in seconds",
            |c| start_seconds(&c.start_time),
            false,
        ),
    ];
    for (name, kind, help, get, stamped) in families {
        header(out, name, kind, help);
        for p in pods {
            for c in &p.containers {
                if let Some(v) = get(c) {
                    let labels = [
                        ("container", c.name.as_str()),
                        ("pod", &p.pod_ref.name),
                        ("namespace", &p.pod_ref.namespace),
                    ];
                    line(out, name, &labels, v, if stamped { ms } else { None });
                }
            }
        }
    }
}

/// The node's and each pod's CPU and working set.
fn node_and_pod_families(out: &mut String, s: &crate::summary::Summary, ms: Option<i64>) {
    let pods = &s.pods;
    header(
        out,
        "node_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
    );
    if let Some(ns) = s.node.cpu.as_ref().and_then(|c| c.usage_core_nano_seconds) {
        line(out, "node_cpu_usage_seconds_total", &[], seconds(ns), ms);
    }
    header(
        out,
        "node_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the node in bytes",
    );
    if let Some(ws) = s.node.memory.as_ref().and_then(|m| m.working_set_bytes) {
        line(out, "node_memory_working_set_bytes", &[], ws as f64, ms);
    }
    header(
        out,
        "node_swap_usage_bytes",
        "gauge",
        "[ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems",
    );
    if let Some(used) = s.node.swap.as_ref().and_then(|w| w.swap_usage_bytes) {
        line(out, "node_swap_usage_bytes", &[], used as f64, ms);
    }
    header(
        out,
        "pod_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
    );
    for p in pods {
        if let Some(ns) = p.cpu.as_ref().and_then(|c| c.usage_core_nano_seconds) {
            let labels = [
                ("pod", p.pod_ref.name.as_str()),
                ("namespace", &p.pod_ref.namespace),
            ];
            line(out, "pod_cpu_usage_seconds_total", &labels, seconds(ns), ms);
        }
    }
    header(
        out,
        "pod_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the pod in bytes",
    );
    for p in pods {
        if let Some(ws) = p.memory.as_ref().and_then(|m| m.working_set_bytes) {
            let labels = [
                ("pod", p.pod_ref.name.as_str()),
                ("namespace", &p.pod_ref.namespace),
            ];
            line(out, "pod_memory_working_set_bytes", &labels, ws as f64, ms);
        }
    }
}

/// Whether the sample was there (1: no metrics). The kubelet 1.33 no longer shows its
/// `scrape_error` (deprecated in 1.29, hidden since).
fn scrape_errors(out: &mut String, errors: f64) {
    header(
        out,
        "resource_scrape_error",
        "gauge",
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
    );
    line(out, "resource_scrape_error", &[], errors, None);
}

/// One cAdvisor series: its labels and value.
struct Series<'a> {
    labels: Vec<(&'a str, String)>,
    value: f64,
}

/// A cgroup the sample measured, with its labels.
struct Item<'a> {
    labels: Vec<(&'a str, String)>,
    cpu: Option<u64>,
    mem: Option<&'a crate::summary::MemoryStats>,
    fs: Option<u64>,
    net: Option<&'a crate::summary::NetworkStats>,
    start: Option<f64>,
}

/// Every cgroup `sample` measured: the node's root, each pod's, each container's.
fn items(sample: &Sample) -> Vec<Item<'_>> {
    let s = &sample.summary;
    let mut items = vec![Item {
        labels: vec![
            ("container", String::new()),
            ("id", "/".to_owned()),
            ("image", String::new()),
            ("name", String::new()),
            ("namespace", String::new()),
            ("pod", String::new()),
        ],
        cpu: s.node.cpu.as_ref().and_then(|c| c.usage_core_nano_seconds),
        mem: s.node.memory.as_ref(),
        fs: None,
        net: s.node.network.as_ref(),
        start: start_seconds(&s.node.start_time),
    }];
    for p in &s.pods {
        let meta = sample.pods.get(&p.pod_ref.uid);
        let pod_id = meta
            .and_then(|m| m.cgroup.clone())
            .unwrap_or_else(|| format!("/pod{}", p.pod_ref.uid));
        items.push(Item {
            labels: vec![
                ("container", String::new()),
                ("id", pod_id.clone()),
                ("image", String::new()),
                ("name", String::new()),
                ("namespace", p.pod_ref.namespace.clone()),
                ("pod", p.pod_ref.name.clone()),
            ],
            cpu: p.cpu.as_ref().and_then(|c| c.usage_core_nano_seconds),
            mem: p.memory.as_ref(),
            fs: None,
            net: p.network.as_ref(),
            start: start_seconds(&p.start_time),
        });
        for c in &p.containers {
            let (id, image) = meta
                .and_then(|m| m.containers.get(&c.name))
                .cloned()
                .unwrap_or_default();
            items.push(Item {
                labels: vec![
                    ("container", c.name.clone()),
                    ("id", format!("{pod_id}/{id}")),
                    ("image", image),
                    ("name", id),
                    ("namespace", p.pod_ref.namespace.clone()),
                    ("pod", p.pod_ref.name.clone()),
                ],
                cpu: c.cpu.as_ref().and_then(|c| c.usage_core_nano_seconds),
                mem: c.memory.as_ref(),
                fs: c.rootfs.as_ref().and_then(|f| f.used_bytes),
                net: None,
                start: start_seconds(&c.start_time),
            });
        }
    }
    items
}

/// A metric family: name, type, help, and its series of one cgroup.
type Family = (
    &'static str,
    &'static str,
    &'static str,
    for<'a> fn(&Item<'a>) -> Vec<Series<'a>>,
);

/// The families of `/metrics/cadvisor`, in the order they are written.
const FAMILIES: [Family; 10] = [
    (
        "container_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed in seconds.",
        |i| {
            i.cpu
                .map(|ns| Series {
                    labels: vec![("cpu", "total".to_owned())],
                    value: seconds(ns),
                })
                .into_iter()
                .collect()
        },
    ),
    (
        "container_fs_usage_bytes",
        "gauge",
        "Number of bytes that are consumed by the container on this filesystem.",
        |i| {
            i.fs.map(|b| Series {
                labels: vec![("device", String::new())],
                value: b as f64,
            })
            .into_iter()
            .collect()
        },
    ),
    (
        "container_memory_rss",
        "gauge",
        "Size of RSS in bytes.",
        |i| one(i.mem.and_then(|m| m.rss_bytes)),
    ),
    (
        "container_memory_usage_bytes",
        "gauge",
        "Current memory usage in bytes, including all memory regardless of when it was accessed",
        |i| one(i.mem.and_then(|m| m.usage_bytes)),
    ),
    (
        "container_memory_working_set_bytes",
        "gauge",
        "Current working set in bytes.",
        |i| one(i.mem.and_then(|m| m.working_set_bytes)),
    ),
    (
        "container_network_receive_bytes_total",
        "counter",
        "Cumulative count of bytes received",
        |i| per_interface(i.net, |f| f.rx_bytes),
    ),
    (
        "container_network_receive_errors_total",
        "counter",
        "Cumulative count of errors encountered while receiving",
        |i| per_interface(i.net, |f| f.rx_errors),
    ),
    (
        "container_network_transmit_bytes_total",
        "counter",
        "Cumulative count of bytes transmitted",
        |i| per_interface(i.net, |f| f.tx_bytes),
    ),
    (
        "container_network_transmit_errors_total",
        "counter",
        "Cumulative count of errors encountered while transmitting",
        |i| per_interface(i.net, |f| f.tx_errors),
    ),
    (
        "container_start_time_seconds",
        "gauge",
        "Start time of the container since unix epoch in seconds.",
        |i| {
            i.start
                .map(|v| Series {
                    labels: Vec::new(),
                    value: v,
                })
                .into_iter()
                .collect()
        },
    ),
];

/// `/metrics/cadvisor`: the node's root cgroup (`id="/"`), each pod's cgroup
/// (`container=""`) and each container.
pub fn cadvisor(sample: Option<&Sample>) -> String {
    let mut out = String::with_capacity(8192);
    let Some(sample) = sample else {
        return out;
    };
    let ms = Some(sample.at / 1_000_000);
    let items = items(sample);
    for (name, kind, help, get) in FAMILIES {
        header(&mut out, name, kind, help);
        let stamp = if name == "container_start_time_seconds" {
            None
        } else {
            ms
        };
        for item in &items {
            for series in get(item) {
                let mut labels: Vec<(&str, &str)> =
                    item.labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                labels.extend(series.labels.iter().map(|(k, v)| (*k, v.as_str())));
                line(&mut out, name, &labels, series.value, stamp);
            }
        }
    }
    out
}

fn one<'a>(v: Option<u64>) -> Vec<Series<'a>> {
    v.map(|v| Series {
        labels: Vec::new(),
        value: v as f64,
    })
    .into_iter()
    .collect()
}

fn per_interface<'a>(
    net: Option<&crate::summary::NetworkStats>,
    get: fn(&crate::summary::InterfaceStats) -> Option<u64>,
) -> Vec<Series<'a>> {
    net.map(|n| {
        n.interfaces
            .iter()
            .filter_map(|i| {
                get(i).map(|v| Series {
                    labels: vec![("interface", i.name.clone())],
                    value: v as f64,
                })
            })
            .collect()
    })
    .unwrap_or_default()
}
