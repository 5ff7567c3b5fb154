//! Static pod UIDs as the kubelet makes them, so that wasmlet and the kubelet recognise
//! each other's static pods on a node one takes over from the other (same UID, same
//! config hash, same mirror pod).
//!
//! The kubelet (v1.33, `pkg/kubelet/config/common.go`) decodes a manifest into its
//! internal pod type — the v1 defaults applied on the way — prints that with its
//! deep-hash printer (every field, in declaration order, with its Go type) and takes the
//! MD5 of the print followed by `host:<node>file:<path>` for a file, or by `url:<url>`
//! for a URL. `defaults` applies the same defaults, `dump` prints the same text from
//! the internal layout in `core_pod.schema`. A manifest with something the printing does
//! not cover (see `defaults` and `quantity`) gets no kubelet UID: the caller falls
//! back to its own.

mod defaults;
mod dump;
mod marshal;
mod quantity;

use std::path::Path;

use k8s_openapi::api::core::v1 as k8s;
use md5::{Digest, Md5};

/// Where a static pod's manifest was read from, as the kubelet hashes it.
#[derive(Debug, Clone, Copy)]
pub enum Location<'a> {
    /// A file: its full path (and the node's name).
    File(&'a Path),
    /// A URL.
    Url(&'a str),
}

/// A static pod as the kubelet holds it after reading its manifest.
#[derive(Debug, Clone)]
pub struct Read {
    /// The pod with the v1 defaults applied (as the kubelet runs it and mirrors it).
    pub pod: k8s::Pod,
    /// What its UID hashes.
    printed: String,
}

impl Read {
    /// Reads `pod` as the kubelet reads a manifest; `None` when a field is outside what
    /// is covered.
    pub fn of(pod: &k8s::Pod) -> Option<Read> {
        let mut v = serde_json::to_value(pod).ok()?;
        defaults::apply(&mut v).ok()?;
        let defaulted: k8s::Pod = serde_json::from_value(v.clone()).ok()?;
        defaults::to_internal(&mut v).ok()?;
        Some(Read {
            pod: defaulted,
            printed: dump::pod(&v).ok()?,
        })
    }

    /// The UID the kubelet gives the pod read from `location` on node `node`.
    pub fn uid(&self, node: &str, location: Location<'_>) -> String {
        let mut h = Md5::new();
        h.update(&self.printed);
        match location {
            Location::File(path) => {
                h.update(format!("host:{node}"));
                h.update(format!("file:{}", path.display()));
            }
            Location::Url(url) => h.update(format!("url:{url}")),
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The UID the kubelet gives `pod`, read from `location` on node `node`.
pub fn uid(pod: &k8s::Pod, node: &str, location: Location<'_>) -> Option<String> {
    Read::of(pod).map(|r| r.uid(node, location))
}

/// The hash the kubelet 1.33 keeps of a container's spec (`io.kubernetes.container.hash`,
/// lowercase hex): FNV-32a of its deep-hash print of `{"image":…,"name":…}` — the
/// only fields a running container is replaced for (resources are resized in place). A
/// running container whose hash differs from its spec's is restarted — by either agent.
pub fn container_hash(c: &k8s::Container) -> Option<String> {
    let mut json = String::from("{\"image\":");
    marshal::string(&mut json, c.image.as_deref().unwrap_or(""));
    json.push_str(",\"name\":");
    marshal::string(&mut json, &c.name);
    json.push('}');
    Some(fnv_of_print(&json))
}

/// The hash the kubelet 1.28 kept (over the container's whole JSON), still recognised
/// on containers a 1.28 kubelet or an earlier wasmlet made.
pub fn container_hash_128(c: &k8s::Container) -> Option<String> {
    let json = marshal::container(&serde_json::to_value(c).ok()?).ok()?;
    Some(fnv_of_print(&json))
}

/// FNV-32a of the deep-hash print of `json`'s bytes (`([]uint8)[123 34 …]`), in hex.
fn fnv_of_print(json: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    feed(b"([]uint8)[");
    for (i, b) in json.bytes().enumerate() {
        if i > 0 {
            feed(b" ");
        }
        // The byte in decimal, without a leading zero.
        let digits = [b / 100, b / 10 % 10, b % 10].map(|d| d + b'0');
        let skip = if b >= 100 {
            0
        } else if b >= 10 {
            1
        } else {
            2
        };
        feed(&digits[skip..]);
    }
    feed(b"]");
    format!("{h:x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test data directory and the non-comment lines of its file `list`.
    fn testdata(list: &str) -> (std::path::PathBuf, Vec<String>) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/pod/kubelet/testdata");
        let text = std::fs::read_to_string(dir.join(list)).expect(list);
        let lines = text.lines().filter(|l| !l.starts_with('#'));
        (dir.clone(), lines.map(str::to_owned).collect())
    }

    /// The manifest `file` of the test data, as a source reads it.
    fn manifest(dir: &Path, file: &str) -> k8s::Pod {
        let text = std::fs::read_to_string(dir.join(file)).expect("manifest");
        serde_yaml_ng::from_str(&text).expect("pod")
    }

    /// The manifests of `testdata/` (kubeadm's control plane, a pod using most of what a
    /// static pod can hold, a bare one) get the UIDs the upstream kubelet gave them.
    #[test]
    fn static_pod_uids_are_the_kubelets() {
        let (dir, expected) = testdata("uids.txt");
        let mut checked = 0;
        for line in &expected {
            let (file, want) = line.split_once(' ').expect("file uid");
            let pod = manifest(&dir, file);
            if let Ok(out) = std::env::var("KUBELET_UID_PRINT_DIR") {
                let printed = Read::of(&pod).map(|r| r.printed).unwrap_or_default();
                std::fs::write(Path::new(&out).join(format!("rs-{file}.txt")), printed)
                    .expect("print");
            }
            let path = Path::new("/etc/kubernetes/manifests").join(file);
            let got = uid(&pod, "node-a", Location::File(&path));
            assert_eq!(got.as_deref(), Some(want), "{file}");
            checked += 1;
        }
        assert_eq!(checked, 6);
    }

    /// The containers of the same manifests get the kubelet's container hashes, 1.33's
    /// and 1.28's.
    #[test]
    fn container_hashes_are_the_kubelets() {
        for (list, hash) in [
            (
                "hashes.txt",
                container_hash as fn(&k8s::Container) -> Option<String>,
            ),
            ("hashes-1.28.txt", container_hash_128),
        ] {
            container_hashes_are(list, hash);
        }
    }

    fn container_hashes_are(list: &str, hash: fn(&k8s::Container) -> Option<String>) {
        let (dir, expected) = testdata(list);
        let mut checked = 0;
        for line in &expected {
            let mut words = line.split(' ');
            let (Some(file), Some(name), Some(want)) = (words.next(), words.next(), words.next())
            else {
                panic!("{line}");
            };
            let read = Read::of(&manifest(&dir, file)).expect("covered").pod;
            let spec = read.spec.expect("spec");
            let c = spec
                .init_containers
                .iter()
                .flatten()
                .chain(&spec.containers)
                .find(|c| c.name == name)
                .expect("container");
            if let Ok(out) = std::env::var("KUBELET_UID_PRINT_DIR") {
                let json = marshal::container(&serde_json::to_value(c).expect("json"));
                let path = Path::new(&out).join(format!("rs-{file}-{name}.json"));
                std::fs::write(path, json.unwrap_or_default()).expect("print");
            }
            assert_eq!(hash(c).as_deref(), Some(want), "{list}: {file} {name}");
            checked += 1;
        }
        assert_eq!(checked, 8);
    }

    #[test]
    fn what_is_not_covered_gets_no_uid() {
        let pod: k8s::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"limits": {"memory": "1.5Gi"}}}]}
        }))
        .expect("pod");
        assert!(Read::of(&pod).is_none(), "an arbitrary-precision quantity");
        let url = uid(&pod, "n", Location::Url("http://example.com/p.yaml"));
        assert_eq!(url, None);
    }
}
