// SPDX-License-Identifier: Apache-2.0
//! Identity files (docs/cli.md, "Identity files") read by Identity::from_json
//! and Identity::from_file, with the C++ tool's errors (kind and field).

use kvkey::{Digest, Dtype, Identity, Namespace, TenantPolicy};
use sha2::{Digest as _, Sha256};

fn examples() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/identities")
}

const VALID: &str = r#"{
  "tenant": "team-a",
  "model": {"name": "Qwen2.5-0.5B-Instruct", "revision": "7ae557604adf67be50417f59c2c2f167def9a775",
            "weights_epoch": 3, "positional_fingerprint": "ab00000000000000000000000000000000000000000000000000000000000001"},
  "kv": {"dtype": "int8", "quant": {"scheme": "per_token", "group_size": 128, "scale_dtype": "bf16", "zero_point": true},
         "block_size": 64, "num_layers": 24, "num_kv_heads": 2, "head_dim": 64, "layout": "lmdeploy.mooncake.v1",
         "mla": false},
  "shard": {"tp_size": 2, "tp_rank": 1, "pp_size": 1, "pp_rank": 0},
  "adapter": {"name": "sql-lora@v2", "weights_fingerprint": "a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5"}
}"#;

#[test]
fn every_member_is_read() {
    let (id, policy) = Identity::from_json(VALID).expect("valid");
    assert_eq!(policy, TenantPolicy::Required.into());
    assert_eq!(id.tenant, "team-a");
    assert_eq!(id.model.weights_epoch, 3);
    assert_eq!(id.model.weights_fingerprint, None);
    assert_eq!(id.model.positional_fingerprint.expect("set").0[0], 0xab);
    assert_eq!((id.kv.dtype, id.kv.quant.scale_dtype), (Some(Dtype::Int8), Some(Dtype::Bf16)));
    assert_eq!((id.kv.quant.scheme.as_str(), id.kv.quant.group_size, id.kv.quant.zero_point), ("per_token", 128, true));
    assert_eq!((id.kv.block_size, id.kv.num_layers, id.kv.num_kv_heads, id.kv.head_dim), (64, 24, 2, 64));
    assert_eq!((id.shard.tp_size, id.shard.tp_rank), (2, 1));
    let a = id.adapter.as_ref().expect("an adapter");
    assert_eq!((a.name.as_str(), a.weights_fingerprint.0[31]), ("sql-lora@v2", 0xa5));
    let ns = Namespace::builder(&id).policy(policy).build().expect("valid");
    assert_eq!(ns.slice().kv_head_begin, 1);
}

