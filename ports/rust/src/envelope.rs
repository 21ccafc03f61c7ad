// SPDX-License-Identifier: Apache-2.0
//! The 1024-byte envelope: parsing and verification with the C++ library's
//! Reason and field (docs/format.md, section 6).

use std::borrow::Cow;
use std::fmt;

use crate::digest::Digest;
use crate::encode::{decode_fields, decode_identity, first_difference_from, FORMAT_VERSION};
use crate::error::{Error, Result};
use crate::identity::{Identity, Slice};
use crate::namespace::{Namespace, SecretId};

/// The size of every envelope.
pub const ENVELOPE_SIZE: usize = 1024;

const MAGIC: &[u8; 8] = b"KVKEYENV";
const VERSION: usize = 8;
const SIZE: usize = 10;
const IDENTITY_LEN: usize = 12;
const BLOCK_HASH: usize = 16;
const PAYLOAD_SIZE: usize = 48;
const SLICE: usize = 56;
const NAMESPACE_KIND: usize = 72;
const INTEGRITY_MODE: usize = 73;
const RESERVED: usize = 74;
const NONCE: usize = 80;
const PAYLOAD_DIGEST: usize = 96;
const SECRET_ID: usize = 112;
const IDENTITY: usize = 120;

/// Which kind of namespace sealed a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamespaceKind {
    /// SHA-256.
    Plain = 1,
    /// HMAC-SHA-256 under a tenant secret.
    Keyed = 2,
}

/// How a header protects its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntegrityMode {
    /// Size only.
    None = 0,
    /// XXH3-128 of the payload and the header (plain namespaces).
    Xxh3_128 = 1,
    /// Poly1305 tag of the payload and the header (keyed namespaces).
    Poly1305 = 2,
    /// AES-256-GCM ciphertext and tag (confidential namespaces, format v4).
    Aes256Gcm = 3,
}

fn mode_allowed(kind: u8, mode: u8) -> bool {
    mode == IntegrityMode::None as u8
        || (kind == NamespaceKind::Plain as u8 && mode == IntegrityMode::Xxh3_128 as u8)
        || (kind == NamespaceKind::Keyed as u8
            && (mode == IntegrityMode::Poly1305 as u8 || mode == IntegrityMode::Aes256Gcm as u8))
}

/// True for the modes whose headers carry a random nonce.
fn has_nonce(mode: u8) -> bool {
    mode == IntegrityMode::Poly1305 as u8 || mode == IntegrityMode::Aes256Gcm as u8
}

/// Why a header was accepted or rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Accepted.
    Ok,
    /// Not a kvkey envelope, truncated, or not parseable.
    Malformed,
    /// A kvkey envelope of another format version.
    UnsupportedVersion,
    /// Produced under another identity or namespace kind.
    IdentityMismatch,
    /// Same identity, another block.
    BlockMismatch,
    /// The payload size differs.
    SizeMismatch,
    /// The payload does not match its digest or tag, or cannot be checked.
    PayloadMismatch,
}

impl Reason {
    /// The stable name ("identity_mismatch").
    pub fn name(self) -> &'static str {
        match self {
            Reason::Ok => "ok",
            Reason::Malformed => "malformed",
            Reason::UnsupportedVersion => "unsupported_version",
            Reason::IdentityMismatch => "identity_mismatch",
            Reason::BlockMismatch => "block_mismatch",
            Reason::SizeMismatch => "size_mismatch",
            Reason::PayloadMismatch => "payload_mismatch",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The outcome of checking a header: anything but ok is a miss. `field` names
/// the first differing identity field or the part of the envelope; "" when ok.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Why.
    pub reason: Reason,
    /// Where: an identity field or a part of the envelope.
    pub field: &'static str,
}

impl Verdict {
    const OK: Verdict = Verdict { reason: Reason::Ok, field: "" };
    fn new(reason: Reason, field: &'static str) -> Verdict {
        Verdict { reason, field }
    }
    /// True when the header was accepted.
    pub fn is_ok(&self) -> bool {
        self.reason == Reason::Ok
    }
}

/// A header's decoded contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// The producer's identity encoding (docs/format.md, section 1).
    pub identity_encoding: Vec<u8>,
    /// The producer's slice.
    pub slice: Slice,
    /// The block hash.
    pub block_hash: Digest,
    /// The payload size in bytes.
    pub payload_size: u64,
    /// The namespace kind.
    pub kind: NamespaceKind,
    /// The integrity mode.
    pub mode: IntegrityMode,
    /// The nonce (Poly1305 mode only).
    pub nonce: [u8; 16],
    /// The XXH3-128 digest or Poly1305 tag.
    pub payload_digest: [u8; 16],
    /// The secret id of the keyed namespace that sealed it (`secret_id()` of
    /// its tenant secret); None in a plain namespace's header (whose bytes
    /// there are zero).
    pub secret_id: Option<SecretId>,
}

