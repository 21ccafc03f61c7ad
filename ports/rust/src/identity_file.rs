// SPDX-License-Identifier: Apache-2.0
//! Identity files (docs/cli.md, "Identity files"): the JSON `kvkey init`
//! writes and the engine builds its namespace from, read with the C++ tool's
//! rules and errors (the kind and the field), walking the field table.

use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::fields::{members, Field, FieldType, Slot};
use crate::identity::{Dtype, Identity, Policy, TenantPolicy};
use crate::json::Json;

/// The largest identity file read, in bytes (as the C++ tool's).
pub const MAX_IDENTITY_FILE_SIZE: u64 = 1 << 20;
/// How deep arrays and objects may nest in an identity file (the top-level
/// object is level 1).
pub const MAX_IDENTITY_FILE_DEPTH: usize = 32;
/// The field named by errors about the file as a whole (syntax, nesting,
/// encoding, size).
pub const IDENTITY_FILE_FIELD: &str = "identity_file";

/// How a request or an identity file gives an identity: what the two readers
/// differ in.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// An identity file: required keys, `*_file` fingerprints.
    File,
    /// A conformance request's `identity`: every key optional, fingerprints inline.
    Request,
}

fn input<T>(field: &str, message: impl Into<String>) -> Result<T> {
    Err(Error::input_owned(field.to_string(), message.into()))
}

/// A JSON value in a message: strings quoted, numbers as written, containers by type.
fn describe(v: &Json) -> String {
    match v {
        Json::String(s) => format!("{:?}", s.chars().take(64).collect::<String>()),
        Json::Unsigned(n) => n.to_string(),
        Json::Signed(n) => n.to_string(),
        Json::Float(f) if *f == 0.0 && f.is_sign_negative() => "-0".into(),
        Json::Float(f) => f.to_string(),
        Json::Bool(b) => b.to_string(),
        other => other.type_name().into(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{}.{}", path, key)
    }
}

/// "weights_fingerprint" -> "weights_file".
fn file_key(f: &Field) -> String {
    let key = f.key();
    format!("{}_file", key.strip_suffix("_fingerprint").unwrap_or(key))
}

/// Reads the identity's JSON (a file, or a request's `identity`) with the
/// field table.
pub(crate) struct Reader<'a> {
    pub dialect: Dialect,
    /// Where `*_file` paths are relative to.
    pub base: Option<&'a Path>,
}

