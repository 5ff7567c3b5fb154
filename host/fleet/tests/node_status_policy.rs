//! The ValidatingAdmissionPolicy shipped in deploy/ (both its `v1` and its `v1beta1`
//! file) on the API server double, which evaluates its CEL as the real API server does
//! (checked there too, kube-apiserver v1.28.7 with the feature gate: the same answers,
//! word for word): a node writes its own entry of `status.nodes` and, when it is the
//! first by name, `status.summary`; another node's entry — added, changed or removed —
//! and a summary written by anyone but its writer are refused with 403; users that are
//! not nodes are not its business. And nodes that run under it, each with its own
//! identity, report as before.

mod support;

use std::path::Path;

use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use support::{Cluster, RESTRICTED, digest_of};
use wasmlet_apiserver_sim::ApiServerSim;

const POLICIES: [&str; 2] = [
    "deploy/wasmletplugin-node-status-policy.yaml",
    "deploy/wasmletplugin-node-status-policy-v1beta1.yaml",
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

fn entry(node: &str, state: &str) -> Value {
    json!({"apiVersion": "wasmlet.dev/v1alpha1", "kind": "WasmletPlugin",
           "metadata": {"name": "policy"},
           "status": {"nodes": [{"nodeName": node, "observedGeneration": 1, "state": state, "digest": DIGEST}]}})
}

fn summary(nodes: i64) -> Value {
    json!({"apiVersion": "wasmlet.dev/v1alpha1", "kind": "WasmletPlugin",
           "metadata": {"name": "policy"},
           "status": {"summary": {"observedGeneration": 1, "nodes": nodes, "serving": nodes, "failed": 0, "pending": 0}}})
}

/// What a server-side apply of `body` to the status as `who` with `manager` got: 200,
/// or the code and message.
async fn apply(clients: &Clients, who: &str, manager: &str, body: &Value) -> (u16, String) {
    let api: Api<DynamicObject> =
        Api::all_with(clients.of(who), &wasmlet_fleet::object::api_resource());
    match api
        .patch_status(
            "policy",
            &PatchParams::apply(manager).force(),
            &Patch::Apply(body),
        )
        .await
    {
        Ok(_) => (200, String::new()),
        Err(kube::Error::Api(s)) => (s.code, s.message),
        Err(e) => panic!("{who}: {e}"),
    }
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

/// (what, who, field manager, body, the answer).
type Case<'a> = (&'a str, &'a str, &'a str, Value, (u16, String));

fn denied(who: &str, what: &str) -> (u16, String) {
    (
        403,
        format!(
            "wasmletplugins.wasmlet.dev \"policy\" is forbidden: ValidatingAdmissionPolicy 'wasmlet.dev-node-plugin-status' with binding 'wasmlet.dev-node-plugin-status' denied request: system:node:{who} {what}"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_writes_only_its_own_entry_and_the_summary_only_when_it_is_the_writer() {
    for file in POLICIES {
        let c = Cluster::start("status-policy", &[]).await;
        install(&c.api, file);
        c.apply(json!({"metadata": {"name": "policy"},
                        "spec": {"kind": "admission", "digest": DIGEST, "source": {"configMap": {"name": "x", "key": "y"}}}}))
            .await;
        let mut clients = Clients {
            dir: c.dir.join("clients"),
            url: c.url.clone(),
            made: Default::default(),
        };
        for n in ["node-a", "node-b", "node-z", "node-0"] {
            clients
                .add(&c.api, n, &format!("system:node:{n}"), &["system:nodes"])
                .await;
        }
        clients
            .add(&c.api, "admin", "kubernetes-admin", &["system:masters"])
            .await;
        let own = "may write only its own entry of status.nodes";
        let not_writer =
            "is not the writer of status.summary (the first node by name with an entry)";
        let ok = (200, String::new());
        let cases: Vec<Case> = vec![
            (
                "first entry on the object",
                "node-b",
                "wasmlet-node/node-b",
                entry("node-b", "Pending"),
                ok.clone(),
            ),
            (
                "the summary by its only node",
                "node-b",
                "wasmlet-summary",
                summary(1),
                ok.clone(),
            ),
            (
                "another node's own entry",
                "node-a",
                "wasmlet-node/node-a",
                entry("node-a", "Loaded"),
                ok.clone(),
            ),
            (
                "an entry forged for node-z",
                "node-a",
                "wasmlet-node/node-a-forge",
                entry("node-z", "Loaded"),
                denied("node-a", own),
            ),
            (
                "node-b's entry changed by node-a",
                "node-a",
                "wasmlet-node/node-b",
                entry("node-b", "Failed"),
                denied("node-a", own),
            ),
            (
                "its own entry again",
                "node-b",
                "wasmlet-node/node-b",
                entry("node-b", "Loaded"),
                ok.clone(),
            ),
            (
                "the summary by node-b, no longer first",
                "node-b",
                "wasmlet-summary",
                summary(2),
                denied("node-b", not_writer),
            ),
            (
                "the summary by node-a, first",
                "node-a",
                "wasmlet-summary",
                summary(2),
                ok.clone(),
            ),
            (
                "an admin forges anything",
                "admin",
                "wasmlet-node/node-z",
                entry("node-z", "Failed"),
                ok.clone(),
            ),
            (
                "node-a removes node-z's entry",
                "node-a",
                "wasmlet-node/node-z",
                json!({"apiVersion": "wasmlet.dev/v1alpha1", "kind": "WasmletPlugin", "metadata": {"name": "policy"}, "status": {}}),
                denied("node-a", own),
            ),
            (
                "node-0 joins",
                "node-0",
                "wasmlet-node/node-0",
                entry("node-0", "Pending"),
                ok.clone(),
            ),
            (
                "the summary by node-a, now second",
                "node-a",
                "wasmlet-summary",
                summary(4),
                denied("node-a", not_writer),
            ),
            (
                "the summary by node-0",
                "node-0",
                "wasmlet-summary",
                summary(4),
                ok.clone(),
            ),
        ];
        for (what, who, manager, body, want) in cases {
            assert_eq!(
                apply(&clients, who, manager, &body).await,
                want,
                "{file}: {what}"
            );
        }
        let object = c.object("policy");
        let names: Vec<&str> = object["status"]["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .filter_map(|e| e["nodeName"].as_str())
            .collect();
        assert_eq!(names, ["node-b", "node-a", "node-z", "node-0"], "{file}");
        // A merge patch emptying the list is a change to others' entries too.
        let api: Api<DynamicObject> =
            Api::all_with(clients.of("node-a"), &wasmlet_fleet::object::api_resource());
        let err = api
            .patch_status(
                "policy",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"nodes": []}})),
            )
            .await
            .expect_err("refused");
        assert!(
            matches!(err, kube::Error::Api(ref s) if s.code == 403),
            "{file}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_each_under_its_own_identity_report_under_the_policy() {
    let c = Cluster::start("status-policy-nodes", &[]).await;
    install(&c.api, POLICIES[0]);
    let mut c = c;
    for name in ["node-c", "node-a", "node-b"] {
        c.api
            .create(
                "api/v1",
                "nodes",
                json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}),
            )
            .expect("node");
        c.add_node(name).await;
    }
    c.config_map("v1", &[("policy.wasm", RESTRICTED)]).await;
    c.apply(json!({"metadata": {"name": "policy"},
                    "spec": {"kind": "admission", "digest": digest_of(RESTRICTED),
                             "source": {"configMap": {"name": "v1", "key": "policy.wasm"}}}}))
        .await;
    c.wait_status(
        "policy",
        1,
        &[
            ("node-a", "Loaded"),
            ("node-b", "Loaded"),
            ("node-c", "Loaded"),
        ],
    )
    .await;
    c.wait_summary(
        "policy",
        json!({"observedGeneration": 1, "nodes": 3, "serving": 3, "verified": 0, "failed": 0, "pending": 0}),
    )
    .await;
}
