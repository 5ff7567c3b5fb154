use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::testing::{FakeSigstore, KeylessSignature, now};
use crate::verify::{Verification, Verified, Verifier};

use super::{Identity, Keyless};

const ISSUER: &str = "https://issuer.test.invalid";
const RELEASE: &str = "https://ci.test.invalid/acme/policies/release@refs/heads/main";

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wasmlet-keyless-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    d
}

fn exact(issuer: &str, subject: &str) -> Identity {
    Identity {
        issuer: Some(issuer.into()),
        subject: Some(subject.into()),
        ..Default::default()
    }
}

/// A verifier trusting `sigstore`'s root (written to `dir`) and `identities`.
fn verifier(dir: &Path, sigstore: &FakeSigstore, identities: Vec<Identity>) -> Verifier {
    let root = dir.join("trusted_root.json");
    std::fs::write(&root, sigstore.trusted_root()).expect("root");
    Verifier::load(&Verification {
        keyless: Some(Keyless {
            trusted_root: root,
            identities,
        }),
        required: true,
        ..Default::default()
    })
    .expect("load")
    .expect("enabled")
}

/// `signed`'s signature of `component` logged again by `log` at `at` (its bundle).
fn relogged(log: &FakeSigstore, signed: &KeylessSignature, at: i64) -> String {
    let entry = log.log_entry(b"component", &signed.signature, &signed.certificate, at);
    serde_json::to_string(&entry).expect("bundle")
}

/// Asserts that `signed` of `bytes` is refused with a reason containing `cause`.
fn assert_refused(v: &Verifier, bytes: &[u8], signed: &KeylessSignature, cause: &str) {
    let err = v
        .verify_blob(bytes, &signed.blob_bundle())
        .expect_err("refused")
        .to_string();
    assert!(err.contains(cause), "{cause}: {err}");
}

#[test]
fn a_keyless_signature_by_a_trusted_identity_verifies() {
    let sigstore = FakeSigstore::new();
    let v = verifier(&dir("ok"), &sigstore, vec![exact(ISSUER, RELEASE)]);
    let signed = sigstore.sign(b"component", RELEASE, ISSUER);
    assert_eq!(
        v.verify_blob(b"component", &signed.blob_bundle()),
        Ok(Verified {
            signer: format!("{RELEASE} ({ISSUER})")
        })
    );
    // An email subject, matched by a whole-value expression.
    let v = verifier(
        &dir("regexp"),
        &sigstore,
        vec![Identity {
            issuer: Some(ISSUER.into()),
            subject_reg_exp: Some(r".*@acme\.example".into()),
            ..Default::default()
        }],
    );
    let by_mail = sigstore.sign(b"component", "release@acme.example", ISSUER);
    assert!(v.verify_blob(b"component", &by_mail.blob_bundle()).is_ok());
    // The expression matches the whole subject, not a part of it.
    let lookalike = sigstore.sign(b"component", "release@acme.example.evil", ISSUER);
    assert_refused(
        &v,
        b"component",
        &lookalike,
        "signed by release@acme.example.evil (issuer https://issuer.test.invalid), not a trusted identity",
    );
}

#[test]
fn another_identity_or_issuer_is_refused_naming_who_signed() {
    let sigstore = FakeSigstore::new();
    let v = verifier(&dir("identity"), &sigstore, vec![exact(ISSUER, RELEASE)]);
    let other = sigstore.sign(b"component", "https://ci.test.invalid/mallory/fork", ISSUER);
    assert_refused(
        &v,
        b"component",
        &other,
        "signed by https://ci.test.invalid/mallory/fork (issuer https://issuer.test.invalid), not a trusted identity",
    );
    let other_issuer = sigstore.sign(b"component", RELEASE, "https://other.test.invalid");
    assert_refused(
        &v,
        b"component",
        &other_issuer,
        "(issuer https://other.test.invalid), not a trusted identity",
    );
}

