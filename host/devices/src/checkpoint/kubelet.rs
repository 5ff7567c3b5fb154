//! The kubelet's device checkpoint, `kubelet_internal_checkpoint`, read when wasmlet takes
//! a node over from the kubelet and has no checkpoint of its own yet: the devices the
//! kubelet gave each running container stay theirs. Its layout is the kubelet's JSON
//! (`Data.PodDeviceEntries[]`: `PodUID`, `ContainerName`, `ResourceName`, `DeviceIDs` per
//! NUMA node, `AllocResp` — the plugin's `ContainerAllocateResponse` as protobuf, base64 —
//! and `Data.RegisteredDevices`). Its `Checksum` is an FNV of Go's own printing of the
//! data, not reproduced here: the file is read as it is.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;
use prost::Message;
use serde::Deserialize;

use super::{CheckpointError, Saved};
use crate::options::ContainerOptions;
use crate::proto;
use crate::state::Grant;

/// The kubelet's checkpoint's file name in the device plugin directory.
pub const FILE: &str = "kubelet_internal_checkpoint";

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Entry {
    #[serde(rename = "PodUID")]
    pod_uid: String,
    container_name: String,
    resource_name: String,
    #[serde(rename = "DeviceIDs", default)]
    device_ids: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    alloc_resp: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Inner {
    #[serde(default)]
    pod_device_entries: Vec<Entry>,
    #[serde(default)]
    registered_devices: BTreeMap<String, Vec<String>>,
}

#[derive(Deserialize)]
struct File {
    #[serde(rename = "Data")]
    data: Inner,
}

/// What the plugin answered, from an entry's `AllocResp`.
fn options(alloc_resp: Option<&str>) -> Result<ContainerOptions, String> {
    let Some(text) = alloc_resp.filter(|t| !t.is_empty()) else {
        return Ok(ContainerOptions::default());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| e.to_string())?;
    let response =
        proto::ContainerAllocateResponse::decode(bytes.as_slice()).map_err(|e| e.to_string())?;
    Ok(ContainerOptions::from(response))
}

/// The kubelet's checkpoint in `dir`, as wasmlet's grants; nothing when there is none. A
/// file that does not parse is an error naming it.
pub fn read(dir: &Path) -> Result<Saved, CheckpointError> {
    let file = dir.join(FILE);
    let Some(text) = super::read_bytes(&file)? else {
        return Ok(Saved::default());
    };
    let parsed: File = serde_json::from_slice(&text).map_err(|source| CheckpointError::Parse {
        file: file.clone(),
        source,
    })?;
    let named = |message: String| CheckpointError::AllocResp {
        file: file.clone(),
        message,
    };
    let mut saved = Saved::new(parsed.data.registered_devices);
    for e in parsed.data.pod_device_entries {
        let grant = Grant {
            ids: e.device_ids.into_values().flatten().collect(),
            options: options(e.alloc_resp.as_deref()).map_err(named)?,
        };
        saved.add((e.pod_uid, e.container_name), e.resource_name, grant);
    }
    Ok(saved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubelets_checkpoint_gives_the_same_grants() {
        let dir = tempfile::tempdir().expect("tempdir");
        let response = proto::ContainerAllocateResponse {
            envs: BTreeMap::from([("GPU".to_string(), "1".to_string())]),
            mounts: vec![proto::Mount {
                container_path: "/dev-info".into(),
                host_path: "/run/gpu-1".into(),
                read_only: true,
            }],
            ..Default::default()
        };
        let resp = base64::engine::general_purpose::STANDARD.encode(response.encode_to_vec());
        // As the kubelet 1.33 writes it (json.Marshal of checkpoint.Data).
        let text = format!(
            r#"{{"Data":{{"PodDeviceEntries":[{{"PodUID":"uid-1","ContainerName":"app",
            "ResourceName":"example.com/gpu","DeviceIDs":{{"-1":["1"]}},"AllocResp":"{resp}"}}],
            "RegisteredDevices":{{"example.com/gpu":["0","1"]}}}},"Checksum":1234567}}"#
        );
        std::fs::write(dir.path().join(FILE), text).expect("write");
        let saved = read(dir.path()).expect("read");
        assert_eq!(saved.resources, ["example.com/gpu"]);
        let grant = &saved.grants[&("uid-1".to_string(), "app".to_string())]["example.com/gpu"];
        assert_eq!(grant.ids.iter().collect::<Vec<_>>(), ["1"]);
        assert_eq!(grant.options.envs["GPU"], "1");
        assert!(grant.options.mounts[0].read_only);
        std::fs::write(dir.path().join(FILE), "{}").expect("spoil");
        let err = read(dir.path()).expect_err("no Data");
        assert!(err.to_string().contains(FILE), "{err}");
        assert_eq!(
            read(&dir.path().join("none")).expect("no file"),
            Saved::default()
        );
    }
}
