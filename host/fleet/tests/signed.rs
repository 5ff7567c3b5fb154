//! Signed cluster plugins: nodes that require a trusted key's signature load what that
//! key signed — a cosign signature beside the artifact in a real registry (Debian's
//! `docker-registry`, see `registry.rs`), or a blob signature beside a ConfigMap's
//! component — and refuse, naming why, what another key signed, what nobody signed, a
//! signature copied from another artifact and changed bytes; the version serving before
//! keeps serving. A verified component is verified once: a node restarted without the
//! API server serves it from its store. Keyless signatures count by identity, at
//! cosign's tag or as a Sigstore bundle referring to the manifest (cosign 3).

mod support;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use support::{Cluster, DENY_ALL, RESTRICTED, Verdict, bytes, digest_of};
use wasmlet_fleet::FleetConfig;
use wasmlet_signing::keyless::{Identity, Keyless};
use wasmlet_signing::testing::FakeSigstore;
use wasmlet_signing::{Registry, Verification, keys};

/// A component no node fetches before the refusals.
const COUNTER: &str = "fixture_counter";

/// A key pair in `dir`: (private key PEM, its id, public key file).
fn key_pair(dir: &Path, name: &str) -> (Vec<u8>, String, PathBuf) {
    let (private, public) = keys::generate(b"test").expect("key pair");
    let file = dir.join(format!("{name}.pub"));
    std::fs::write(&file, &public).expect("write");
    let id = wasmlet_signing::key_id(&keys::pem_contents(public.as_bytes()).expect("der"));
    (private.as_bytes().to_vec(), id, file)
}

fn signer(private: &[u8]) -> wasmlet_signing::Signer {
    keys::signer(private, b"test").expect("signer")
}

fn requiring(key: &Path) -> FleetConfig {
    FleetConfig {
        verification: Verification {
            public_keys: vec![key.to_path_buf()],
            required: true,
            ..Verification::default()
        },
        ..FleetConfig::default()
    }
}

fn keys_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wasmlet-keys-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

/// Every entry of `name` is `state` with a message containing `cause`, the digest of
/// `serving` still serving and signed by `key`.
fn assert_entries(c: &Cluster, name: &str, cause: &str, serving: &str, key: &str) {
    for entry in c.entries(name) {
        let message = entry["message"].as_str().unwrap_or_default();
        assert!(message.contains(cause), "{cause}: {message}");
        assert_eq!(entry["digest"], digest_of(serving), "{entry}");
        assert_eq!(entry["verified"], key, "{entry}");
    }
}

/// A ConfigMap's (key, bytes).
type Keys<'a> = Vec<(&'a str, Vec<u8>)>;

