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
            match read(&format!("{dir}/{name}")) {
                Read::Text(text) => out.extend(parse_manifests(&name, &text)),
                // Deleted between the listing and the read: its pods are gone, as they
                // would be had the listing come a moment later.
                Read::Gone => {}
                Read::Problem(message) => out.problem(name, message),
            }
        }
        Ok(out.into())
    }
}

/// What reading one manifest file gave.
#[derive(Debug, PartialEq)]
enum Read {
    Text(String),
    /// The file is no longer there.
    Gone,
    Problem(String),
}

fn read(path: &str) -> Read {
    match std::fs::read(path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => Read::Text(text),
            Err(_) => Read::Problem("not UTF-8 text".into()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Read::Gone,
        Err(e) => Read::Problem(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_deleted_after_the_listing_is_gone_not_a_problem() {
        let dir = std::env::temp_dir().join(format!("source-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("a.yaml");
        std::fs::write(&file, "kind: Pod\n").expect("write");
        let path = file.to_string_lossy().into_owned();
        assert_eq!(read(&path), Read::Text("kind: Pod\n".into()));
        std::fs::write(&file, [0xff, 0xfe]).expect("write");
        assert_eq!(read(&path), Read::Problem("not UTF-8 text".into()));
        std::fs::remove_file(&file).expect("remove");
        assert_eq!(read(&path), Read::Gone);
        assert!(
            matches!(read(&dir.to_string_lossy()), Read::Problem(_)),
            "a directory"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

wasmlet_plugin_sdk::export_pod_source!(FileSource);
