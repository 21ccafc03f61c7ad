// SPDX-License-Identifier: Apache-2.0
//! Confidential namespaces (format v4, docs/format.md section 6, "Mode
//! aes256_gcm"): values sealed encrypted, opened only when they authenticate.

use kvkey::{HashOptions, Identity, Namespace, Reason, Verdict};

fn identity() -> Identity {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/identities/qwen-fp16.json");
    Identity::from_file(path).expect("the example identity").0
}

fn verdict(reason: Reason, field: &'static str) -> Verdict {
    Verdict { reason, field }
}

#[test]
fn confidential_values_open_only_when_they_authenticate() {
    let id = identity();
    let secret = [9u8; 32];
    let ns = Namespace::builder(&id).secret(&secret).confidential(true).build().expect("confidential");
    let keyed = Namespace::builder(&id).secret(&secret).build().expect("keyed");
    let other = Namespace::builder(&id).secret(&[8u8; 32]).confidential(true).build().expect("confidential");
    let none = Namespace::builder(&id).confidential(true).build().expect_err("no secret");
    assert_eq!((none.kind(), none.field()), ("identity_error", "confidential"));
    assert!(ns.secret_prefix().starts_with("kvk4/team-a/c"));
    let tokens: Vec<u32> = (0..64).collect();
    let b = ns.block_hashes(&tokens, &HashOptions::default()).expect("blocks")[0];
    let p: Vec<u8> = (0..1000u32).map(|j| (j % 251) as u8).collect();
    let value = ns.seal_value(&b, &p).expect("sealed");
    assert_eq!(value[73], 3);
    assert_ne!(&value[1024..], p.as_slice(), "the payload is stored in the clear");
    if let Ok(out) = std::env::var("KVKEY_CONFIDENTIAL_OUT") {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{:02x}", x)).collect::<String>();
        std::fs::write(out, format!("{} {} {} {}", hex(&secret), ns.root().hex(), hex(&value), hex(&p)))
            .expect("write");
    }
    assert_eq!(ns.open_value(&value, &b).0.as_deref(), Some(p.as_slice()));
    for (at, want) in [
        (1024 + 500, verdict(Reason::PayloadMismatch, "payload")),
        (99, verdict(Reason::PayloadMismatch, "payload")),
        (87, verdict(Reason::PayloadMismatch, "payload")),
        (81, verdict(Reason::PayloadMismatch, "payload")),
        (48, verdict(Reason::SizeMismatch, "payload_size")),
    ] {
        let mut bad = value.clone();
        bad[at] ^= 1;
        assert_eq!(ns.open_value(&bad, &b), (None, want), "flipped byte {}", at);
    }
    assert_eq!(other.open_value(&value, &b).1, verdict(Reason::IdentityMismatch, "tenant.secret_id"));
    let mode = verdict(Reason::PayloadMismatch, "envelope.integrity_mode");
    assert_eq!(ns.open_value(&keyed.seal_value(&b, &p).expect("sealed"), &b).1, mode);
    assert_eq!(keyed.open_value(&value, &b).1, mode);
    let again = ns.seal_value(&b, &p).expect("sealed");
    assert_ne!(value[80..112], again[80..112], "two seals share a nonce");
}
