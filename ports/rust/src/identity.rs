// SPDX-License-Identifier: Apache-2.0
//! The identity, its validation and the rank's slice (docs/format.md, sections 1 and 4).

use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::fields::{Field, FieldKind, FieldType, Value, FIELDS};

/// Element type of the stored KV and of quantization scales. The codes are
/// part of the byte format and never change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// 32-bit float.
    Fp32 = 1,
    /// 16-bit float.
    Fp16 = 2,
    /// bfloat16.
    Bf16 = 3,
    /// 8-bit float, e4m3.
    Fp8E4m3 = 4,
    /// 8-bit float, e5m2.
    Fp8E5m2 = 5,
    /// 8-bit integer.
    Int8 = 6,
    /// 4-bit integer.
    Int4 = 7,
    /// 8-bit unsigned integer.
    Uint8 = 8,
    /// 4-bit unsigned integer.
    Uint4 = 9,
    /// 4-bit float, e2m1.
    Fp4E2m1 = 10,
    /// 8-bit float, e4m3 with another exponent bias, no infinities, one NaN (AMD MI300).
    Fp8E4m3fnuz = 11,
    /// 8-bit float, e5m2 likewise.
    Fp8E5m2fnuz = 12,
}

const DTYPES: [(Dtype, &str); 12] = [
    (Dtype::Fp32, "fp32"),
    (Dtype::Fp16, "fp16"),
    (Dtype::Bf16, "bf16"),
    (Dtype::Fp8E4m3, "fp8_e4m3"),
    (Dtype::Fp8E5m2, "fp8_e5m2"),
    (Dtype::Int8, "int8"),
    (Dtype::Int4, "int4"),
    (Dtype::Uint8, "uint8"),
    (Dtype::Uint4, "uint4"),
    (Dtype::Fp4E2m1, "fp4_e2m1"),
    (Dtype::Fp8E4m3fnuz, "fp8_e4m3fnuz"),
    (Dtype::Fp8E5m2fnuz, "fp8_e5m2fnuz"),
];

impl Dtype {
    /// The name identity files use ("fp16", "fp8_e4m3").
    pub fn name(self) -> &'static str {
        DTYPES[self as usize - 1].1
    }
    /// Parses a name as `name` prints it.
    pub fn from_name(name: &str) -> Option<Dtype> {
        DTYPES.iter().find(|(_, n)| *n == name).map(|(d, _)| *d)
    }
    /// The dtype of a code read from the wire (0, "unset", is no dtype).
    pub fn from_code(code: u8) -> Option<Dtype> {
        DTYPES.get(usize::from(code).wrapping_sub(1)).map(|(d, _)| *d)
    }
}

/// The model's weights lineage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Model {
    /// The readable name (1..128 bytes, no control or bidirectional formatting characters).
    pub name: String,
    /// An immutable checkpoint id.
    pub revision: String,
    /// Bumped on every accepted weight update.
    pub weights_epoch: u64,
    /// Fingerprint of the weights.
    pub weights_fingerprint: Option<Digest>,
    /// Fingerprint of the positional-encoding (RoPE) configuration.
    pub positional_fingerprint: Option<Digest>,
}

/// How KV values are quantized; scheme "none" (the default) requires every
/// other field at its default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quant {
    /// The scheme: "none" for unquantized KV.
    pub scheme: String,
    /// Elements per scale group; 0 = per tensor.
    pub group_size: u32,
    /// Type of the stored scales.
    pub scale_dtype: Option<Dtype>,
    /// Asymmetric quantization with a stored zero point.
    pub zero_point: bool,
    /// Fingerprint of static (calibrated) scales.
    pub scales_fingerprint: Option<Digest>,
}

impl Default for Quant {
    fn default() -> Self {
        Quant { scheme: "none".into(), group_size: 0, scale_dtype: None, zero_point: false, scales_fingerprint: None }
    }
}

/// What one stored KV object's bytes are. `dtype` None is "unset", which
/// validation rejects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kv {
    /// The element type; None ("unset") is invalid.
    pub dtype: Option<Dtype>,
    /// How values are quantized.
    pub quant: Quant,
    /// Tokens per block.
    pub block_size: u32,
    /// Layers of the whole model.
    pub num_layers: u32,
    /// KV heads of the whole model (1 for an MLA latent cache).
    pub num_kv_heads: u32,
    /// Elements per head.
    pub head_dim: u32,
    /// The engine's byte layout of one stored object.
    pub layout: String,
    /// Multi-head latent attention: the latent cache is whole on every rank.
    pub mla: bool,
}