#[test]
fn a_certificate_from_another_authority_or_a_log_not_trusted_is_refused() {
    let trusted = FakeSigstore::new();
    let stranger = FakeSigstore::new();
    let v = verifier(&dir("authority"), &trusted, vec![exact(ISSUER, RELEASE)]);
    // Everything by another Sigstore: its log is not in the trusted root.
    assert_refused(
        &v,
        b"component",
        &stranger.sign(b"component", RELEASE, ISSUER),
        "which the trusted root does not list",
    );
    // Another authority's certificate, logged by the trusted log.
    let mut forged = stranger.sign(b"component", RELEASE, ISSUER);
    forged.bundle = relogged(&trusted, &forged, now());
    assert_refused(
        &v,
        b"component",
        &forged,
        "by a certificate authority of the trusted root",
    );
}

#[test]
fn a_log_entry_of_something_else_or_a_forged_timestamp_is_refused() {
    let sigstore = FakeSigstore::new();
    let v = verifier(&dir("entry"), &sigstore, vec![exact(ISSUER, RELEASE)]);
    let genuine = sigstore.sign(b"component", RELEASE, ISSUER);
    // The signed bytes changed.
    assert_refused(
        &v,
        b"tampered",
        &genuine,
        "records a signature of other bytes",
    );
    // Another signature of the same bytes, with the genuine certificate and entry.
    let mut swapped = genuine.clone();
    swapped.signature = sigstore.sign(b"component", RELEASE, ISSUER).signature;
    assert_refused(&v, b"component", &swapped, "records another signature");
    // Another certificate than the one logged.
    let mut recertified = genuine.clone();
    recertified.certificate = sigstore.sign(b"component", RELEASE, ISSUER).certificate;
    assert_refused(
        &v,
        b"component",
        &recertified,
        "records another certificate",
    );
    // A signature the log recorded faithfully, which the certificate's key did not make.
    let mut forged = genuine.clone();
    forged.signature = sigstore.sign(b"component", RELEASE, ISSUER).signature;
    forged.bundle = relogged(&sigstore, &forged, now());
    assert_refused(
        &v,
        b"component",
        &forged,
        &format!("the signature does not verify with the key of {RELEASE}'s certificate"),
    );
    // The entry changed after the log signed it.
    let mut bundle: serde_json::Value = serde_json::from_str(&genuine.bundle).expect("json");
    bundle["Payload"]["logIndex"] = 99.into();
    let mut edited = genuine.clone();
    edited.bundle = bundle.to_string();
    assert_refused(
        &v,
        b"component",
        &edited,
        "signed timestamp does not verify",
    );
}

#[test]
fn a_signature_logged_after_the_certificate_expired_is_refused() {
    let sigstore = FakeSigstore::new();
    let v = verifier(&dir("expired"), &sigstore, vec![exact(ISSUER, RELEASE)]);
    let mut late = sigstore.sign(b"component", RELEASE, ISSUER);
    late.bundle = relogged(&sigstore, &late, now() + 3600);
    assert_refused(&v, b"component", &late, "was not issued, valid at");
    // An old signature stays valid: its certificate was valid when it was logged.
    let old = sigstore.sign_at(b"component", RELEASE, ISSUER, now() - 6 * 3600);
    assert!(v.verify_blob(b"component", &old.blob_bundle()).is_ok());
}

