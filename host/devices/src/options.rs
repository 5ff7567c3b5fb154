//! What a container given devices needs to use them — the environment, mounts, device
//! nodes, annotations and CDI devices its plugins answered Allocate with — and how it
//! goes into the container's CRI configuration, where the kubelet puts it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use wasmlet_cri_api::proto as cri;

use crate::proto;

/// A host path mounted into the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    /// Where in the container.
    pub container_path: String,
    /// What on the host.
    pub host_path: String,
    /// Read-only.
    pub read_only: bool,
}

/// A device node given to the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceNode {
    /// Its path in the container.
    pub container_path: String,
    /// Its path on the host.
    pub host_path: String,
    /// cgroup permissions (`rwm`).
    pub permissions: String,
}

/// A container's device options, from one plugin or merged from several.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerOptions {
    /// Environment variables.
    pub envs: BTreeMap<String, String>,
    /// Mounts.
    pub mounts: Vec<Mount>,
    /// Device nodes.
    pub devices: Vec<DeviceNode>,
    /// Annotations of the container.
    pub annotations: BTreeMap<String, String>,
    /// Fully qualified CDI device names.
    pub cdi_devices: Vec<String>,
}

impl From<proto::ContainerAllocateResponse> for ContainerOptions {
    fn from(r: proto::ContainerAllocateResponse) -> Self {
        ContainerOptions {
            envs: r.envs,
            mounts: r
                .mounts
                .into_iter()
                .map(|m| Mount {
                    container_path: m.container_path,
                    host_path: m.host_path,
                    read_only: m.read_only,
                })
                .collect(),
            devices: r
                .devices
                .into_iter()
                .map(|d| DeviceNode {
                    container_path: d.container_path,
                    host_path: d.host_path,
                    permissions: d.permissions,
                })
                .collect(),
            annotations: r.annotations,
            cdi_devices: r.cdi_devices.into_iter().map(|d| d.name).collect(),
        }
    }
}

impl ContainerOptions {
    /// Whether there is nothing to add.
    pub fn is_empty(&self) -> bool {
        self == &ContainerOptions::default()
    }

    /// Adds `other`'s options (another resource's): a variable, mount, device node,
    /// annotation or CDI device already given is kept, the first one winning, as the
    /// kubelet merges its plugins' answers.
    pub fn merge(&mut self, other: &ContainerOptions) {
        for (k, v) in &other.envs {
            self.envs.entry(k.clone()).or_insert_with(|| v.clone());
        }
        for m in &other.mounts {
            if !self
                .mounts
                .iter()
                .any(|x| x.container_path == m.container_path)
            {
                self.mounts.push(m.clone());
            }
        }
        for d in &other.devices {
            if !self
                .devices
                .iter()
                .any(|x| x.container_path == d.container_path)
            {
                self.devices.push(d.clone());
            }
        }
        for (k, v) in &other.annotations {
            self.annotations
                .entry(k.clone())
                .or_insert_with(|| v.clone());
        }
        for name in &other.cdi_devices {
            if !self.cdi_devices.contains(name) {
                self.cdi_devices.push(name.clone());
            }
        }
    }

    /// Puts the options into `config` where the kubelet does: the variables and mounts
    /// before the container's own (a variable the container sets itself wins), the
    /// device nodes and CDI devices, and the annotations under the agent's own (which
    /// win).
    pub fn apply(&self, config: &mut cri::ContainerConfig) {
        let envs = self.envs.iter().map(|(key, value)| cri::KeyValue {
            key: key.clone(),
            value: value.clone(),
        });
        config.envs.splice(0..0, envs);
        let mounts = self.mounts.iter().map(|m| cri::Mount {
            container_path: m.container_path.clone(),
            host_path: m.host_path.clone(),
            readonly: m.read_only,
            ..Default::default()
        });
        config.mounts.splice(0..0, mounts);
        config
            .devices
            .extend(self.devices.iter().map(|d| cri::Device {
                container_path: d.container_path.clone(),
                host_path: d.host_path.clone(),
                permissions: d.permissions.clone(),
            }));
        config.cdi_devices.extend(
            self.cdi_devices
                .iter()
                .map(|name| cri::CdiDevice { name: name.clone() }),
        );
        for (k, v) in &self.annotations {
            config
                .annotations
                .entry(k.clone())
                .or_insert_with(|| v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(env: (&str, &str), path: &str) -> ContainerOptions {
        ContainerOptions {
            envs: BTreeMap::from([(env.0.into(), env.1.into())]),
            mounts: vec![Mount {
                container_path: path.into(),
                host_path: format!("/host{path}"),
                read_only: true,
            }],
            devices: vec![DeviceNode {
                container_path: "/dev/x".into(),
                host_path: "/dev/x0".into(),
                permissions: "rw".into(),
            }],
            annotations: BTreeMap::from([("vendor/a".into(), "1".into())]),
            cdi_devices: vec!["vendor.com/gpu=0".into()],
        }
    }

    #[test]
    fn options_go_before_the_containers_own_and_under_the_agents_annotations() {
        let mut config = cri::ContainerConfig {
            envs: vec![cri::KeyValue {
                key: "MODE".into(),
                value: "mine".into(),
            }],
            mounts: vec![cri::Mount {
                container_path: "/data".into(),
                ..Default::default()
            }],
            annotations: BTreeMap::from([("vendor/a".into(), "agent".into())]),
            ..Default::default()
        };
        options(("MODE", "device"), "/dev-info").apply(&mut config);
        let envs: Vec<(&str, &str)> = config
            .envs
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(
            envs,
            [("MODE", "device"), ("MODE", "mine")],
            "the container's own comes last and wins"
        );
        assert_eq!(config.mounts[0].container_path, "/dev-info");
        assert!(config.mounts[0].readonly);
        assert_eq!(config.mounts[1].container_path, "/data");
        assert_eq!(config.devices[0].host_path, "/dev/x0");
        assert_eq!(config.cdi_devices[0].name, "vendor.com/gpu=0");
        assert_eq!(config.annotations["vendor/a"], "agent");
    }

    #[test]
    fn merging_keeps_what_was_given_first() {
        let mut a = options(("A", "1"), "/one");
        a.merge(&options(("A", "2"), "/one"));
        a.merge(&options(("B", "3"), "/two"));
        assert_eq!(a.envs["A"], "1");
        assert_eq!(a.envs["B"], "3");
        assert_eq!(a.mounts.len(), 2);
        assert_eq!(a.devices.len(), 1);
        assert_eq!(a.cdi_devices.len(), 1);
    }
}