/// The rank's place in the tensor/pipeline-parallel grid (default: one rank).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// Tensor-parallel size.
    pub tp_size: u32,
    /// This rank's tensor-parallel rank.
    pub tp_rank: u32,
    /// Pipeline-parallel size.
    pub pp_size: u32,
    /// This rank's pipeline stage.
    pub pp_rank: u32,
}

impl Default for Shard {
    fn default() -> Self {
        Shard { tp_size: 1, tp_rank: 0, pp_size: 1, pp_rank: 0 }
    }
}

/// A LoRA (or other) adapter: its weights, not only its name, are identity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Adapter {
    /// The readable name (1..128 bytes, no control or bidirectional formatting characters).
    pub name: String,
    /// Fingerprint of the weights.
    pub weights_fingerprint: Digest,
}

/// Everything that changes the meaning or the ownership of stored KV bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// The owner of the bytes; empty under the single-tenant policy.
    pub tenant: String,
    /// The weights lineage.
    pub model: Model,
    /// What the KV bytes are.
    pub kv: Kv,
    /// Where the rank sits in the TP/PP grid.
    pub shard: Shard,
    /// The adapter, if any.
    pub adapter: Option<Adapter>,
}

/// The KV heads and layers `[begin, end)` one rank holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Slice {
    /// First KV head.
    pub kv_head_begin: u32,
    /// One past the last KV head.
    pub kv_head_end: u32,
    /// First layer.
    pub layer_begin: u32,
    /// One past the last layer.
    pub layer_end: u32,
}

/// Whether a namespace's store is shared between tenants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TenantPolicy {
    /// A shared store: the identity names its tenant (the default).
    #[default]
    Required,
    /// A store no one else shares: the tenant is left empty and
    /// SINGLE_TENANT_NAME is encoded.
    SingleTenant,
}

impl TenantPolicy {
    /// The name identity files use: "required" or "single_tenant".
    pub fn name(self) -> &'static str {
        match self {
            TenantPolicy::Required => "required",
            TenantPolicy::SingleTenant => "single_tenant",
        }
    }
}

/// A namespace's policy as an identity file gives it: the tenant policy and
/// whether a keyed namespace is confidential (format v4, its payloads stored
/// encrypted). `NamespaceBuilder::policy` takes it, or a bare `TenantPolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Policy {
    /// `"policy"`: required (the default) or single_tenant.
    pub tenant: TenantPolicy,
    /// `"confidential": true`: AES-256-GCM payloads (needs the tenant secret).
    pub confidential: bool,
}

impl From<TenantPolicy> for Policy {
    fn from(tenant: TenantPolicy) -> Policy {
        Policy { tenant, confidential: false }
    }
}

/// The tenant a single-tenant namespace encodes.
pub const SINGLE_TENANT_NAME: &str = "_single";

/// What a shared scope's tenant starts with (format v4, docs/format.md
/// section 12): scope N has tenant "_scope.N", which no tenant can be.
pub const SCOPE_TENANT_PREFIX: &str = "_scope.";

/// Limits on the identity's strings, in bytes.
pub mod limits {
    /// Longest `tenant`, in bytes.
    pub const TENANT: usize = 64;
    /// Longest `model.name`, in bytes.
    pub const MODEL_NAME: usize = 128;
    /// Longest `model.revision`, in bytes.
    pub const REVISION: usize = 128;
    /// Longest `kv.quant.scheme`, in bytes.
    pub const QUANT_SCHEME: usize = 32;
    /// Longest `kv.layout`, in bytes.
    pub const LAYOUT: usize = 64;
    /// Longest `adapter.name`, in bytes.
    pub const ADAPTER_NAME: usize = 128;
}

fn check_length(field: &'static str, s: &str, max: usize) -> Result<()> {
    if s.is_empty() {
        return Err(Error::identity(field, "must not be empty"));
    }
    if s.len() > max {
        return Err(Error::identity(field, format!("is {} bytes, at most {} allowed", s.len(), max)));
    }
    Ok(())
}