impl Reader<'_> {
    /// The keys a part takes (its members', each `_file` alternative after its
    /// digest in the file dialect; the top level also takes `policy`).
    fn keys(&self, part: &str) -> Vec<String> {
        let mut keys = Vec::new();
        for f in members(part) {
            keys.push(f.key().to_string());
            if f.file_alt && self.dialect == Dialect::File {
                keys.push(file_key(f));
            }
            if f.path == "tenant" {
                keys.push("policy".into());
                keys.push("confidential".into());
            }
        }
        keys
    }

    /// A part's object and its keys (docs/conformance.md, "Decoding an
    /// identity", steps 1 and 2): a JSON object whose keys are all known, else
    /// an input error on the part's path or on the first unknown key in byte order.
    fn check_keys(&self, j: &Json, part: &str) -> Result<()> {
        let members = match j {
            Json::Object(m) => m,
            _ => {
                let top = if self.dialect == Dialect::File { IDENTITY_FILE_FIELD } else { "identity" };
                let what = if part.is_empty() { top } else { part };
                return input(what, format!("expected an object, got {}", j.type_name()));
            }
        };
        let known = self.keys(part);
        let unknown =
            members.iter().map(|(k, _)| k).filter(|k| !known.contains(k)).min_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        match unknown {
            Some(k) => input(&join(part, k), format!("unknown key ({} takes: {})", part_name(part), known.join(", "))),
            None => Ok(()),
        }
    }

    /// Reads the top level: its keys, the policy, then every member in table
    /// order, each nested object entirely when its member is reached.
    pub fn read(&self, j: &Json) -> Result<(Identity, Policy)> {
        self.check_keys(j, "")?;
        let tenant = match j.member("policy") {
            None => TenantPolicy::Required,
            Some(Json::String(s)) if s == "required" => TenantPolicy::Required,
            Some(Json::String(s)) if s == "single_tenant" => TenantPolicy::SingleTenant,
            Some(Json::String(_)) => return input("policy", "expected \"required\" or \"single_tenant\""),
            Some(v) => return input("policy", format!("expected a string, got {}", describe(v))),
        };
        // Format v4: the keyed namespace's payloads stored encrypted (absent or null: false).
        let confidential = match j.member("confidential") {
            None => false,
            Some(Json::Bool(b)) => *b,
            Some(v) => return input("confidential", format!("expected true or false, got {}", describe(v))),
        };
        let mut id = Identity::default();
        self.read_part(j, "", &mut id)?;
        Ok((id, Policy { tenant, confidential }))
    }

    /// A part's members in table order (step 4); in the file dialect a
    /// required member must be given, and a digest may be given as a file.
    fn read_part(&self, j: &Json, part: &str, id: &mut Identity) -> Result<()> {
        self.check_keys(j, part)?;
        for f in members(part) {
            let file_dialect = self.dialect == Dialect::File;
            if f.file_alt && file_dialect {
                let file = file_key(f);
                let (hex, path) = (j.member(f.key()), j.member(&file));
                if hex.is_some() && path.is_some() {
                    return input(&join(part, &file), format!("give {} or {}, not both", f.path, join(part, &file)));
                }
                if let Some(p) = path {
                    let d = self.fingerprint_file(&join(part, &file), p)?;
                    set_digest(f, id, d);
                    continue;
                }
                if hex.is_none() && f.required {
                    return input(f.path, format!("required key is missing (or give {})", join(part, &file)));
                }
            }
            let v = match j.member(f.key()) {
                Some(v) => v,
                None if f.required && file_dialect => return input(f.path, "required key is missing"),
                None => continue,
            };
            match f.ty {
                FieldType::Part => self.read_part(v, f.path, id)?,
                FieldType::OptionalPart => {
                    id.adapter = Some(Default::default());
                    self.read_part(v, f.path, id)?;
                }
                _ => self.value(f, v, id)?,
            }
        }
        Ok(())
    }

    /// One leaf's value, by its type.
    fn value(&self, f: &Field, v: &Json, id: &mut Identity) -> Result<()> {
        let (ty, path) = (f.ty, f.path);
        match (f.set)(id) {
            Slot::String(out) => match v {
                Json::String(s) => *out = s.clone(),
                _ => return input(path, format!("expected a string, got {}", describe(v))),
            },
            Slot::U32(out) => *out = unsigned(path, v, u64::from(u32::MAX))? as u32,
            Slot::U64(out) => *out = unsigned(path, v, u64::MAX)?,
            Slot::Bool(out) => match v {
                Json::Bool(b) => *out = *b,
                _ => return input(path, format!("expected true or false, got {}", describe(v))),
            },
            Slot::Dtype(out) => match v {
                Json::String(s) => match Dtype::from_name(s) {
                    Some(d) => *out = Some(d),
                    None => return input(path, format!("unknown dtype {}", describe(v))),
                },
                _ => return input(path, format!("expected a dtype name, got {}", describe(v))),
            },
            Slot::Digest(out) => *out = digest(path, v)?,
            Slot::OptionalDigest(out) => *out = Some(digest(path, v)?),
            Slot::Part | Slot::OptionalPart(_) => {
                debug_assert!(matches!(ty, FieldType::Part | FieldType::OptionalPart))
            }
        }
        Ok(())
    }

    /// SHA-256 of the file a `*_file` key names (relative to `base`).
    fn fingerprint_file(&self, field: &str, v: &Json) -> Result<Digest> {
        let given = match v {
            Json::String(s) if !s.contains('\0') => PathBuf::from(s),
            Json::String(_) => return input(field, "a NUL byte cannot be in a path"),
            _ => return input(field, format!("expected a string, got {}", describe(v))),
        };
        let path = match self.base {
            Some(base) if given.is_relative() => base.join(given),
            _ => given,
        };
        let meta = std::fs::metadata(&path)
            .map_err(|e| Error::input_owned(field.into(), format!("{}: {}", path.display(), e)))?;
        if !meta.is_file() {
            return input(field, format!("{}: not a regular file", path.display()));
        }
        let mut f = std::fs::File::open(&path)
            .map_err(|e| Error::input_owned(field.into(), format!("{}: {}", path.display(), e)))?;
        let mut h = Sha256::new();
        std::io::copy(&mut f, &mut h)
            .map_err(|e| Error::input_owned(field.into(), format!("{}: {}", path.display(), e)))?;
        let mut d = Digest::default();
        d.0.copy_from_slice(&h.finalize());
        Ok(d)
    }
}

fn part_name(part: &str) -> &str {
    if part.is_empty() {
        "the top level"
    } else {
        part
    }
}

fn set_digest(f: &Field, id: &mut Identity, d: Digest) {
    match (f.set)(id) {
        Slot::Digest(out) => *out = d,
        Slot::OptionalDigest(out) => *out = Some(d),
        _ => unreachable!("a file alternative is a digest"),
    }
}

fn unsigned(path: &str, v: &Json, max: u64) -> Result<u64> {
    match v {
        Json::Unsigned(n) if *n <= max => Ok(*n),
        Json::Unsigned(n) => input(path, format!("{} is above the maximum {}", n, max)),
        _ => input(path, format!("expected an integer in [0, {}], got {}", max, describe(v))),
    }
}

