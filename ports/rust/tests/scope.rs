// SPDX-License-Identifier: Apache-2.0
//! Shared scopes' block hashes (format v4, docs/format.md sections 3 and 12).

use kvkey::{ExtraKey, HashOptions, Identity, Namespace};

fn identity(tenant: &str) -> Identity {
    let text = format!(
        r#"{{"tenant": "{tenant}", "model": {{"name": "m", "revision": "r"}},
            "kv": {{"dtype": "fp16", "block_size": 4, "num_layers": 2, "num_kv_heads": 2, "head_dim": 8, "layout": "l"}}}}"#
    );
    Identity::from_json(&text).expect("an identity").0
}

#[test]
fn the_scope_transition_binds_the_tenant_and_the_prefix() {
    let scope = Namespace::builder(&identity("a")).scope("sys").build().expect("plain");
    assert_eq!(scope.identity().tenant, "_scope.sys");
    let a = Namespace::builder(&identity("a")).secret(&[1; 32]).build().expect("keyed");
    let b = Namespace::builder(&identity("b")).secret(&[2; 32]).build().expect("keyed");
    let tokens: Vec<u32> = (1..14).collect();
    let opts = HashOptions {
        salt: b"salt".to_vec(),
        extras: vec![ExtraKey { token_begin: 2, token_end: 6, key: b"img".to_vec() }],
    };
    let ha = a.scoped_block_hashes(&scope, &tokens, 8, &opts).expect("hashes");
    let hb = b.scoped_block_hashes(&scope, &tokens, 8, &opts).expect("hashes");
    let hs =
        scope.block_hashes(&tokens[..8], &HashOptions { salt: vec![], extras: opts.extras.clone() }).expect("scope");
    assert_eq!((ha.len(), &ha[..2], &hb[..2]), (3, &hs[..], &hs[..]));
    assert_ne!(ha[2], hb[2], "two tenants' private blocks after one scope prefix are equal");
    // Recomputed from docs/format.md with Python's hashlib and hmac.
    let want = std::process::Command::new("python3")
        .arg("-c")
        .arg(format!(
            r#"
import hashlib, hmac, struct
se, ae = bytes.fromhex("{}"), bytes.fromhex("{}")
H_s = lambda m: hashlib.sha256(m).digest()
H_t = lambda m: hmac.new(bytes([1]) * 32, m, hashlib.sha256).digest()
tokens, bs, extras, salt = list(range(1, 14)), 4, [(2, 6, b"img")], b"salt"
def block(H, parent, i):
    lo, hi = i * bs, (i + 1) * bs
    ov = [e for e in sorted(extras) if e[0] < hi and e[1] > lo]
    m = b"B" + parent + b"".join(struct.pack("<I", t) for t in tokens[lo:hi]) + struct.pack("<I", len(ov))
    for b_, e_, k in ov: m += struct.pack("<QQ", b_, e_) + struct.pack("<I", len(k)) + k
    return H(m)
h0 = block(H_s, H_s(se), 0); h1 = block(H_s, h0, 1)
pt = H_t(b"S" + H_t(ae) + struct.pack("<I", len(salt)) + salt)
print(",".join(h.hex() for h in (h0, h1, block(H_t, H_t(b"T" + pt + h1), 2))))"#,
            scope.encoding().iter().map(|x| format!("{:02x}", x)).collect::<String>(),
            a.encoding().iter().map(|x| format!("{:02x}", x)).collect::<String>()
        ))
        .output()
        .expect("python3 runs");
    let got: Vec<String> = ha.iter().map(|d| d.hex()).collect();
    assert_eq!(String::from_utf8_lossy(&want.stdout).trim(), got.join(","));
    assert_eq!(
        a.scoped_block_hashes(&scope, &tokens, 0, &opts).expect("hashes"),
        a.block_hashes(&tokens, &opts).expect("hashes")
    );
    let e = a.scoped_block_hashes(&scope, &tokens, 6, &opts).expect_err("not a multiple");
    assert_eq!((e.kind(), e.field()), ("input_error", "scope_tokens"));
    assert_eq!(a.scoped_block_hashes(&scope, &tokens[..6], 8, &opts).expect("hashes"), hs[..1].to_vec());
}