/// Printable ASCII without space: revisions and layouts.
fn check_printable(field: &'static str, s: &str, max: usize) -> Result<()> {
    check_length(field, s, max)?;
    match s.bytes().position(|c| !(0x21..=0x7e).contains(&c)) {
        Some(i) => Err(Error::identity(field, format!("byte {} is not printable ASCII", i))),
        None => Ok(()),
    }
}

/// The code points a terminal or log viewer does not show as themselves, as the
/// C++ library's `kvkey::is_unsafe_code_point`: C0 controls, DEL and C1
/// controls, U+061C, U+200B..U+200F, U+2028..U+202E, U+2060..U+206F, U+FEFF and
/// U+FFF9..U+FFFB.
fn is_unsafe_code_point(c: char) -> bool {
    matches!(c as u32, 0x00..=0x1f | 0x7f..=0x9f | 0x061c | 0x200b..=0x200f | 0x2028..=0x202e
        | 0x2060..=0x206f | 0xfeff | 0xfff9..=0xfffb)
}

/// What kind of unsafe code point c is, for messages.
fn unsafe_kind(c: char) -> &'static str {
    match c as u32 {
        0x80..=0x9f => "a C1 control character",
        0x061c | 0x200e | 0x200f | 0x202a..=0x202e | 0x2066..=0x2069 => "a bidirectional formatting character",
        _ => "an invisible formatting character",
    }
}

/// Free text (model and adapter names): none of the unsafe code points.
fn check_text(field: &'static str, s: &str, max: usize) -> Result<()> {
    check_length(field, s, max)?;
    match s.char_indices().find(|&(_, c)| is_unsafe_code_point(c)) {
        Some((i, c)) if c < ' ' || c == '\u{7f}' => {
            Err(Error::identity(field, format!("byte {} is a control character", i)))
        }
        Some((i, c)) => {
            Err(Error::identity(field, format!("byte {} starts {} (U+{:04X})", i, unsafe_kind(c), c as u32)))
        }
        None => Ok(()),
    }
}

fn check_tenant(t: &str, max: usize) -> Result<()> {
    check_length("tenant", t, max)?;
    if !t.as_bytes()[0].is_ascii_alphanumeric() {
        return Err(Error::identity("tenant", "must start with a letter or digit"));
    }
    match t.bytes().position(|c| !(c.is_ascii_alphanumeric() || c == b'.' || c == b'_' || c == b'-')) {
        Some(i) => {
            Err(Error::identity("tenant", format!("byte {} is not allowed: use letters, digits, '.', '_' and '-'", i)))
        }
        None => Ok(()),
    }
}

fn check_scheme(s: &str, max: usize) -> Result<()> {
    check_length("kv.quant.scheme", s, max)?;
    if s.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'_' || c == b'-') {
        Ok(())
    } else {
        Err(Error::identity("kv.quant.scheme", "use lowercase letters, digits, '.', '_' and '-' only"))
    }
}

fn check_positive(field: &'static str, v: u32) -> Result<()> {
    if v == 0 {
        Err(Error::identity(field, "must be greater than 0"))
    } else {
        Ok(())
    }
}

/// One member's own rule, by its kind (the field table); skip_tenant: the
/// single-tenant policy has replaced the tenant already.
fn check_member(f: &Field, v: Value, skip_tenant: bool) -> Result<()> {
    match (f.kind, v) {
        (FieldKind::Tenant, Value::String(s)) if !skip_tenant => check_tenant(s, f.limit),
        (FieldKind::Text, Value::String(s)) => check_text(f.path, s, f.limit),
        (FieldKind::Identifier, Value::String(s)) => check_printable(f.path, s, f.limit),
        (FieldKind::Scheme, Value::String(s)) => check_scheme(s, f.limit),
        (FieldKind::Positive, Value::U32(n)) => check_positive(f.path, n),
        (FieldKind::Dtype, Value::Dtype(None)) if f.ty == FieldType::Dtype => {
            Err(Error::identity(f.path, "must be set"))
        }
        _ => Ok(()),
    }
}

