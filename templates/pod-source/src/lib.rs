//! A pod source whose pods come from its configuration: `replicas` (default 1) pods
//! running `image`, named `<name>-<i>` (`name` defaults to `replica`) in `namespace`
//! (default `default`). Writing pod JSON by hand keeps the component small; a source
//! that reads manifests would enable the SDK's `manifests` feature and call
//! `parse_manifests` instead.

use wasmlet_plugin_sdk::host;
use wasmlet_plugin_sdk::source::*;

struct Replicas;

/// A JSON string literal of `s`.
fn quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl PodSource for Replicas {
    fn poll() -> Result<Snapshot, String> {
        let image = host::config("image").ok_or("no `image` in the source's configuration")?;
        let replicas: usize = match host::config("replicas") {
            Some(n) => n
                .parse()
                .map_err(|_| format!("replicas {n:?}: not a number"))?,
            None => 1,
        };
        let name = host::config("name").unwrap_or_else(|| "replica".into());
        let namespace = host::config("namespace").unwrap_or_else(|| "default".into());
        let pods = (0..replicas)
            .map(|i| {
                let pod_name = format!("{name}-{i}");
                PodManifest {
                    origin: format!("replica {i}"),
                    pod_json: format!(
                        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":{},"namespace":{},"labels":{{"app":{}}}}},"spec":{{"containers":[{{"name":"main","image":{}}}]}}}}"#,
                        quoted(&pod_name),
                        quoted(&namespace),
                        quoted(&name),
                        quoted(&image)
                    ),
                }
            })
            .collect();
        Ok(Snapshot {
            pods,
            problems: Vec::new(),
        })
    }
}

wasmlet_plugin_sdk::export_pod_source!(Replicas);
