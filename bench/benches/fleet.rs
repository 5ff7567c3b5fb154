//! Cluster plugins: from `kubectl apply` of a WasmletPlugin (the object's update reaching
//! the watches) to the new version deciding on every node, for 3 and 100 nodes following
//! the API server double in this process; decisions made on every node throughout (none
//! may fail); the node writes per rollout (each to its own WasmletNode); apply → the
//! controller's counts saying every node serves. Each round publishes a new digest (the component
//! with a custom section naming the round), so every round fetches, verifies, compiles
//! and swaps: from the test registry when there is one (`WASMLET_TEST_REGISTRY`, or
//! `scripts/registry.sh up`), pushed before the clock starts ("cached by the registry"),
//! else from a ConfigMap. The nodes share one wasmtime engine and compiled-component cache,
//! as hollow nodes in one process do: one of them compiles, the others load the result.
//! Each size runs twice: without signatures, and with every node requiring a trusted
//! key's signature (cosign's, beside the artifact in the registry, or `KEY.sig` beside a
//! ConfigMap's component), signed before the clock starts as a publisher signs. Then
//! what one verification costs: a registry artifact's (signature lookup included) and a
//! blob's.

#[path = "../../host/fleet/tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::Cluster;
use wasmlet_bench::{fmt, pct, variant};
use wasmlet_fleet::FleetConfig;
use wasmlet_signing::{Registry, Verification, Verifier, keys};

fn smoke() -> bool {
    std::env::args().any(|a| a == "--smoke")
}

struct Round {
    /// Apply → the last node serving.
    all: Duration,
    /// Apply → each node serving.
    nodes: Vec<Duration>,
    failed: u64,
    decided: u64,
    writes: usize,
    /// Apply → the controller's counts say every node serves.
    counted: Duration,
}

/// The publisher's key, when nodes require signatures: (private key PEM, its public key
/// file).
type Signing = Option<(Vec<u8>, std::path::PathBuf)>;

/// The middle of `v` (the upper one of an even count).
fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn signer(key: &[u8]) -> wasmlet_signing::Signer {
    keys::signer(key, b"bench").expect("signer")
}

fn registry_of((_, user, password): &(String, String, String)) -> Registry {
    Registry {
        insecure: true,
        credentials: Some((user.clone(), password.clone())),
    }
}

