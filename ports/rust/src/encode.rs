// SPDX-License-Identifier: Apache-2.0
//! The canonical identity encoding and its decoder (docs/format.md, section 1).

use crate::digest::Digest;
use crate::fields::{Field, FieldType, Slot, Value, FIELDS};
use crate::identity::{Adapter, Dtype, Identity};

/// The byte format this crate reads and writes.
pub const FORMAT_VERSION: u16 = 4;

const IDENTITY_TAG: &[u8; 8] = b"kvkey.id";

fn str_bytes(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

/// One salient field's bytes, by its type.
fn bytes(f: &Field, v: Value) -> Vec<u8> {
    match v {
        Value::Part => Vec::new(),
        Value::OptionalPart(present) | Value::Bool(present) => vec![u8::from(present)],
        Value::String(s) => str_bytes(s),
        Value::U32(n) => n.to_le_bytes().to_vec(),
        Value::U64(n) => n.to_le_bytes().to_vec(),
        Value::Dtype(d) if f.ty == FieldType::Dtype => vec![d.map_or(0, |d| d as u8)],
        Value::Dtype(d) => d.map_or(vec![0], |d| vec![1, d as u8]),
        Value::Digest(d) => d.0.to_vec(),
        Value::OptionalDigest(d) => d.map_or(vec![0], |d| [&[1u8][..], &d.0].concat()),
    }
}

/// The salient fields in encoding order (the field table's), each with its
/// bytes; the adapter contributes its presence byte, then its members.
pub(crate) fn fields(id: &Identity) -> Vec<(&'static str, Vec<u8>)> {
    crate::fields::salient(id).map(|(f, v)| (f.path, bytes(f, v))).collect()
}

/// The canonical encoding of a validated identity, without the shard.
pub fn encode_identity(id: &Identity) -> Vec<u8> {
    let mut out = IDENTITY_TAG.to_vec();
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    for (_, bytes) in fields(id) {
        out.extend_from_slice(&bytes);
    }
    out
}

/// The dotted path of the first salient field in which `a` and `b` differ, in
/// encoding order; None when they encode the same.
pub fn first_difference(a: &Identity, b: &Identity) -> Option<&'static str> {
    fields(a).into_iter().zip(fields(b)).find(|(x, y)| x.1 != y.1).map(|(x, _)| x.0)
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.rest.len() {
            return None;
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Some(head)
    }
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.array()?))
    }
    fn flag(&mut self) -> Option<bool> {
        match self.u8()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
    fn string(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()?;
        if n > 1024 {
            return None; // longer than any valid string
        }
        self.take(n as usize)
    }
    fn digest(&mut self) -> Option<Digest> {
        Some(Digest(self.array()?))
    }
    fn opt_digest(&mut self) -> Option<Option<Digest>> {
        if self.flag()? {
            Some(Some(self.digest()?))
        } else {
            Some(None)
        }
    }
    fn dtype(&mut self) -> Option<Dtype> {
        Dtype::from_code(self.u8()?)
    }
}

/// Reads one salient field of type `ty`; with `into`, stores its value there
/// (strings must then be UTF-8). None when the bytes do not hold one.
fn read_field(r: &mut Reader, ty: FieldType, into: Option<Slot>) -> Option<bool> {
    let mut present = false;
    match (ty, into) {
        (FieldType::String, slot) => {
            let s = r.string()?;
            if let Some(Slot::String(out)) = slot {
                *out = String::from_utf8(s.to_vec()).ok()?;
            }
        }
        (FieldType::U32, slot) => {
            let n = r.u32()?;
            if let Some(Slot::U32(out)) = slot {
                *out = n;
            }
        }
        (FieldType::U64, slot) => {
            let n = r.u64()?;
            if let Some(Slot::U64(out)) = slot {
                *out = n;
            }
        }
        (FieldType::Bool, slot) => {
            let b = r.flag()?;
            if let Some(Slot::Bool(out)) = slot {
                *out = b;
            }
        }
        (FieldType::OptionalPart, slot) => {
            present = r.flag()?;
            if let Some(Slot::OptionalPart(out)) = slot {
                *out = if present { Some(Adapter::default()) } else { None };
            }
        }
        (FieldType::Dtype, slot) => {
            let d = r.dtype()?;
            if let Some(Slot::Dtype(out)) = slot {
                *out = Some(d);
            }
        }
        (FieldType::OptionalDtype, slot) => {
            let d = if r.flag()? { Some(r.dtype()?) } else { None };
            if let Some(Slot::Dtype(out)) = slot {
                *out = d;
            }
        }
        (FieldType::Digest, slot) => {
            let d = r.digest()?;
            if let Some(Slot::Digest(out)) = slot {
                *out = d;
            }
        }
        (FieldType::OptionalDigest, slot) => {
            let d = r.opt_digest()?;
            if let Some(Slot::OptionalDigest(out)) = slot {
                *out = d;
            }
        }
        (FieldType::Part, _) => {}
    }
    Some(present)
}

/// Walks an encoding's salient fields in table order: their paths and bytes,
/// and with `into` the identity they describe. None unless the bytes are
/// exactly one well-formed encoding of the current format version.
fn decode(bytes: &[u8], mut into: Option<&mut Identity>) -> Option<Vec<(&'static str, Vec<u8>)>> {
    let mut r = Reader { rest: bytes };
    if r.take(8)? != IDENTITY_TAG || u16::from_le_bytes(r.array()?) != FORMAT_VERSION {
        return None;
    }
    let mut out = Vec::new();
    let mut adapter = false;
    for f in FIELDS.iter().filter(|f| f.salient && f.ty != FieldType::Part) {
        if f.parent() == "adapter" && !adapter {
            continue;
        }
        let before = r.rest;
        let present = read_field(&mut r, f.ty, into.as_deref_mut().map(f.set))?;
        if f.ty == FieldType::OptionalPart {
            adapter = present;
        }
        out.push((f.path, before[..before.len() - r.rest.len()].to_vec()));
    }
    if r.rest.is_empty() {
        Some(out)
    } else {
        None
    }
}

/// The salient fields of an identity encoding as `fields` lists them, each
/// with its bytes, checking only the structure (as the C++ decoder does: the
/// strings' bytes are kept whatever they are); None unless the bytes are
/// exactly one well-formed encoding of the current format version.
pub(crate) fn decode_fields(bytes: &[u8]) -> Option<Vec<(&'static str, Vec<u8>)>> {
    decode(bytes, None)
}

/// The dotted path of the first salient field in which an encoding's fields
/// (decode_fields) differ from `own`'s.
pub(crate) fn first_difference_from(theirs: &[(&'static str, Vec<u8>)], own: &Identity) -> Option<&'static str> {
    theirs.iter().zip(fields(own)).find(|(x, y)| x.1 != y.1).map(|(x, _)| x.0)
}

/// Parses an identity encoding of the current format version; None unless the
/// bytes are exactly one well-formed encoding whose strings are UTF-8. Values
/// are not validated; the shard is left at its default.
pub fn decode_identity(bytes: &[u8]) -> Option<Identity> {
    let mut id = Identity::default();
    decode(bytes, Some(&mut id))?;
    Some(id)
}
