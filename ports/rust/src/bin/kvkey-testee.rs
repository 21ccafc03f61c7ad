// SPDX-License-Identifier: Apache-2.0
//! Answers kvkey conformance requests with this crate: one JSON request per
//! line on stdin, one JSON response per line on stdout (docs/conformance.md).
//!
//!     kvkey conformance --testee 'cargo run --manifest-path ports/rust/Cargo.toml --bin kvkey-testee'
#![forbid(unsafe_code)]

use std::io::{self, BufRead, Write};

use kvkey::json::Json;
use kvkey::{Digest, Error, ExtraKey, HashOptions, Identity, Namespace, TenantPolicy};
use serde_json::{json, Value};

/// One decoded request.
#[derive(Default)]
struct Request {
    identity: Identity,
    single_tenant: bool,
    secret: Option<Vec<u8>>,
    confidential: bool,
    tokens: Vec<u32>,
    options: HashOptions,
    verify: Option<Verify>,
    open: Option<(Vec<u8>, u64)>, // a stored value, block index
}

/// A verify request: the header, the block index, and the payload's size
/// (the size-only check) or its bytes (the whole check).
struct Verify {
    header: Vec<u8>,
    block_index: u64,
    payload: Payload,
}

enum Payload {
    Size(u64),
    Bytes(Vec<u8>),
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

fn hex_member(m: &Json, key: &str, field: &'static str) -> Result<Option<Vec<u8>>> {
    match m.member(key) {
        None => Ok(None),
        Some(Json::String(s)) => match kvkey::from_hex(s) {
            Some(b) => Ok(Some(b)),
            None => bad(field, "expected hex digits (an even number)"),
        },
        Some(_) => bad(field, "expected hex digits (an even number)"),
    }
}

/// An unsigned integer no larger than max: written without a sign, no
/// fraction or exponent.
fn unsigned(v: Option<&Json>, max: u64) -> Option<u64> {
    match v {
        Some(Json::Unsigned(n)) if *n <= max => Some(*n),
        _ => None,
    }
}

/// The request members the protocol defines.
const MEMBERS: &[&str] = &[
    "id",
    "identity",
    "identity_file",
    "single_tenant",
    "secret_hex",
    "confidential",
    "tokens",
    "salt_hex",
    "extras",
    "verify",
    "open",
];

fn decode(raw: &Json) -> Result<Request> {
    let mut r = Request::default();
    if let Json::Object(members) = raw {
        let unknown = members.iter().map(|(k, _)| k).filter(|k| !MEMBERS.contains(&k.as_str()));
        if let Some(k) = unknown.min_by(|a, b| a.as_bytes().cmp(b.as_bytes())) {
            return bad(k.clone(), "not a member of a request");
        }
    }
    let (identity, policy) = match (raw.member("identity"), raw.member("identity_file")) {
        (Some(_), Some(_)) => return bad("identity", "give identity or identity_file, not both"),
        (None, None) => return bad("identity", "give identity or identity_file"),
        (None, Some(Json::String(text))) => Identity::from_json(text)?,
        (None, Some(_)) => return bad("identity_file", "expected a string: the identity file's text"),
        (Some(v), None) => kvkey::read_request_identity(v)?,
    };
    r.identity = identity;
    r.single_tenant = policy.tenant == TenantPolicy::SingleTenant;
    match raw.member("single_tenant") {
        None => {}
        Some(Json::Bool(b)) => r.single_tenant |= *b,
        Some(_) => return bad("single_tenant", "expected true or false"),
    }
    r.secret = hex_member(raw, "secret_hex", "secret_hex")?;
    r.confidential = policy.confidential;
    match raw.member("confidential") {
        // format v4: AES-256-GCM values
        None => {}
        Some(Json::Bool(b)) => r.confidential |= *b,
        Some(_) => return bad("confidential", "expected true or false"),
    }
    match raw.member("tokens") {
        None => {}
        Some(Json::Array(list)) => {
            for t in list {
                match unsigned(Some(t), u64::from(u32::MAX)) {
                    Some(n) => r.tokens.push(n as u32),
                    None => return bad("tokens", "token ids are integers in [0, 2^32)"),
                }
            }
        }
        Some(_) => return bad("tokens", "expected an array of token ids"),
    }
    r.options.salt = hex_member(raw, "salt_hex", "salt_hex")?.unwrap_or_default();
    match raw.member("extras") {
        None => {}
        Some(Json::Array(list)) => {
            for x in list {
                if !matches!(x, Json::Object(_)) {
                    return bad("extras", "expected objects");
                }
                let num = |key: &str| match unsigned(x.get(key), u64::MAX) {
                    Some(n) => Ok(n),
                    None => bad("extras", "expected an unsigned integer"),
                };
                let token_begin = num("token_begin")?;
                let token_end = num("token_end")?;
                let key = hex_member(x, "key_hex", "extras")?.unwrap_or_default();
                r.options.extras.push(ExtraKey { token_begin, token_end, key });
            }
        }
        Some(_) => return bad("extras", "expected an array"),
    }
    match raw.member("verify") {
        None => {}
        Some(m @ Json::Object(_)) => {
            let header = hex_member(m, "header_hex", "verify.header_hex")?.unwrap_or_default();
            let index = match unsigned(m.get("block_index"), u64::MAX) {
                Some(n) => n,
                None => return bad("verify.block_index", "expected an unsigned integer"),
            };
            let payload = match hex_member(m, "payload_hex", "verify.payload_hex")? {
                Some(bytes) => {
                    if m.member("payload_size").is_some() {
                        return bad("verify.payload_size", "give payload_size or payload_hex, not both");
                    }
                    Payload::Bytes(bytes)
                }
                None => match unsigned(m.get("payload_size"), u64::MAX) {
                    Some(n) => Payload::Size(n),
                    None => return bad("verify.payload_size", "expected an unsigned integer"),
                },
            };
            r.verify = Some(Verify { header, block_index: index, payload });
        }
        Some(_) => return bad("verify", "expected an object"),
    }
    match raw.member("open") {
        None => {}
        Some(m @ Json::Object(_)) => {
            if r.verify.is_some() {
                return bad("open", "give verify or open, not both");
            }
            let value = hex_member(m, "value_hex", "open.value_hex")?.unwrap_or_default();
            let index = match unsigned(m.get("block_index"), u64::MAX) {
                Some(n) => n,
                None => return bad("open.block_index", "expected an unsigned integer"),
            };
            r.open = Some((value, index));
        }
        Some(_) => return bad("open", "expected an object"),
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
    let ns = builder.confidential(r.confidential).build()?;
    let blocks = ns.block_hashes(&r.tokens, &r.options)?;
    let mut out = json!({
        "encoding": ns.encoding().iter().map(|b| format!("{:02x}", b)).collect::<String>(),
        "root": ns.root().hex(),
        "prefix": ns.key_prefix(),
        "blocks": blocks.iter().map(Digest::hex).collect::<Vec<_>>(),
        "blocks_u64": blocks.iter().map(Digest::u64_projection).collect::<Vec<_>>(),
        "keys": blocks.iter().map(|b| ns.store_key(b)).collect::<Vec<_>>(),
    });
    let block = |index: u64, field: &str| match usize::try_from(index).ok().and_then(|i| blocks.get(i)) {
        Some(b) => Ok(b),
        None => bad(field, "no such block"),
    };
    let verdict = if let Some(v) = &r.verify {
        let b = block(v.block_index, "verify.block_index")?;
        Some(match &v.payload {
            Payload::Size(size) => ns.verify_header(&v.header, b, *size),
            Payload::Bytes(bytes) => ns.verify(&v.header, b, bytes),
        })
    } else if let Some((value, index)) = &r.open {
        Some(ns.open_value(value, block(*index, "open.block_index")?).1)
    } else {
        None
    };
    if let Some(v) = verdict {
        out["verdict"] = json!({"ok": v.is_ok(), "reason": v.reason.name(), "field": v.field});
    }
    Ok(out)
}

/// How deep a request line may nest (the request object is level 1).
const MAX_DEPTH: usize = 32;

/// The answer to one line: any bytes at all get exactly one JSON object
/// (docs/conformance.md, "Lines that are not requests").
fn respond(line: &[u8]) -> Value {
    let raw = match Json::parse(line) {
        Ok(v @ Json::Object(_)) => v,
        Ok(_) => return refusal(Value::Null, &refuse_request("not a JSON object")),
        Err(e) => return refusal(Value::Null, &refuse_request(&format!("not strict JSON: {}", e))),
    };
    if raw.depth() > MAX_DEPTH {
        return refusal(Value::Null, &refuse_request(&format!("nested deeper than {} levels", MAX_DEPTH)));
    }
    if let Some(path) = raw.first_duplicate() {
        return refusal(Value::Null, &refuse_request(&format!("duplicate key {:?}", path)));
    }
    let id = raw.get("id").map_or(Value::Null, Json::to_value);
    match decode(&raw).and_then(|r| answer(&r)) {
        Ok(mut v) => {
            v["id"] = id;
            v
        }
        Err(e) => refusal(id, &e),
    }
}

fn refuse_request(message: &str) -> Refusal {
    Refusal { kind: "input_error", field: "request".into(), message: message.into() }
}

fn refusal(id: Value, e: &Refusal) -> Value {
    json!({"id": id, "error": {"kind": e.kind, "field": e.field, "message": e.message}})
}

fn main() -> io::Result<()> {
    let stdin = io::stdin();
    let mut input = stdin.lock();
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let mut line = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        writeln!(out, "{}", respond(&line))?;
        out.flush()?;
    }
}
