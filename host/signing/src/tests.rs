use std::path::{Path, PathBuf};

use super::*;

/// A key pair written to a fresh directory: (private PEM path, public PEM path).
fn key_pair(dir: &Path, name: &str, password: &[u8]) -> (PathBuf, PathBuf) {
    let (private, public) = keys::generate(password).expect("generate");
    let (key, public_path) = (
        dir.join(format!("{name}.key")),
        dir.join(format!("{name}.pub")),
    );
    std::fs::write(&key, private.as_bytes()).expect("write key");
    std::fs::write(&public_path, public).expect("write pub");
    (key, public_path)
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wasmlet-signing-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    d
}

fn verifier(keys: &[&Path], required: bool) -> Verifier {
    Verifier::load(&Verification {
        public_keys: keys.iter().map(|p| p.to_path_buf()).collect(),
        required,
        ..Default::default()
    })
    .expect("load")
    .expect("enabled")
}

#[test]
fn a_blob_verifies_with_its_key_only_and_only_unchanged() {
    let d = dir("blob");
    let (key_a, pub_a) = key_pair(&d, "a", b"pw-a");
    let (_, pub_b) = key_pair(&d, "b", b"pw-b");
    let signer = keys::signer(&std::fs::read(&key_a).expect("read"), b"pw-a").expect("signer");
    let signature = keys::sign_blob(&signer, b"component bytes").expect("sign");

    let a = verifier(&[&pub_a], true);
    let verified = a
        .verify_blob(b"component bytes", &signature)
        .expect("verifies");
    let der = keys::pem_contents(&std::fs::read(&pub_a).expect("read")).expect("der");
    assert_eq!(verified.signer, key_id(&der));
    assert!(verified.signer.starts_with("sha256:") && verified.signer.len() == 7 + 16);

    let err = a
        .verify_blob(b"component bytez", &signature)
        .expect_err("tampered")
        .to_string();
    assert!(
        err.contains("does not verify with any trusted key"),
        "{err}"
    );
    let b = verifier(&[&pub_b], true);
    let err = b
        .verify_blob(b"component bytes", &signature)
        .expect_err("other key")
        .to_string();
    assert!(err.contains(&b.keys[0].id), "names the trusted key: {err}");
    // Either key of a rotation verifies.
    let both = verifier(&[&pub_b, &pub_a], true);
    assert_eq!(
        both.verify_blob(b"component bytes", &signature),
        Ok(verified)
    );
}

#[test]
fn a_private_key_opens_only_with_its_password() {
    let d = dir("password");
    let (key, _) = key_pair(&d, "k", b"right");
    let pem = std::fs::read(&key).expect("read");
    assert!(String::from_utf8_lossy(&pem).contains("ENCRYPTED SIGSTORE PRIVATE KEY"));
    let err = keys::signer(&pem, b"wrong")
        .expect_err("wrong password")
        .to_string();
    assert!(
        err.contains("not a private key this password opens"),
        "{err}"
    );
    let signer = keys::signer(&pem, b"right").expect("opens");
    let public = keys::public_pem(&signer).expect("public");
    assert_eq!(
        public,
        std::fs::read_to_string(d.join("k.pub")).expect("pub")
    );
}

#[test]
fn configuration_errors_name_the_field_and_the_file() {
    let d = dir("config");
    let missing = d.join("missing.pub");
    let err = Verifier::load(&Verification {
        public_keys: vec![missing.clone()],
        required: true,
        ..Default::default()
    })
    .expect_err("missing file")
    .to_string();
    assert!(
        err.starts_with(&format!("publicKeys: {}:", missing.display())),
        "{err}"
    );

    let not_a_key = d.join("junk.pub");
    std::fs::write(
        &not_a_key,
        "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
    )
    .expect("write");
    let err = Verifier::load(&Verification {
        public_keys: vec![not_a_key.clone()],
        required: false,
        ..Default::default()
    })
    .expect_err("junk")
    .to_string();
    assert!(err.contains("not a PEM public key"), "{err}");

    let err = Verification {
        public_keys: vec![],
        required: true,
        ..Default::default()
    }
    .validate()
    .expect_err("required without keys")
    .to_string();
    assert!(
        err.starts_with("required: true needs at least one key"),
        "{err}"
    );
    let err = Verification {
        public_keys: vec![PathBuf::from("keys/a.pub")],
        required: false,
        ..Default::default()
    }
    .validate()
    .expect_err("relative")
    .to_string();
    assert!(
        err.starts_with("publicKeys[0]: keys/a.pub is not an absolute path"),
        "{err}"
    );
    assert!(
        Verifier::load(&Verification::default())
            .expect("nothing")
            .is_none()
    );
}

#[test]
fn the_fingerprint_changes_with_the_keys_and_the_requirement() {
    let d = dir("fingerprint");
    let (_, a) = key_pair(&d, "a", b"p");
    let (_, b) = key_pair(&d, "b", b"p");
    let ab = verifier(&[&a, &b], true);
    assert_eq!(ab.fingerprint(), verifier(&[&b, &a], true).fingerprint());
    assert_ne!(ab.fingerprint(), verifier(&[&a, &b], false).fingerprint());
    assert_ne!(ab.fingerprint(), verifier(&[&a], true).fingerprint());
}

#[test]
fn the_signed_payload_is_cosigns_simple_signing_json() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let claim = oci::payload("127.0.0.1:5055", "team/policy", &digest);
    assert_eq!(
        String::from_utf8(serde_json::to_vec(&claim).expect("json")).expect("utf-8"),
        format!(
            r#"{{"critical":{{"identity":{{"docker-reference":"127.0.0.1:5055/team/policy"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"cosign container image signature"}},"optional":null}}"#
        )
    );
}
