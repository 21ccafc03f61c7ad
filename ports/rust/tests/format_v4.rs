// SPDX-License-Identifier: Apache-2.0
//! Format version 4 as docs/format.md states it, checked byte by byte against
//! headers and keys assembled here from the layout (the committed vectors,
//! tests/vectors.rs, pin the same bytes as the C++ library computes them).

use hmac::{Hmac, Mac};
use kvkey::{
    parse_envelope, secret_id, Digest, HashOptions, Identity, Namespace, NamespaceKind, Reason, Verdict, ENVELOPE_SIZE,
    STORE_KEY_TAG,
};
use sha2::Sha256;

const SECRET: &[u8; 32] = b"kvkey format-v4 rust test secret";
const OTHER_SECRET: &[u8; 32] = b"kvkey format-v4 rust rotated key";

mod common;

/// common::valid_identity with tenant "t0" and 4-token blocks.
fn identity() -> Identity {
    let mut id = common::valid_identity();
    id.tenant = "t0".into();
    id.kv.block_size = 4;
    id
}

fn payload(i: usize, size: usize) -> Vec<u8> {
    (0..size).map(|j| ((j + 31 * i) % 251) as u8).collect()
}

fn blocks(ns: &Namespace) -> Vec<Digest> {
    ns.block_hashes(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], &HashOptions::default()).expect("blocks")
}

fn verdict(reason: Reason, field: &'static str) -> Verdict {
    Verdict { reason, field }
}

/// The header of a plain namespace, assembled from the table of docs/format.md.
fn assembled(ns: &Namespace, block: &Digest, payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(b"KVKEYENV");
    h.extend_from_slice(&[4, 0]); // format version 4
    h.extend_from_slice(&1024u16.to_le_bytes());
    h.extend_from_slice(&(ns.encoding().len() as u32).to_le_bytes());
    h.extend_from_slice(&block.0); // 16
    h.extend_from_slice(&(payload.len() as u64).to_le_bytes()); // 48
    let s = ns.slice();
    for v in [s.kv_head_begin, s.kv_head_end, s.layer_begin, s.layer_end] {
        h.extend_from_slice(&v.to_le_bytes()); // 56
    }
    h.extend_from_slice(&[1, 1, 0, 0, 0, 0, 0, 0]); // 72: plain, xxh3_128, reserved
    h.extend_from_slice(&[0; 16]); // 80: nonce
    assert_eq!(h.len(), 96);
    h.extend_from_slice(&[0; 16]); // 96: digest, zero in header'
    h.extend_from_slice(&[0; 8]); // 112: secret id, zero in a plain namespace
    assert_eq!(h.len(), 120);
    h.extend_from_slice(ns.encoding());
    h.resize(1024, 0);
    let mut message = payload.to_vec();
    message.extend_from_slice(&h);
    h[96..112].copy_from_slice(&xxhash_rust::xxh3::xxh3_128(&message).to_be_bytes());
    h
}

#[test]
fn plain_header_is_the_documented_layout() {
    let ns = Namespace::new(&identity()).expect("valid");
    assert_eq!(&ns.encoding()[8..10], &[4, 0]);
    for (i, b) in blocks(&ns).iter().enumerate() {
        let p = payload(i, 300);
        let h = ns.seal(b, &p).expect("plain");
        assert_eq!(h, assembled(&ns, b, &p));
        assert!(ns.verify(&h, b, &p).is_ok());
    }
}

#[test]
fn secret_id_is_the_documented_hmac() {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(SECRET).expect("a key");
    mac.update(&[0x49]);
    let want = mac.finalize().into_bytes();
    assert_eq!(secret_id(SECRET).0[..], want[..8]);
    assert_ne!(secret_id(SECRET), secret_id(OTHER_SECRET));
    // The same for every tenant, model, epoch and rank under the secret.
    let mut other = identity();
    other.tenant = "t1".into();
    other.model.name = "another".into();
    other.model.weights_epoch = 7;
    other.shard.tp_size = 2;
    other.shard.tp_rank = 1;
    for id in [identity(), other] {
        let ns = Namespace::builder(&id).secret(SECRET).build().expect("keyed");
        assert_eq!(ns.secret_id(), Some(secret_id(SECRET)));
        let h = ns.seal_size_only(&blocks(&ns)[0], 10);
        assert_eq!(&h[112..120], &secret_id(SECRET).0);
        assert_eq!(parse_envelope(&h).expect("well-formed").secret_id, Some(secret_id(SECRET)));
    }
    assert_eq!(Namespace::new(&identity()).expect("plain").secret_id(), None);
}

