// SPDX-License-Identifier: Apache-2.0
//! 32-byte digests: roots, block hashes, object hashes, fingerprints.

use std::fmt;

use crate::error::{Error, Result};

/// A SHA-256 or HMAC-SHA-256 value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest(pub [u8; 32]);

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * bytes.len());
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Decodes hex digits (either case, an even number); None otherwise.
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    b.chunks(2).map(|p| Some(value(p[0])? << 4 | value(p[1])?)).collect()
}

impl Digest {
    /// Parses 64 hex digits (either case).
    pub fn from_hex(s: &str) -> Result<Digest> {
        match from_hex(s) {
            Some(v) if v.len() == 32 => {
                let mut d = [0u8; 32];
                d.copy_from_slice(&v);
                Ok(Digest(d))
            }
            _ => Err(Error::input("digest", "expected 64 hex digits")),
        }
    }

    /// 64 lowercase hex digits.
    pub fn hex(&self) -> String {
        hex(&self.0)
    }

    /// The 64-bit projection for indexes keyed on u64 (docs/format.md,
    /// section 11): the first 8 bytes read big-endian, so its 16 hex digits
    /// are the digest's first 16.
    pub fn u64_projection(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[..8]);
        u64::from_be_bytes(b)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}
