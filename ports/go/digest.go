// SPDX-License-Identifier: Apache-2.0

package kvkey

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// Digest is a 32-byte SHA-256 or HMAC-SHA-256 value: a root, block hash,
// object hash or fingerprint.
type Digest [32]byte

// String returns the digest as 64 lowercase hex digits.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// U64 is the digest's 64-bit projection for indexes keyed on u64
// (docs/format.md, section 11): its first 8 bytes read big-endian, so its 16
// hex digits are the first 16 hex digits of the digest.
func (d Digest) U64() uint64 { return binary.BigEndian.Uint64(d[:8]) }

// ParseDigest reads 64 hex digits (either case).
func ParseDigest(s string) (Digest, error) {
	var d Digest
	if len(s) != 2*len(d) {
		return d, inputError("", fmt.Sprintf("hex digest must be 64 hex characters, got %d characters", len(s)))
	}
	if _, err := hex.Decode(d[:], []byte(s)); err != nil {
		return d, inputError("", "hex digest has a non-hex character")
	}
	return d, nil
}