#[test]
fn store_keys_name_the_namespace() {
    let id = identity();
    let plain = Namespace::new(&id).expect("plain");
    let keyed = Namespace::builder(&id).secret(SECRET).build().expect("keyed");
    let b = blocks(&plain)[0];
    assert_eq!(STORE_KEY_TAG, "kvk4/");
    assert_eq!(plain.store_key(&b), format!("kvk4/t0/p/m/e0/{}", plain.object_hash(&b)));
    let sid = secret_id(SECRET).hex();
    assert_eq!(sid.len(), 16);
    let kb = blocks(&keyed)[0];
    assert_eq!(keyed.store_key(&kb), format!("kvk4/t0/k{}/m/e0/{}", sid, keyed.object_hash(&kb)));
    assert_eq!(keyed.secret_prefix(), format!("kvk4/t0/k{}/", sid));
    assert_eq!(plain.secret_prefix(), "kvk4/t0/p/");
    assert_eq!(keyed.tenant_prefix(), "kvk4/t0/");
    // A rotated secret's keys share the tenant prefix, never the secret prefix.
    let rotated = Namespace::builder(&id).secret(OTHER_SECRET).build().expect("keyed");
    let rb = blocks(&rotated)[0];
    assert!(rotated.store_key(&rb).starts_with(&rotated.tenant_prefix()));
    assert!(!rotated.store_key(&rb).starts_with(&keyed.secret_prefix()));
}

#[test]
fn the_longest_key_fits() {
    let mut id = identity();
    id.tenant = "t".repeat(64);
    id.model.name = "a".repeat(128);
    id.model.weights_epoch = u64::MAX;
    let ns = Namespace::builder(&id).secret(SECRET).build().expect("keyed");
    let key = ns.store_key(&blocks(&ns)[0]);
    assert_eq!(key.len(), 255);
    assert!(key.contains(&format!("/{}/", "a".repeat(80))));
    // Escapes are never split: 26 of them (78 characters) fit, a 27th would not.
    id.model.name = "/".repeat(100);
    let ns = Namespace::new(&id).expect("plain");
    assert!(ns.key_prefix().contains(&format!("/{}/", "%2F".repeat(26))));
}

#[test]
fn a_splice_of_two_objects_never_verifies() {
    let ns = Namespace::new(&identity()).expect("plain");
    let bl = blocks(&ns);
    let (a, b) = (bl[0], bl[1]);
    let (pa, pb) = (payload(0, 256), payload(1, 200));
    let (ha, hb) = (ns.seal(&a, &pa).expect("sealed"), ns.seal(&b, &pb).expect("sealed"));
    // B's header with A's block hash, then B's payload, read as A.
    let mut splice = hb.clone();
    splice[16..48].copy_from_slice(&a.0);
    assert_eq!(ns.verify(&splice, &a, &pb), verdict(Reason::PayloadMismatch, "payload"));
    // Every other mix of the fields of the two headers.
    let fields: [(usize, usize); 3] = [(16, 48), (48, 56), (96, 112)];
    for mask in 1..7u32 {
        let mut mixed = ha.clone();
        for (i, (from, to)) in fields.iter().enumerate() {
            if mask & (1 << i) != 0 {
                mixed[*from..*to].copy_from_slice(&hb[*from..*to]);
            }
        }
        for (block, p) in [(&a, &pa), (&b, &pb)] {
            if mixed != ha && mixed != hb {
                assert!(!ns.verify(&mixed, block, p).is_ok(), "mask {}", mask);
            }
        }
    }
}

#[test]
fn plain_header_with_a_secret_id_is_malformed() {
    let ns = Namespace::new(&identity()).expect("plain");
    let b = blocks(&ns)[0];
    let p = payload(0, 64);
    let mut h = ns.seal(&b, &p).expect("sealed");
    h[119] = 1;
    assert_eq!(parse_envelope(&h).err(), Some(verdict(Reason::Malformed, "envelope.secret_id")));
    assert_eq!(ns.verify_header(&h, &b, 64), verdict(Reason::Malformed, "envelope.secret_id"));
    // The digest check comes first: a digest in mode none is named before the secret id.
    let mut none = ns.seal_size_only(&b, 64);
    none[96] = 1;
    none[112] = 1;
    assert_eq!(parse_envelope(&none).err(), Some(verdict(Reason::Malformed, "envelope.payload_digest")));
}