impl Envelope {
    /// The producer's identity; None when one of its strings is not UTF-8.
    pub fn identity(&self) -> Option<Identity> {
        decode_identity(&self.identity_encoding)
    }
}

fn u16_at(h: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([h[at], h[at + 1]])
}
fn u32_at(h: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]])
}
fn u64_at(h: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&h[at..at + 8]);
    u64::from_le_bytes(b)
}
fn all_zero(b: &[u8]) -> bool {
    b.iter().all(|&c| c == 0)
}
/// a == b in time independent of where they differ.
fn equal_ct(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn preamble(h: &[u8]) -> Verdict {
    if h.len() != ENVELOPE_SIZE {
        Verdict::new(Reason::Malformed, "envelope.size")
    } else if &h[..8] != MAGIC {
        Verdict::new(Reason::Malformed, "envelope.magic")
    } else if u16_at(h, VERSION) != FORMAT_VERSION {
        Verdict::new(Reason::UnsupportedVersion, "envelope.format_version")
    } else {
        Verdict::OK
    }
}

/// Decodes a header without judging it against any identity; the Verdict
/// (malformed or unsupported_version, and the field) says why when it is not
/// a well-formed envelope of this format version.
pub fn parse_envelope(h: &[u8]) -> std::result::Result<Envelope, Verdict> {
    let v = preamble(h);
    if !v.is_ok() {
        return Err(v);
    }
    let malformed = |field| Err(Verdict::new(Reason::Malformed, field));
    if usize::from(u16_at(h, SIZE)) != ENVELOPE_SIZE {
        return malformed("envelope.size");
    }
    let n = u32_at(h, IDENTITY_LEN) as usize;
    if n > ENVELOPE_SIZE - IDENTITY || decode_fields(&h[IDENTITY..IDENTITY + n]).is_none() {
        return malformed("envelope.identity");
    }
    if !all_zero(&h[IDENTITY + n..]) || !all_zero(&h[RESERVED..NONCE]) {
        return malformed("envelope.padding");
    }
    let (kind, mode) = (h[NAMESPACE_KIND], h[INTEGRITY_MODE]);
    let kind = match kind {
        1 => NamespaceKind::Plain,
        2 => NamespaceKind::Keyed,
        _ => return malformed("envelope.namespace_kind"),
    };
    if !mode_allowed(kind as u8, mode) {
        return malformed("envelope.integrity_mode");
    }
    let mode = [IntegrityMode::None, IntegrityMode::Xxh3_128, IntegrityMode::Poly1305, IntegrityMode::Aes256Gcm]
        [usize::from(mode)];
    if !has_nonce(mode as u8) && !all_zero(&h[NONCE..PAYLOAD_DIGEST]) {
        return malformed("envelope.nonce");
    }
    if mode == IntegrityMode::None && !all_zero(&h[PAYLOAD_DIGEST..SECRET_ID]) {
        return malformed("envelope.payload_digest");
    }
    if kind == NamespaceKind::Plain && !all_zero(&h[SECRET_ID..IDENTITY]) {
        return malformed("envelope.secret_id");
    }
    let mut e = Envelope {
        identity_encoding: h[IDENTITY..IDENTITY + n].to_vec(),
        slice: Slice {
            kv_head_begin: u32_at(h, SLICE),
            kv_head_end: u32_at(h, SLICE + 4),
            layer_begin: u32_at(h, SLICE + 8),
            layer_end: u32_at(h, SLICE + 12),
        },
        block_hash: Digest::default(),
        payload_size: u64_at(h, PAYLOAD_SIZE),
        kind,
        mode,
        nonce: [0; 16],
        payload_digest: [0; 16],
        secret_id: None,
    };
    e.block_hash.0.copy_from_slice(&h[BLOCK_HASH..BLOCK_HASH + 32]);
    e.nonce.copy_from_slice(&h[NONCE..PAYLOAD_DIGEST]);
    e.payload_digest.copy_from_slice(&h[PAYLOAD_DIGEST..SECRET_ID]);
    if kind == NamespaceKind::Keyed {
        let mut sid = SecretId::default();
        sid.0.copy_from_slice(&h[SECRET_ID..IDENTITY]);
        e.secret_id = Some(sid);
    }
    Ok(e)
}

/// The XXH3-128 digest of a payload in its canonical (big-endian) form, as
/// `xxh128sum` prints it.
pub fn xxh3_128_digest(payload: &[u8]) -> [u8; 16] {
    xxhash_rust::xxh3::xxh3_128(payload).to_be_bytes()
}

/// A plain header's digest (integrity mode xxh3_128, docs/format.md section
/// 6): XXH3-128 of `payload || header'`, where `header'` is the 1024-byte
/// header with its 16 digest bytes (offset 96) zero, in canonical form.
pub fn plain_digest(payload: &[u8], header: &[u8]) -> [u8; 16] {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(payload);
    h.update(&header[..PAYLOAD_DIGEST]);
    h.update(&[0u8; SECRET_ID - PAYLOAD_DIGEST]);
    h.update(&header[SECRET_ID..]);
    h.digest128().to_be_bytes()
}

/// Poly1305 over a message that arrives in pieces of any length: whole
/// 16-byte blocks go to the MAC as they fill, the last partial one to
/// `compute_unpadded` (which pads as RFC 8439 does, not with zero blocks).
struct Poly1305Stream {
    mac: poly1305::Poly1305,
    buf: [u8; 16],
    len: usize,
}

impl Poly1305Stream {
    fn new(mac: poly1305::Poly1305) -> Self {
        Poly1305Stream { mac, buf: [0; 16], len: 0 }
    }
    fn update(&mut self, mut data: &[u8]) {
        use poly1305::universal_hash::UniversalHash;
        if self.len > 0 {
            let take = (16 - self.len).min(data.len());
            self.buf[self.len..self.len + take].copy_from_slice(&data[..take]);
            self.len += take;
            data = &data[take..];
            if self.len < 16 {
                return;
            }
            self.mac.update(&[self.buf.into()]);
            self.len = 0;
        }
        let whole = data.len() / 16 * 16;
        for block in data[..whole].chunks_exact(16) {
            self.mac.update(&[poly1305::Block::clone_from_slice(block)]);
        }
        let rest = &data[whole..];
        self.buf[..rest.len()].copy_from_slice(rest);
        self.len = rest.len();
    }
    fn finish(self) -> [u8; 16] {
        self.mac.compute_unpadded(&self.buf[..self.len]).into()
    }
}

impl Namespace {
    fn kind(&self) -> u8 {
        if self.is_keyed() {
            NamespaceKind::Keyed as u8
        } else {
            NamespaceKind::Plain as u8
        }
    }

    /// The header a plain namespace writes for `block` without the payload's
    /// bytes (integrity mode none). The C++ library refuses to seal one in a
    /// keyed namespace, and no keyed reader accepts it.
    pub fn seal_size_only(&self, block: &Digest, payload_size: u64) -> Vec<u8> {
        let mut h = vec![0u8; ENVELOPE_SIZE];
        h[..8].copy_from_slice(MAGIC);
        h[VERSION..VERSION + 2].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        h[SIZE..SIZE + 2].copy_from_slice(&(ENVELOPE_SIZE as u16).to_le_bytes());
        h[IDENTITY_LEN..IDENTITY_LEN + 4].copy_from_slice(&(self.encoding.len() as u32).to_le_bytes());
        h[BLOCK_HASH..BLOCK_HASH + 32].copy_from_slice(&block.0);
        h[PAYLOAD_SIZE..PAYLOAD_SIZE + 8].copy_from_slice(&payload_size.to_le_bytes());
        let s = self.slice;
        for (i, v) in [s.kv_head_begin, s.kv_head_end, s.layer_begin, s.layer_end].iter().enumerate() {
            h[SLICE + 4 * i..SLICE + 4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
        h[NAMESPACE_KIND] = self.kind();
        if let Some(sid) = &self.secret_id {
            h[SECRET_ID..IDENTITY].copy_from_slice(&sid.0);
        }
        h[IDENTITY..IDENTITY + self.encoding.len()].copy_from_slice(&self.encoding);
        h
    }

    /// The integrity mode `seal` writes: xxh3_128 in a plain namespace,
    /// poly1305 in a keyed one.
    pub fn integrity_mode(&self) -> IntegrityMode {
        if self.is_confidential() {
            IntegrityMode::Aes256Gcm
        } else if self.is_keyed() {
            IntegrityMode::Poly1305
        } else {
            IntegrityMode::Xxh3_128
        }
    }

    /// The digest or tag `header` (its integrity mode and nonce set) carries
    /// for `payload`: `plain_digest` in a plain namespace; in a keyed one the
    /// Poly1305 tag of `payload || header'` under the one-time key of the
    /// header's nonce (docs/format.md, section 6, "Mode poly1305").
    fn digest_of(&self, payload: &[u8], header: &[u8]) -> [u8; 16] {
        if !self.is_keyed() {
            return plain_digest(payload, header);
        }
        use chacha20::cipher::{KeyIvInit, StreamCipher, StreamCipherSeek};
        use poly1305::universal_hash::KeyInit;
        // K_p = H('P' || root); the one-time key is the first 32 bytes of the
        // ChaCha20 keystream under K_p, block counter u32le N[0..4], nonce N[4..16].
        let key = self.hasher.hash(&[b"P", &self.root().0]);
        let nonce = &header[NONCE..PAYLOAD_DIGEST];
        let mut stream = chacha20::ChaCha20::new(key.0.as_ref().into(), nonce[4..].into());
        let counter = u32::from_le_bytes([nonce[0], nonce[1], nonce[2], nonce[3]]);
        stream.seek(u64::from(counter) * 64);
        let mut otk = [0u8; 32];
        stream.apply_keystream(&mut otk);
        let mut mac = Poly1305Stream::new(poly1305::Poly1305::new(&otk.into()));
        mac.update(payload);
        mac.update(&header[..PAYLOAD_DIGEST]);
        mac.update(&[0u8; SECRET_ID - PAYLOAD_DIGEST]);
        mac.update(&header[SECRET_ID..]);
        mac.finish()
    }

    /// The header of this namespace for `block` and its payload, as the C++
    /// `seal(block_hash, payload)` writes it: the payload's size and its
    /// digest (plain: XXH3-128 of the payload and the header) or tag (keyed:
    /// Poly1305 under a fresh random nonce from the operating system). An
    /// error only when the operating system gives no random bytes.
    pub fn seal(&self, block: &Digest, payload: &[u8]) -> Result<Vec<u8>> {
        if self.is_confidential() {
            return Err(Error::input(
                "payload",
                "a confidential namespace stores the payload encrypted: use seal_value",
            ));
        }
        let mut h = self.seal_size_only(block, payload.len() as u64);
        h[INTEGRITY_MODE] = self.integrity_mode() as u8;
        if self.is_keyed() {
            getrandom::fill(&mut h[NONCE..PAYLOAD_DIGEST])
                .map_err(|e| Error::input("payload", format!("no random nonce for the payload tag: {e}")))?;
        }
        let digest = self.digest_of(payload, &h);
        h[PAYLOAD_DIGEST..SECRET_ID].copy_from_slice(&digest);
        Ok(h)
    }

    /// One store value for `block` (docs/format.md, "Stored values"): the
    /// header `seal` writes, immediately followed by the payload.
    pub fn seal_value(&self, block: &Digest, payload: &[u8]) -> Result<Vec<u8>> {
        if self.is_confidential() {
            return self.seal_confidential(block, payload);
        }
        let mut value = self.seal(block, payload)?;
        value.extend_from_slice(payload);
        Ok(value)
    }

    /// Verifies a stored value (header, then payload) for `block`, as the C++
    /// `open_value`: the Verdict of `verify(&value[..1024], block,
    /// &value[1024..])`, and the verified payload (a slice of the value) only
    /// when it is ok. A value shorter than an envelope is malformed
    /// ("envelope.size"); a payload of another length than its header says is
    /// size_mismatch ("payload_size").
    ///
    /// In a confidential namespace the payload returned is the plaintext, in
    /// new memory (`Cow::Owned`), and only when the GCM tag authenticates it.
    pub fn open_value<'v>(&self, value: &'v [u8], block: &Digest) -> (Option<Cow<'v, [u8]>>, Verdict) {
        if value.len() < ENVELOPE_SIZE {
            return (None, Verdict::new(Reason::Malformed, "envelope.size"));
        }
        let (header, payload) = value.split_at(ENVELOPE_SIZE);
        if self.is_confidential() {
            return match self.open_confidential(header, block, payload) {
                Ok(plain) => (Some(Cow::Owned(plain)), Verdict::OK),
                Err(v) => (None, v),
            };
        }
        let v = self.verify(header, block, payload);
        (if v.is_ok() { Some(Cow::Borrowed(payload)) } else { None }, v)
    }

    /// The AES-256-GCM cipher under K_c = HKDF-SHA-256(tenant secret, salt,
    /// info = 'C' || root || selector, 32 bytes).
    fn confidential_cipher(&self, selector: &[u8]) -> aes_gcm::Aes256Gcm {
        use aes_gcm::KeyInit;
        let key = self.confidential_key(selector).expect("a confidential namespace");
        aes_gcm::Aes256Gcm::new(&key.into())
    }

    /// K_c for a 4-byte key selector; None unless confidential (for the vectors' test).
    #[doc(hidden)]
    pub fn confidential_key(&self, selector: &[u8]) -> Option<[u8; 32]> {
        let kdf = self.kdf.as_ref()?;
        let mut key = [0u8; 32];
        kdf.expand_multi_info(&[b"C", &self.root().0, selector], &mut key).expect("32 bytes of HKDF output");
        Some(key)
    }

    fn seal_confidential(&self, block: &Digest, payload: &[u8]) -> Result<Vec<u8>> {
        use aes_gcm::AeadInPlace;
        let mut value = self.seal_size_only(block, payload.len() as u64);
        value[INTEGRITY_MODE] = IntegrityMode::Aes256Gcm as u8;
        getrandom::fill(&mut value[NONCE..PAYLOAD_DIGEST])
            .map_err(|e| Error::input("payload", format!("no random nonce for the payload: {e}")))?;
        let aad = value.clone();
        value.extend_from_slice(payload);
        let (header, body) = value.split_at_mut(ENVELOPE_SIZE);
        let tag = self
            .confidential_cipher(&header[NONCE..NONCE + 4])
            .encrypt_in_place_detached(header[NONCE + 4..PAYLOAD_DIGEST].into(), &aad, body)
            .map_err(|_| Error::input("payload", "AES-256-GCM refused the payload (too long)"))?;
        header[PAYLOAD_DIGEST..SECRET_ID].copy_from_slice(&tag);
        Ok(value)
    }

    /// The plaintext of a confidential value's ciphertext, when the header is
    /// this namespace's for `block` and the GCM tag authenticates both.
    fn open_confidential(&self, h: &[u8], block: &Digest, ciphertext: &[u8]) -> std::result::Result<Vec<u8>, Verdict> {
        use aes_gcm::AeadInPlace;
        let v = self.verify_except_payload(h, block, ciphertext.len() as u64);
        if !v.is_ok() {
            return Err(v);
        }
        if h[INTEGRITY_MODE] != IntegrityMode::Aes256Gcm as u8 {
            return Err(Verdict::new(Reason::PayloadMismatch, "envelope.integrity_mode"));
        }
        let mut aad = h.to_vec();
        aad[PAYLOAD_DIGEST..SECRET_ID].fill(0);
        let mut plain = ciphertext.to_vec();
        let opened = self.confidential_cipher(&h[NONCE..NONCE + 4]).decrypt_in_place_detached(
            h[NONCE + 4..PAYLOAD_DIGEST].into(),
            &aad,
            &mut plain,
            h[PAYLOAD_DIGEST..SECRET_ID].into(),
        );
        match opened {
            Ok(()) => Ok(plain),
            Err(_) => {
                plain.fill(0); // no unauthenticated plaintext is left behind
                Err(Verdict::new(Reason::PayloadMismatch, "payload"))
            }
        }
    }

    /// Checks a header against what this namespace would have sealed for
    /// `block` and a payload of `payload_size` bytes: everything but the
    /// payload digest or tag (routers do not read payloads), as the C++
    /// size-only verify under `PayloadCheck::size_only`. A plain namespace
    /// accepts a header that passes every other check; a keyed one accepts no
    /// payload it did not authenticate, so there such a header is
    /// payload_mismatch, on "payload", or on "envelope.integrity_mode" when it
    /// carries no tag.
    pub fn verify_header(&self, h: &[u8], block: &Digest, payload_size: u64) -> Verdict {
        let v = self.verify_except_payload(h, block, payload_size);
        if v.is_ok() && self.is_keyed() {
            let field =
                if h[INTEGRITY_MODE] == IntegrityMode::None as u8 { "envelope.integrity_mode" } else { "payload" };
            return Verdict::new(Reason::PayloadMismatch, field);
        }
        v
    }

    fn verify_except_payload(&self, h: &[u8], block: &Digest, payload_size: u64) -> Verdict {
        let v = preamble(h);
        if !v.is_ok() {
            return v;
        }
        let mut want = self.seal_size_only(block, payload_size);
        let mode = h[INTEGRITY_MODE];
        // Only the modes this namespace writes (none aside): a keyed header
        // read by a confidential reader, or the reverse, is named by its mode.
        if mode == IntegrityMode::None as u8 || mode == self.integrity_mode() as u8 {
            want[INTEGRITY_MODE] = mode;
            if has_nonce(mode) {
                want[NONCE..PAYLOAD_DIGEST].copy_from_slice(&h[NONCE..PAYLOAD_DIGEST]);
            }
            if mode != IntegrityMode::None as u8 {
                want[PAYLOAD_DIGEST..SECRET_ID].copy_from_slice(&h[PAYLOAD_DIGEST..SECRET_ID]);
            }
        }
        self.compare(h, &want, block)
    }

    /// Checks a header and the payload read with it, as the C++ verify does
    /// under the default `PayloadCheck::required`: every byte of the header,
    /// and the payload against its XXH3-128 digest (plain) or Poly1305 tag
    /// (keyed). Anything but ok is a miss: bytes that do not match are
    /// payload_mismatch on "payload", a header without a digest or tag
    /// payload_mismatch on "envelope.integrity_mode".
    ///
    /// In a confidential namespace `payload` is the stored ciphertext: the
    /// header and its GCM tag are checked (`open_value` also decrypts).
    pub fn verify(&self, h: &[u8], block: &Digest, payload: &[u8]) -> Verdict {
        if self.is_confidential() {
            return self.open_confidential(h, block, payload).err().unwrap_or(Verdict::OK);
        }
        let v = preamble(h);
        if !v.is_ok() {
            return v;
        }
        let mut want = self.seal_size_only(block, payload.len() as u64);
        want[INTEGRITY_MODE] = self.integrity_mode() as u8;
        if !self.is_keyed() || h[INTEGRITY_MODE] == IntegrityMode::Poly1305 as u8 {
            if self.is_keyed() {
                want[NONCE..PAYLOAD_DIGEST].copy_from_slice(&h[NONCE..PAYLOAD_DIGEST]);
            }
            let digest = self.digest_of(payload, &want);
            want[PAYLOAD_DIGEST..SECRET_ID].copy_from_slice(&digest);
        }
        self.compare(h, &want, block)
    }

    /// Compares a header whose preamble is right with the expected one and
    /// names the first difference in the order of docs/format.md.
    fn compare(&self, h: &[u8], want: &[u8], block: &Digest) -> Verdict {
        if equal_ct(h, want) {
            return Verdict::OK;
        }
        if want[INTEGRITY_MODE] != IntegrityMode::None as u8
            && equal_ct(&h[..PAYLOAD_DIGEST], &want[..PAYLOAD_DIGEST])
            && equal_ct(&h[SECRET_ID..], &want[SECRET_ID..])
        {
            return Verdict::new(Reason::PayloadMismatch, "payload");
        }
        if let Err(v) = parse_envelope(h) {
            return v;
        }
        let n = u32_at(h, IDENTITY_LEN) as usize;
        let theirs = decode_fields(&h[IDENTITY..IDENTITY + n]).unwrap_or_default();
        if h[NAMESPACE_KIND] != want[NAMESPACE_KIND] {
            Verdict::new(Reason::IdentityMismatch, "envelope.namespace_kind")
        } else if let Some(field) = first_difference_from(&theirs, &self.id) {
            Verdict::new(Reason::IdentityMismatch, field)
        } else if !equal_ct(&h[SECRET_ID..IDENTITY], &want[SECRET_ID..IDENTITY]) {
            Verdict::new(Reason::IdentityMismatch, "tenant.secret_id")
        } else if h[SLICE..SLICE + 16] != want[SLICE..SLICE + 16] {
            Verdict::new(Reason::IdentityMismatch, "shard")
        } else if !equal_ct(&h[BLOCK_HASH..BLOCK_HASH + 32], &block.0) {
            Verdict::new(Reason::BlockMismatch, "block_hash")
        } else if h[PAYLOAD_SIZE..PAYLOAD_SIZE + 8] != want[PAYLOAD_SIZE..PAYLOAD_SIZE + 8] {
            Verdict::new(Reason::SizeMismatch, "payload_size")
        } else if h[INTEGRITY_MODE] != want[INTEGRITY_MODE] {
            Verdict::new(Reason::PayloadMismatch, "envelope.integrity_mode")
        } else {
            Verdict::new(Reason::PayloadMismatch, "payload")
        }
    }
}
