//! The ValidatingAdmissionPolicies shipped in deploy/ (each in its `v1` and its
//! `v1beta1` file) on the API server double, which evaluates their CEL as the real API
//! server does (checked there too, kube-apiserver v1.28.7 with the feature gate: the
//! same answers, word for word): a node creates, writes and deletes only the
//! WasmletNode named after it, owned by nobody but its own Node, and writes no
//! WasmletPlugin status at all — 403 otherwise; users that are not nodes are not their
//! business. (On the real API server RBAC refuses nodes the deletes and the plugin
//! status first — deploy/ grants neither; the policies are what stands where a cluster
//! grants more, checked there with such a grant.) And nodes that run under them, each
//! with its own identity, report as before, and the controller counts them.

mod support;

use std::path::Path;

use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use support::{Cluster, RESTRICTED, digest_of};
use wasmlet_apiserver_sim::ApiServerSim;

/// (WasmletNode policy, WasmletPlugin status policy), per version.
const POLICIES: [[&str; 2]; 2] = [
    [
        "deploy/wasmletnode-policy.yaml",
        "deploy/wasmletplugin-node-status-policy.yaml",
    ],
    [
        "deploy/wasmletnode-policy-v1beta1.yaml",
        "deploy/wasmletplugin-node-status-policy-v1beta1.yaml",
    ],
];

/// The documents of a file in deploy/.
fn deploy(file: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|d| d.join(file))
        .find(|f| f.is_file())
        .unwrap_or_else(|| panic!("{file} above this crate"));
    let text = std::fs::read_to_string(path).expect("read");
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("yaml"))
        .collect()
}

fn install(api: &ApiServerSim, file: &str) {
    for object in deploy(file) {
        let api_version = object["apiVersion"]
            .as_str()
            .expect("apiVersion")
            .to_owned();
        let resource = match object["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => "validatingadmissionpolicies",
            Some("ValidatingAdmissionPolicyBinding") => "validatingadmissionpolicybindings",
            other => panic!("{file}: {other:?}"),
        };
        api.create(&format!("apis/{api_version}"), resource, object)
            .expect("policy");
    }
}

const DIGEST: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

/// What a write got: 200, or the code and message.
fn answer<T>(who: &str, result: Result<T, kube::Error>) -> (u16, String) {
    match result {
        Ok(_) => (200, String::new()),
        Err(kube::Error::Api(s)) => (s.code, s.message),
        Err(e) => panic!("{who}: {e}"),
    }
}

/// A WasmletNode `name` owned by Node `owner`.
fn node_object(name: &str, owner: &str) -> Value {
    json!({"apiVersion": "wasmlet.dev/v1alpha1", "kind": "WasmletNode",
           "metadata": {"name": name, "ownerReferences": [
               {"apiVersion": "v1", "kind": "Node", "name": owner, "uid": format!("uid-{owner}")}]}})
}

fn node_status(name: &str, state: &str) -> Value {
    json!({"apiVersion": "wasmlet.dev/v1alpha1", "kind": "WasmletNode",
           "metadata": {"name": name},
           "status": {"plugins": [{"name": "policy", "observedGeneration": 1, "state": state, "digest": DIGEST}]}})
}

/// What `who` got for server-side applying `body` to WasmletNode `name` (its status
/// when `status`).
async fn write_node(
    clients: &Clients,
    who: &str,
    name: &str,
    body: &Value,
    status: bool,
) -> (u16, String) {
    let api: Api<DynamicObject> =
        Api::all_with(clients.of(who), &wasmlet_fleet::object::node_api_resource());
    let params = PatchParams::apply(&format!("wasmlet-node/{who}")).force();
    let patch = Patch::Apply(body);
    let result = if status {
        api.patch_status(name, &params, &patch).await
    } else {
        api.patch(name, &params, &patch).await
    };
    answer(who, result)
}

async fn delete_node(clients: &Clients, who: &str, name: &str) -> (u16, String) {
    let api: Api<DynamicObject> =
        Api::all_with(clients.of(who), &wasmlet_fleet::object::node_api_resource());
    answer(
        who,
        api.delete(name, &DeleteParams::default()).await.map(|_| ()),
    )
}

/// What `who` got for writing an entry into WasmletPlugin `policy`'s status, as nodes
/// before WasmletNode did.
async fn write_plugin_status(clients: &Clients, who: &str) -> (u16, String) {
    let api: Api<DynamicObject> =
        Api::all_with(clients.of(who), &wasmlet_fleet::object::api_resource());
    let body = json!({"apiVersion": "wasmlet.dev/v1alpha1", "kind": "WasmletPlugin",
           "metadata": {"name": "policy"},
           "status": {"nodes": [{"nodeName": who, "observedGeneration": 1, "state": "Loaded", "digest": DIGEST}]}});
    answer(
        who,
        api.patch_status(
            "policy",
            &PatchParams::apply(&format!("wasmlet-node/{who}")).force(),
            &Patch::Apply(&body),
        )
        .await,
    )
}

struct Clients {
    dir: std::path::PathBuf,
    url: String,
    made: std::collections::BTreeMap<String, kube::Client>,
}

impl Clients {
    fn of(&self, who: &str) -> kube::Client {
        self.made[who].clone()
    }

    async fn add(&mut self, api: &ApiServerSim, who: &str, user: &str, groups: &[&str]) {
        let token = format!("token-{who}");
        api.add_token(&token, user, groups);
        let client = support::client_as(&self.dir.join(who), &self.url, &token).await;
        self.made.insert(who.to_owned(), client);
    }
}