#[test]
fn another_secret_is_a_named_miss() {
    let id = identity();
    let keyed = Namespace::builder(&id).secret(SECRET).build().expect("keyed");
    let rotated = Namespace::builder(&id).secret(OTHER_SECRET).build().expect("keyed");
    let b = blocks(&keyed)[1];
    let mut h = keyed.seal_size_only(&b, 64);
    h[73] = 2; // a Poly1305 tag and nonce, as a keyed namespace seals
    h[80..112].iter_mut().enumerate().for_each(|(i, x)| *x = i as u8 + 1);
    assert_eq!(parse_envelope(&h).expect("well-formed").kind, NamespaceKind::Keyed);
    assert_eq!(rotated.verify_header(&h, &b, 64), verdict(Reason::IdentityMismatch, "tenant.secret_id"));
    // The identity is judged before the secret id, the secret id before the block.
    let mut epoch = id.clone();
    epoch.model.weights_epoch = 1;
    let later = Namespace::builder(&epoch).secret(OTHER_SECRET).build().expect("keyed");
    assert_eq!(later.verify_header(&h, &b, 64), verdict(Reason::IdentityMismatch, "model.weights_epoch"));
    let other_block = blocks(&rotated)[0];
    assert_eq!(rotated.verify_header(&h, &other_block, 64), verdict(Reason::IdentityMismatch, "tenant.secret_id"));
    // The same header under its own secret passes every check but the tag.
    assert_eq!(keyed.verify_header(&h, &b, 64), verdict(Reason::PayloadMismatch, "payload"));
    assert_eq!(keyed.verify_header(&h, &blocks(&keyed)[0], 64), verdict(Reason::BlockMismatch, "block_hash"));
}

#[test]
fn v2_and_v3_headers_are_unsupported() {
    let ns = Namespace::new(&identity()).expect("plain");
    let b = blocks(&ns)[0];
    let p = payload(0, 64);
    for version in [2u8, 3] {
        let mut h = ns.seal(&b, &p).expect("sealed");
        assert_eq!(h.len(), ENVELOPE_SIZE);
        h[8] = version;
        let miss = verdict(Reason::UnsupportedVersion, "envelope.format_version");
        assert_eq!(ns.verify(&h, &b, &p), miss);
        assert_eq!(ns.verify_header(&h, &b, 64), miss);
        assert_eq!(parse_envelope(&h).err(), Some(miss));
        let mut encoding = ns.encoding().to_vec();
        encoding[8] = version;
        assert_eq!(kvkey::decode_identity(&encoding), None);
    }
}

#[test]
fn keyed_seal_verifies_and_nonces_differ() {
    let keyed = Namespace::builder(&identity()).secret(SECRET).build().expect("keyed");
    let rotated = Namespace::builder(&identity()).secret(OTHER_SECRET).build().expect("keyed");
    let b = blocks(&keyed)[0];
    // Every length around the Poly1305 block size, and a long one.
    for n in [0usize, 1, 15, 16, 17, 31, 32, 33, 1000, 4099] {
        let p = payload(0, n);
        let h = keyed.seal(&b, &p).expect("sealed");
        assert_eq!(h[73], 2);
        assert!(keyed.verify(&h, &b, &p).is_ok(), "{} bytes", n);
        let value = keyed.seal_value(&b, &p).expect("sealed");
        assert_eq!(keyed.open_value(&value, &b).0.as_deref(), Some(p.as_slice()));
        assert_eq!(rotated.open_value(&value, &b).1, verdict(Reason::IdentityMismatch, "tenant.secret_id"));
        if n > 0 {
            let mut bad = value.clone();
            bad[1024 + n - 1] ^= 0x80;
            assert_eq!(keyed.open_value(&bad, &b).1, verdict(Reason::PayloadMismatch, "payload"));
        }
    }
    let (x, y) = (keyed.seal(&b, b"x").expect("sealed"), keyed.seal(&b, b"x").expect("sealed"));
    assert_ne!(x[80..96], y[80..96], "two seals share a nonce");
    // A size-only header carries no tag: a keyed reader names the mode.
    let mut none = keyed.seal_size_only(&b, 1);
    none[73] = 0;
    assert_eq!(keyed.verify(&none, &b, b"x"), verdict(Reason::PayloadMismatch, "envelope.integrity_mode"));
}