#[test]
fn a_certificate_needs_a_timestamp_of_a_ct_log_the_root_lists() {
    let sigstore = FakeSigstore::new();
    let d = dir("sct");
    let v = verifier(&d, &sigstore, vec![exact(ISSUER, RELEASE)]);
    let untimestamped = sigstore.sign_without_timestamp(b"component", RELEASE, ISSUER);
    assert_refused(
        &v,
        b"component",
        &untimestamped,
        "carries no certificate transparency timestamp (SCT)",
    );
    // A root that lists another CT log than the one that gave the timestamp.
    let mut root: serde_json::Value = serde_json::from_str(&sigstore.trusted_root()).expect("json");
    let other = FakeSigstore::new().trusted_root();
    let other: serde_json::Value = serde_json::from_str(&other).expect("json");
    root["ctlogs"] = other["ctlogs"].clone();
    let path = d.join("other-ct.json");
    std::fs::write(&path, root.to_string()).expect("write");
    let v = Verifier::load(&Verification {
        keyless: Some(Keyless {
            trusted_root: path,
            identities: vec![exact(ISSUER, RELEASE)],
        }),
        required: true,
        ..Default::default()
    })
    .expect("load")
    .expect("enabled");
    assert_refused(
        &v,
        b"component",
        &sigstore.sign(b"component", RELEASE, ISSUER),
        "none of the signing certificate's 1 certificate transparency timestamp(s) is by a log of the trusted root",
    );
    // A deployment without a CT log lists none: certificates need no timestamp.
    let private = FakeSigstore::without_ct_log();
    let v = verifier(&dir("sct-none"), &private, vec![exact(ISSUER, RELEASE)]);
    let signed = private.sign(b"component", RELEASE, ISSUER);
    assert!(v.verify_blob(b"component", &signed.blob_bundle()).is_ok());
}

#[test]
fn a_bundle_signed_with_a_trusted_key_verifies_by_the_key() {
    let d = dir("bundle-key");
    let (private, public) = crate::keys::generate(b"pw").expect("keys");
    let public_path = d.join("k.pub");
    std::fs::write(&public_path, public).expect("write");
    let signer = crate::keys::signer(private.as_bytes(), b"pw").expect("signer");
    let signature = crate::keys::sign_blob(&signer, b"component").expect("sign");
    let bundle = serde_json::json!({
        "base64Signature": signature,
        "cert": STANDARD.encode("not used"),
        "rekorBundle": {"SignedEntryTimestamp": "", "Payload": {"body": "", "integratedTime": 0, "logIndex": 0, "logID": ""}}
    });
    let v = Verifier::load(&Verification {
        public_keys: vec![public_path],
        required: true,
        ..Default::default()
    })
    .expect("load")
    .expect("enabled");
    assert!(v.verify_blob(b"component", &bundle.to_string()).is_ok());
    // Without keyless identities, a keyless bundle is refused saying so.
    let sigstore = FakeSigstore::new();
    let keyless = sigstore.sign(b"component", RELEASE, ISSUER);
    let err = v
        .verify_blob(b"component", &keyless.blob_bundle())
        .expect_err("no identities")
        .to_string();
    assert!(err.contains("no keyless identity is trusted"), "{err}");
}

