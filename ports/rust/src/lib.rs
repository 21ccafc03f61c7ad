// SPDX-License-Identifier: Apache-2.0
//! kvkey's key format in Rust: identity validation and encoding, the
//! namespace root, block hashes (salt, extras), store keys, keyed (HMAC)
//! namespaces, envelope parsing and verification with the C++ library's
//! Reason and field, XXH3-128 payload digests, Poly1305 payload tags and keyed
//! namespaces' secret ids —
//! byte for byte as docs/format.md (format version 4) specifies and the C++
//! library computes.
//!
//! ```no_run
//! # fn main() -> kvkey::Result<()> {
//! # let identity = kvkey::Identity::default();
//! let ns = kvkey::Namespace::new(&identity)?;
//! let blocks = ns.block_hashes(&[1, 2, 3, 4], &kvkey::HashOptions::default())?;
//! let key = ns.store_key(&blocks[0]);
//! let index_key: u64 = blocks[0].u64_projection();
//! # let _ = (key, index_key);
//! # Ok(())
//! # }
//! ```
//!
//! A reader of KV bytes opens each stored value whole with
//! `Namespace::open_value` (or `verify` with the header and payload apart):
//! the XXH3-128 digest of a plain value, the Poly1305 tag of a keyed one.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod digest;
mod encode;
mod envelope;
mod error;
mod fields;
mod identity;
mod identity_file;
#[doc(hidden)]
pub mod json;
mod namespace;

pub use digest::{from_hex, Digest};
pub use encode::{decode_identity, encode_identity, first_difference, FORMAT_VERSION};
pub use envelope::{
    parse_envelope, plain_digest, xxh3_128_digest, Envelope, IntegrityMode, NamespaceKind, Reason, Verdict,
    ENVELOPE_SIZE,
};
pub use error::{Error, Result};
pub use fields::{Field, FieldKind, FieldType, FIELDS};
pub use identity::{
    limits, resolve_slice, Adapter, Dtype, Identity, Kv, Model, Policy, Quant, Shard, Slice, TenantPolicy,
    SCOPE_TENANT_PREFIX, SINGLE_TENANT_NAME,
};
#[doc(hidden)]
pub use identity_file::read_request_identity;
pub use identity_file::{IDENTITY_FILE_FIELD, MAX_IDENTITY_FILE_DEPTH, MAX_IDENTITY_FILE_SIZE};
pub use namespace::{
    secret_id, secret_key_prefix, tenant_key_prefix, ExtraKey, HashOptions, Namespace, NamespaceBuilder, SecretId,
    MAX_SECRET_SIZE, MIN_SECRET_SIZE, STORE_KEY_TAG,
};
