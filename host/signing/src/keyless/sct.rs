//! The certificate transparency timestamps (SCTs) Fulcio embeds in each certificate:
//! a log of the trusted root promised to publish the certificate, signed over the
//! certificate as it was before the timestamps were added (RFC 6962's precertificate
//! entry). Checked when the trusted root lists certificate transparency logs, as cosign
//! checks them; a private deployment without such logs lists none.

use sigstore::crypto::Signature;
use x509_cert::Certificate;
use x509_cert::der::{Decode, Encode};

use super::root::Root;

/// The extension holding the timestamp list (RFC 6962, 3.3), DER content of its OID.
const SCT_LIST: &[u8] = &[0x2b, 0x06, 0x01, 0x04, 0x01, 0xd6, 0x79, 0x02, 0x04, 0x02];

/// One DER element: its tag, where it starts, where its content starts and ends (its
/// end).
struct Element {
    tag: u8,
    start: usize,
    content: std::ops::Range<usize>,
    end: usize,
}

/// The DER element at `at` in `der`.
fn element(der: &[u8], at: usize) -> Option<Element> {
    let tag = *der.get(at)?;
    let first = *der.get(at + 1)?;
    let (len, start) = if first < 0x80 {
        (usize::from(first), at + 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let bytes = der.get(at + 2..at + 2 + n)?;
        let len = bytes.iter().fold(0usize, |l, b| (l << 8) | usize::from(*b));
        (len, at + 2 + n)
    };
    let end = start.checked_add(len)?;
    (end <= der.len()).then_some(Element {
        tag,
        start: at,
        content: start..end,
        end,
    })
}

/// The elements inside `range` of `der`.
fn children(der: &[u8], range: std::ops::Range<usize>) -> Option<Vec<Element>> {
    let mut at = range.start;
    let mut out = Vec::new();
    while at < range.end {
        let e = element(der, at)?;
        at = e.end;
        out.push(e);
    }
    (at == range.end).then_some(out)
}

/// A DER element of `tag` around `content`.
fn encode(tag: u8, content: &[u8]) -> Vec<u8> {
    let len = content.len();
    let mut out = vec![tag];
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// The certificate's to-be-signed part without the timestamp list (what the logs
/// signed), and the list's bytes (TLS encoded); `None` when it has no list.
pub(crate) fn precertificate(cert: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let (tbs, list) = split(cert)?;
    Some((tbs, list?))
}

/// The certificate's to-be-signed part without the timestamp list, and the list when
/// there is one.
pub(crate) fn split(cert: &[u8]) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    let outer = element(cert, 0)?;
    let tbs = element(cert, outer.content.start)?;
    let mut fields = Vec::new();
    let mut list = None;
    for field in children(cert, tbs.content.clone())? {
        if field.tag != 0xa3 {
            fields.extend_from_slice(&cert[field.start..field.end]);
            continue;
        }
        let sequence = element(cert, field.content.start)?;
        let mut kept = Vec::new();
        for ext in children(cert, sequence.content.clone())? {
            let parts = children(cert, ext.content.clone())?;
            let oid = parts.first()?;
            if cert[oid.content.clone()] == *SCT_LIST {
                // extnValue: an OCTET STRING holding the DER OCTET STRING of the list.
                let value = parts.last()?;
                let inner = element(cert, value.content.start)?;
                list = Some(cert[inner.content.clone()].to_vec());
            } else {
                kept.extend_from_slice(&cert[ext.start..ext.end]);
            }
        }
        fields.extend(encode(0xa3, &encode(0x30, &kept)));
    }
    Some((encode(0x30, &fields), list))
}

/// One timestamp of the list.
struct Sct<'a> {
    log_id: &'a [u8],
    timestamp: u64,
    extensions: &'a [u8],
    signature: &'a [u8],
}

/// Reads a TLS-encoded timestamp list.
fn parse_list(list: &[u8]) -> Option<Vec<Sct<'_>>> {
    let u16_at = |b: &[u8], at: usize| -> Option<usize> {
        Some(usize::from(u16::from_be_bytes(
            b.get(at..at + 2)?.try_into().ok()?,
        )))
    };
    let total = u16_at(list, 0)?;
    let body = list.get(2..2 + total)?;
    let mut at = 0;
    let mut out = Vec::new();
    while at < body.len() {
        let len = u16_at(body, at)?;
        let sct = body.get(at + 2..at + 2 + len)?;
        at += 2 + len;
        if *sct.first()? != 0 {
            continue; // not version 1
        }
        let log_id = sct.get(1..33)?;
        let timestamp = u64::from_be_bytes(sct.get(33..41)?.try_into().ok()?);
        let ext_len = u16_at(sct, 41)?;
        let extensions = sct.get(43..43 + ext_len)?;
        let rest = sct.get(43 + ext_len..)?;
        // hash and signature algorithm (2 bytes), then the signature.
        let sig_len = u16_at(rest, 2)?;
        let signature = rest.get(4..4 + sig_len)?;
        out.push(Sct {
            log_id,
            timestamp,
            extensions,
            signature,
        });
    }
    Some(out)
}