fn digest(path: &str, v: &Json) -> Result<Digest> {
    match v {
        Json::String(s) => Digest::from_hex(s).or_else(|_| input(path, "expected 64 hex digits")),
        _ => input(path, format!("expected 64 hex digits, got {}", describe(v))),
    }
}

/// Parses an identity file's bytes (a UTF-8 byte order mark is skipped):
/// strict JSON, no NUL byte, nesting at most 32 levels, no duplicate key.
fn parse_file(bytes: &[u8]) -> Result<Json> {
    if bytes.len() as u64 > MAX_IDENTITY_FILE_SIZE {
        return input(IDENTITY_FILE_FIELD, format!("larger than {} bytes", MAX_IDENTITY_FILE_SIZE));
    }
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    if let Some(i) = bytes.iter().position(|&b| b == 0) {
        return input(IDENTITY_FILE_FIELD, format!("NUL byte (byte {}): not a text file", i));
    }
    let j = Json::parse(bytes).or_else(|e| input(IDENTITY_FILE_FIELD, format!("invalid JSON: {}", e)))?;
    if j.depth() > MAX_IDENTITY_FILE_DEPTH {
        return input(
            IDENTITY_FILE_FIELD,
            format!("invalid JSON: nested deeper than {} levels", MAX_IDENTITY_FILE_DEPTH),
        );
    }
    if let Some(dup) = j.first_duplicate() {
        // An empty key at the top level has the empty path: named "." as the
        // C++, Python and Go readers name it.
        return input(if dup.is_empty() { "." } else { &dup }, "duplicate key");
    }
    Ok(j)
}

impl Identity {
    /// Reads an identity file's JSON, as `kvkey init` writes it (docs/cli.md,
    /// "Identity files"): the identity and its policy (the tenant policy and,
    /// format v4, `confidential`), not yet validated
    /// (`Namespace::builder(&id).policy(policy).secret(s).build()` validates
    /// it; a confidential policy needs the secret). Errors are input errors naming the field as the C++ tool does
    /// (an unknown, missing or duplicate key, a wrong type, an integer out of
    /// range, an unknown dtype, a digest that is not 64 hex digits), or
    /// "identity_file" for the text as a whole. `*_file` fingerprints are read
    /// relative to the working directory.
    pub fn from_json(text: &str) -> Result<(Identity, Policy)> {
        Identity::from_json_bytes(text.as_bytes(), None)
    }

    /// Reads an identity file (at most 1 MiB): as `from_json`, with `*_file`
    /// paths relative to the file's directory.
    pub fn from_file(path: impl AsRef<Path>) -> Result<(Identity, Policy)> {
        use std::io::Read;
        let path = path.as_ref();
        let io =
            |e: std::io::Error| Error::input_owned(IDENTITY_FILE_FIELD.into(), format!("{}: {}", path.display(), e));
        // Refused before it is opened, as the C++, Python and Go readers do:
        // opening a FIFO would wait for a writer, a terminal would be read
        // from. The open itself does not block either (O_NONBLOCK: a path
        // swapped for a FIFO meanwhile), and the opened file is checked again.
        let not_regular = || input(IDENTITY_FILE_FIELD, format!("{}: not a regular file", path.display()));
        if !std::fs::metadata(path).map_err(io)?.is_file() {
            return not_regular();
        }
        let mut options = std::fs::OpenOptions::new();
        options.read(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.custom_flags(libc::O_NONBLOCK);
        }
        let file = options.open(path).map_err(io)?;
        if !file.metadata().map_err(io)?.is_file() {
            return not_regular();
        }
        let mut bytes = Vec::new();
        file.take(MAX_IDENTITY_FILE_SIZE + 1).read_to_end(&mut bytes).map_err(io)?;
        if bytes.len() as u64 > MAX_IDENTITY_FILE_SIZE {
            return input(
                IDENTITY_FILE_FIELD,
                format!("{}: larger than {} bytes", path.display(), MAX_IDENTITY_FILE_SIZE),
            );
        }
        Identity::from_json_bytes(&bytes, path.parent())
    }

    fn from_json_bytes(bytes: &[u8], base: Option<&Path>) -> Result<(Identity, Policy)> {
        let j = parse_file(bytes)?;
        Reader { dialect: Dialect::File, base }.read(&j)
    }
}

/// The conformance testee's reader of a request's `identity` (docs/conformance.md):
/// every member optional (absent and null keep the C++ defaults), unknown keys
/// checked first, errors naming the member's dotted path.
#[doc(hidden)]
pub fn read_request_identity(j: &Json) -> Result<(Identity, Policy)> {
    Reader { dialect: Dialect::Request, base: None }.read(j)
}
