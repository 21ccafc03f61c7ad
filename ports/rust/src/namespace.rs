// SPDX-License-Identifier: Apache-2.0
//! A deployment rank's namespace: root, block-hash chain and store keys
//! (docs/format.md, sections 2 to 5).

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::{Digest as _, Sha256};

use crate::digest::{hex, Digest};
use crate::encode::encode_identity;
use crate::error::{Error, Result};
use crate::identity::{resolve_slice, Identity, Policy, Slice, TenantPolicy, SCOPE_TENANT_PREFIX};

/// Tenant secret sizes of a keyed namespace, in bytes.
pub const MIN_SECRET_SIZE: usize = 32;
/// See MIN_SECRET_SIZE.
pub const MAX_SECRET_SIZE: usize = 256;

/// The tag that opens every store key (format version 4; "kvk3/" in version 3).
pub const STORE_KEY_TAG: &str = "kvk4/";

/// The longest model segment of a store key, in characters.
const MODEL_SEGMENT_MAX: usize = 80;

/// How the namespace hashes: plain SHA-256, or HMAC-SHA-256 under a tenant secret.
#[derive(Clone)]
pub(crate) enum Hasher {
    Plain,
    Keyed(Hmac<Sha256>),
}

impl Hasher {
    pub(crate) fn hash(&self, parts: &[&[u8]]) -> Digest {
        let mut out = [0u8; 32];
        match self {
            Hasher::Plain => {
                let mut h = Sha256::new();
                for p in parts {
                    h.update(p);
                }
                out.copy_from_slice(&h.finalize());
            }
            Hasher::Keyed(mac) => {
                let mut h = mac.clone();
                for p in parts {
                    h.update(p);
                }
                out.copy_from_slice(&h.finalize().into_bytes());
            }
        }
        Digest(out)
    }
}

/// An extra key: enters only the blocks overlapping tokens `[token_begin, token_end)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtraKey {
    /// First token position the key covers.
    pub token_begin: u64,
    /// One past the last token position.
    pub token_end: u64,
    /// The key bytes.
    pub key: Vec<u8>,
}

/// A request's chain inputs besides the tokens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HashOptions {
    /// Per-request salt; empty means none.
    pub salt: Vec<u8>,
    /// Per-block extra keys (multimodal content hashes and the like).
    pub extras: Vec<ExtraKey>,
}

/// A keyed namespace's secret id (docs/format.md): the first 8 bytes of
/// HMAC-SHA-256(secret, "I"). A public fingerprint of the tenant secret, in the
/// envelope and (as 16 lowercase hex digits) in every store key, so that one
/// retired secret's values can be selected and purged.
pub fn secret_id(secret: &[u8]) -> SecretId {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes keys of any size");
    mac.update(b"I");
    let mut id = SecretId([0u8; 8]);
    id.0.copy_from_slice(&mac.finalize().into_bytes()[..8]);
    id
}

/// A tenant secret's public id (see `secret_id`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SecretId(pub [u8; 8]);

impl SecretId {
    /// 16 lowercase hex digits, as in store keys.
    pub fn hex(&self) -> String {
        hex(&self.0)
    }
}

impl fmt::Display for SecretId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

/// Everything one deployment rank derives from its identity.
#[derive(Clone)]
pub struct Namespace {
    pub(crate) id: Identity,
    pub(crate) hasher: Hasher,
    pub(crate) secret_id: Option<SecretId>,
    pub(crate) slice: Slice,
    pub(crate) encoding: Vec<u8>,
    root: Digest,
    key_prefix: String,
    /// Confidential namespaces: HKDF-SHA-256 extracted from the tenant secret.
    pub(crate) kdf: Option<hkdf::Hkdf<Sha256>>,
    /// A shared scope's namespace (`NamespaceBuilder::scope`).
    scope: bool,
}

/// The HKDF salt of confidential payload keys; no other derivation uses it.
pub(crate) const CONFIDENTIAL_SALT: &[u8] = b"kvkey v4 confidential";

/// Shows the identity, kind, secret id and root; never the secret.
impl fmt::Debug for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Namespace")
            .field("identity", &self.id)
            .field("keyed", &self.is_keyed())
            .field("secret_id", &self.secret_id)
            .field("root", &self.root)
            .field("key_prefix", &self.key_prefix)
            .finish()
    }
}

/// How a namespace is built: the tenant policy and, for a keyed namespace,
/// the tenant secret. `Namespace::builder(&id)` starts one.
#[derive(Clone)]
pub struct NamespaceBuilder<'a> {
    id: &'a Identity,
    policy: TenantPolicy,
    secret: Option<&'a [u8]>,
    confidential: bool,
    scope: Option<&'a str>,
}