#[test]
fn the_examples_read_and_build() {
    let mut read = 0;
    for entry in std::fs::read_dir(examples()).expect("examples/identities") {
        let path = entry.expect("an entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let (id, policy) = Identity::from_file(&path).unwrap_or_else(|e| panic!("{}: {}", path.display(), e));
        Namespace::builder(&id).policy(policy).build().unwrap_or_else(|e| panic!("{}: {}", path.display(), e));
        read += 1;
    }
    assert!(read >= 5);
    let (single, policy) = Identity::from_file(examples().join("single-tenant.json")).expect("valid");
    assert_eq!((policy, single.tenant.as_str()), (TenantPolicy::SingleTenant.into(), ""));
}

#[test]
fn file_fingerprints_are_relative_to_the_file() {
    let (id, _) = Identity::from_file(examples().join("lora.json")).expect("valid");
    let bytes = std::fs::read(examples().join("adapter-weights.txt")).expect("the weights");
    let want = Digest(Sha256::digest(&bytes).into());
    assert_eq!(id.adapter.expect("an adapter").weights_fingerprint, want);
    // from_json: relative to the working directory, so this one is not found.
    let text = std::fs::read_to_string(examples().join("lora.json")).expect("text");
    let e = Identity::from_json(&text).expect_err("no such file here");
    assert_eq!((e.kind(), e.field()), ("input_error", "adapter.weights_file"));
}

/// Each edit of VALID and the field its error names.
#[test]
fn errors_name_the_field() {
    let cases: &[(&str, &str, &str)] = &[
        (r#""tenant": "team-a""#, r#""tenant": "team-a", "tenat": 1"#, "tenat"),
        (r#""block_size": 64"#, r#""blocksize": 64"#, "kv.blocksize"),
        (r#""mla": false"#, r#""mla": false, "quant": {"zz": 1}"#, "kv.quant"),
        (r#""zero_point": true"#, r#""zero_point": true, "zz": 1"#, "kv.quant.zz"),
        (r#""tenant": "team-a""#, r#""tenant": "team-a", "tenant": "b""#, "tenant"),
        (r#""head_dim": 64"#, r#""head_dim": 64, "head_dim": 65"#, "kv.head_dim"),
        (r#""revision": "7ae557604adf67be50417f59c2c2f167def9a775","#, "", "model.revision"),
        (r#""layout": "lmdeploy.mooncake.v1","#, "", "kv.layout"),
        (r#""dtype": "int8""#, r#""dtype": "int9""#, "kv.dtype"),
        (r#""scale_dtype": "bf16""#, r#""scale_dtype": 2"#, "kv.quant.scale_dtype"),
        (r#""block_size": 64"#, r#""block_size": 4294967296"#, "kv.block_size"),
        (r#""block_size": 64"#, r#""block_size": -1"#, "kv.block_size"),
        (r#""block_size": 64"#, r#""block_size": 64.0"#, "kv.block_size"),
        (r#""weights_epoch": 3"#, r#""weights_epoch": 18446744073709551616"#, "model.weights_epoch"),
        (r#""mla": false"#, r#""mla": 0"#, "kv.mla"),
        (r#""tenant": "team-a""#, r#""tenant": 7"#, "tenant"),
        (r#""tenant": "team-a""#, r#""tenant": "team-a", "policy": "shared""#, "policy"),
        (r#""positional_fingerprint": "ab"#, r#""positional_fingerprint": "zz"#, "model.positional_fingerprint"),
        (
            r#""weights_epoch": 3"#,
            r#""weights_epoch": 3, "weights_fingerprint": "00", "weights_file": "x""#,
            "model.weights_file",
        ),
        (r#""name": "sql-lora@v2", "#, "", "adapter.name"),
        (
            r#""weights_fingerprint": "a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5""#,
            r#""x": null"#,
            "adapter.x",
        ),
        (r#""shard": {"tp_size": 2"#, r#""shard": {"tp_size": null, "tp_siz": 2"#, "shard.tp_siz"),
        (r#""shard": {"tp_size": 2, "tp_rank": 1, "pp_size": 1, "pp_rank": 0}"#, r#""shard": 1"#, "shard"),
    ];
    for (from, to, field) in cases {
        assert!(VALID.contains(from), "{}", from);
        let text = VALID.replacen(from, to, 1);
        let e = Identity::from_json(&text).err().unwrap_or_else(|| panic!("{} accepted", to));
        assert_eq!((e.kind(), e.field()), ("input_error", *field), "{}: {}", to, e);
    }
    let missing_fingerprint = VALID.replacen(
        r#", "weights_fingerprint": "a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5""#,
        "",
        1,
    );
    let e = Identity::from_json(&missing_fingerprint).expect_err("required");
    assert_eq!(e.field(), "adapter.weights_fingerprint");
    let e = Identity::from_json(r#"{"tenant": "t"}"#).expect_err("model is required");
    assert_eq!(e.field(), "model");
}

#[test]
fn the_text_as_a_whole() {
    let whole = |text: &[u8]| {
        let text = String::from_utf8_lossy(text).into_owned();
        let e = Identity::from_json(&text).expect_err("refused");
        (e.kind(), e.field().to_string())
    };
    let want = ("input_error", kvkey::IDENTITY_FILE_FIELD.to_string());
    assert_eq!(whole(b"{"), want);
    assert_eq!(whole(b"[]"), want);
    assert_eq!(whole(format!("{} x", VALID).as_bytes()), want);
    assert_eq!(whole(b"{\"tenant\": \"a\0\"}"), want);
    assert_eq!(whole(br#"{"tenant": "\ud800"}"#), want);
    assert_eq!(whole(br#"{"tenant": NaN}"#), want);
    assert_eq!(whole(br#"{"model": {"weights_epoch": 1e400}}"#), want);
    let deep = |n: usize| format!("{{\"tenant\": {}{}}}", "[".repeat(n), "]".repeat(n));
    assert_eq!(whole(deep(31).as_bytes()).1, "tenant"); // 32 levels: read, then a wrong type
    assert_eq!(whole(deep(32).as_bytes()), want);
    assert_eq!(whole(deep(100_000).as_bytes()), want);
    // A byte order mark is skipped.
    let bom = format!("\u{feff}{}", VALID);
    assert!(Identity::from_json(&bom).is_ok());
}

#[test]
fn validation_comes_later() {
    // A file that reads is not yet a valid identity: the namespace names the field.
    let text = VALID.replacen(r#""block_size": 64"#, r#""block_size": 0"#, 1);
    let (id, policy) = Identity::from_json(&text).expect("reads");
    let e = Namespace::builder(&id).policy(policy).build().expect_err("invalid");
    assert_eq!((e.kind(), e.field()), ("identity_error", "kv.block_size"));
}

fn field_of(r: kvkey::Result<(Identity, kvkey::Policy)>) -> (String, String) {
    let e = r.expect_err("refused");
    (e.kind().to_string(), e.field().to_string())
}

#[test]
fn a_duplicate_empty_key_at_the_top_is_named_dot() {
    // "." as the C++ (kvkey::parse_identity_file), Python and Go readers name it.
    let want = ("input_error".to_string(), ".".to_string());
    assert_eq!(field_of(Identity::from_json(r#"{"": 1, "": 2}"#)), want);
    assert_eq!(field_of(Identity::from_json(r#"{"kv": {"": 1, "": 2}}"#)).1, "kv.");
    assert_eq!(field_of(Identity::from_json(r#"{"tenant": "a", "tenant": "b"}"#)).1, "tenant");
}

#[cfg(unix)]
#[test]
fn a_fifo_or_a_device_is_refused_at_once() {
    let dir = std::env::temp_dir().join(format!("kvkey-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let fifo = dir.join("identity.json");
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
    assert!(made.success(), "mkfifo failed");
    // No writer ever opens it: a reader that opened it would wait here forever.
    let (tx, rx) = std::sync::mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || {
        let _ = tx.send(field_of(Identity::from_file(&path)));
    });
    let got = rx.recv_timeout(std::time::Duration::from_secs(30)).expect("from_file returned");
    assert_eq!(got, ("input_error".to_string(), "identity_file".to_string()));
    assert_eq!(field_of(Identity::from_file("/dev/null")).1, "identity_file");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Format v4's top-level "confidential" (after "policy", as the C++ reader
/// takes it): the policy says so, the builder applies it, and a namespace
/// from it needs the tenant secret.
#[test]
fn confidential_is_read() {
    let text = r#"{"tenant": "t", "policy": "required", "confidential": true, "model": {"name": "m", "revision": "r"},
        "kv": {"dtype": "fp16", "block_size": 4, "num_layers": 2, "num_kv_heads": 2, "head_dim": 8, "layout": "l"}}"#;
    let (id, policy) = Identity::from_json(text).expect("valid");
    assert_eq!(policy, kvkey::Policy { tenant: TenantPolicy::Required, confidential: true });
    let e = Namespace::builder(&id).policy(policy).build().expect_err("no secret");
    assert_eq!((e.kind(), e.field()), ("identity_error", "confidential"));
    let ns = Namespace::builder(&id).policy(policy).secret(&[3; 32]).build().expect("confidential");
    assert!(
        ns.is_confidential() && ns.key_prefix().starts_with(&format!("kvk4/t/c{}/", kvkey::secret_id(&[3; 32]).hex()))
    );
    for (value, confidential) in [("false", false), ("null", false)] {
        let (_, p) = Identity::from_json(&text.replace(": true", &format!(": {value}"))).expect("valid");
        assert_eq!(p.confidential, confidential, "{}", value);
    }
    for bad in ["1", "\"yes\"", "[]"] {
        let e = Identity::from_json(&text.replace(": true", &format!(": {bad}"))).expect_err("not a boolean");
        assert_eq!((e.kind(), e.field()), ("input_error", "confidential"), "{}", bad);
    }
}
