// SPDX-License-Identifier: Apache-2.0
//! The canonical identity encoding and its decoder (docs/format.md, section 1).

use crate::digest::Digest;
use crate::identity::{Adapter, Dtype, Identity};

/// The byte format this crate reads and writes.
pub const FORMAT_VERSION: u16 = 3;

const IDENTITY_TAG: &[u8; 8] = b"kvkey.id";

fn str_bytes(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

fn opt_digest(d: &Option<Digest>) -> Vec<u8> {
    match d {
        Some(d) => [&[1u8][..], &d.0].concat(),
        None => vec![0],
    }
}

/// The salient fields in encoding order, each with its bytes; the adapter
/// contributes its presence byte, then its members.
pub(crate) fn fields(id: &Identity) -> Vec<(&'static str, Vec<u8>)> {
    let q = &id.kv.quant;
    let mut out = vec![
        ("tenant", str_bytes(&id.tenant)),
        ("model.name", str_bytes(&id.model.name)),
        ("model.revision", str_bytes(&id.model.revision)),
        ("model.weights_epoch", id.model.weights_epoch.to_le_bytes().to_vec()),
        ("model.weights_fingerprint", opt_digest(&id.model.weights_fingerprint)),
        ("model.positional_fingerprint", opt_digest(&id.model.positional_fingerprint)),
        ("kv.dtype", vec![id.kv.dtype.map_or(0, |d| d as u8)]),
        ("kv.quant.scheme", str_bytes(&q.scheme)),
        ("kv.quant.group_size", q.group_size.to_le_bytes().to_vec()),
        ("kv.quant.scale_dtype", q.scale_dtype.map_or(vec![0], |d| vec![1, d as u8])),
        ("kv.quant.zero_point", vec![u8::from(q.zero_point)]),
        ("kv.quant.scales_fingerprint", opt_digest(&q.scales_fingerprint)),
        ("kv.block_size", id.kv.block_size.to_le_bytes().to_vec()),
        ("kv.num_layers", id.kv.num_layers.to_le_bytes().to_vec()),
        ("kv.num_kv_heads", id.kv.num_kv_heads.to_le_bytes().to_vec()),
        ("kv.head_dim", id.kv.head_dim.to_le_bytes().to_vec()),
        ("kv.layout", str_bytes(&id.kv.layout)),
        ("kv.mla", vec![u8::from(id.kv.mla)]),
        ("adapter", vec![u8::from(id.adapter.is_some())]),
    ];
    if let Some(a) = &id.adapter {
        out.push(("adapter.name", str_bytes(&a.name)));
        out.push(("adapter.weights_fingerprint", a.weights_fingerprint.0.to_vec()));
    }
    out
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
    fn text(&mut self) -> Option<String> {
        String::from_utf8(self.string()?.to_vec()).ok()
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

/// The salient fields of an identity encoding as `fields` lists them, each
/// with its bytes, checking only the structure (as the C++ decoder does: the
/// strings' bytes are kept whatever they are); None unless the bytes are
/// exactly one well-formed encoding of the current format version.
pub(crate) fn decode_fields(bytes: &[u8]) -> Option<Vec<(&'static str, Vec<u8>)>> {
    let mut r = Reader { rest: bytes };
    if r.take(8)? != IDENTITY_TAG || u16::from_le_bytes(r.array()?) != FORMAT_VERSION {
        return None;
    }
    let mut out = Vec::new();
    let mut field = |r: &mut Reader, path: &'static str, read: fn(&mut Reader) -> Option<()>| -> Option<bool> {
        let before = r.rest;
        read(r)?;
        let bytes = before[..before.len() - r.rest.len()].to_vec();
        let set = bytes == [1];
        out.push((path, bytes));
        Some(set)
    };
    let string = |r: &mut Reader| r.string().map(drop);
    let digest = |r: &mut Reader| r.opt_digest().map(drop);
    let u32 = |r: &mut Reader| r.u32().map(drop);
    let flag = |r: &mut Reader| r.flag().map(drop);
    field(&mut r, "tenant", string)?;
    field(&mut r, "model.name", string)?;
    field(&mut r, "model.revision", string)?;
    field(&mut r, "model.weights_epoch", |r| r.u64().map(drop))?;
    field(&mut r, "model.weights_fingerprint", digest)?;
    field(&mut r, "model.positional_fingerprint", digest)?;
    field(&mut r, "kv.dtype", |r| r.dtype().map(drop))?;
    field(&mut r, "kv.quant.scheme", string)?;
    field(&mut r, "kv.quant.group_size", u32)?;
    field(&mut r, "kv.quant.scale_dtype", |r| if r.flag()? { r.dtype().map(drop) } else { Some(()) })?;
    field(&mut r, "kv.quant.zero_point", flag)?;
    field(&mut r, "kv.quant.scales_fingerprint", digest)?;
    for path in ["kv.block_size", "kv.num_layers", "kv.num_kv_heads", "kv.head_dim"] {
        field(&mut r, path, u32)?;
    }
    field(&mut r, "kv.layout", string)?;
    field(&mut r, "kv.mla", flag)?;
    if field(&mut r, "adapter", flag)? {
        field(&mut r, "adapter.name", string)?;
        field(&mut r, "adapter.weights_fingerprint", |r| r.digest().map(drop))?;
    }
    if r.rest.is_empty() {
        Some(out)
    } else {
        None
    }
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
    decode_fields(bytes)?;
    let mut r = Reader { rest: &bytes[10..] };
    let mut id = Identity { tenant: r.text()?, ..Identity::default() };
    id.model.name = r.text()?;
    id.model.revision = r.text()?;
    id.model.weights_epoch = r.u64()?;
    id.model.weights_fingerprint = r.opt_digest()?;
    id.model.positional_fingerprint = r.opt_digest()?;
    id.kv.dtype = Some(r.dtype()?);
    id.kv.quant.scheme = r.text()?;
    id.kv.quant.group_size = r.u32()?;
    id.kv.quant.scale_dtype = if r.flag()? { Some(r.dtype()?) } else { None };
    id.kv.quant.zero_point = r.flag()?;
    id.kv.quant.scales_fingerprint = r.opt_digest()?;
    id.kv.block_size = r.u32()?;
    id.kv.num_layers = r.u32()?;
    id.kv.num_kv_heads = r.u32()?;
    id.kv.head_dim = r.u32()?;
    id.kv.layout = r.text()?;
    id.kv.mla = r.flag()?;
    if r.flag()? {
        id.adapter = Some(Adapter { name: r.text()?, weights_fingerprint: r.digest()? });
    }
    Some(id)
}
