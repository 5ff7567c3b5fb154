//! The allocation checkpoint: which devices each container holds and what its plugin
//! answered, so containers restarted after the agent restarts get the same devices,
//! and no other container gets them. wasmlet's own file in the device plugin directory
//! (the kubelet's `kubelet_internal_checkpoint` carries a checksum of Go's own
//! printing), written whole to a temporary file and renamed. Taking a node over from the
//! kubelet, its checkpoint is read once instead ([`kubelet`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::state::{ContainerKey, Grant};

pub mod kubelet;

/// A checkpoint that cannot be read, naming its file.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The file is there and cannot be read.
    #[error("{}: {source}", file.display())]
    Read {
        /// The checkpoint.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is not the JSON it should be.
    #[error("{}: {source}", file.display())]
    Parse {
        /// The checkpoint.
        file: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// A grant's saved plugin answer (the kubelet's `AllocResp`) does not decode.
    #[error("{}: AllocResp: {message}", file.display())]
    AllocResp {
        /// The checkpoint.
        file: PathBuf,
        /// Why.
        message: String,
    },
}

/// The checkpoint's file name in the device plugin directory.
pub const FILE: &str = "wasmlet_device_checkpoint.json";

/// One container's grant of one resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    pod_uid: String,
    container_name: String,
    resource_name: String,
    grant: Grant,
}

/// The file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    entries: Vec<Entry>,
    /// The healthy devices per resource when it was written (for the record).
    registered_devices: BTreeMap<String, Vec<String>>,
}

/// The grants, per container and resource.
pub type Grants = BTreeMap<ContainerKey, BTreeMap<String, Grant>>;

/// The checkpoint of the directory `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// Writes `grants` and `registered` to `file`.
pub fn write(
    file: &Path,
    grants: &Grants,
    registered: BTreeMap<String, Vec<String>>,
) -> std::io::Result<()> {
    let entries = grants
        .iter()
        .flat_map(|((pod, container), by_resource)| {
            by_resource.iter().map(|(resource, grant)| Entry {
                pod_uid: pod.clone(),
                container_name: container.clone(),
                resource_name: resource.clone(),
                grant: grant.clone(),
            })
        })
        .collect();
    let data = Data {
        entries,
        registered_devices: registered,
    };
    let text = serde_json::to_vec(&data).map_err(std::io::Error::other)?;
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, file)
}

/// What a checkpoint holds.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Saved {
    /// The grants.
    pub grants: Grants,
    /// The resources plugins had registered.
    pub resources: Vec<String>,
}

impl Saved {
    /// A checkpoint's content: the resources it names as registered, then each entry's
    /// grant (its resource counted too).
    fn new(registered: BTreeMap<String, Vec<String>>) -> Self {
        Saved {
            grants: Grants::new(),
            resources: registered.into_keys().collect(),
        }
    }

    /// Adds container `(pod, container)`'s grant of `resource`.
    fn add(&mut self, key: ContainerKey, resource: String, grant: Grant) {
        if !self.resources.contains(&resource) {
            self.resources.push(resource.clone());
        }
        self.grants.entry(key).or_default().insert(resource, grant);
    }
}

/// `file`'s bytes; `None` when there is no such file. Errors name the file.
fn read_bytes(file: &Path) -> Result<Option<Vec<u8>>, CheckpointError> {
    match std::fs::read(file) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(CheckpointError::Read {
            file: file.to_owned(),
            source,
        }),
    }
}

/// What `file` holds; nothing when there is no file. A file that does not parse is an
/// error naming it.
pub fn read(file: &Path) -> Result<Saved, CheckpointError> {
    let Some(text) = read_bytes(file)? else {
        return Ok(Saved::default());
    };
    let data: Data = serde_json::from_slice(&text).map_err(|source| CheckpointError::Parse {
        file: file.to_owned(),
        source,
    })?;
    let mut saved = Saved::new(data.registered_devices);
    for e in data.entries {
        saved.add((e.pod_uid, e.container_name), e.resource_name, e.grant);
    }
    Ok(saved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::ContainerOptions;

    #[test]
    fn grants_survive_a_write_and_a_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = path(dir.path());
        assert_eq!(read(&file).expect("no file"), Saved::default());
        let mut grants = Grants::new();
        let mut options = ContainerOptions::default();
        options.envs.insert("GPU".into(), "0".into());
        grants
            .entry(("uid-1".into(), "app".into()))
            .or_default()
            .insert(
                "example.com/gpu".into(),
                Grant {
                    ids: ["0".to_string()].into(),
                    options,
                },
            );
        write(
            &file,
            &grants,
            BTreeMap::from([("example.com/gpu".into(), vec!["0".into(), "1".into()])]),
        )
        .expect("write");
        let saved = read(&file).expect("read");
        assert_eq!(saved.grants, grants);
        assert_eq!(saved.resources, ["example.com/gpu"]);
        std::fs::write(&file, "{").expect("spoil");
        let err = read(&file).expect_err("a broken file is an error");
        assert!(err.to_string().contains(FILE), "{err}");
    }
}
