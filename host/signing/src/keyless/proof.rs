//! A Rekor entry's inclusion proof, as Sigstore bundles carry it beside the signed entry
//! timestamp: the entry's leaf hashed up its audit path (RFC 9162, 2.1.3.2) to the root
//! of a tree the log signed — the checkpoint, a signed note whose signature verifies
//! with the log's key of the trusted root.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256};
use sigstore::crypto::Signature;
use sigstore_protobuf_specs::dev::sigstore::rekor::v1::InclusionProof;

use super::root::Root;

/// RFC 6962's leaf hash.
pub(crate) fn leaf_hash(entry: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(entry);
    h.finalize().into()
}

/// RFC 6962's interior node hash.
pub(crate) fn node_hash(left: &[u8], right: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The root that `path` leads to from `leaf` at `index` in a tree of `size` leaves.
fn root_from(index: u64, size: u64, leaf: [u8; 32], path: &[Vec<u8>]) -> Option<[u8; 32]> {
    if index >= size {
        return None;
    }
    let (mut f, mut s, mut r) = (index, size - 1, leaf);
    for p in path {
        if s == 0 {
            return None;
        }
        if f & 1 == 1 || f == s {
            r = node_hash(p, &r);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            r = node_hash(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    (s == 0).then_some(r)
}

/// Checks that the log with id `log_id` (hex) included `body` (the entry, canonical)
/// in the tree its checkpoint signs.
pub(crate) fn verify(
    body: &[u8],
    proof: &InclusionProof,
    log_id: &str,
    root: &Root,
) -> Result<(), String> {
    let log = root.logs.get(log_id).ok_or_else(|| {
        format!("the inclusion proof is from log {log_id}, which the trusted root does not list")
    })?;
    let (index, size) = (
        u64::try_from(proof.log_index).unwrap_or(u64::MAX),
        u64::try_from(proof.tree_size).unwrap_or(0),
    );
    let computed = root_from(index, size, leaf_hash(body), &proof.hashes);
    if computed.as_ref().map(|r| r.as_slice()) != Some(proof.root_hash.as_slice()) {
        return Err("the inclusion proof does not lead from the entry to its root hash".into());
    }
    let note = proof
        .checkpoint
        .as_ref()
        .map(|c| c.envelope.as_str())
        .ok_or("the inclusion proof has no checkpoint")?;
    let (text, signatures) = note
        .split_once("\n\n")
        .ok_or("the checkpoint is not a signed note")?;
    let text = format!("{text}\n");
    let mut lines = text.lines().skip(1);
    let (tree_size, root_hash) = (lines.next(), lines.next());
    if tree_size != Some(&proof.tree_size.to_string())
        || root_hash != Some(&STANDARD.encode(&proof.root_hash))
    {
        return Err("the checkpoint names another tree than the inclusion proof".into());
    }
    let hint = log_id.get(..8).unwrap_or_default();
    let signed = signatures.lines().any(|line| {
        let Some(b64) = line.strip_prefix("— ").and_then(|l| l.rsplit(' ').next()) else {
            return false;
        };
        let Ok(raw) = STANDARD.decode(b64) else {
            return false;
        };
        let (key_hint, signature) = raw.split_at(4.min(raw.len()));
        let key_hint: String = key_hint.iter().map(|b| format!("{b:02x}")).collect();
        key_hint == hint
            && log
                .key
                .verify_signature(Signature::Raw(signature), text.as_bytes())
                .is_ok()
    });
    if !signed {
        return Err(format!(
            "the checkpoint is not signed by log {log_id} of the trusted root"
        ));
    }
    Ok(())
}

#[cfg(any(test, feature = "testing"))]
/// The root of `leaves` (already leaf-hashed) and the audit path of leaf `index`, as a
/// log computes them (RFC 6962, 2.1).
pub(crate) fn tree(leaves: &[[u8; 32]], index: usize) -> ([u8; 32], Vec<Vec<u8>>) {
    fn root(leaves: &[[u8; 32]]) -> [u8; 32] {
        if leaves.len() == 1 {
            return leaves[0];
        }
        let k = split(leaves.len());
        node_hash(&root(&leaves[..k]), &root(&leaves[k..]))
    }
    fn path(leaves: &[[u8; 32]], m: usize) -> Vec<Vec<u8>> {
        if leaves.len() == 1 {
            return Vec::new();
        }
        let k = split(leaves.len());
        if m < k {
            let mut p = path(&leaves[..k], m);
            p.push(root(&leaves[k..]).to_vec());
            p
        } else {
            let mut p = path(&leaves[k..], m - k);
            p.push(root(&leaves[..k]).to_vec());
            p
        }
    }
    /// The largest power of two smaller than `n`.
    fn split(n: usize) -> usize {
        let mut k = 1;
        while k * 2 < n {
            k *= 2;
        }
        k
    }
    (root(leaves), path(leaves, index))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_leaf_of_trees_up_to_17_leaves_proves_its_inclusion_and_no_other() {
        for size in 1..=17usize {
            let leaves: Vec<[u8; 32]> = (0..size).map(|i| leaf_hash(&i.to_be_bytes())).collect();
            for index in 0..size {
                let (root, path) = tree(&leaves, index);
                let (i, n) = (index as u64, size as u64);
                assert_eq!(
                    root_from(i, n, leaves[index], &path),
                    Some(root),
                    "{index} of {size}"
                );
                // Another leaf, another index, or a shorter path does not.
                let other = leaf_hash(b"other");
                assert_ne!(root_from(i, n, other, &path), Some(root));
                if size > 1 {
                    let moved = (index + 1) % size;
                    assert_ne!(root_from(moved as u64, n, leaves[index], &path), Some(root));
                    assert_ne!(root_from(i, n, leaves[index], &path[1..]), Some(root));
                }
                assert_eq!(root_from(n, n, leaves[index], &path), None);
            }
        }
    }
}
