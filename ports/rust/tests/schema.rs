// SPDX-License-Identifier: Apache-2.0
//! The field table (`kvkey::FIELDS`) against the C++ library's exported
//! identity schema (tests/vectors/identity-schema.json, `kvkey schema`), field
//! by field, and the validation order against the schema's `validation` list
//! with identities that break two rules at once.

use kvkey::{Adapter, Digest, Dtype, FieldKind, FieldType, Identity, Namespace, TenantPolicy, FIELDS};
use serde_json::{json, Value};

fn schema() -> Value {
    let path = format!("{}/../../tests/vectors/identity-schema.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {}", path, e));
    serde_json::from_str(&text).expect("JSON")
}

fn type_name(t: FieldType) -> &'static str {
    match t {
        FieldType::Part | FieldType::OptionalPart => "object",
        FieldType::String => "string",
        FieldType::U32 => "u32",
        FieldType::U64 => "u64",
        FieldType::Bool => "bool",
        FieldType::Dtype | FieldType::OptionalDtype => "dtype",
        FieldType::Digest | FieldType::OptionalDigest => "digest",
    }
}

fn rule_name(k: FieldKind) -> Value {
    match k {
        FieldKind::Value => Value::Null,
        FieldKind::Positive => json!("positive"),
        FieldKind::Text => json!("text"),
        FieldKind::Identifier => json!("identifier"),
        FieldKind::Tenant => json!("tenant"),
        FieldKind::Scheme => json!("scheme"),
        FieldKind::Dtype => json!("dtype"),
    }
}

/// The default of a member in an identity file's terms, read from Identity::default().
fn default_of(path: &str) -> Value {
    let id = Identity { adapter: Some(Adapter::default()), ..Identity::default() };
    let v: Value = match path {
        "tenant" => json!(id.tenant),
        "model.name" => json!(id.model.name),
        "model.revision" => json!(id.model.revision),
        "model.weights_epoch" => json!(id.model.weights_epoch),
        "model.weights_fingerprint" => json!(id.model.weights_fingerprint.map(|d| d.hex())),
        "model.positional_fingerprint" => json!(id.model.positional_fingerprint.map(|d| d.hex())),
        "kv.dtype" => json!(id.kv.dtype.map(Dtype::name)),
        "kv.quant.scheme" => json!(id.kv.quant.scheme),
        "kv.quant.group_size" => json!(id.kv.quant.group_size),
        "kv.quant.scale_dtype" => json!(id.kv.quant.scale_dtype.map(Dtype::name)),
        "kv.quant.zero_point" => json!(id.kv.quant.zero_point),
        "kv.quant.scales_fingerprint" => json!(id.kv.quant.scales_fingerprint.map(|d| d.hex())),
        "kv.block_size" => json!(id.kv.block_size),
        "kv.num_layers" => json!(id.kv.num_layers),
        "kv.num_kv_heads" => json!(id.kv.num_kv_heads),
        "kv.head_dim" => json!(id.kv.head_dim),
        "kv.layout" => json!(id.kv.layout),
        "kv.mla" => json!(id.kv.mla),
        "shard.tp_size" => json!(id.shard.tp_size),
        "shard.tp_rank" => json!(id.shard.tp_rank),
        "shard.pp_size" => json!(id.shard.pp_size),
        "shard.pp_rank" => json!(id.shard.pp_rank),
        "adapter.name" => json!(id.adapter.as_ref().map(|a| a.name.clone())),
        "adapter.weights_fingerprint" => json!(id.adapter.as_ref().map(|a| a.weights_fingerprint.hex())),
        _ => Value::Null, // parts
    };
    v
}

#[test]
fn the_field_table_is_the_exported_schema() {
    let s = schema();
    let fields = s["fields"].as_array().expect("fields");
    let paths: Vec<&str> = fields.iter().map(|f| f["path"].as_str().expect("a path")).collect();
    assert_eq!(paths, FIELDS.iter().map(|f| f.path).collect::<Vec<_>>(), "the members and their order");
    let mut encoding_index = 0u64;
    for (want, f) in fields.iter().zip(FIELDS) {
        // Encoded: the salient leaves and the adapter's presence, not the parts holding them.
        let encoded = f.salient && f.ty != FieldType::Part;
        let optional = matches!(f.ty, FieldType::OptionalPart | FieldType::OptionalDtype | FieldType::OptionalDigest);
        let got = json!({
            "key": f.key(),
            "type": type_name(f.ty),
            "optional": optional,
            "rule": rule_name(f.kind),
            "max_bytes": if f.limit == 0 { Value::Null } else { json!(f.limit) },
            "salient": f.salient,
            "encoding_index": if encoded { json!(encoding_index) } else { Value::Null },
            "file_required": f.required,
            "file_alt_key": if f.file_alt { json!(format!("{}_file", f.key().trim_end_matches("_fingerprint"))) } else { Value::Null },
            "default": default_of(f.path),
        });
        for (k, v) in got.as_object().expect("an object") {
            assert_eq!(&want[k], v, "{}: {}", f.path, k);
        }
        if encoded {
            encoding_index += 1;
        }
    }
    assert_eq!(s["identity_file"]["max_bytes"], kvkey::MAX_IDENTITY_FILE_SIZE);
    assert_eq!(s["identity_file"]["max_depth"], kvkey::MAX_IDENTITY_FILE_DEPTH);
    assert_eq!(s["policy"]["values"], json!([TenantPolicy::Required.name(), TenantPolicy::SingleTenant.name()]));
    // Policy::confidential: read after "policy", a bool (null: absent), false by default.
    assert_eq!(
        s["confidential"],
        json!({"key": "confidential", "after": "policy", "type": "bool", "nullable": true, "default": false, "rule": "keyed"})
    );
    assert_eq!(s["format_version"], kvkey::FORMAT_VERSION, "the schema's format version");
    let dtypes: Vec<(String, u64)> = s["dtypes"]
        .as_array()
        .expect("dtypes")
        .iter()
        .map(|d| (d["name"].as_str().expect("a name").to_string(), d["code"].as_u64().expect("a code")))
        .collect();
    assert!(!dtypes.is_empty());
    for (name, code) in &dtypes {
        let d = Dtype::from_name(name).unwrap_or_else(|| panic!("dtype {}", name));
        assert_eq!((d as u64, Dtype::from_code(*code as u8)), (*code, Some(d)));
    }
    assert_eq!(Dtype::from_code(dtypes.len() as u8 + 1), None);
}