/// The rank's slice (docs/format.md, section 4), or an identity error naming
/// the field when the geometry does not split.
pub fn resolve_slice(kv: &Kv, shard: &Shard) -> Result<Slice> {
    check_positive("kv.num_layers", kv.num_layers)?;
    check_positive("kv.num_kv_heads", kv.num_kv_heads)?;
    check_positive("shard.tp_size", shard.tp_size)?;
    check_positive("shard.pp_size", shard.pp_size)?;
    if shard.tp_rank >= shard.tp_size {
        return Err(Error::identity(
            "shard.tp_rank",
            format!("{} is not below shard.tp_size {}", shard.tp_rank, shard.tp_size),
        ));
    }
    if shard.pp_rank >= shard.pp_size {
        return Err(Error::identity(
            "shard.pp_rank",
            format!("{} is not below shard.pp_size {}", shard.pp_rank, shard.pp_size),
        ));
    }
    let (heads, tp, r) = (kv.num_kv_heads, shard.tp_size, shard.tp_rank);
    let (kv_head_begin, kv_head_end) = if kv.mla {
        (0, heads)
    } else if tp <= heads {
        if heads % tp != 0 {
            return Err(Error::identity("shard.tp_size", format!("{} does not divide kv.num_kv_heads {}", tp, heads)));
        }
        (r * (heads / tp), (r + 1) * (heads / tp))
    } else {
        if tp % heads != 0 {
            return Err(Error::identity(
                "shard.tp_size",
                format!("{} is not a multiple of kv.num_kv_heads {}", tp, heads),
            ));
        }
        let head = r / (tp / heads);
        (head, head + 1)
    };
    if !kv.num_layers.is_multiple_of(shard.pp_size) {
        return Err(Error::identity(
            "shard.pp_size",
            format!("{} does not divide kv.num_layers {}", shard.pp_size, kv.num_layers),
        ));
    }
    let per = kv.num_layers / shard.pp_size;
    Ok(Slice { kv_head_begin, kv_head_end, layer_begin: shard.pp_rank * per, layer_end: (shard.pp_rank + 1) * per })
}

impl Identity {
    /// Checks every field in the order docs/format.md states (the C++
    /// library's): each member's own rule in field-table order (tenant,
    /// model.name, model.revision, kv.dtype, kv.quant.scheme, kv.block_size,
    /// kv.num_layers, kv.num_kv_heads, kv.head_dim, kv.layout, adapter.name),
    /// then the quant rules of scheme "none", then the geometry
    /// (resolve_slice). Returns the identity as encoded (under the
    /// single-tenant policy the empty tenant becomes SINGLE_TENANT_NAME). The
    /// error names the first invalid field.
    pub fn validated(&self, policy: TenantPolicy) -> Result<Identity> {
        let mut id = self.clone();
        let single_tenant = policy == TenantPolicy::SingleTenant;
        if single_tenant {
            if !id.tenant.is_empty() {
                return Err(Error::identity("tenant", "must be empty under the single-tenant policy"));
            }
            id.tenant = SINGLE_TENANT_NAME.into();
        }
        id.validated_members(single_tenant)
    }

    /// The identity of shared scope `name`'s namespace (format v4,
    /// docs/format.md section 12): this one with tenant "_scope.<name>",
    /// validated. An identity error on "scope.name" unless the name is 1..57
    /// bytes of the tenant charset, first byte a letter or digit.
    pub(crate) fn validated_scope(&self, name: &str) -> Result<Identity> {
        check_tenant(name, limits::TENANT - SCOPE_TENANT_PREFIX.len())
            .map_err(|e| Error::identity("scope.name", format!("the scope name {}", e.message())))?;
        let mut id = self.clone();
        id.tenant = format!("{SCOPE_TENANT_PREFIX}{name}");
        id.validated_members(true)
    }

    /// Every member's own rule, then the quant rules and the geometry;
    /// skip_tenant: the tenant was replaced (single tenant, a scope's) already.
    fn validated_members(self, skip_tenant: bool) -> Result<Identity> {
        let id = self;
        for f in FIELDS.iter().filter(|f| !f.is_part()) {
            if let Some(v) = (f.get)(&id) {
                check_member(f, v, skip_tenant)?;
            }
        }
        let q = &id.kv.quant;
        if q.scheme == "none" {
            let none = |field: &'static str| {
                Err(Error::identity(field, "must keep its default when kv.quant.scheme is \"none\""))
            };
            if q.group_size != 0 {
                return none("kv.quant.group_size");
            }
            if q.scale_dtype.is_some() {
                return none("kv.quant.scale_dtype");
            }
            if q.zero_point {
                return none("kv.quant.zero_point");
            }
            if q.scales_fingerprint.is_some() {
                return none("kv.quant.scales_fingerprint");
            }
        }
        resolve_slice(&id.kv, &id.shard)?;
        Ok(id)
    }
}
