// SPDX-License-Identifier: Apache-2.0
//! Answers kvkey conformance requests with this crate: one JSON request per
//! line on stdin, one JSON response per line on stdout (docs/conformance.md).
//!
//!     kvkey conformance --testee 'cargo run --manifest-path ports/rust/Cargo.toml --bin kvkey-testee'
#![forbid(unsafe_code)]

use std::io::{self, BufRead, Write};

use kvkey::{Adapter, Digest, Dtype, Error, ExtraKey, HashOptions, Identity, Namespace, TenantPolicy};
use serde_json::{json, Map, Value};

/// One decoded request.
#[derive(Default)]
struct Request {
    identity: Identity,
    single_tenant: bool,
    secret: Option<Vec<u8>>,
    tokens: Vec<u32>,
    options: HashOptions,
    verify: Option<(Vec<u8>, u64, u64)>, // header, block index, payload size
}

/// A refused request: the protocol's error object.
struct Refusal {
    kind: &'static str,
    field: String,
    message: String,
}

impl From<Error> for Refusal {
    fn from(e: Error) -> Refusal {
        Refusal { kind: e.kind(), field: e.field().to_string(), message: e.message().to_string() }
    }
}

type Result<T> = std::result::Result<T, Refusal>;

fn bad<T>(field: impl Into<String>, message: &str) -> Result<T> {
    Err(Refusal { kind: "input_error", field: field.into(), message: message.into() })
}

/// One JSON object of the identity: absent and null members keep the C++
/// defaults; every error names the member's dotted path.
struct Section<'a> {
    map: &'a Map<String, Value>,
    fields: &'static [&'static str],
}

impl<'a> Section<'a> {
    /// `fields` are the object's members' dotted paths, in the order `keys` lists them.
    fn new(v: &'a Value, path: &'static str, keys: &[&str], fields: &'static [&'static str]) -> Result<Section<'a>> {
        let map = match v.as_object() {
            Some(m) => m,
            None => return bad(path, "expected an object"),
        };
        if let Some(unknown) = map.keys().find(|k| !keys.contains(&k.as_str())) {
            let field = if path == "identity" { unknown.clone() } else { format!("{}.{}", path, unknown) };
            return bad(field, "unknown key");
        }
        Ok(Section { map, fields })
    }
    fn get(&self, i: usize) -> Option<&'a Value> {
        let key = self.fields[i].rsplit('.').next().unwrap_or_default();
        self.map.get(key).filter(|v| !v.is_null())
    }
    fn text(&self, i: usize, out: &mut String) -> Result<()> {
        if let Some(v) = self.get(i) {
            match v.as_str() {
                Some(s) => *out = s.to_string(),
                None => return bad(self.fields[i], "expected a string"),
            }
        }
        Ok(())
    }
    fn uint(&self, i: usize, max: u64) -> Result<Option<u64>> {
        match self.get(i) {
            None => Ok(None),
            Some(v) => match v.as_u64().filter(|n| *n <= max) {
                Some(n) => Ok(Some(n)),
                None => bad(self.fields[i], "expected an unsigned integer in range"),
            },
        }
    }
    fn u32(&self, i: usize, out: &mut u32) -> Result<()> {
        if let Some(n) = self.uint(i, u64::from(u32::MAX))? {
            *out = n as u32;
        }
        Ok(())
    }
    fn flag(&self, i: usize, out: &mut bool) -> Result<()> {
        if let Some(v) = self.get(i) {
            match v.as_bool() {
                Some(b) => *out = b,
                None => return bad(self.fields[i], "expected true or false"),
            }
        }
        Ok(())
    }
    fn dtype(&self, i: usize) -> Result<Option<Dtype>> {
        match self.get(i) {
            None => Ok(None),
            Some(v) => match v.as_str().and_then(Dtype::from_name) {
                Some(d) => Ok(Some(d)),
                None => bad(self.fields[i], "expected a dtype name"),
            },
        }
    }
    fn digest(&self, i: usize) -> Result<Option<Digest>> {
        match self.get(i) {
            None => Ok(None),
            Some(v) => match v.as_str().map(Digest::from_hex) {
                Some(Ok(d)) => Ok(Some(d)),
                _ => bad(self.fields[i], "expected 64 hex digits"),
            },
        }
    }
}

