//! A stand-in for Sigstore's Fulcio and Rekor, for tests: a certificate authority that
//! issues short-lived code-signing certificates as Fulcio does (the subject as an email
//! or URI subject alternative name, the OpenID Connect issuer in Sigstore's extensions,
//! a certificate transparency log's timestamp embedded), a transparency log key that
//! signs entry timestamps as Rekor does, and the trusted root file that trusts them. What it makes is verified by the same code as
//! public Sigstore's signatures.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rcgen::{
    BasicConstraints, CertificateParams, CustomExtension, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, PKCS_ECDSA_P384_SHA384, PublicKeyData,
    SanType, SigningKey,
};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::keyless::rekor::{Bundle, Entry};
use crate::keyless::sct;
use crate::oci::{self, Registry};

/// How long a certificate is valid: Fulcio's ten minutes.
const CERTIFICATE_LIFETIME: i64 = 600;

/// A keyless signature: what cosign stores beside the signed bytes.
#[derive(Debug, Clone)]
pub struct KeylessSignature {
    /// The signature, base64.
    pub signature: String,
    /// The signing certificate, PEM.
    pub certificate: String,
    /// The Rekor bundle, JSON.
    pub bundle: String,
}

impl KeylessSignature {
    /// The `cosign sign-blob --bundle` file of this signature.
    pub fn blob_bundle(&self) -> String {
        let bundle: serde_json::Value =
            serde_json::from_str(&self.bundle).unwrap_or(serde_json::Value::Null);
        json!({
            "base64Signature": self.signature,
            "cert": STANDARD.encode(&self.certificate),
            "rekorBundle": bundle,
        })
        .to_string()
    }
}

/// A Fulcio (with its certificate transparency log) and a Rekor of the test's own.
pub struct FakeSigstore {
    ca: Issuer<'static, KeyPair>,
    ca_der: Vec<u8>,
    /// The sha256 of the CA key's DER form (the issuer key hash of timestamps).
    ca_key_hash: Vec<u8>,
    log: KeyPair,
    /// The hex sha256 of the log key's DER form.
    log_id: String,
    /// The certificate transparency log; `None`: certificates carry no timestamps and
    /// the trusted root lists no such log (a private deployment without one).
    ct_log: Option<KeyPair>,
}

impl std::fmt::Debug for FakeSigstore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeSigstore")
            .field("log_id", &self.log_id)
            .finish()
    }
}

/// Now, in seconds since the epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn at(secs: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// A trusted root's entry for a log (Rekor or CT) at `url` with `key`.
fn log_instance(url: &str, key: &KeyPair) -> serde_json::Value {
    let der = key.subject_public_key_info();
    json!({
        "baseUrl": url,
        "hashAlgorithm": "SHA2_256",
        "publicKey": {
            "rawBytes": STANDARD.encode(&der),
            "keyDetails": "PKIX_ECDSA_P256_SHA_256",
            "validFor": {"start": "2020-01-01T00:00:00Z"}
        },
        "logId": {"keyId": STANDARD.encode(Sha256::digest(&der))}
    })
}

/// The payload type of an in-toto statement.
const IN_TOTO: &str = "application/vnd.in-toto+json";

/// The in-toto statement cosign 3 signs for the manifest `digest`.
pub fn statement(digest: &str) -> Vec<u8> {
    json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"digest": {"sha256": digest.trim_start_matches("sha256:")}, "annotations": {}}],
        "predicateType": "https://sigstore.dev/cosign/sign/v1"
    })
    .to_string()
    .into_bytes()
}

/// A Sigstore bundle (v0.3) of an image signed with a key: the DSSE envelope of the
/// statement naming the manifest `digest`, the key named by hint, no log entry.
pub fn key_signed_image_bundle(signer: &sigstore::crypto::SigStoreSigner, digest: &str) -> String {
    let payload = statement(digest);
    let signature = signer
        .sign(&crate::bundle::pae(IN_TOTO, &payload))
        .expect("sign");
    json!({
        "mediaType": crate::bundle::ARTIFACT_TYPE,
        "verificationMaterial": {"publicKey": {"hint": "release"}, "tlogEntries": []},
        "dsseEnvelope": {
            "payload": STANDARD.encode(&payload),
            "payloadType": IN_TOTO,
            "signatures": [{"sig": STANDARD.encode(signature)}]
        }
    })
    .to_string()
}

