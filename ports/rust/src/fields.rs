// SPDX-License-Identifier: Apache-2.0
//! The identity's field table: every member in the C++ table order
//! (`kvkey::Fields`, exported as tests/vectors/identity-schema.json), with its
//! type, the rule validation applies, its byte limit and flags. The encoder,
//! the decoder, `first_difference`, the validator and the identity-file
//! reader walk it; tests/schema.rs checks it against the exported schema field
//! by field.

use crate::digest::Digest;
use crate::identity::{Adapter, Dtype, Identity};

/// A member's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldType {
    /// A part holding members (`model`, `kv`, `kv.quant`, `shard`).
    Part,
    /// An optional part (`adapter`): absent, or all its members.
    OptionalPart,
    /// A UTF-8 string.
    String,
    /// An unsigned 32-bit integer.
    U32,
    /// An unsigned 64-bit integer.
    U64,
    /// true or false.
    Bool,
    /// A dtype that must be set (`kv.dtype`).
    Dtype,
    /// An optional dtype (`kv.quant.scale_dtype`).
    OptionalDtype,
    /// A 32-byte digest.
    Digest,
    /// An optional 32-byte digest.
    OptionalDigest,
}

/// The rule validation applies to a member (the C++ `kvkey::FieldKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// No rule beyond its type.
    Value,
    /// An integer greater than 0.
    Positive,
    /// Free text: 1..limit bytes without unsafe code points.
    Text,
    /// 1..limit bytes of printable ASCII without space.
    Identifier,
    /// 1..limit bytes of `[A-Za-z0-9._-]`, the first alphanumeric.
    Tenant,
    /// 1..limit bytes of `[a-z0-9._-]`.
    Scheme,
    /// A dtype that names a real type.
    Dtype,
}

/// One member of the identity.
#[derive(Clone, Copy)]
pub struct Field {
    /// The dotted path from the identity ("kv.quant.group_size").
    pub path: &'static str,
    /// Its type.
    pub ty: FieldType,
    /// The rule validation applies.
    pub kind: FieldKind,
    /// A string's byte limit (0 for other types).
    pub limit: usize,
    /// An identity file must give it.
    pub required: bool,
    /// A digest an identity file may give as `<key minus _fingerprint>_file`.
    pub file_alt: bool,
    /// Part of the identity encoding (the shard is not: it enters as the slice).
    pub salient: bool,
    pub(crate) get: for<'a> fn(&'a Identity) -> Option<Value<'a>>,
    pub(crate) set: for<'a> fn(&'a mut Identity) -> Slot<'a>,
}

impl Field {
    /// The member's key in its part ("group_size").
    pub fn key(&self) -> &'static str {
        self.path.rsplit('.').next().unwrap_or(self.path)
    }
    /// The dotted path of the part holding it ("kv.quant"); "" at the top.
    pub fn parent(&self) -> &'static str {
        self.path.rfind('.').map_or("", |i| &self.path[..i])
    }
    /// True for parts (`Part`, `OptionalPart`).
    pub fn is_part(&self) -> bool {
        matches!(self.ty, FieldType::Part | FieldType::OptionalPart)
    }
}

impl std::fmt::Debug for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Field")
            .field("path", &self.path)
            .field("ty", &self.ty)
            .field("kind", &self.kind)
            .field("limit", &self.limit)
            .field("required", &self.required)
            .field("file_alt", &self.file_alt)
            .field("salient", &self.salient)
            .finish()
    }
}