const TOP: &[&str] = &["tenant", "policy", "model", "kv", "shard", "adapter"];
const MODEL: &[&str] = &[
    "model.name",
    "model.revision",
    "model.weights_epoch",
    "model.weights_fingerprint",
    "model.positional_fingerprint",
];
const KV: &[&str] = &[
    "kv.dtype",
    "kv.quant",
    "kv.block_size",
    "kv.num_layers",
    "kv.num_kv_heads",
    "kv.head_dim",
    "kv.layout",
    "kv.mla",
];
const QUANT: &[&str] = &[
    "kv.quant.scheme",
    "kv.quant.group_size",
    "kv.quant.scale_dtype",
    "kv.quant.zero_point",
    "kv.quant.scales_fingerprint",
];
const SHARD: &[&str] = &["shard.tp_size", "shard.tp_rank", "shard.pp_size", "shard.pp_rank"];
const ADAPTER: &[&str] = &["adapter.name", "adapter.weights_fingerprint"];

fn keys(paths: &[&'static str]) -> Vec<&'static str> {
    paths.iter().map(|p| p.rsplit('.').next().unwrap_or_default()).collect()
}

fn decode_identity(v: &Value, r: &mut Request) -> Result<()> {
    let top = Section::new(v, "identity", TOP, TOP)?;
    let id = &mut r.identity;
    top.text(0, &mut id.tenant)?;
    let mut policy = "required".to_string();
    top.text(1, &mut policy)?;
    match policy.as_str() {
        "single_tenant" => r.single_tenant = true,
        "required" => {}
        _ => return bad("policy", "expected \"required\" or \"single_tenant\""),
    }
    if let Some(m) = top.get(2) {
        let s = Section::new(m, "model", &keys(MODEL), MODEL)?;
        s.text(0, &mut id.model.name)?;
        s.text(1, &mut id.model.revision)?;
        if let Some(n) = s.uint(2, u64::MAX)? {
            id.model.weights_epoch = n;
        }
        id.model.weights_fingerprint = s.digest(3)?;
        id.model.positional_fingerprint = s.digest(4)?;
    }
    if let Some(k) = top.get(3) {
        let s = Section::new(k, "kv", &keys(KV), KV)?;
        id.kv.dtype = s.dtype(0)?;
        if let Some(q) = s.get(1) {
            let qs = Section::new(q, "kv.quant", &keys(QUANT), QUANT)?;
            qs.text(0, &mut id.kv.quant.scheme)?;
            qs.u32(1, &mut id.kv.quant.group_size)?;
            id.kv.quant.scale_dtype = qs.dtype(2)?;
            qs.flag(3, &mut id.kv.quant.zero_point)?;
            id.kv.quant.scales_fingerprint = qs.digest(4)?;
        }
        s.u32(2, &mut id.kv.block_size)?;
        s.u32(3, &mut id.kv.num_layers)?;
        s.u32(4, &mut id.kv.num_kv_heads)?;
        s.u32(5, &mut id.kv.head_dim)?;
        s.text(6, &mut id.kv.layout)?;
        s.flag(7, &mut id.kv.mla)?;
    }
    if let Some(sh) = top.get(4) {
        let s = Section::new(sh, "shard", &keys(SHARD), SHARD)?;
        s.u32(0, &mut id.shard.tp_size)?;
        s.u32(1, &mut id.shard.tp_rank)?;
        s.u32(2, &mut id.shard.pp_size)?;
        s.u32(3, &mut id.shard.pp_rank)?;
    }
    if let Some(a) = top.get(5) {
        let s = Section::new(a, "adapter", &keys(ADAPTER), ADAPTER)?;
        let mut adapter = Adapter::default();
        s.text(0, &mut adapter.name)?;
        if let Some(d) = s.digest(1)? {
            adapter.weights_fingerprint = d;
        }
        id.adapter = Some(adapter);
    }
    Ok(())
}

fn hex_member(m: &Map<String, Value>, key: &str, field: &'static str) -> Result<Option<Vec<u8>>> {
    match m.get(key).filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(v) => match v.as_str().and_then(kvkey::from_hex) {
            Some(b) => Ok(Some(b)),
            None => bad(field, "expected hex digits (an even number)"),
        },
    }
}

fn unsigned(m: &Map<String, Value>, key: &str, field: &'static str) -> Result<u64> {
    match m.get(key).and_then(Value::as_u64) {
        Some(n) => Ok(n),
        None => bad(field, "expected an unsigned integer"),
    }
}

fn decode(raw: &Map<String, Value>) -> Result<Request> {
    let mut r = Request::default();
    match raw.get("identity") {
        Some(v) if v.is_object() => decode_identity(v, &mut r)?,
        _ => return bad("identity", "expected an object"),
    }
    match raw.get("single_tenant").filter(|v| !v.is_null()) {
        None => {}
        Some(Value::Bool(b)) => r.single_tenant |= *b,
        Some(_) => return bad("single_tenant", "expected true or false"),
    }
    r.secret = hex_member(raw, "secret_hex", "secret_hex")?;
    match raw.get("tokens").filter(|v| !v.is_null()) {
        None => {}
        Some(Value::Array(list)) => {
            for t in list {
                match t.as_u64().filter(|n| *n <= u64::from(u32::MAX)) {
                    Some(n) => r.tokens.push(n as u32),
                    None => return bad("tokens", "token ids are integers in [0, 2^32)"),
                }
            }
        }
        Some(_) => return bad("tokens", "expected an array of token ids"),
    }
    r.options.salt = hex_member(raw, "salt_hex", "salt_hex")?.unwrap_or_default();
    match raw.get("extras").filter(|v| !v.is_null()) {
        None => {}
        Some(Value::Array(list)) => {
            for x in list {
                let m = match x.as_object() {
                    Some(m) => m,
                    None => return bad("extras", "expected objects"),
                };
                let token_begin = unsigned(m, "token_begin", "extras")?;
                let token_end = unsigned(m, "token_end", "extras")?;
                let key = hex_member(m, "key_hex", "extras")?.unwrap_or_default();
                r.options.extras.push(ExtraKey { token_begin, token_end, key });
            }
        }
        Some(_) => return bad("extras", "expected an array"),
    }
    match raw.get("verify").filter(|v| !v.is_null()) {
        None => {}
        Some(Value::Object(m)) => {
            let header = hex_member(m, "header_hex", "verify.header_hex")?.unwrap_or_default();
            let index = unsigned(m, "block_index", "verify.block_index")?;
            let size = unsigned(m, "payload_size", "verify.payload_size")?;
            r.verify = Some((header, index, size));
        }
        Some(_) => return bad("verify", "expected an object"),
    }
    Ok(r)
}

fn answer(r: &Request) -> Result<Value> {
    let mut builder = Namespace::builder(&r.identity);
    if r.single_tenant {
        builder = builder.policy(TenantPolicy::SingleTenant);
    }
    if let Some(secret) = &r.secret {
        builder = builder.secret(secret);
    }
    let ns = builder.build()?;
    let blocks = ns.block_hashes(&r.tokens, &r.options)?;
    let mut out = json!({
        "encoding": ns.encoding().iter().map(|b| format!("{:02x}", b)).collect::<String>(),
        "root": ns.root().hex(),
        "prefix": ns.key_prefix(),
        "blocks": blocks.iter().map(Digest::hex).collect::<Vec<_>>(),
        "blocks_u64": blocks.iter().map(Digest::u64_projection).collect::<Vec<_>>(),
        "keys": blocks.iter().map(|b| ns.store_key(b)).collect::<Vec<_>>(),
    });
    if let Some((header, index, size)) = &r.verify {
        let block = match usize::try_from(*index).ok().and_then(|i| blocks.get(i)) {
            Some(b) => b,
            None => return bad("verify.block_index", "no such block"),
        };
        let v = ns.verify_header(header, block, *size);
        out["verdict"] = json!({"ok": v.is_ok(), "reason": v.reason.name(), "field": v.field});
    }
    Ok(out)
}

fn respond(line: &str) -> Value {
    let raw: Value = match serde_json::from_str(line) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            let e = Refusal { kind: "input_error", field: "request".into(), message: "not a JSON object".into() };
            return refusal(Value::Null, &e);
        }
    };
    let map = raw.as_object().expect("an object");
    let id = map.get("id").cloned().unwrap_or(Value::Null);
    match decode(map).and_then(|r| answer(&r)) {
        Ok(mut v) => {
            v["id"] = id;
            v
        }
        Err(e) => refusal(id, &e),
    }
}

fn refusal(id: Value, e: &Refusal) -> Value {
    json!({"id": id, "error": {"kind": e.kind, "field": e.field, "message": e.message}})
}

fn main() -> io::Result<()> {
    let stdin = io::stdin();
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    for line in stdin.lock().lines() {
        let line = line?;
        if line.is_empty() {
            continue;
        }
        writeln!(out, "{}", respond(&line))?;
        out.flush()?;
    }
    Ok(())
}