/// A bundle's `tlogEntries` item for a Rekor entry of `kind`.
fn tlog_entry(entry: &Bundle, kind: &str) -> serde_json::Value {
    let key_id: Vec<u8> = (0..entry.payload.log_id.len() / 2)
        .filter_map(|i| u8::from_str_radix(&entry.payload.log_id[2 * i..2 * i + 2], 16).ok())
        .collect();
    json!({
        "logIndex": entry.payload.log_index.to_string(),
        "logId": {"keyId": STANDARD.encode(key_id)},
        "kindVersion": {"kind": kind, "version": "0.0.1"},
        "integratedTime": entry.payload.integrated_time.to_string(),
        "inclusionPromise": {"signedEntryTimestamp": entry.signed_entry_timestamp},
        "canonicalizedBody": entry.payload.body
    })
}

/// Stores `bundle` as a referrer of the manifest `digest` in `image`'s repository, as
/// cosign 3 does: a manifest of artifact type [`crate::bundle::ARTIFACT_TYPE`] whose
/// subject is the artifact, listed in the referrers tag `sha256-<hex>` (the registry
/// has no referrers API).
pub async fn attach_referrer(
    registry: &Registry,
    reference: &str,
    bundle: &str,
) -> Result<String, String> {
    use oci_client::Reference;
    use oci_client::manifest::{OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE};
    let (client, auth) = registry.oci();
    let (image, digest) = oci::resolve(&client, &auth, reference)
        .await
        .map_err(|e| e.to_string())?;
    let failed = |e: &dyn std::fmt::Display| format!("storing a referrer of {digest}: {e}");
    client
        .auth(&image, &auth, oci_client::RegistryOperation::Push)
        .await
        .map_err(|e| failed(&e))?;
    let sha = |b: &[u8]| format!("sha256:{:x}", Sha256::digest(b));
    let empty = b"{}".to_vec();
    for blob in [empty.clone(), bundle.as_bytes().to_vec()] {
        let d = sha(&blob);
        client
            .push_blob(&image, blob, &d)
            .await
            .map_err(|e| failed(&e))?;
    }
    let (subject_raw, _) = client
        .pull_manifest_raw(&image, &auth, &[OCI_IMAGE_MEDIA_TYPE])
        .await
        .map_err(|e| failed(&e))?;
    let manifest = referrer_manifest(bundle, &digest, subject_raw.len());
    let manifest_digest = sha(manifest.as_bytes());
    let at = |r: String| {
        Reference::with_digest(
            image.registry().to_owned(),
            image.repository().to_owned(),
            r,
        )
    };
    let content_type = |t: &'static str| http::HeaderValue::from_static(t);
    client
        .push_manifest_raw(
            &at(manifest_digest.clone()),
            manifest.clone(),
            content_type(OCI_IMAGE_MEDIA_TYPE),
        )
        .await
        .map_err(|e| failed(&e))?;
    // The referrers tag: an index of every referrer, this one added.
    let tag = Reference::with_tag(
        image.registry().to_owned(),
        image.repository().to_owned(),
        digest.replace(':', "-"),
    );
    let mut index = match client
        .pull_manifest_raw(&tag, &auth, &[OCI_IMAGE_INDEX_MEDIA_TYPE])
        .await
    {
        Ok((raw, _)) => serde_json::from_slice(&raw).map_err(|e| failed(&e))?,
        Err(_) => {
            json!({"schemaVersion": 2, "mediaType": OCI_IMAGE_INDEX_MEDIA_TYPE, "manifests": []})
        }
    };
    if let Some(list) = index["manifests"].as_array_mut() {
        list.push(json!({
            "mediaType": OCI_IMAGE_MEDIA_TYPE,
            "digest": manifest_digest,
            "size": manifest.len(),
            "artifactType": crate::bundle::ARTIFACT_TYPE
        }));
    }
    client
        .push_manifest_raw(
            &tag,
            index.to_string(),
            content_type(OCI_IMAGE_INDEX_MEDIA_TYPE),
        )
        .await
        .map_err(|e| failed(&e))?;
    Ok(digest)
}

