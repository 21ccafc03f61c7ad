// SPDX-License-Identifier: Apache-2.0

package kvkey

import (
	"crypto/rand"
	"encoding/binary"

	"github.com/zeebo/xxh3"
	"golang.org/x/crypto/chacha20"
	"golang.org/x/crypto/poly1305"
)

// payloadKey is a keyed namespace's Poly1305 payload key (docs/format.md,
// section 6, "Mode poly1305"): K_p = HMAC-SHA-256(secret, 'P' || root).
func (ns *Namespace) payloadKey() [32]byte {
	var k [32]byte
	d := ns.hash([]byte{'P'}, ns.root[:])
	copy(k[:], d[:])
	return k
}

// digestOf computes the digest or tag header h (EnvelopeSize bytes, its
// integrity mode and nonce set) stores for payload, over payload || h with
// h's 16 digest bytes taken as zero: XXH3-128 in canonical form in a plain
// namespace, Poly1305 under the one-time key of h's nonce in a keyed one.
func (ns *Namespace) digestOf(payload, h []byte) [16]byte {
	var zero [16]byte
	if !ns.keyed {
		x := xxh3.New128()
		x.Write(payload)
		x.Write(h[:offPayloadDigest])
		x.Write(zero[:])
		x.Write(h[offSecretID:])
		return x.Sum128().Bytes()
	}
	// The one-time key: the first 32 bytes of the ChaCha20 keystream under
	// K_p, initial block counter u32le N[0:4], 96-bit nonce N[4:16].
	key := ns.payloadKey()
	nonce := h[offNonce:offPayloadDigest]
	c, err := chacha20.NewUnauthenticatedCipher(key[:], nonce[4:])
	if err != nil {
		panic(err) // the key and nonce sizes are fixed
	}
	c.SetCounter(binary.LittleEndian.Uint32(nonce[:4]))
	var otk [32]byte
	c.XORKeyStream(otk[:], otk[:])
	m := poly1305.New(&otk)
	m.Write(payload)
	m.Write(h[:offPayloadDigest])
	m.Write(zero[:])
	m.Write(h[offSecretID:])
	var tag [16]byte
	m.Sum(tag[:0])
	return tag
}

// Mode is the integrity mode Seal writes: ModeXXH3 in a plain namespace,
// ModePoly1305 in a keyed one.
func (ns *Namespace) Mode() IntegrityMode {
	if ns.keyed {
		return ModePoly1305
	}
	return ModeXXH3
}

// Seal returns the header of this namespace for block and its payload, as the
// C++ seal(block_hash, payload) writes it: the payload's size and its digest
// (plain: XXH3-128 of the payload and the header) or tag (keyed: Poly1305
// under a fresh random nonce from crypto/rand).
func (ns *Namespace) Seal(block Digest, payload []byte) []byte {
	h := ns.SealSizeOnly(block, uint64(len(payload)))
	h[offIntegrity] = byte(ns.Mode())
	if ns.keyed {
		rand.Read(h[offNonce:offPayloadDigest]) // never fails (crypto/rand, Go 1.24 and later)
	}
	d := ns.digestOf(payload, h)
	copy(h[offPayloadDigest:offSecretID], d[:])
	return h
}

// Verify checks a header and the payload read with it, as the C++
// verify(header, block_hash, payload) under the default
// PayloadCheck::required: every byte of the header, and the payload against
// its digest (plain) or tag (keyed). Anything but OK is a miss: bytes that do
// not match are payload_mismatch on "payload", a header without a digest or
// tag payload_mismatch on "envelope.integrity_mode".
func (ns *Namespace) Verify(h []byte, block Digest, payload []byte) Verdict {
	if v := preamble(h); !v.OK() {
		return v
	}
	want := ns.SealSizeOnly(block, uint64(len(payload)))
	want[offIntegrity] = byte(ns.Mode())
	if !ns.keyed || IntegrityMode(h[offIntegrity]) == ModePoly1305 {
		if ns.keyed {
			copy(want[offNonce:offPayloadDigest], h[offNonce:offPayloadDigest])
		}
		d := ns.digestOf(payload, want)
		copy(want[offPayloadDigest:offSecretID], d[:])
	}
	return ns.compare(h, want, block, uint64(len(payload)))
}

// SealValue returns one store value for block (docs/format.md, "Stored
// values"): the header Seal writes, immediately followed by the payload.
func (ns *Namespace) SealValue(block Digest, payload []byte) []byte {
	return append(ns.Seal(block, payload), payload...)
}

// OpenValue verifies a stored value (header, then payload) for block, as the
// C++ open_value: the Verdict of Verify(value[:EnvelopeSize], block,
// value[EnvelopeSize:]) and, only when it is OK, the verified payload (a
// slice of value). A value shorter than an envelope is malformed
// ("envelope.size"); a payload of another length than its header says is
// size_mismatch ("payload_size").
func (ns *Namespace) OpenValue(value []byte, block Digest) ([]byte, Verdict) {
	if len(value) < EnvelopeSize {
		return nil, Verdict{ReasonMalformed, "envelope.size"}
	}
	v := ns.Verify(value[:EnvelopeSize], block, value[EnvelopeSize:])
	if !v.OK() {
		return nil, v
	}
	return value[EnvelopeSize:], v
}