#[test]
fn keyless_configuration_errors_name_the_field() {
    let d = dir("config");
    let with = |keyless: Keyless| Verification {
        keyless: Some(keyless),
        required: true,
        ..Default::default()
    };
    let err = with(Keyless {
        trusted_root: "root.json".into(),
        identities: vec![exact(ISSUER, RELEASE)],
    })
    .validate()
    .expect_err("relative")
    .to_string();
    assert!(
        err.starts_with("keyless.trustedRoot: root.json is not an absolute path"),
        "{err}"
    );
    let err = with(Keyless {
        trusted_root: d.join("root.json"),
        identities: vec![],
    })
    .validate()
    .expect_err("no identities")
    .to_string();
    assert!(err.starts_with("keyless.identities: at least one"), "{err}");
    let err = with(Keyless {
        trusted_root: d.join("root.json"),
        identities: vec![Identity {
            issuer: Some(ISSUER.into()),
            subject_reg_exp: Some("(".into()),
            ..Default::default()
        }],
    })
    .validate()
    .expect_err("bad expression")
    .to_string();
    assert!(
        err.starts_with("keyless.identities[0].subjectRegExp:"),
        "{err}"
    );
    let err = with(Keyless {
        trusted_root: d.join("root.json"),
        identities: vec![Identity {
            subject: Some(RELEASE.into()),
            ..Default::default()
        }],
    })
    .validate()
    .expect_err("no issuer")
    .to_string();
    assert!(
        err.starts_with("keyless.identities[0].issuer: issuer or issuerRegExp is required"),
        "{err}"
    );
    // The trusted root is read at load: a missing or foreign file names itself.
    let missing = d.join("missing.json");
    let err = Verifier::load(&with(Keyless {
        trusted_root: missing.clone(),
        identities: vec![exact(ISSUER, RELEASE)],
    }))
    .expect_err("missing")
    .to_string();
    assert!(
        err.starts_with(&format!("keyless.trustedRoot: {}:", missing.display())),
        "{err}"
    );
    let junk = d.join("junk.json");
    std::fs::write(&junk, r#"{"tlogs": 3}"#).expect("write");
    let err = Verifier::load(&with(Keyless {
        trusted_root: junk,
        identities: vec![exact(ISSUER, RELEASE)],
    }))
    .expect_err("junk")
    .to_string();
    assert!(err.contains("not a Sigstore trusted root"), "{err}");
}

#[test]
fn the_fingerprint_changes_with_the_root_and_the_identities() {
    let sigstore = FakeSigstore::new();
    let a = verifier(&dir("fp-a"), &sigstore, vec![exact(ISSUER, RELEASE)]);
    let b = verifier(&dir("fp-b"), &sigstore, vec![exact(ISSUER, "someone@else")]);
    let c = verifier(
        &dir("fp-c"),
        &FakeSigstore::new(),
        vec![exact(ISSUER, RELEASE)],
    );
    assert_ne!(a.fingerprint(), b.fingerprint());
    assert_ne!(a.fingerprint(), c.fingerprint());
    assert_eq!(
        a.fingerprint(),
        verifier(&dir("fp-a2"), &sigstore, vec![exact(ISSUER, RELEASE)]).fingerprint()
    );
}

/// A public entry of the public-good Rekor log (`testdata/`): the entry as the log
/// signed it and the certificate it records.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PublicEntry {
    certificate: String,
    signed_entry_timestamp: String,
    body: String,
    integrated_time: i64,
    log_index: i64,
    #[serde(rename = "logID")]
    log_id: String,
}

/// Public Sigstore's own data, checked offline with its trusted root: the log's
/// signature over a real entry, and a real Fulcio certificate's chain, subject and
/// issuer (a GitHub Actions release workflow).
#[test]
fn public_sigstore_entries_and_certificates_verify_offline() {
    let root = super::root::parse(include_bytes!(
        "../../testdata/public-good-trusted-root.json"
    ))
    .expect("public-good trusted root");
    let entry: PublicEntry =
        serde_json::from_str(include_str!("../../testdata/public-good-rekor-entry.json"))
            .expect("entry");
    let bundle = super::rekor::Bundle {
        signed_entry_timestamp: entry.signed_entry_timestamp,
        payload: super::rekor::Entry {
            body: entry.body,
            integrated_time: entry.integrated_time,
            log_index: entry.log_index,
            log_id: entry.log_id,
        },
    };
    let at = bundle.verify(&root).expect("the log signed this entry");
    assert_eq!(at, 1_775_719_409);
    let der = STANDARD.decode(&entry.certificate).expect("base64");
    let leaf = super::cert::verify(&der, &root, at).expect("Fulcio issued it");
    assert_eq!(
        leaf.subject,
        "https://github.com/kubewarden/kubewarden-controller/.github/workflows/release.yml@refs/tags/v1.34.0"
    );
    assert_eq!(leaf.issuer, "https://token.actions.githubusercontent.com");
    // Its certificate transparency timestamp, by public Sigstore's CT log.
    super::sct::verify(&der, &root).expect("the CT log's timestamp");

    // The entry changed by one field: the log's signature no longer holds.
    let mut edited = bundle.clone();
    edited.payload.log_index += 1;
    assert!(edited.verify(&root).is_err());
    // The certificate ten minutes after it expired.
    let err = super::cert::verify(&der, &root, at + 3600)
        .err()
        .expect("expired");
    assert!(err.contains("was not issued, valid at"), "{err}");
}