/// A referrer manifest of `bundle` for the subject `digest` (whose manifest is
/// `subject_len` bytes), as cosign 3 writes it: an empty config, the bundle its layer.
fn referrer_manifest(bundle: &str, digest: &str, subject_len: usize) -> String {
    use oci_client::manifest::OCI_IMAGE_MEDIA_TYPE;
    let sha = |b: &[u8]| format!("sha256:{:x}", Sha256::digest(b));
    let empty = b"{}";
    json!({
        "schemaVersion": 2,
        "mediaType": OCI_IMAGE_MEDIA_TYPE,
        "artifactType": crate::bundle::ARTIFACT_TYPE,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": sha(empty), "size": empty.len()},
        "layers": [{"mediaType": crate::bundle::ARTIFACT_TYPE, "digest": sha(bundle.as_bytes()), "size": bundle.len()}],
        "subject": {"mediaType": OCI_IMAGE_MEDIA_TYPE, "digest": digest, "size": subject_len}
    })
    .to_string()
}

/// A DER UTF8String.
fn utf8_string(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut der = vec![0x0c];
    match bytes.len() {
        n @ 0..0x80 => der.push(n as u8),
        n @ 0x80..0x100 => der.extend([0x81, n as u8]),
        n => der.extend([0x82, (n >> 8) as u8, n as u8]),
    }
    der.extend_from_slice(bytes);
    der
}