impl<'a> NamespaceBuilder<'a> {
    /// The tenant policy (default `TenantPolicy::Required`), or an identity
    /// file's `Policy` (`Identity::from_file`), which also sets `confidential`.
    pub fn policy(mut self, policy: impl Into<Policy>) -> Self {
        let p = policy.into();
        self.policy = p.tenant;
        self.confidential = p.confidential;
        self
    }

    /// A keyed namespace: every hash is an HMAC-SHA-256 under this tenant
    /// secret (32 to 256 bytes, else an identity error on "tenant_secret",
    /// checked after the identity).
    pub fn secret(mut self, secret: &'a [u8]) -> Self {
        self.secret = Some(secret);
        self
    }

    /// A confidential namespace (format v4, docs/format.md section 6, "Mode
    /// aes256_gcm"): a keyed one whose payloads are stored encrypted with
    /// AES-256-GCM under keys derived from the tenant secret, its keys under
    /// "c<secret id>". Needs `secret` (else an identity error on "confidential").
    pub fn confidential(mut self, confidential: bool) -> Self {
        self.confidential = confidential;
        self
    }

    /// The namespace of the shared scope `name` (format v4, docs/format.md
    /// section 12): the identity with tenant "_scope.<name>" (its own tenant
    /// is replaced), plain, or keyed under the scope's own secret and then
    /// optionally confidential. An identity error on "scope.name" for a bad
    /// name (1..57 bytes of the tenant charset, first byte a letter or digit),
    /// on "tenant" under `TenantPolicy::SingleTenant`. Which tenants may read
    /// or publish is the serving side's to decide;
    /// `Namespace::scoped_block_hashes` chains a tenant's blocks after it.
    pub fn scope(mut self, name: &'a str) -> Self {
        self.scope = Some(name);
        self
    }

    /// Validates the identity (the error names the first invalid field, in the
    /// order of docs/format.md) and the secret, and derives the namespace.
    pub fn build(self) -> Result<Namespace> {
        let id = match self.scope {
            None => self.id.validated(self.policy)?,
            Some(_) if self.policy == TenantPolicy::SingleTenant => {
                return Err(Error::identity("tenant", "a shared scope's namespace is not single_tenant"))
            }
            Some(name) => self.id.validated_scope(name)?,
        };
        let (hasher, secret_id) = match self.secret {
            None => (Hasher::Plain, None),
            Some(secret) => {
                if secret.len() < MIN_SECRET_SIZE || secret.len() > MAX_SECRET_SIZE {
                    return Err(Error::identity(
                        "tenant_secret",
                        format!(
                            "is {} bytes; a tenant secret has {} to {} bytes",
                            secret.len(),
                            MIN_SECRET_SIZE,
                            MAX_SECRET_SIZE
                        ),
                    ));
                }
                let mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
                    .map_err(|_| Error::identity("tenant_secret", "rejected"))?;
                (Hasher::Keyed(mac), Some(secret_id(secret)))
            }
        };
        let kdf = match (self.confidential, self.secret) {
            (false, _) => None,
            (true, Some(secret)) => Some(hkdf::Hkdf::<Sha256>::new(Some(CONFIDENTIAL_SALT), secret)),
            (true, None) => {
                return Err(Error::identity(
                    "confidential",
                    "a confidential namespace encrypts under a key derived from the tenant secret: give secret()",
                ))
            }
        };
        let slice = resolve_slice(&id.kv, &id.shard)?;
        let encoding = encode_identity(&id);
        let root = hasher.hash(&[&encoding]);
        let key_prefix = format!(
            "{}{}/e{}/",
            namespace_prefix(&id.tenant, secret_id.as_ref(), kdf.is_some()),
            model_key_segment(&id.model.name),
            id.model.weights_epoch
        );
        let scope = self.scope.is_some();
        Ok(Namespace { id, hasher, secret_id, slice, encoding, root, key_prefix, kdf, scope })
    }
}

/// "kvk4/<tenant>/": the prefix of every key of the tenant, under any secret.
pub fn tenant_key_prefix(tenant: &str) -> String {
    format!("{}{}/", STORE_KEY_TAG, tenant)
}

/// "kvk4/<tenant>/k<secret id, 16 hex>/": the prefix of every key the tenant's
/// keyed namespaces wrote under one secret (what a purge of a retired secret
/// selects). `secret_id` as `secret_id()` computes it.
pub fn secret_key_prefix(tenant: &str, secret_id: &SecretId) -> String {
    format!("{}k{}/", tenant_key_prefix(tenant), secret_id.hex())
}