/// What a log signs for a precertificate (RFC 6962, 3.2): version, the timestamp
/// (milliseconds), the entry's type, the issuer's key hash, the precertificate's TBS,
/// the timestamp's extensions.
pub(crate) fn signed_data(
    timestamp: u64,
    issuer_key_hash: &[u8],
    tbs: &[u8],
    extensions: &[u8],
) -> Vec<u8> {
    let mut data = vec![0u8, 0u8]; // v1, certificate_timestamp
    data.extend_from_slice(&timestamp.to_be_bytes());
    data.extend_from_slice(&[0, 1]); // precert_entry
    data.extend_from_slice(issuer_key_hash);
    data.extend_from_slice(&(tbs.len() as u32).to_be_bytes()[1..]);
    data.extend_from_slice(tbs);
    data.extend_from_slice(&(extensions.len() as u16).to_be_bytes());
    data.extend_from_slice(extensions);
    data
}

/// A TLS-encoded list of one timestamp by log `log_id` (ECDSA with SHA-256).
#[cfg(any(test, feature = "testing"))]
pub(crate) fn encode_list(log_id: &[u8], timestamp: u64, signature: &[u8]) -> Vec<u8> {
    let mut sct = vec![0u8];
    sct.extend_from_slice(log_id);
    sct.extend_from_slice(&timestamp.to_be_bytes());
    sct.extend_from_slice(&[0, 0, 4, 3]); // no extensions; sha256, ecdsa
    sct.extend_from_slice(&(signature.len() as u16).to_be_bytes());
    sct.extend_from_slice(signature);
    let mut list = ((sct.len() + 2) as u16).to_be_bytes().to_vec();
    list.extend_from_slice(&(sct.len() as u16).to_be_bytes());
    list.extend(sct);
    list
}

/// The DER OCTET STRING of `list`: the extension's value.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn extension_value(list: &[u8]) -> Vec<u8> {
    encode(0x04, list)
}

/// Checks that `leaf` (DER) carries a timestamp by a certificate transparency log of
/// `root`, valid when it was given, over the certificate as its issuer issued it.
/// Nothing to check when the root lists no such logs.
pub(crate) fn verify(leaf: &[u8], root: &Root) -> Result<(), String> {
    if root.ct_logs.is_empty() {
        return Ok(());
    }
    let missing =
        || "the signing certificate carries no certificate transparency timestamp (SCT)".to_owned();
    let (tbs, list) = precertificate(leaf).ok_or_else(missing)?;
    let scts = parse_list(&list)
        .ok_or_else(|| "the signing certificate's SCT list does not parse".to_owned())?;
    let issuers = issuer_key_hashes(leaf, root);
    for sct in &scts {
        let id = sct
            .log_id
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>();
        let Some(log) = root.ct_logs.get(&id) else {
            continue;
        };
        let seconds = i64::try_from(sct.timestamp / 1000).unwrap_or(i64::MAX);
        if !log.valid.contains(seconds) {
            continue;
        }
        let verified = issuers.iter().any(|hash| {
            log.key
                .verify_signature(
                    Signature::Raw(sct.signature),
                    &signed_data(sct.timestamp, hash, &tbs, sct.extensions),
                )
                .is_ok()
        });
        if verified {
            return Ok(());
        }
    }
    Err(format!(
        "none of the signing certificate's {} certificate transparency timestamp(s) is by a log of the trusted root over this certificate",
        scts.len()
    ))
}

/// The sha256 of the key of each trusted certificate that could have issued `leaf`
/// (its subject is the leaf's issuer).
fn issuer_key_hashes<'r>(leaf: &[u8], root: &'r Root) -> Vec<&'r [u8]> {
    let issuer = Certificate::from_der(leaf).and_then(|c| c.tbs_certificate().issuer().to_der());
    let Ok(issuer) = issuer else {
        return Vec::new();
    };
    root.issuers
        .iter()
        .filter(|(subject, _)| *subject == issuer)
        .map(|(_, key_hash)| key_hash.as_slice())
        .collect()
}