fn denied(resource: &str, name: &str, policy: &str, message: &str) -> (u16, String) {
    (
        403,
        format!(
            "{resource}.wasmlet.dev \"{name}\" is forbidden: ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: {message}"
        ),
    )
}

fn not_its_own(who: &str, name: &str) -> (u16, String) {
    denied(
        "wasmletnodes",
        name,
        "wasmlet.dev-node-objects",
        &format!(
            "system:node:{who} may write only the WasmletNode named after its node, not {name}"
        ),
    )
}

async fn clients_of(c: &Cluster) -> Clients {
    let mut clients = Clients {
        dir: c.dir.join("clients"),
        url: c.url.clone(),
        made: Default::default(),
    };
    for n in ["node-a", "node-b", "node-c"] {
        clients
            .add(&c.api, n, &format!("system:node:{n}"), &["system:nodes"])
            .await;
    }
    clients
        .add(&c.api, "admin", "kubernetes-admin", &["system:masters"])
        .await;
    clients
}

/// A write as one of the users: (who, what).
enum Write {
    /// Makes WasmletNode `.0`, owned by Node `.1`.
    Make(&'static str, &'static str),
    /// Writes WasmletNode `.0`'s status with an entry in state `.1`.
    Status(&'static str, &'static str),
    /// Deletes WasmletNode `.0`.
    Delete(&'static str),
    /// Writes an entry into WasmletPlugin `policy`'s status, as older nodes did.
    PluginStatus,
}

async fn write(clients: &Clients, who: &str, what: &Write) -> (u16, String) {
    match what {
        Write::Make(name, owner) => {
            write_node(clients, who, name, &node_object(name, owner), false).await
        }
        Write::Status(name, state) => {
            write_node(clients, who, name, &node_status(name, state), true).await
        }
        Write::Delete(name) => delete_node(clients, who, name).await,
        Write::PluginStatus => write_plugin_status(clients, who).await,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_writes_only_its_own_wasmletnode_and_no_plugin_status() {
    let ok = || (200, String::new());
    let plugin_status = denied(
        "wasmletplugins",
        "policy",
        "wasmlet.dev-node-plugin-status",
        "system:node:node-a may not write WasmletPlugins or their status: a node reports in its own WasmletNode",
    );
    let owner = denied(
        "wasmletnodes",
        "node-c",
        "wasmlet.dev-node-objects",
        "system:node:node-c may give its WasmletNode no owner but its own Node",
    );
    let steps = [
        ("node-a", Write::Make("node-a", "node-a"), ok()),
        ("node-a", Write::Status("node-a", "Loaded"), ok()),
        (
            "node-a",
            Write::Make("node-b", "node-b"),
            not_its_own("node-a", "node-b"),
        ),
        ("admin", Write::Make("node-b", "node-b"), ok()),
        (
            "node-a",
            Write::Status("node-b", "Failed"),
            not_its_own("node-a", "node-b"),
        ),
        (
            "node-a",
            Write::Delete("node-b"),
            not_its_own("node-a", "node-b"),
        ),
        ("node-c", Write::Make("node-c", "node-b"), owner),
        ("node-b", Write::Status("node-b", "Pending"), ok()),
        ("node-b", Write::Delete("node-b"), ok()),
        ("node-a", Write::PluginStatus, plugin_status),
        ("admin", Write::PluginStatus, ok()),
    ];
    for files in POLICIES {
        let c = Cluster::start("status-policy", &[]).await;
        for file in files {
            install(&c.api, file);
        }
        c.apply(json!({"metadata": {"name": "policy"},
                        "spec": {"kind": "admission", "digest": DIGEST, "source": {"configMap": {"name": "x", "key": "y"}}}}))
            .await;
        let clients = clients_of(&c).await;
        for (i, (who, what, want)) in steps.iter().enumerate() {
            assert_eq!(
                &write(&clients, who, what).await,
                want,
                "{}: step {i}",
                files[0]
            );
        }
        let object = |name: &str| {
            c.api
                .get("apis/wasmlet.dev/v1alpha1", "wasmletnodes", "", name)
        };
        let stored = object("node-a").expect("node-a's");
        assert_eq!(stored["status"]["plugins"][0]["state"], "Loaded");
        assert!(object("node-b").is_none(), "{}", files[0]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_each_under_its_own_identity_report_under_the_policies() {
    let mut c = Cluster::start("status-policy-nodes", &[]).await;
    for file in POLICIES[0] {
        install(&c.api, file);
    }
    let names = ["node-a", "node-b", "node-c"];
    for name in ["node-c", "node-a", "node-b"] {
        c.create_node(name);
        c.add_node(name).await;
    }
    c.config_map("v1", &[("policy.wasm", RESTRICTED)]).await;
    c.apply(json!({"metadata": {"name": "policy"},
                    "spec": {"kind": "admission", "digest": digest_of(RESTRICTED),
                             "source": {"configMap": {"name": "v1", "key": "policy.wasm"}}}}))
        .await;
    c.wait_status("policy", 1, &names.map(|n| (n, "Loaded")))
        .await;
    c.wait_summary(
        "policy",
        json!({"observedGeneration": 1, "selected": 3, "serving": 3, "verified": 0, "failed": 0, "pending": 0}),
    )
    .await;
    for name in names {
        let object = c
            .api
            .get("apis/wasmlet.dev/v1alpha1", "wasmletnodes", "", name)
            .expect(name);
        assert_eq!(object["metadata"]["ownerReferences"][0]["name"], name);
        assert_eq!(object["metadata"]["ownerReferences"][0]["kind"], "Node");
    }
}