/// A verifier trusting public Sigstore's root (`testdata/`) and `identities`.
fn public_good(identities: Vec<Identity>) -> Verifier {
    Verifier::load(&Verification {
        keyless: Some(Keyless {
            trusted_root: Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("testdata/public-good-trusted-root.json"),
            identities,
        }),
        required: true,
        ..Default::default()
    })
    .expect("load")
    .expect("enabled")
}

/// A real cosign 3 image signature from public Sigstore (`testdata/`: a Sigstore bundle
/// v0.3 of kubewarden-controller's v1.34.0 release, a DSSE envelope with its Rekor
/// entry), verified offline end to end: statement, log entry, chain, CT timestamp,
/// signature, identity.
#[test]
fn a_public_sigstore_bundle_of_an_image_verifies_offline() {
    use crate::bundle::{Refusal, Subject};
    const WORKFLOW: &str = "https://github.com/kubewarden/kubewarden-controller/.github/workflows/release.yml@refs/tags/v1.34.0";
    const ACTIONS: &str = "https://token.actions.githubusercontent.com";
    const MANIFEST: &str =
        "sha256:c811d58de79c92f03214e63aa339484e488d694ae8a6283b5f3f17a9faf50172";
    let json = include_bytes!("../../testdata/public-good-bundle-v0.3.json");
    let v = public_good(vec![exact(ACTIONS, WORKFLOW)]);
    let verified = v
        .verify_sigstore_bundle(json, Subject::Manifest(MANIFEST))
        .expect("verifies");
    assert_eq!(verified.signer, format!("{WORKFLOW} ({ACTIONS})"));
    // Its inclusion proof was checked too: one hash of the path changed, it fails.
    let mut bent: serde_json::Value = serde_json::from_slice(json).expect("json");
    bent["verificationMaterial"]["tlogEntries"][0]["inclusionProof"]["hashes"][5] =
        STANDARD.encode([0u8; 32]).into();
    match v.verify_sigstore_bundle(bent.to_string().as_bytes(), Subject::Manifest(MANIFEST)) {
        Err(Refusal::Untrusted(Some(why))) => assert!(why.contains("inclusion proof"), "{why}"),
        other => panic!("{other:?}"),
    }
    // About another manifest: it does not count.
    let other = format!("sha256:{}", "0".repeat(64));
    assert!(matches!(
        v.verify_sigstore_bundle(json, Subject::Manifest(&other)),
        Err(Refusal::Foreign)
    ));
    // Another identity is refused, naming who signed.
    let v = public_good(vec![exact(
        ACTIONS,
        "https://github.com/acme/policies/.github/workflows/release.yml@refs/heads/main",
    )]);
    match v.verify_sigstore_bundle(json, Subject::Manifest(MANIFEST)) {
        Err(Refusal::Untrusted(Some(why))) => {
            assert!(
                why.contains(&format!(
                    "signed by {WORKFLOW} (issuer {ACTIONS}), not a trusted identity"
                )),
                "{why}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn cosign_3_file_bundles_verify_by_identity_and_only_for_their_bytes() {
    let sigstore = FakeSigstore::new();
    let v = verifier(&dir("file-bundle"), &sigstore, vec![exact(ISSUER, RELEASE)]);
    let bundle = sigstore.file_bundle(b"component", RELEASE, ISSUER);
    assert_eq!(
        v.verify_blob(b"component", &bundle),
        Ok(Verified {
            signer: format!("{RELEASE} ({ISSUER})")
        })
    );
    let err = v
        .verify_blob(b"tampered", &bundle)
        .expect_err("other bytes")
        .to_string();
    assert!(
        err.contains("the Sigstore bundle is a signature of other bytes"),
        "{err}"
    );
    let other = sigstore.file_bundle(b"component", "https://ci.test.invalid/mallory", ISSUER);
    let err = v
        .verify_blob(b"component", &other)
        .expect_err("other identity")
        .to_string();
    assert!(err.contains("not a trusted identity"), "{err}");
}

#[test]
fn cosign_3_image_bundles_verify_by_key_or_identity() {
    use crate::bundle::{Refusal, Subject};
    let manifest = format!("sha256:{}", "ab".repeat(32));
    let sigstore = FakeSigstore::new();
    let v = verifier(
        &dir("image-bundle"),
        &sigstore,
        vec![exact(ISSUER, RELEASE)],
    );
    let bundle = sigstore.image_bundle(&manifest, RELEASE, ISSUER);
    assert!(
        v.verify_sigstore_bundle(bundle.as_bytes(), Subject::Manifest(&manifest))
            .is_ok()
    );
    // Its inclusion proof altered, or its checkpoint signed by another log.
    let json: serde_json::Value = serde_json::from_str(&bundle).expect("json");
    let proof = json["verificationMaterial"]["tlogEntries"][0]["inclusionProof"].clone();
    let mut bent = proof.clone();
    bent["hashes"][0] = STANDARD.encode([7u8; 32]).into();
    let stranger = FakeSigstore::new().inclusion_proof(b"anything");
    let signature_of = |p: &serde_json::Value| {
        let note = p["checkpoint"]["envelope"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        note.split_once("\n\n")
            .map(|(text, sig)| (text.to_owned(), sig.to_owned()))
    };
    let ((text, _), (_, foreign)) = (
        signature_of(&proof).expect("note"),
        signature_of(&stranger).expect("note"),
    );
    let mut resigned = proof.clone();
    resigned["checkpoint"]["envelope"] = format!("{text}\n\n{foreign}").into();
    for (altered, cause) in [
        (bent, "does not lead from the entry to its root hash"),
        (resigned, "the checkpoint is not signed by log"),
    ] {
        let mut edited = json.clone();
        edited["verificationMaterial"]["tlogEntries"][0]["inclusionProof"] = altered;
        match v.verify_sigstore_bundle(edited.to_string().as_bytes(), Subject::Manifest(&manifest))
        {
            Err(Refusal::Untrusted(Some(why))) => assert!(why.contains(cause), "{cause}: {why}"),
            other => panic!("{cause}: {other:?}"),
        }
    }
    // The statement names another manifest.
    let other = format!("sha256:{}", "cd".repeat(32));
    assert!(matches!(
        v.verify_sigstore_bundle(bundle.as_bytes(), Subject::Manifest(&other)),
        Err(Refusal::Foreign)
    ));
    // Signed with a key (`cosign sign --key`): the trusted key verifies it, and only it.
    let d = dir("image-bundle-key");
    let (private, public) = crate::keys::generate(b"pw").expect("keys");
    std::fs::write(d.join("k.pub"), public).expect("write");
    let signer = crate::keys::signer(private.as_bytes(), b"pw").expect("signer");
    let keyed = crate::testing::key_signed_image_bundle(&signer, &manifest);
    let by_key = Verifier::load(&Verification {
        public_keys: vec![d.join("k.pub")],
        required: true,
        ..Default::default()
    })
    .expect("load")
    .expect("enabled");
    let verified = by_key
        .verify_sigstore_bundle(keyed.as_bytes(), Subject::Manifest(&manifest))
        .expect("by the key");
    assert!(verified.signer.starts_with("sha256:"));
    assert!(matches!(
        v.verify_sigstore_bundle(keyed.as_bytes(), Subject::Manifest(&manifest)),
        Err(Refusal::Untrusted(None))
    ));
}