fn from_config_map(name: &str, plugin: &str) -> Value {
    json!({"kind": "admission", "digest": digest_of(plugin),
           "source": {"configMap": {"name": name, "key": "policy.wasm"}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_in_config_maps_load_only_with_a_trusted_signature_and_once() {
    let dir = keys_dir("configmap");
    let (release, release_id, release_pub) = key_pair(&dir, "release");
    let (other, _, _) = key_pair(&dir, "other");
    let mut c =
        Cluster::start_with("signed-cm", &["node-a", "node-b"], requiring(&release_pub)).await;
    let all = |state| [("node-a", state), ("node-b", state)];
    let sign = |key: &[u8], plugin: &str| {
        keys::sign_blob(&signer(key), &bytes(plugin))
            .expect("sign")
            .into_bytes()
    };

    c.config_map_bytes(
        "v1",
        &[
            ("policy.wasm", bytes(RESTRICTED)),
            ("policy.wasm.sig", sign(&release, RESTRICTED)),
        ],
    )
    .await;
    c.apply(json!({"metadata": {"name": "policy"}, "spec": from_config_map("v1", RESTRICTED)}))
        .await;
    c.wait_status("policy", 1, &all("Loaded")).await;
    assert_entries(&c, "policy", "", RESTRICTED, &release_id);
    c.wait_summary(
        "policy",
        json!({"observedGeneration": 1, "selected": 2, "serving": 2, "verified": 2, "failed": 0, "pending": 0}),
    )
    .await;

    // Refused, each on every node, the signed version deciding meanwhile.
    let cases: [(&str, Keys, &str); 3] = [
        (
            "other-key",
            vec![
                ("policy.wasm", bytes(DENY_ALL)),
                ("policy.wasm.sig", sign(&other, DENY_ALL)),
            ],
            "signature refused: the signature does not verify with any trusted key",
        ),
        (
            "unsigned",
            vec![("policy.wasm", bytes(DENY_ALL))],
            "signature refused: not signed: ConfigMap wasmlet-system/unsigned key policy.wasm has no signature beside it",
        ),
        (
            // The release signature of another component beside these bytes.
            "swapped-bytes",
            vec![
                ("policy.wasm", bytes(DENY_ALL)),
                ("policy.wasm.sig", sign(&release, RESTRICTED)),
            ],
            "signature refused: the signature does not verify with any trusted key",
        ),
    ];
    for (generation, (name, keys, cause)) in (2..).zip(cases) {
        c.config_map_bytes(name, &keys).await;
        c.apply(json!({"metadata": {"name": "policy"}, "spec": from_config_map(name, DENY_ALL)}))
            .await;
        c.wait_status("policy", generation, &all("Failed")).await;
        assert_entries(&c, "policy", cause, RESTRICTED, &release_id);
        for n in &c.nodes {
            assert_eq!(n.decide().await, Verdict::Admitted, "{name}");
        }
    }

    // The story, as `kubectl describe` tells it from node-a's events.
    let story: Vec<(String, String)> = c.nodes[0]
        .events
        .events()
        .into_iter()
        .map(|e| (e.reason, e.message))
        .collect();
    assert_eq!(story.len(), 4, "{story:?}");
    assert_eq!(story[0].0, "PluginLoaded");
    assert_eq!(
        story[0].1,
        format!(
            "{} serves on node-a (generation 1, signed by key {release_id})",
            digest_of(RESTRICTED)
        )
    );
    for (generation, (reason, message)) in (2..).zip(&story[1..]) {
        assert_eq!(reason, "PluginRefused");
        assert!(
            message.starts_with(&format!(
                "generation {generation} refused on node-a: signature refused: "
            )),
            "{message}"
        );
        assert!(
            message.ends_with(&format!("; {} keeps serving", digest_of(RESTRICTED))),
            "{message}"
        );
    }
    let event = &c.nodes[0].events.events()[0];
    let regarding = event.regarding.as_ref().expect("about the plugin");
    assert_eq!(
        (
            regarding.kind.as_str(),
            regarding.name.as_str(),
            regarding.controller.as_str()
        ),
        ("WasmletPlugin", "policy", "wasmlet")
    );
    assert_eq!(
        regarding.uid,
        c.object("policy")["metadata"]["uid"].as_str().expect("uid")
    );

    // Verified once: without the API server (nothing to fetch the ConfigMap from), a
    // restarted node serves the verified version from its store.
    c.stop_api_server();
    let node = c.restart_node(0).await;
    node.wait(
        |n| n.chain.names().iter().any(|l| l == "policy"),
        "policy from the store",
    )
    .await;
    assert_eq!(node.decide().await, Verdict::Admitted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_does_not_require_signatures_records_who_signed() {
    let dir = keys_dir("optional");
    let (release, release_id, release_pub) = key_pair(&dir, "release");
    let config = FleetConfig {
        verification: Verification {
            public_keys: vec![release_pub],
            required: false,
            ..Verification::default()
        },
        ..FleetConfig::default()
    };
    let c = Cluster::start_with("signed-optional", &["node-a"], config).await;
    let signature = keys::sign_blob(&signer(&release), &bytes(RESTRICTED)).expect("sign");
    c.config_map_bytes(
        "signed",
        &[
            ("policy.wasm", bytes(RESTRICTED)),
            ("policy.wasm.sig", signature.into_bytes()),
        ],
    )
    .await;
    c.config_map_bytes("unsigned", &[("policy.wasm", bytes(DENY_ALL))])
        .await;
    c.apply(json!({"metadata": {"name": "policy"}, "spec": from_config_map("signed", RESTRICTED)}))
        .await;
    c.wait_status("policy", 1, &[("node-a", "Loaded")]).await;
    assert_eq!(c.entries("policy")[0]["verified"], release_id.as_str());
    c.apply(json!({"metadata": {"name": "policy"}, "spec": from_config_map("unsigned", DENY_ALL)}))
        .await;
    c.wait_status("policy", 2, &[("node-a", "Loaded")]).await;
    let entry = &c.entries("policy")[0];
    assert_eq!(entry["digest"], digest_of(DENY_ALL));
    assert_eq!(entry.get("verified"), None, "{entry}");
    assert_eq!(
        c.nodes[0].decide().await,
        Verdict::Rejected("DeniedByPolicy".into())
    );
    c.delete("policy").await;
    // The event follows the unload: wait for both.
    c.nodes[0]
        .wait(
            |n| n.chain.names().is_empty() && n.events.events().len() == 3,
            "the plugin unloaded",
        )
        .await;
    let story: Vec<String> = c.nodes[0]
        .events
        .events()
        .into_iter()
        .map(|e| format!("{}: {}", e.reason, e.message))
        .collect();
    assert_eq!(
        story,
        [
            format!(
                "PluginLoaded: {} serves on node-a (generation 1, signed by key {release_id})",
                digest_of(RESTRICTED)
            ),
            format!(
                "PluginSwapped: {} serves on node-a in place of {} (generation 2)",
                digest_of(DENY_ALL),
                digest_of(RESTRICTED)
            ),
            format!(
                "PluginUnloaded: {} unloaded from node-a: the WasmletPlugin was deleted",
                digest_of(DENY_ALL)
            ),
        ]
    );
}

async fn push(addr: &str, auth: &Registry, repo: &str, plugin: &str) -> String {
    let reference = format!("oci://{addr}/{repo}");
    wasmlet_fleet::publish::push(
        &bytes(plugin),
        &reference,
        true,
        auth.credentials.clone(),
        Some("wasmlet:plugin/admission-policy@0.1.0"),
    )
    .await
    .expect("push");
    reference
}

fn oci(reference: &str, plugin: &str) -> Value {
    json!({"kind": "admission", "digest": digest_of(plugin),
           "source": {"oci": {"reference": reference, "insecure": true, "pullSecret": "registry"}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_artifacts_roll_out_and_tampered_ones_are_refused_on_every_node() {
    let Some((addr, user, password)) = wasmlet_fleet::dev::registry() else {
        return;
    };
    let registry = Registry {
        insecure: true,
        credentials: Some((user.clone(), password.clone())),
    };
    let dir = keys_dir("registry");
    let (release, release_id, release_pub) = key_pair(&dir, "release");
    let (other, _, _) = key_pair(&dir, "other");
    let c = Cluster::start_with(
        "signed-registry",
        &["node-a", "node-b", "node-c"],
        requiring(&release_pub),
    )
    .await;
    support::pull_secret(&c, &addr, &user, &password);
    let all = |state| [("node-a", state), ("node-b", state), ("node-c", state)];
    let run = std::process::id();
    let repo = |tag: &str| format!("wasmlet-test/signed-{run}:{tag}");

    let v1 = push(&addr, &registry, &repo("v1"), RESTRICTED).await;
    let signed = registry
        .sign(&v1, &signer(&release))
        .await
        .expect("sign v1");
    c.apply(json!({"metadata": {"name": "policy"}, "spec": oci(&v1, RESTRICTED)}))
        .await;
    c.wait_status("policy", 1, &all("Loaded")).await;
    assert_entries(&c, "policy", "", RESTRICTED, &release_id);
    c.wait_summary(
        "policy",
        json!({"observedGeneration": 1, "selected": 3, "serving": 3, "verified": 3, "failed": 0, "pending": 0}),
    )
    .await;

    // Signed by another key.
    let by_other = push(&addr, &registry, &repo("other"), DENY_ALL).await;
    registry
        .sign(&by_other, &signer(&other))
        .await
        .expect("sign");
    // Nobody signed it.
    let unsigned = push(&addr, &registry, &repo("unsigned"), COUNTER).await;
    // The tag re-pushed with other bytes, v1's release signature copied beside it.
    let repushed = push(&addr, &registry, &repo("v1"), DENY_ALL).await;
    copy_signatures(&registry, &v1, &signed.manifest_digest, &repushed).await;
    let cases = [
        (
            oci(&by_other, DENY_ALL),
            "signature refused: not signed by a trusted key or identity: 1 signature(s)",
        ),
        (
            oci(&unsigned, COUNTER),
            "signature refused: not signed: no cosign signature",
        ),
        (
            oci(&repushed, DENY_ALL),
            "(1 of them for another manifest), none by ",
        ),
    ];
    for (generation, (spec, cause)) in (2..).zip(cases) {
        c.apply(json!({"metadata": {"name": "policy"}, "spec": spec}))
            .await;
        c.wait_status("policy", generation, &all("Failed")).await;
        assert_entries(&c, "policy", cause, RESTRICTED, &release_id);
        for n in &c.nodes {
            assert_eq!(n.decide().await, Verdict::Admitted, "{cause}");
        }
    }

    // Signed with the release key after all: every node takes it at its next attempt.
    registry
        .sign(&repushed, &signer(&release))
        .await
        .expect("sign");
    c.wait_status("policy", 4, &all("Loaded")).await;
    for n in &c.nodes {
        assert_eq!(n.decide().await, Verdict::Rejected("DeniedByPolicy".into()));
    }
}

/// The release workflow a keyless node trusts, and its OpenID Connect issuer.
const RELEASE: &str = "https://ci.test.invalid/acme/policies/.ci/release.yml@refs/heads/main";
const ISSUER: &str = "https://token.ci.test.invalid";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_signed_artifacts_load_only_by_a_trusted_identity() {
    let Some((addr, user, password)) = wasmlet_fleet::dev::registry() else {
        return;
    };
    let registry = Registry {
        insecure: true,
        credentials: Some((user.clone(), password.clone())),
    };
    // A Fulcio and a Rekor of the test's own; the nodes trust them through the trusted
    // root file, as a cluster trusts public Sigstore's.
    let sigstore = FakeSigstore::new();
    let dir = keys_dir("keyless");
    let root = dir.join("trusted_root.json");
    std::fs::write(&root, sigstore.trusted_root()).expect("root");
    let config = FleetConfig {
        verification: Verification {
            keyless: Some(Keyless {
                trusted_root: root,
                identities: vec![Identity {
                    issuer: Some(ISSUER.into()),
                    subject: Some(RELEASE.into()),
                    ..Identity::default()
                }],
            }),
            required: true,
            ..Verification::default()
        },
        ..FleetConfig::default()
    };
    let c = Cluster::start_with("signed-keyless", &["node-a", "node-b"], config).await;
    support::pull_secret(&c, &addr, &user, &password);
    let all = |state| [("node-a", state), ("node-b", state)];
    let run = std::process::id();
    let repo = |tag: &str| format!("wasmlet-test/keyless-{run}:{tag}");

    let v1 = push(&addr, &registry, &repo("v1"), RESTRICTED).await;
    sigstore
        .sign_artifact(&registry, &v1, RELEASE, ISSUER)
        .await
        .expect("sign v1");
    c.apply(json!({"metadata": {"name": "policy"}, "spec": oci(&v1, RESTRICTED)}))
        .await;
    c.wait_status("policy", 1, &all("Loaded")).await;
    let signer = format!("{RELEASE} ({ISSUER})");
    assert_entries(&c, "policy", "", RESTRICTED, &signer);

    // Signed keyless too, by a workflow of another repository.
    let fork = push(&addr, &registry, &repo("fork"), DENY_ALL).await;
    sigstore
        .sign_artifact(
            &registry,
            &fork,
            "https://ci.test.invalid/mallory/policies/.ci/release.yml@refs/heads/main",
            ISSUER,
        )
        .await
        .expect("sign fork");
    c.apply(json!({"metadata": {"name": "policy"}, "spec": oci(&fork, DENY_ALL)}))
        .await;
    c.wait_status("policy", 2, &all("Failed")).await;
    assert_entries(
        &c,
        "policy",
        "keyless: signed by https://ci.test.invalid/mallory/policies/.ci/release.yml@refs/heads/main (issuer https://token.ci.test.invalid), not a trusted identity",
        RESTRICTED,
        &signer,
    );
    for n in &c.nodes {
        assert_eq!(n.decide().await, Verdict::Admitted);
    }
    // The trusted workflow signs it as well: the signatures sit side by side, and the
    // nodes take it at their next attempt.
    sigstore
        .sign_artifact(&registry, &fork, RELEASE, ISSUER)
        .await
        .expect("sign again");
    c.wait_status("policy", 2, &all("Loaded")).await;
    assert_entries(&c, "policy", "", DENY_ALL, &signer);

    // Signed as cosign 3 signs by default: a Sigstore bundle stored as a referrer of
    // the manifest (in the referrers tag: this registry has no referrers API).
    let v3 = push(&addr, &registry, &repo("v3"), COUNTER).await;
    let (client, auth) = registry.oci();
    let (_, digest) = wasmlet_signing::oci::resolve(&client, &auth, &v3)
        .await
        .expect("digest");
    let bundle = sigstore.image_bundle(&digest, RELEASE, ISSUER);
    wasmlet_signing::testing::attach_referrer(&registry, &v3, &bundle)
        .await
        .expect("referrer");
    c.apply(json!({"metadata": {"name": "policy"}, "spec": oci(&v3, COUNTER)}))
        .await;
    c.wait_status("policy", 3, &all("Loaded")).await;
    assert_entries(&c, "policy", "", COUNTER, &signer);
}

/// Stores the signatures of `original`'s manifest `digest` as the signatures of what
/// `target` names now: a forger copying a valid signature to other bytes.
async fn copy_signatures(registry: &Registry, original: &str, digest: &str, target: &str) {
    use wasmlet_signing::oci::{self, SIGNATURE_ANNOTATION};
    use wasmlet_signing::oci_client::Reference;
    use wasmlet_signing::oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciImageManifest};
    let (client, auth) = registry.oci();
    let original: Reference = original.trim_start_matches("oci://").parse().expect("ref");
    let (raw, _) = client
        .pull_manifest_raw(
            &oci::signature_reference(&original, digest),
            &auth,
            &[OCI_IMAGE_MEDIA_TYPE],
        )
        .await
        .expect("the original's signatures");
    let manifest: OciImageManifest = serde_json::from_slice(&raw).expect("manifest");
    assert_eq!(manifest.layers.len(), 1);
    let annotations = manifest.layers[0].annotations.clone().expect("annotations");
    assert!(annotations.contains_key(SIGNATURE_ANNOTATION));
    let target: Reference = target.trim_start_matches("oci://").parse().expect("ref");
    let target_digest = client
        .fetch_manifest_digest(&target, &auth)
        .await
        .expect("digest");
    assert_ne!(target_digest, digest);
    // The original's payload (it names the original's manifest) and signature.
    let payload = oci::payload_bytes(&original, digest);
    oci::attach(
        &client,
        &auth,
        &target,
        &target_digest,
        payload,
        annotations,
    )
    .await
    .expect("copied");
}