/// A member's value (None from `get` when its optional part is absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Value<'a> {
    Part,
    OptionalPart(bool),
    String(&'a str),
    U32(u32),
    U64(u64),
    Bool(bool),
    Dtype(Option<Dtype>),
    Digest(&'a Digest),
    OptionalDigest(Option<&'a Digest>),
}

/// Where a member's value goes (an optional part is created on the way).
pub(crate) enum Slot<'a> {
    Part,
    OptionalPart(&'a mut Option<Adapter>),
    String(&'a mut String),
    U32(&'a mut u32),
    U64(&'a mut u64),
    Bool(&'a mut bool),
    Dtype(&'a mut Option<Dtype>),
    Digest(&'a mut Digest),
    OptionalDigest(&'a mut Option<Digest>),
}

use FieldKind as K;
use FieldType as T;

/// A Field, as a struct literal (a `const fn` may not take the setter's
/// `&mut` type before Rust 1.83, and the table builds with 1.63).
macro_rules! field {
    ($path:expr, $ty:expr, $kind:expr, $limit:expr, $flags:expr, $get:expr, $set:expr $(,)?) => {
        Field {
            path: $path,
            ty: $ty,
            kind: $kind,
            limit: $limit,
            required: $flags.0,
            file_alt: $flags.1,
            salient: $flags.2,
            get: $get,
            set: $set,
        }
    };
}

// (required, file_alt, salient)
const PLAIN: (bool, bool, bool) = (false, false, true);
const REQUIRED: (bool, bool, bool) = (true, false, true);

fn adapter(id: &mut Identity) -> &mut Adapter {
    id.adapter.get_or_insert_with(Adapter::default)
}

/// Every member, parts included, in the C++ table order (depth first: a part,
/// then its members).
pub static FIELDS: &[Field] = &[
    field!("tenant", T::String, K::Tenant, crate::limits::TENANT, PLAIN, |i| Some(Value::String(&i.tenant)), |i| {
        Slot::String(&mut i.tenant)
    },),
    field!("model", T::Part, K::Value, 0, REQUIRED, |_| Some(Value::Part), |_| Slot::Part),
    field!(
        "model.name",
        T::String,
        K::Text,
        crate::limits::MODEL_NAME,
        REQUIRED,
        |i| Some(Value::String(&i.model.name)),
        |i| Slot::String(&mut i.model.name),
    ),
    field!(
        "model.revision",
        T::String,
        K::Identifier,
        crate::limits::REVISION,
        REQUIRED,
        |i| Some(Value::String(&i.model.revision)),
        |i| Slot::String(&mut i.model.revision),
    ),
    field!("model.weights_epoch", T::U64, K::Value, 0, PLAIN, |i| Some(Value::U64(i.model.weights_epoch)), |i| {
        Slot::U64(&mut i.model.weights_epoch)
    },),
    field!(
        "model.weights_fingerprint",
        T::OptionalDigest,
        K::Value,
        0,
        (false, true, true),
        |i| Some(Value::OptionalDigest(i.model.weights_fingerprint.as_ref())),
        |i| Slot::OptionalDigest(&mut i.model.weights_fingerprint),
    ),
    field!(
        "model.positional_fingerprint",
        T::OptionalDigest,
        K::Value,
        0,
        PLAIN,
        |i| Some(Value::OptionalDigest(i.model.positional_fingerprint.as_ref())),
        |i| Slot::OptionalDigest(&mut i.model.positional_fingerprint),
    ),
    field!("kv", T::Part, K::Value, 0, REQUIRED, |_| Some(Value::Part), |_| Slot::Part),
    field!("kv.dtype", T::Dtype, K::Dtype, 0, REQUIRED, |i| Some(Value::Dtype(i.kv.dtype)), |i| Slot::Dtype(
        &mut i.kv.dtype
    ),),
    field!("kv.quant", T::Part, K::Value, 0, PLAIN, |_| Some(Value::Part), |_| Slot::Part),
    field!(
        "kv.quant.scheme",
        T::String,
        K::Scheme,
        crate::limits::QUANT_SCHEME,
        PLAIN,
        |i| Some(Value::String(&i.kv.quant.scheme)),
        |i| Slot::String(&mut i.kv.quant.scheme),
    ),
    field!("kv.quant.group_size", T::U32, K::Value, 0, PLAIN, |i| Some(Value::U32(i.kv.quant.group_size)), |i| {
        Slot::U32(&mut i.kv.quant.group_size)
    },),
    field!(
        "kv.quant.scale_dtype",
        T::OptionalDtype,
        K::Dtype,
        0,
        PLAIN,
        |i| Some(Value::Dtype(i.kv.quant.scale_dtype)),
        |i| Slot::Dtype(&mut i.kv.quant.scale_dtype),
    ),
    field!("kv.quant.zero_point", T::Bool, K::Value, 0, PLAIN, |i| Some(Value::Bool(i.kv.quant.zero_point)), |i| {
        Slot::Bool(&mut i.kv.quant.zero_point)
    },),
    field!(
        "kv.quant.scales_fingerprint",
        T::OptionalDigest,
        K::Value,
        0,
        (false, true, true),
        |i| Some(Value::OptionalDigest(i.kv.quant.scales_fingerprint.as_ref())),
        |i| Slot::OptionalDigest(&mut i.kv.quant.scales_fingerprint),
    ),
    field!("kv.block_size", T::U32, K::Positive, 0, REQUIRED, |i| Some(Value::U32(i.kv.block_size)), |i| Slot::U32(
        &mut i.kv.block_size
    ),),
    field!("kv.num_layers", T::U32, K::Positive, 0, REQUIRED, |i| Some(Value::U32(i.kv.num_layers)), |i| Slot::U32(
        &mut i.kv.num_layers
    ),),
    field!(
        "kv.num_kv_heads",
        T::U32,
        K::Positive,
        0,
        REQUIRED,
        |i| Some(Value::U32(i.kv.num_kv_heads)),
        |i| Slot::U32(&mut i.kv.num_kv_heads),
    ),
    field!("kv.head_dim", T::U32, K::Positive, 0, REQUIRED, |i| Some(Value::U32(i.kv.head_dim)), |i| Slot::U32(
        &mut i.kv.head_dim
    ),),
    field!(
        "kv.layout",
        T::String,
        K::Identifier,
        crate::limits::LAYOUT,
        REQUIRED,
        |i| Some(Value::String(&i.kv.layout)),
        |i| Slot::String(&mut i.kv.layout),
    ),
    field!("kv.mla", T::Bool, K::Value, 0, PLAIN, |i| Some(Value::Bool(i.kv.mla)), |i| Slot::Bool(&mut i.kv.mla)),
    field!("shard", T::Part, K::Value, 0, (false, false, false), |_| Some(Value::Part), |_| Slot::Part),
    field!("shard.tp_size", T::U32, K::Value, 0, (false, false, false), |i| Some(Value::U32(i.shard.tp_size)), |i| {
        Slot::U32(&mut i.shard.tp_size)
    },),
    field!("shard.tp_rank", T::U32, K::Value, 0, (false, false, false), |i| Some(Value::U32(i.shard.tp_rank)), |i| {
        Slot::U32(&mut i.shard.tp_rank)
    },),
    field!("shard.pp_size", T::U32, K::Value, 0, (false, false, false), |i| Some(Value::U32(i.shard.pp_size)), |i| {
        Slot::U32(&mut i.shard.pp_size)
    },),
    field!("shard.pp_rank", T::U32, K::Value, 0, (false, false, false), |i| Some(Value::U32(i.shard.pp_rank)), |i| {
        Slot::U32(&mut i.shard.pp_rank)
    },),
    field!("adapter", T::OptionalPart, K::Value, 0, PLAIN, |i| Some(Value::OptionalPart(i.adapter.is_some())), |i| {
        Slot::OptionalPart(&mut i.adapter)
    },),
    field!(
        "adapter.name",
        T::String,
        K::Text,
        crate::limits::ADAPTER_NAME,
        REQUIRED,
        |i| i.adapter.as_ref().map(|a| Value::String(&a.name)),
        |i| Slot::String(&mut adapter(i).name),
    ),
    field!(
        "adapter.weights_fingerprint",
        T::Digest,
        K::Value,
        0,
        (true, true, true),
        |i| i.adapter.as_ref().map(|a| Value::Digest(&a.weights_fingerprint)),
        |i| Slot::Digest(&mut adapter(i).weights_fingerprint),
    ),
];

/// The members of the part at `path` ("" for the top level), in table order.
pub fn members(path: &str) -> impl Iterator<Item = &'static Field> + '_ {
    FIELDS.iter().filter(move |f| f.parent() == path)
}

/// The salient fields of an identity in encoding order with their values:
/// the table's salient leaves and the adapter's presence, skipping the
/// members of an absent adapter.
pub(crate) fn salient(id: &Identity) -> impl Iterator<Item = (&'static Field, Value<'_>)> {
    FIELDS.iter().filter(|f| f.salient && f.ty != FieldType::Part).filter_map(move |f| (f.get)(id).map(|v| (f, v)))
}