async fn round(
    c: &Cluster,
    i: usize,
    registry: Option<&(String, String, String)>,
    signing: &Signing,
) -> Round {
    let base = support::bytes(if i.is_multiple_of(2) {
        support::DENY_ALL
    } else {
        support::RESTRICTED
    });
    let wasm = variant(&base, &format!("round {i} of {}", std::process::id()));
    let sha = wasmlet_fleet::fetch::sha256_hex(&wasm);
    let source = match registry {
        Some((addr, user, password)) => {
            let reference = format!(
                "oci://{addr}/wasmlet-bench/policy:r{i}-{}",
                std::process::id()
            );
            wasmlet_fleet::publish::push(
                &wasm,
                &reference,
                true,
                Some((user.clone(), password.clone())),
                None,
            )
            .await
            .expect("push");
            if let (Some((key, _)), Some(r)) = (signing, registry) {
                registry_of(r)
                    .sign(&reference, &signer(key))
                    .await
                    .expect("sign");
            }
            json!({"oci": {"reference": reference, "pullSecret": "registry", "insecure": true}})
        }
        None => {
            let name = format!("round-{i}");
            let mut keys = vec![("policy.wasm", wasm.clone())];
            if let Some((key, _)) = signing {
                let signature = keys::sign_blob(&signer(key), &wasm).expect("sign");
                keys.push(("policy.wasm.sig", signature.into_bytes()));
            }
            c.config_map_bytes(&name, &keys).await;
            json!({"configMap": {"name": name, "key": "policy.wasm"}})
        }
    };
    let writes_before = c.node_writes();
    let deciding = c.decide_continuously();
    let start = Instant::now();
    c.apply(json!({"metadata": {"name": "policy"},
                   "spec": {"kind": "admission", "digest": format!("sha256:{sha}"), "source": source}}))
        .await;
    let nodes = support::serving(&c.nodes, "policy", &sha, start, Duration::from_secs(60)).await;
    let counts = deciding.stop().await;
    let generation = i as i64 + 1;
    let want = json!({"observedGeneration": generation, "serving": c.nodes.len(), "pending": 0});
    c.wait_summary("policy", want).await;
    let counted = start.elapsed();
    // Every node's entry written; a little longer to see any write beyond one per node.
    let waited = Instant::now();
    while c.node_writes() < writes_before + c.nodes.len()
        && waited.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    Round {
        all: nodes.iter().copied().max().unwrap_or_default(),
        nodes,
        failed: counts.failed,
        decided: counts.decided,
        writes: c.node_writes() - writes_before,
        counted,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let registry = wasmlet_fleet::dev::registry();
    // `--nodes N` measures one fleet size (for profiling one of them).
    let only: Option<usize> = std::env::args()
        .skip_while(|a| a != "--nodes")
        .nth(1)
        .and_then(|n| n.parse().ok());
    let (sizes, rounds): (Vec<usize>, usize) = match only {
        Some(n) => (vec![n], 6),
        None if smoke() => (vec![3], 2),
        None => (vec![3, 100], 6),
    };
    println!(
        "\n### apply → new version deciding on every node ({}; {rounds} rounds, a new digest each)\n",
        if registry.is_some() {
            "OCI registry, htpasswd, pull secret"
        } else {
            "ConfigMap"
        }
    );
    println!(
        "| nodes | signatures | apply → all serving p50 | max | apply → a node serving: first p50 | p50 | p99 | apply → counts say all serve p50 | decisions during rollouts | failed | status writes per node and rollout |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let keys_dir = std::env::temp_dir().join(format!("wasmlet-bench-keys-{}", std::process::id()));
    std::fs::create_dir_all(&keys_dir).expect("dir");
    let (private, public) = keys::generate(b"bench").expect("key");
    let public_file = keys_dir.join("release.pub");
    std::fs::write(&public_file, public).expect("write");
    let required: Signing = Some((private.as_bytes().to_vec(), public_file.clone()));
    for (n, signing) in sizes
        .iter()
        .flat_map(|&n| [(n, None), (n, required.clone())])
    {
        fleet_row(n, signing, rounds, registry.as_ref()).await;
    }
    verification_cost(registry.as_ref(), &required).await;
}

/// `rounds` rollouts on `n` nodes, signed with `signing` if given: the table's row.
async fn fleet_row(
    n: usize,
    signing: Signing,
    rounds: usize,
    registry: Option<&(String, String, String)>,
) {
    let names: Vec<String> = (0..n).map(|i| format!("node-{i:03}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let config = FleetConfig {
        verification: Verification {
            public_keys: signing.iter().map(|(_, p)| p.clone()).collect(),
            required: signing.is_some(),
            ..Verification::default()
        },
        ..FleetConfig::default()
    };
    let tag = if signing.is_some() { "signed" } else { "plain" };
    let c = Cluster::start_with(&format!("bench-{n}-{tag}"), &names, config).await;
    if let Some((addr, user, password)) = &registry {
        support::pull_secret(&c, addr, user, password);
    }
    let mut all = Vec::new();
    let mut first = Vec::new();
    let mut per_node = Vec::new();
    let (mut failed, mut decided) = (0, 0);
    let mut writes = Vec::new();
    let mut counted = Vec::new();
    for i in 0..rounds {
        let r = round(&c, i, registry, &signing).await;
        all.push(r.all);
        first.push(r.nodes.iter().copied().min().unwrap_or_default());
        per_node.extend(r.nodes);
        failed += r.failed;
        decided += r.decided;
        writes.push(r.writes);
        counted.push(r.counted);
    }
    println!(
        "| {n} | {} | {} | {} | {} | {} | {} | {} | {decided} | {failed} | {} |",
        if signing.is_some() {
            "required"
        } else {
            "none"
        },
        fmt(pct(all.clone(), 50.0)),
        fmt(pct(all, 100.0)),
        fmt(pct(first, 50.0)),
        fmt(pct(per_node.clone(), 50.0)),
        fmt(pct(per_node, 99.0)),
        fmt(pct(counted, 50.0)),
        writes
            .iter()
            .map(|w| format!("{:.2}", *w as f64 / n as f64))
            .collect::<Vec<_>>()
            .join(" "),
    );
    assert_eq!(failed, 0, "a decision failed during a rollout");
}

/// A verifier trusting `sigstore`'s root and the identity `subject` of `issuer`.
fn keyless_verifier(
    sigstore: &wasmlet_signing::testing::FakeSigstore,
    subject: &str,
    issuer: &str,
) -> Verifier {
    use wasmlet_signing::keyless::{Identity, Keyless};
    let root = std::env::temp_dir().join(format!("wasmlet-bench-root-{}.json", std::process::id()));
    std::fs::write(&root, sigstore.trusted_root()).expect("root");
    let verifier = Verifier::load(&Verification {
        keyless: Some(Keyless {
            trusted_root: root.clone(),
            identities: vec![Identity {
                issuer: Some(issuer.into()),
                subject: Some(subject.into()),
                ..Identity::default()
            }],
        }),
        required: true,
        ..Verification::default()
    })
    .expect("keyless")
    .expect("enabled");
    let _ = std::fs::remove_file(&root);
    verifier
}

/// Twenty keyless verifications of a file's `cosign sign-blob --bundle` signature,
/// against a Fulcio/Rekor stand-in's trusted root.
fn keyless_cost(wasm: &[u8]) -> Vec<Duration> {
    let (subject, issuer) = (
        "https://ci.example/acme/release",
        "https://token.ci.example",
    );
    let sigstore = wasmlet_signing::testing::FakeSigstore::new();
    let verifier = keyless_verifier(&sigstore, subject, issuer);
    let bundle = sigstore.sign(wasm, subject, issuer).blob_bundle();
    (0..20)
        .map(|_| {
            let t = Instant::now();
            verifier.verify_blob(wasm, &bundle).expect("verified");
            t.elapsed()
        })
        .collect()
}

/// What one verification costs a load: a registry artifact's (its signature looked up in
/// the registry) and a blob's, the median of 20.
async fn verification_cost(registry: Option<&(String, String, String)>, signing: &Signing) {
    let Some((key, public)) = signing else {
        return;
    };
    let verifier = Verifier::load(&Verification {
        public_keys: vec![public.clone()],
        required: true,
        ..Verification::default()
    })
    .expect("keys")
    .expect("enabled");
    let wasm = variant(&support::bytes(support::RESTRICTED), "verification");
    println!("\n### one verification (median of 20)\n");
    println!("| what | time |");
    println!("|---|---|");
    let signature = keys::sign_blob(&signer(key), &wasm).expect("sign");
    let blob: Vec<Duration> = (0..20)
        .map(|_| {
            let t = Instant::now();
            verifier.verify_blob(&wasm, &signature).expect("verified");
            t.elapsed()
        })
        .collect();
    println!(
        "| a blob signature (ConfigMap, plugin directory) | {} |",
        fmt(median(blob))
    );
    println!(
        "| a keyless blob signature (Rekor timestamp, certificate chain, CT timestamp, identity) | {} |",
        fmt(median(keyless_cost(&wasm)))
    );
    if let Some(r) = registry {
        registry_costs(r, &verifier, key, &wasm).await;
    }
}

/// What verification costs for an artifact in registry `r`: signed at cosign's tag
/// with `key`, and signed as cosign 3 does (a keyless bundle referring to it).
async fn registry_costs(
    r: &(String, String, String),
    verifier: &Verifier,
    key: &[u8],
    wasm: &[u8],
) {
    let reference = format!("oci://{}/wasmlet-bench/verify:{}", r.0, std::process::id());
    wasmlet_fleet::publish::push(wasm, &reference, true, registry_of(r).credentials, None)
        .await
        .expect("push");
    let signed = registry_of(r)
        .sign(&reference, &signer(key))
        .await
        .expect("sign");
    let repository: wasmlet_signing::oci_client::Reference = reference
        .trim_start_matches("oci://")
        .parse()
        .expect("reference");
    // As a node reads it: through the client it pulled the component with.
    let (client, auth) = registry_of(r).oci();
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        verifier
            .verify_artifact(&client, &auth, &repository, &signed.manifest_digest)
            .await
            .expect("verified");
        times.push(t.elapsed());
    }
    println!(
        "| a registry artifact (its signature manifest fetched, htpasswd; the payload is the one cosign writes for it) | {} |",
        fmt(median(times))
    );
    let bundled = format!(
        "oci://{}/wasmlet-bench/verify:{}-v3",
        r.0,
        std::process::id()
    );
    let variant_bytes = variant(wasm, "cosign-3");
    wasmlet_fleet::publish::push(
        &variant_bytes,
        &bundled,
        true,
        registry_of(r).credentials,
        None,
    )
    .await
    .expect("push");
    let times = referrer_cost(&registry_of(r), &bundled).await;
    println!(
        "| a registry artifact signed as cosign 3 does, the node's first (`.sig` tag asked first: none; the referrers tag, the referrer's manifest and bundle; keyless) | {} |",
        fmt(times[0])
    );
    println!(
        "| the same, then (the repository's signatures known to be bundles: asked first) | {} |",
        fmt(median(times[1..].to_vec()))
    );
}

/// Twenty verifications of an artifact whose only signature is a keyless Sigstore
/// bundle referring to it, as a node reads it.
async fn referrer_cost(registry: &Registry, reference: &str) -> Vec<Duration> {
    let (subject, issuer) = (
        "https://ci.example/acme/release",
        "https://token.ci.example",
    );
    let sigstore = wasmlet_signing::testing::FakeSigstore::new();
    let (client, auth) = registry.oci();
    let (repository, digest) = wasmlet_signing::oci::resolve(&client, &auth, reference)
        .await
        .expect("digest");
    let bundle = sigstore.image_bundle(&digest, subject, issuer);
    wasmlet_signing::testing::attach_referrer(registry, reference, &bundle)
        .await
        .expect("referrer");
    let verifier = keyless_verifier(&sigstore, subject, issuer);
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        verifier
            .verify_artifact(&client, &auth, &repository, &digest)
            .await
            .expect("verified");
        times.push(t.elapsed());
    }
    times
}