mod common;
use common::valid_identity as valid;

/// A test identity and how its namespace is built.
struct Case {
    id: Identity,
    policy: TenantPolicy,
    secret: Vec<u8>,
    plain: bool,
    confidential: bool,
}

impl Case {
    fn new() -> Self {
        Case { id: valid(), policy: TenantPolicy::Required, secret: Vec::new(), plain: false, confidential: false }
    }
}

/// Breaks one validation step's rule, touching only its field; false for a
/// step this port cannot break (an optional dtype is always a known one here).
fn break_step(step: &Value, c: &mut Case) -> bool {
    let field = step["field"].as_str().expect("a field");
    let rule = step["rule"].as_str().expect("a rule");
    let id = &mut c.id;
    match (field, rule) {
        ("tenant", "empty") => {
            c.policy = TenantPolicy::SingleTenant;
            id.tenant = "x".into();
        }
        ("tenant", _) => id.tenant = String::new(),
        ("model.name", _) => id.model.name = String::new(),
        ("model.revision", _) => id.model.revision = String::new(),
        ("kv.quant.scheme", _) => id.kv.quant.scheme = String::new(),
        ("kv.layout", _) => id.kv.layout = String::new(),
        ("adapter.name", _) => {
            id.adapter = Some(Adapter { name: String::new(), weights_fingerprint: Digest::default() })
        }
        ("kv.dtype", _) => id.kv.dtype = None,
        ("kv.quant.scale_dtype", "dtype") => return false,
        ("kv.block_size", _) => id.kv.block_size = 0,
        ("kv.num_layers", _) => id.kv.num_layers = 0,
        ("kv.num_kv_heads", _) => id.kv.num_kv_heads = 0,
        ("kv.head_dim", _) => id.kv.head_dim = 0,
        ("kv.quant.group_size", "default") => id.kv.quant.group_size = 4,
        ("kv.quant.scale_dtype", "default") => id.kv.quant.scale_dtype = Some(Dtype::Bf16),
        ("kv.quant.zero_point", "default") => id.kv.quant.zero_point = true,
        ("kv.quant.scales_fingerprint", "default") => id.kv.quant.scales_fingerprint = Some(Digest([1; 32])),
        ("shard.tp_size", "positive") => id.shard.tp_size = 0,
        ("shard.pp_size", "positive") => id.shard.pp_size = 0,
        ("shard.tp_rank", "below") => id.shard.tp_rank = 9,
        ("shard.pp_rank", "below") => id.shard.pp_rank = 9,
        ("shard.tp_size", "splits_heads") => id.shard.tp_size = 3,
        ("shard.pp_size", "divides") => id.shard.pp_size = 3,
        ("tenant_secret", _) => c.secret = vec![7; 31],
        ("confidential", "keyed") => {
            c.plain = true;
            c.confidential = true;
        }
        _ => panic!("a validation step this test does not know: {}", step),
    }
    true
}

fn refused_on(c: &Case) -> Option<String> {
    let mut b = Namespace::builder(&c.id).policy(c.policy).confidential(c.confidential);
    let secret = if c.secret.is_empty() { vec![7u8; 32] } else { c.secret.clone() };
    if !c.plain {
        b = b.secret(&secret);
    }
    b.build().err().map(|e| {
        assert_eq!(e.kind(), "identity_error");
        e.field().to_string()
    })
}

#[test]
fn validation_follows_the_exported_order() {
    let s = schema();
    let steps = s["validation"].as_array().expect("validation");
    let mut checked = 0;
    for (i, first) in steps.iter().enumerate() {
        let mut alone = Case::new();
        if !break_step(first, &mut alone) {
            continue;
        }
        assert_eq!(refused_on(&alone).as_deref(), first["field"].as_str(), "{} alone", first);
        for second in &steps[i + 1..] {
            // The same member twice is not two defects: a short secret and
            // no secret (a plain namespace) are both about the secret.
            let about_secret = |s: &Value| s["field"] == "tenant_secret" || s["field"] == "confidential";
            if second["field"] == first["field"] || about_secret(first) && about_secret(second) {
                continue;
            }
            let mut both = Case::new();
            if !break_step(second, &mut both) {
                continue;
            }
            break_step(first, &mut both);
            assert_eq!(refused_on(&both).as_deref(), first["field"].as_str(), "{} then {}", first, second);
            checked += 1;
        }
    }
    assert!(checked > 100, "{} pairs", checked);
}