impl FakeSigstore {
    /// A new certificate authority (ECDSA P-384, as Fulcio's) and log key (P-256, as
    /// Rekor's).
    pub fn new() -> Self {
        let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "wasmlet test sigstore");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.not_before = at(now() - 86_400);
        params.not_after = at(now() + 86_400 * 365);
        let ca_der = params.self_signed(&ca_key).expect("CA").der().to_vec();
        let ca_key_hash = Sha256::digest(ca_key.subject_public_key_info()).to_vec();
        let log = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("log key");
        let log_id = format!("{:x}", Sha256::digest(log.subject_public_key_info()));
        let ct_log = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("CT log key");
        Self {
            ca: Issuer::new(params, ca_key),
            ca_der,
            ca_key_hash,
            log,
            log_id,
            ct_log: Some(ct_log),
        }
    }

    /// One without a certificate transparency log.
    pub fn without_ct_log() -> Self {
        Self {
            ct_log: None,
            ..Self::new()
        }
    }

    /// The trusted root file (`trusted_root.json`) that trusts this authority and log.
    pub fn trusted_root(&self) -> String {
        let ct_logs: Vec<serde_json::Value> = self
            .ct_log
            .iter()
            .map(|ct| log_instance("https://ctfe.test.invalid", ct))
            .collect();
        json!({
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [log_instance("https://rekor.test.invalid", &self.log)],
            "certificateAuthorities": [{
                "subject": {"organization": "wasmlet", "commonName": "wasmlet test sigstore"},
                "uri": "https://fulcio.test.invalid",
                "certChain": {"certificates": [{"rawBytes": STANDARD.encode(&self.ca_der)}]},
                "validFor": {"start": "2020-01-01T00:00:00Z"}
            }],
            "ctlogs": ct_logs,
            "timestampAuthorities": []
        })
        .to_string()
    }

    /// Signs `bytes` as `subject` (an email when it has an `@`, else a URI) vouched for
    /// by `issuer`, now.
    pub fn sign(&self, bytes: &[u8], subject: &str, issuer: &str) -> KeylessSignature {
        self.sign_at(bytes, subject, issuer, now())
    }

    /// Signs `bytes` with a certificate issued at `issued` and logged at `issued + 1`.
    pub fn sign_at(
        &self,
        bytes: &[u8],
        subject: &str,
        issuer: &str,
        issued: i64,
    ) -> KeylessSignature {
        self.sign_with(bytes, subject, issuer, issued, true)
    }

    /// Signs `bytes` now with a certificate that carries no certificate transparency
    /// timestamp.
    pub fn sign_without_timestamp(
        &self,
        bytes: &[u8],
        subject: &str,
        issuer: &str,
    ) -> KeylessSignature {
        self.sign_with(bytes, subject, issuer, now(), false)
    }

    fn sign_with(
        &self,
        bytes: &[u8],
        subject: &str,
        issuer: &str,
        issued: i64,
        timestamped: bool,
    ) -> KeylessSignature {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("signing key");
        let certificate = self.certificate(&key, subject, issuer, issued, timestamped);
        let signature = STANDARD.encode(key.sign(bytes).expect("sign"));
        let bundle = self.log_entry(bytes, &signature, &certificate, issued + 1);
        KeylessSignature {
            signature,
            certificate,
            bundle: serde_json::to_string(&bundle).expect("bundle"),
        }
    }

    /// A code-signing certificate for `key` as Fulcio issues it, with the CT log's
    /// timestamp when there is a log and `timestamped`.
    fn certificate(
        &self,
        key: &KeyPair,
        subject: &str,
        issuer: &str,
        issued: i64,
        timestamped: bool,
    ) -> String {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        let name = subject.try_into().expect("an IA5 subject");
        params.subject_alt_names = vec![if subject.contains('@') {
            SanType::Rfc822Name(name)
        } else {
            SanType::URI(name)
        }];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::CodeSigning];
        params.custom_extensions = vec![
            CustomExtension::from_oid_content(&[1, 3, 6, 1, 4, 1, 57264, 1, 1], issuer.into()),
            CustomExtension::from_oid_content(
                &[1, 3, 6, 1, 4, 1, 57264, 1, 8],
                utf8_string(issuer),
            ),
        ];
        params.not_before = at(issued);
        params.not_after = at(issued + CERTIFICATE_LIFETIME);
        let serial: [u8; 16] = Sha256::digest(key.subject_public_key_info())[..16]
            .try_into()
            .expect("16 bytes");
        params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
        let precertificate = params.signed_by(key, &self.ca).expect("certificate");
        let Some(ct) = self.ct_log.as_ref().filter(|_| timestamped) else {
            return precertificate.pem();
        };
        // The log's timestamp over the certificate as issued, then the certificate
        // issued again with it (as Fulcio does with its precertificate).
        let (tbs, _) = sct::split(precertificate.der()).expect("TBS");
        let timestamp = u64::try_from(issued).unwrap_or(0) * 1000;
        let signed = sct::signed_data(timestamp, &self.ca_key_hash, &tbs, &[]);
        let signature = ct.sign(&signed).expect("SCT");
        let log_id = Sha256::digest(ct.subject_public_key_info());
        let list = sct::encode_list(&log_id, timestamp, &signature);
        params
            .custom_extensions
            .push(CustomExtension::from_oid_content(
                &[1, 3, 6, 1, 4, 1, 11129, 2, 4, 2],
                sct::extension_value(&list),
            ));
        let certificate = params.signed_by(key, &self.ca).expect("certificate");
        debug_assert_eq!(sct::split(certificate.der()).map(|(t, _)| t), Some(tbs));
        certificate.pem()
    }

    /// The Rekor bundle of a `hashedrekord` entry of `signature` of `bytes` by
    /// `certificate`, taken at `integrated_time`.
    pub fn log_entry(
        &self,
        bytes: &[u8],
        signature: &str,
        certificate: &str,
        integrated_time: i64,
    ) -> Bundle {
        let body = json!({
            "apiVersion": "0.0.1",
            "kind": "hashedrekord",
            "spec": {
                "data": {"hash": {"algorithm": "sha256", "value": format!("{:x}", Sha256::digest(bytes))}},
                "signature": {
                    "content": signature,
                    "publicKey": {"content": STANDARD.encode(certificate)}
                }
            }
        });
        self.log(&body, integrated_time)
    }

    /// The log's entry of `body`, taken at `integrated_time`, with its signed entry
    /// timestamp.
    fn log(&self, body: &serde_json::Value, integrated_time: i64) -> Bundle {
        let payload = Entry {
            body: STANDARD.encode(body.to_string()),
            integrated_time,
            log_index: 1,
            log_id: self.log_id.clone(),
        };
        let signed = serde_json_canonicalizer::to_vec(&payload).expect("canonical");
        Bundle {
            signed_entry_timestamp: STANDARD.encode(self.log.sign(&signed).expect("SET")),
            payload,
        }
    }

    /// The inclusion proof of `body` as the log's fourth entry of six, with the
    /// checkpoint the log signs.
    pub fn inclusion_proof(&self, body: &[u8]) -> serde_json::Value {
        use crate::keyless::proof;
        let mut leaves: Vec<[u8; 32]> = (0u8..6).map(|i| proof::leaf_hash(&[i])).collect();
        leaves[3] = proof::leaf_hash(body);
        let (root, path) = proof::tree(&leaves, 3);
        let text = format!(
            "rekor.test.invalid - 1\n{}\n{}\n",
            leaves.len(),
            STANDARD.encode(root)
        );
        let mut signature = self.log_id_bytes()[..4].to_vec();
        signature.extend(self.log.sign(text.as_bytes()).expect("checkpoint"));
        json!({
            "logIndex": "3",
            "rootHash": STANDARD.encode(root),
            "treeSize": leaves.len().to_string(),
            "hashes": path.iter().map(|h| STANDARD.encode(h)).collect::<Vec<_>>(),
            "checkpoint": {"envelope": format!("{text}\n— rekor.test.invalid {}\n", STANDARD.encode(signature))}
        })
    }

    /// The log's id, raw.
    fn log_id_bytes(&self) -> Vec<u8> {
        Sha256::digest(self.log.subject_public_key_info()).to_vec()
    }

    /// A Sigstore bundle (v0.3), as cosign 3 signs an image keyless: a DSSE envelope of
    /// an in-toto statement naming the manifest `digest`, signed as `subject` vouched
    /// for by `issuer`, with its `dsse` Rekor entry.
    pub fn image_bundle(&self, digest: &str, subject: &str, issuer: &str) -> String {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("signing key");
        let issued = now();
        let certificate = self.certificate(&key, subject, issuer, issued, true);
        let payload = statement(digest);
        let signature = key
            .sign(&crate::bundle::pae(IN_TOTO, &payload))
            .expect("sign");
        let body = json!({
            "apiVersion": "0.0.1",
            "kind": "dsse",
            "spec": {
                "payloadHash": {"algorithm": "sha256", "value": format!("{:x}", Sha256::digest(&payload))},
                "signatures": [{
                    "signature": STANDARD.encode(&signature),
                    "verifier": STANDARD.encode(&certificate)
                }]
            }
        });
        let entry = self.log(&body, issued + 1);
        let der = crate::keyless::certificate_der(certificate.as_bytes()).expect("der");
        let mut tlog = tlog_entry(&entry, "dsse");
        tlog["inclusionProof"] = self.inclusion_proof(body.to_string().as_bytes());
        json!({
            "mediaType": crate::bundle::ARTIFACT_TYPE,
            "verificationMaterial": {
                "certificate": {"rawBytes": STANDARD.encode(der)},
                "tlogEntries": [tlog]
            },
            "dsseEnvelope": {
                "payload": STANDARD.encode(&payload),
                "payloadType": IN_TOTO,
                "signatures": [{"sig": STANDARD.encode(&signature)}]
            }
        })
        .to_string()
    }

    /// A Sigstore bundle of `bytes` signed as `subject` (`cosign sign-blob --bundle` of
    /// cosign 3): a message signature with its `hashedrekord` entry.
    pub fn file_bundle(&self, bytes: &[u8], subject: &str, issuer: &str) -> String {
        let signed = self.sign(bytes, subject, issuer);
        let entry: Bundle = serde_json::from_str(&signed.bundle).expect("entry");
        let der = crate::keyless::certificate_der(signed.certificate.as_bytes()).expect("der");
        json!({
            "mediaType": crate::bundle::ARTIFACT_TYPE,
            "verificationMaterial": {
                "certificate": {"rawBytes": STANDARD.encode(der)},
                "tlogEntries": [tlog_entry(&entry, "hashedrekord")]
            },
            "messageSignature": {
                "messageDigest": {"algorithm": "SHA2_256", "digest": STANDARD.encode(Sha256::digest(bytes))},
                "signature": signed.signature
            }
        })
        .to_string()
    }

    /// Signs the artifact `reference` in `registry` keyless and stores the signature
    /// beside it as cosign does (certificate and bundle annotations); returns the
    /// artifact's manifest digest.
    pub async fn sign_artifact(
        &self,
        registry: &Registry,
        reference: &str,
        subject: &str,
        issuer: &str,
    ) -> Result<String, String> {
        let (client, auth) = registry.oci();
        let (image, digest) = oci::resolve(&client, &auth, reference)
            .await
            .map_err(|e| e.to_string())?;
        let payload = oci::payload_bytes(&image, &digest);
        let signed = self.sign(&payload, subject, issuer);
        let annotations = BTreeMap::from([
            (oci::SIGNATURE_ANNOTATION.to_owned(), signed.signature),
            (oci::CERTIFICATE_ANNOTATION.to_owned(), signed.certificate),
            (oci::BUNDLE_ANNOTATION.to_owned(), signed.bundle),
        ]);
        oci::attach(&client, &auth, &image, &digest, payload, annotations)
            .await
            .map_err(|e| e.to_string())?;
        Ok(digest)
    }
}

impl Default for FakeSigstore {
    fn default() -> Self {
        Self::new()
    }
}