/// "kvk4/<tenant>/p/" (plain) or secret_key_prefix (keyed).
fn namespace_prefix(tenant: &str, secret_id: Option<&SecretId>, confidential: bool) -> String {
    match secret_id {
        Some(sid) if confidential => format!("{}c{}/", tenant_key_prefix(tenant), sid.hex()),
        Some(sid) => secret_key_prefix(tenant, sid),
        None => format!("{}p/", tenant_key_prefix(tenant)),
    }
}

/// Bytes outside `[A-Za-z0-9._-]` as %XX, cut to 80 characters without splitting an escape.
fn model_key_segment(name: &str) -> String {
    let mut out = String::new();
    for b in name.bytes() {
        let plain = b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-';
        if out.len() + if plain { 1 } else { 3 } > MODEL_SEGMENT_MAX {
            break;
        }
        if plain {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{:02X}", b));
        }
    }
    out
}

impl Namespace {
    /// A plain (SHA-256) namespace under the default tenant policy (a tenant
    /// is required). Validates the identity: the error names the first
    /// invalid field. `Namespace::builder` sets the policy or a secret.
    pub fn new(id: &Identity) -> Result<Namespace> {
        Namespace::builder(id).build()
    }

    /// Starts a namespace with options: `.policy(TenantPolicy::SingleTenant)`,
    /// `.secret(&tenant_secret)` for a keyed namespace, then `.build()`.
    pub fn builder(id: &Identity) -> NamespaceBuilder<'_> {
        NamespaceBuilder { id, policy: TenantPolicy::Required, secret: None, confidential: false, scope: None }
    }

    /// The validated identity as encoded.
    pub fn identity(&self) -> &Identity {
        &self.id
    }
    /// True for a keyed (HMAC) namespace.
    pub fn is_keyed(&self) -> bool {
        matches!(self.hasher, Hasher::Keyed(_))
    }
    /// The shared scope's name of a scope's namespace (`NamespaceBuilder::scope`).
    pub fn scope(&self) -> Option<&str> {
        if self.scope {
            self.id.tenant.strip_prefix(SCOPE_TENANT_PREFIX)
        } else {
            None
        }
    }

    /// True for a confidential namespace (`NamespaceBuilder::confidential`).
    pub fn is_confidential(&self) -> bool {
        self.kdf.is_some()
    }
    /// The secret id of a keyed namespace (`secret_id()` of its secret); None
    /// for a plain one.
    pub fn secret_id(&self) -> Option<SecretId> {
        self.secret_id
    }
    /// Keyed: "kvk4/<tenant>/k<secret id>/", the prefix of every key sealed
    /// under this namespace's tenant secret (any model, epoch or rank). Plain:
    /// "kvk4/<tenant>/p/", the prefix of every plain key of the tenant.
    pub fn secret_prefix(&self) -> String {
        namespace_prefix(&self.id.tenant, self.secret_id.as_ref(), self.kdf.is_some())
    }
    /// The KV heads and layers this rank holds.
    pub fn slice(&self) -> Slice {
        self.slice
    }
    /// The canonical identity encoding.
    pub fn encoding(&self) -> &[u8] {
        &self.encoding
    }
    /// H(encoding): the parent of block 0 for unsalted requests.
    pub fn root(&self) -> Digest {
        self.root
    }
    /// "kvk4/<tenant>/<p | k<secret id>>/<model>/e<epoch>/": the prefix of this namespace's keys.
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }
    /// "kvk4/<tenant>/".
    pub fn tenant_prefix(&self) -> String {
        tenant_key_prefix(&self.id.tenant)
    }

    /// The parent of block 0: the root without salt, H('S' || root || str(salt)) with one.
    pub fn first_parent(&self, salt: &[u8]) -> Digest {
        if salt.is_empty() {
            return self.root;
        }
        self.hasher.hash(&[b"S", &self.root.0, &(salt.len() as u32).to_le_bytes(), salt])
    }

    /// The hashes of every full block of `tokens` (a partial tail has none).
    /// An extra key with `token_begin >= token_end` is an input error ("extras").
    pub fn block_hashes(&self, tokens: &[u32], opts: &HashOptions) -> Result<Vec<Digest>> {
        if let Some(i) = opts.extras.iter().position(|e| e.token_begin >= e.token_end) {
            return Err(Error::input("extras", format!("extra key {}: token_begin must be below token_end", i)));
        }
        let mut extras: Vec<&ExtraKey> = opts.extras.iter().collect();
        extras.sort_by(|a, b| (a.token_begin, a.token_end, &a.key).cmp(&(b.token_begin, b.token_end, &b.key)));
        Ok(self.chain_from(tokens, &extras, 0, self.first_parent(&opts.salt)))
    }

    /// The hashes of the full blocks of `tokens` from block `from` on, the
    /// first of them under `parent`; `extras` checked and sorted.
    fn chain_from(&self, tokens: &[u32], extras: &[&ExtraKey], from: usize, mut parent: Digest) -> Vec<Digest> {
        let bs = self.id.kv.block_size as usize;
        let mut out = Vec::with_capacity(tokens.len() / bs);
        let mut msg = Vec::with_capacity(1 + 32 + 4 * bs + 4);
        for (b, block) in tokens.chunks_exact(bs).enumerate().skip(from) {
            msg.clear();
            msg.push(b'B');
            msg.extend_from_slice(&parent.0);
            for t in block {
                msg.extend_from_slice(&t.to_le_bytes());
            }
            let (lo, hi) = ((b * bs) as u64, ((b + 1) * bs) as u64);
            let overlapping: Vec<&&ExtraKey> =
                extras.iter().filter(|e| e.token_begin < hi && e.token_end > lo).collect();
            msg.extend_from_slice(&(overlapping.len() as u32).to_le_bytes());
            for e in overlapping {
                msg.extend_from_slice(&e.token_begin.to_le_bytes());
                msg.extend_from_slice(&e.token_end.to_le_bytes());
                msg.extend_from_slice(&(e.key.len() as u32).to_le_bytes());
                msg.extend_from_slice(&e.key);
            }
            parent = self.hasher.hash(&[&msg]);
            out.push(parent);
        }
        out
    }

    /// The block hashes of a request whose first `scope_tokens` tokens belong
    /// to the shared scope `scope` (namespace `self` is the tenant's), as the
    /// serving side says (format v4, docs/format.md sections 3 and 12): blocks
    /// `[0, k)`, `k = scope_tokens / block size`, in the scope's chain
    /// (unsalted), the rest in the tenant's, the first of them under the
    /// transition parent `H_t('T' || p_t || hash_{k-1})`. The extras enter
    /// both by absolute position, the salt the private blocks only. An input
    /// error on "scope_tokens" when it is not a multiple of the block size,
    /// on "scope" when the block sizes differ; 0 is `block_hashes`.
    pub fn scoped_block_hashes(
        &self,
        scope: &Namespace,
        tokens: &[u32],
        scope_tokens: usize,
        opts: &HashOptions,
    ) -> Result<Vec<Digest>> {
        let bs = self.id.kv.block_size as usize;
        if scope.id.kv.block_size as usize != bs {
            return Err(Error::input(
                "scope",
                format!("the scope's block size is {}, the tenant's {}", scope.id.kv.block_size, bs),
            ));
        }
        if !scope_tokens.is_multiple_of(bs) {
            return Err(Error::input(
                "scope_tokens",
                format!(
                    "scope_tokens is {scope_tokens}, not a multiple of the block size {bs}: a block would belong \
                     to the scope and to the tenant"
                ),
            ));
        }
        if scope_tokens == 0 {
            return self.block_hashes(tokens, opts);
        }
        let unsalted = HashOptions { salt: Vec::new(), extras: opts.extras.clone() };
        let mut hashes = scope.block_hashes(&tokens[..tokens.len().min(scope_tokens)], &unsalted)?;
        let k = scope_tokens / bs;
        if tokens.len() / bs <= k {
            return Ok(hashes);
        }
        let mut extras: Vec<&ExtraKey> = opts.extras.iter().collect();
        extras.sort_by(|a, b| (a.token_begin, a.token_end, &a.key).cmp(&(b.token_begin, b.token_end, &b.key)));
        let parent = self.hasher.hash(&[b"T", &self.first_parent(&opts.salt).0, &hashes[k - 1].0]);
        hashes.extend(self.chain_from(tokens, &extras, k, parent));
        Ok(hashes)
    }

    /// H('O' || block || slice): this rank's object for the block.
    pub fn object_hash(&self, block: &Digest) -> Digest {
        let s = self.slice;
        let mut m = vec![b'O'];
        m.extend_from_slice(&block.0);
        for v in [s.kv_head_begin, s.kv_head_end, s.layer_begin, s.layer_end] {
            m.extend_from_slice(&v.to_le_bytes());
        }
        self.hasher.hash(&[&m])
    }

    /// "kvk4/<tenant>/<p | k<secret id>>/<model>/e<epoch>/<object hash, 64 hex>".
    pub fn store_key(&self, block: &Digest) -> String {
        format!("{}{}", self.key_prefix, hex(&self.object_hash(block).0))
    }
}
