//! `source-file`: the kubelet's file source (`staticPodPath`). Every regular file of the
//! granted directory (at `/manifests`, or the `directory` config value) is read as YAML
//! or JSON manifests — several documents, Pods or PodLists — in name order. Hidden files
//! (`.name`) and subdirectories are skipped, as the kubelet skips them; a file that
//! cannot be read or parsed is reported by name and the other files' pods go on.
//! Needs a directory grant.

use wasmlet_plugin_sdk::host;
use wasmlet_plugin_sdk::source::*;

struct FileSource;

impl PodSource for FileSource {
    fn poll() -> Result<Snapshot, String> {
        let dir = host::config("directory").unwrap_or_else(|| MANIFEST_DIR.to_owned());
        let entries = std::fs::read_dir(&dir).map_err(|e| {
            format!("cannot read the manifest directory {dir} (is a directory granted?): {e}")
        })?;
        let mut names: Vec<_> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with('.'))
            .collect();
        names.sort();
        let mut out = Manifests::default();
        for name in names {
            match std::fs::read(format!("{dir}/{name}")) {
                Ok(bytes) => match String::from_utf8(bytes) {
                    Ok(text) => out.extend(parse_manifests(&name, &text)),
                    Err(_) => out.problem(name, "not UTF-8 text"),
                },
                Err(e) => out.problem(name, e.to_string()),
            }
        }
        Ok(out.into())
    }
}

wasmlet_plugin_sdk::export_pod_source!(FileSource);
