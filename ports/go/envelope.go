// SPDX-License-Identifier: Apache-2.0

package kvkey

import (
	"bytes"
	"crypto/subtle"
	"encoding/binary"
)

// EnvelopeSize is the size of every envelope (header), for every identity.
const EnvelopeSize = 1024

// Offsets of the envelope's fields (docs/format.md, section 6).
const (
	offMagic         = 0
	offVersion       = 8
	offSize          = 10
	offIdentityLen   = 12
	offBlockHash     = 16
	offPayloadSize   = 48
	offSlice         = 56
	offNamespaceKind = 72
	offIntegrity     = 73
	offReserved      = 74
	offNonce         = 80
	offPayloadDigest = 96
	offSecretID      = 112
	offIdentity      = 120
)

const envelopeMagic = "KVKEYENV"

// NamespaceKind says which kind of namespace sealed a header.
type NamespaceKind uint8

// The namespace kinds; the codes are part of the byte format.
const (
	Plain NamespaceKind = 1 // SHA-256
	Keyed NamespaceKind = 2 // HMAC-SHA-256 under a tenant secret
)

// IntegrityMode says how a header protects its payload.
type IntegrityMode uint8

// The integrity modes; the codes are part of the byte format.
const (
	ModeNone     IntegrityMode = 0 // size only
	ModeXXH3     IntegrityMode = 1 // XXH3-128 of the payload (plain namespaces)
	ModePoly1305 IntegrityMode = 2 // Poly1305 tag (keyed namespaces)
)

func modeAllowed(kind NamespaceKind, mode IntegrityMode) bool {
	return mode == ModeNone || kind == Plain && mode == ModeXXH3 || kind == Keyed && mode == ModePoly1305
}

// Reason says why a header was accepted or rejected; its names are the C++
// library's.
type Reason uint8

// The reasons, as kvkey::Reason.
const (
	ReasonOK Reason = iota
	ReasonMalformed
	ReasonUnsupportedVersion
	ReasonIdentityMismatch
	ReasonBlockMismatch
	ReasonSizeMismatch
	ReasonPayloadMismatch
)

var reasonNames = [...]string{"ok", "malformed", "unsupported_version", "identity_mismatch", "block_mismatch",
	"size_mismatch", "payload_mismatch"}

// String returns the reason's stable name ("identity_mismatch").
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "invalid"
}

// Verdict is the outcome of checking a header: anything but OK is a miss.
// Field names the first differing identity field ("kv.dtype") or the part of
// the envelope ("envelope.size", "block_hash"); it is empty when OK.
type Verdict struct {
	Reason Reason
	Field  string
}

// OK reports whether the header was accepted.
func (v Verdict) OK() bool { return v.Reason == ReasonOK }

