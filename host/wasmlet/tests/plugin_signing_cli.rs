//! `wasmlet plugin generate-key-pair | sign | verify` on files: a key pair made, a
//! component signed and verified with it, and keyless signatures (a `cosign sign-blob
//! --bundle` file) verified offline by identity with cosign's flags.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use wasmlet_signing::testing::FakeSigstore;

const BIN: &str = env!("CARGO_BIN_EXE_wasmlet");
const RELEASE: &str = "https://ci.test.invalid/acme/policies/.ci/release.yml@refs/tags/v1";
const ISSUER: &str = "https://token.ci.test.invalid";

fn wasmlet(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env("COSIGN_PASSWORD", "cli-test")
        .output()
        .expect("run wasmlet")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wasmlet-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    d
}

#[test]
fn a_file_signed_with_a_key_verifies_with_it_and_only_unchanged() {
    let d = dir("key");
    std::fs::write(d.join("policy.wasm"), b"component bytes").expect("write");
    let out = wasmlet(
        &d,
        &[
            "plugin",
            "generate-key-pair",
            "--output-key-prefix",
            "release",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = wasmlet(
        &d,
        &["plugin", "sign", "policy.wasm", "--key", "release.key"],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(d.join("policy.wasm.sig").exists());
    let out = wasmlet(
        &d,
        &["plugin", "verify", "policy.wasm", "--key", "release.pub"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("verified: policy.wasm signed by key sha256:"),
        "{}",
        text(&out)
    );
    std::fs::write(d.join("policy.wasm"), b"component bytez").expect("tamper");
    let out = wasmlet(
        &d,
        &["plugin", "verify", "policy.wasm", "--key", "release.pub"],
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("refused: the signature does not verify"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_keyless_bundle_verifies_by_identity_offline() {
    let d = dir("keyless");
    let sigstore = FakeSigstore::new();
    std::fs::write(d.join("trusted_root.json"), sigstore.trusted_root()).expect("root");
    std::fs::write(d.join("policy.wasm"), b"component bytes").expect("write");
    let signed = sigstore.sign(b"component bytes", RELEASE, ISSUER);
    std::fs::write(d.join("policy.wasm.sig"), signed.blob_bundle()).expect("bundle");
    let verify = |identity: &[&str]| {
        let mut args = vec![
            "plugin",
            "verify",
            "policy.wasm",
            "--trusted-root",
            "trusted_root.json",
        ];
        args.extend_from_slice(identity);
        wasmlet(&d, &args)
    };
    let out = verify(&[
        "--certificate-identity",
        RELEASE,
        "--certificate-oidc-issuer",
        ISSUER,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "verified: policy.wasm signed by {RELEASE} ({ISSUER})"
        )),
        "{}",
        text(&out)
    );
    let out = verify(&[
        "--certificate-identity-regexp",
        "https://ci.test.invalid/acme/.*",
        "--certificate-oidc-issuer",
        ISSUER,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = verify(&[
        "--certificate-identity",
        "https://ci.test.invalid/other/repo",
        "--certificate-oidc-issuer",
        ISSUER,
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("not a trusted identity"),
        "{}",
        text(&out)
    );
    // Flag errors name the flag.
    let out = verify(&[
        "--certificate-identity-regexp",
        "(",
        "--certificate-oidc-issuer",
        ISSUER,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("--certificate-identity-regexp:"),
        "{}",
        text(&out)
    );
    let out = verify(&["--certificate-identity", RELEASE]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("--certificate-oidc-issuer"),
        "{}",
        text(&out)
    );
}
