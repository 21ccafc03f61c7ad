// SPDX-License-Identifier: Apache-2.0

package kvkey

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
)

// confidentialSalt is the HKDF salt of confidential payload keys
// (docs/format.md, section 6, "Mode aes256_gcm"); no other derivation uses it.
const confidentialSalt = "kvkey v4 confidential"

// confidentialAEAD is AES-256-GCM under K_c = HKDF-SHA-256(IKM = tenant
// secret, salt, info = 'C' || root || selector, 32 bytes), selector the
// header's nonce bytes 0..4.
func (ns *Namespace) confidentialAEAD(selector []byte) cipher.AEAD {
	block, err := aes.NewCipher(ns.confidentialKey(selector))
	if err != nil {
		panic(err) // the key is 32 bytes
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return gcm
}

// confidentialKey is K_c for the 4-byte key selector.
func (ns *Namespace) confidentialKey(selector []byte) []byte {
	info := append(append([]byte{'C'}, ns.root[:]...), selector...)
	key, err := hkdf.Key(sha256.New, ns.secret, []byte(confidentialSalt), string(info), 32)
	if err != nil {
		panic(err) // 32 bytes of SHA-256 output are always available
	}
	return key
}

// sealConfidential returns the value (header, then ciphertext) of a
// confidential namespace for block and its plaintext payload.
func (ns *Namespace) sealConfidential(block Digest, payload []byte) []byte {
	h := ns.SealSizeOnly(block, uint64(len(payload)))
	h[offIntegrity] = byte(ModeAESGCM)
	rand.Read(h[offNonce:offPayloadDigest]) // never fails (crypto/rand, Go 1.24 and later)
	sealed := ns.confidentialAEAD(h[offNonce:offNonce+4]).Seal(nil, h[offNonce+4:offPayloadDigest], payload, h)
	n := len(payload)
	copy(h[offPayloadDigest:offSecretID], sealed[n:])
	return append(h, sealed[:n]...)
}

// openConfidential checks header h and ciphertext for block and returns the
// plaintext only when the GCM tag authenticates both.
func (ns *Namespace) openConfidential(h []byte, block Digest, ciphertext []byte) ([]byte, Verdict) {
	if v := ns.verifyExceptPayload(h, block, uint64(len(ciphertext))); !v.OK() {
		return nil, v
	}
	if IntegrityMode(h[offIntegrity]) != ModeAESGCM {
		return nil, Verdict{ReasonPayloadMismatch, "envelope.integrity_mode"}
	}
	aad := append([]byte(nil), h...)
	clear(aad[offPayloadDigest:offSecretID])
	sealed := append(append(make([]byte, 0, len(ciphertext)+16), ciphertext...), h[offPayloadDigest:offSecretID]...)
	plain, err := ns.confidentialAEAD(h[offNonce:offNonce+4]).Open(sealed[:0], h[offNonce+4:offPayloadDigest], sealed, aad)
	if err != nil {
		return nil, Verdict{ReasonPayloadMismatch, "payload"}
	}
	return plain, Verdict{}
}