// Envelope is the decoded contents of a header.
type Envelope struct {
	Identity      Identity // shard left zero; see Slice
	Slice         Slice
	BlockHash     Digest
	PayloadSize   uint64
	Kind          NamespaceKind
	Mode          IntegrityMode
	Nonce         [16]byte
	PayloadDigest [16]byte
	SecretID      [8]byte // the keyed namespace's secret id; zero in a plain header
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func preamble(h []byte) Verdict {
	switch {
	case len(h) != EnvelopeSize:
		return Verdict{ReasonMalformed, "envelope.size"}
	case string(h[offMagic:offMagic+8]) != envelopeMagic:
		return Verdict{ReasonMalformed, "envelope.magic"}
	case binary.LittleEndian.Uint16(h[offVersion:]) != FormatVersion:
		return Verdict{ReasonUnsupportedVersion, "envelope.format_version"}
	}
	return Verdict{}
}

// ParseEnvelope decodes a header without judging it against an identity. When
// the bytes are not a well-formed envelope of this format version it returns
// nil and the Verdict saying why (malformed or unsupported_version, and the
// field), in the order of docs/format.md.
func ParseEnvelope(h []byte) (*Envelope, Verdict) {
	if v := preamble(h); !v.OK() {
		return nil, v
	}
	if binary.LittleEndian.Uint16(h[offSize:]) != EnvelopeSize {
		return nil, Verdict{ReasonMalformed, "envelope.size"}
	}
	n := binary.LittleEndian.Uint32(h[offIdentityLen:])
	if n > EnvelopeSize-offIdentity {
		return nil, Verdict{ReasonMalformed, "envelope.identity"}
	}
	id, ok := DecodeIdentity(h[offIdentity : offIdentity+int(n)])
	if !ok {
		return nil, Verdict{ReasonMalformed, "envelope.identity"}
	}
	if !allZero(h[offIdentity+int(n):]) || !allZero(h[offReserved:offNonce]) {
		return nil, Verdict{ReasonMalformed, "envelope.padding"}
	}
	kind, mode := NamespaceKind(h[offNamespaceKind]), IntegrityMode(h[offIntegrity])
	switch {
	case kind != Plain && kind != Keyed:
		return nil, Verdict{ReasonMalformed, "envelope.namespace_kind"}
	case !modeAllowed(kind, mode):
		return nil, Verdict{ReasonMalformed, "envelope.integrity_mode"}
	case mode != ModePoly1305 && !allZero(h[offNonce:offPayloadDigest]):
		return nil, Verdict{ReasonMalformed, "envelope.nonce"}
	case mode == ModeNone && !allZero(h[offPayloadDigest:offSecretID]):
		return nil, Verdict{ReasonMalformed, "envelope.payload_digest"}
	case kind == Plain && !allZero(h[offSecretID:offIdentity]):
		return nil, Verdict{ReasonMalformed, "envelope.secret_id"}
	}
	e := &Envelope{Identity: id, PayloadSize: binary.LittleEndian.Uint64(h[offPayloadSize:]), Kind: kind, Mode: mode}
	e.Slice = Slice{binary.LittleEndian.Uint32(h[offSlice:]), binary.LittleEndian.Uint32(h[offSlice+4:]),
		binary.LittleEndian.Uint32(h[offSlice+8:]), binary.LittleEndian.Uint32(h[offSlice+12:])}
	copy(e.BlockHash[:], h[offBlockHash:])
	copy(e.Nonce[:], h[offNonce:])
	copy(e.PayloadDigest[:], h[offPayloadDigest:])
	copy(e.SecretID[:], h[offSecretID:])
	return e, Verdict{}
}

func (ns *Namespace) kind() NamespaceKind {
	if ns.keyed {
		return Keyed
	}
	return Plain
}

// SealSizeOnly returns the header a plain namespace writes for block when it
// cannot see the payload's bytes (integrity mode none). The C++ library
// refuses to seal one in a keyed namespace, and no keyed reader accepts it.
func (ns *Namespace) SealSizeOnly(block Digest, payloadSize uint64) []byte {
	h := make([]byte, EnvelopeSize)
	copy(h, envelopeMagic)
	binary.LittleEndian.PutUint16(h[offVersion:], FormatVersion)
	binary.LittleEndian.PutUint16(h[offSize:], EnvelopeSize)
	binary.LittleEndian.PutUint32(h[offIdentityLen:], uint32(len(ns.encoding)))
	copy(h[offBlockHash:], block[:])
	binary.LittleEndian.PutUint64(h[offPayloadSize:], payloadSize)
	for i, v := range []uint32{ns.slice.KVHeadBegin, ns.slice.KVHeadEnd, ns.slice.LayerBegin, ns.slice.LayerEnd} {
		binary.LittleEndian.PutUint32(h[offSlice+4*i:], v)
	}
	h[offNamespaceKind] = byte(ns.kind())
	if ns.keyed {
		copy(h[offSecretID:], ns.secretID[:])
	}
	copy(h[offIdentity:], ns.encoding)
	return h
}

// VerifyHeader checks a header read from the store for block against what
// this namespace would have sealed for a payload of payloadSize bytes: magic,
// version, identity, namespace kind, slice, block hash and size, with the
// Reason and field of the C++ library. The payload digest or tag is not
// checked (routers do not read payloads), as in the C++ size-only verify under
// PayloadCheck::size_only: a plain namespace accepts a header that passes
// every other check. A keyed namespace accepts no payload it did not
// authenticate, so there such a header is payload_mismatch, on "payload", or
// on "envelope.integrity_mode" when it carries no tag.
func (ns *Namespace) VerifyHeader(h []byte, block Digest, payloadSize uint64) Verdict {
	v := ns.verifyExceptPayload(h, block, payloadSize)
	if v.OK() && ns.keyed {
		if h[offIntegrity] == byte(ModeNone) {
			return Verdict{ReasonPayloadMismatch, "envelope.integrity_mode"}
		}
		return Verdict{ReasonPayloadMismatch, "payload"}
	}
	return v
}

func (ns *Namespace) verifyExceptPayload(h []byte, block Digest, payloadSize uint64) Verdict {
	if v := preamble(h); !v.OK() {
		return v
	}
	want := ns.SealSizeOnly(block, payloadSize)
	if mode := IntegrityMode(h[offIntegrity]); modeAllowed(ns.kind(), mode) {
		want[offIntegrity] = byte(mode)
		if mode == ModePoly1305 {
			copy(want[offNonce:offPayloadDigest], h[offNonce:offPayloadDigest])
		}
		if mode != ModeNone {
			copy(want[offPayloadDigest:offSecretID], h[offPayloadDigest:offSecretID])
		}
	}
	return ns.compare(h, want, block, payloadSize)
}

// compare checks a header whose preamble is right against want, the header
// this namespace expects, and names the first difference in the order of
// docs/format.md ("Verification").
func (ns *Namespace) compare(h, want []byte, block Digest, payloadSize uint64) Verdict {
	if subtle.ConstantTimeCompare(h, want) == 1 {
		return Verdict{}
	}
	if want[offIntegrity] != byte(ModeNone) && bytes.Equal(h[:offPayloadDigest], want[:offPayloadDigest]) &&
		bytes.Equal(h[offSecretID:], want[offSecretID:]) {
		return Verdict{ReasonPayloadMismatch, "payload"}
	}
	e, v := ParseEnvelope(h)
	if e == nil {
		return v
	}
	switch {
	case e.Kind != ns.kind():
		return Verdict{ReasonIdentityMismatch, "envelope.namespace_kind"}
	case FirstDifference(e.Identity, ns.id) != "":
		return Verdict{ReasonIdentityMismatch, FirstDifference(e.Identity, ns.id)}
	case e.SecretID != ns.secretID:
		return Verdict{ReasonIdentityMismatch, "tenant.secret_id"}
	case e.Slice != ns.slice:
		return Verdict{ReasonIdentityMismatch, "shard"}
	case subtle.ConstantTimeCompare(e.BlockHash[:], block[:]) != 1:
		return Verdict{ReasonBlockMismatch, "block_hash"}
	case e.PayloadSize != payloadSize:
		return Verdict{ReasonSizeMismatch, "payload_size"}
	case h[offIntegrity] != want[offIntegrity]:
		return Verdict{ReasonPayloadMismatch, "envelope.integrity_mode"}
	}
	return Verdict{ReasonPayloadMismatch, "payload"}
}
