// SPDX-License-Identifier: Apache-2.0

package kvkey

import (
	"bytes"
	"encoding/binary"
)

// FormatVersion is the byte format this package reads and writes.
const FormatVersion = 3

const identityTag = "kvkey.id"

// field is one salient field of the identity and its bytes in the encoding.
type field struct {
	path  string
	bytes []byte
}

func u32le(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func u64le(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
func str(s string) []byte   { return append(u32le(uint32(len(s))), s...) }
func flag(b bool) []byte {
	if b {
		return []byte{1}
	}
	return []byte{0}
}
func optDigest(d *Digest) []byte {
	if d == nil {
		return []byte{0}
	}
	return append([]byte{1}, d[:]...)
}

// fields lists the identity's salient fields in encoding order (docs/format.md,
// section 1). The adapter contributes its presence byte, then its members.
func fields(id *Identity) []field {
	scale := []byte{0}
	if d := id.KV.Quant.ScaleDType; d != nil {
		scale = []byte{1, byte(*d)}
	}
	out := []field{
		{"tenant", str(id.Tenant)},
		{"model.name", str(id.Model.Name)},
		{"model.revision", str(id.Model.Revision)},
		{"model.weights_epoch", u64le(id.Model.WeightsEpoch)},
		{"model.weights_fingerprint", optDigest(id.Model.WeightsFingerprint)},
		{"model.positional_fingerprint", optDigest(id.Model.PositionalFingerprint)},
		{"kv.dtype", []byte{byte(id.KV.DType)}},
		{"kv.quant.scheme", str(id.KV.Quant.Scheme)},
		{"kv.quant.group_size", u32le(id.KV.Quant.GroupSize)},
		{"kv.quant.scale_dtype", scale},
		{"kv.quant.zero_point", flag(id.KV.Quant.ZeroPoint)},
		{"kv.quant.scales_fingerprint", optDigest(id.KV.Quant.ScalesFingerprint)},
		{"kv.block_size", u32le(id.KV.BlockSize)},
		{"kv.num_layers", u32le(id.KV.NumLayers)},
		{"kv.num_kv_heads", u32le(id.KV.NumKVHeads)},
		{"kv.head_dim", u32le(id.KV.HeadDim)},
		{"kv.layout", str(id.KV.Layout)},
		{"kv.mla", flag(id.KV.MLA)},
		{"adapter", flag(id.Adapter != nil)},
	}
	if a := id.Adapter; a != nil {
		out = append(out, field{"adapter.name", str(a.Name)},
			field{"adapter.weights_fingerprint", append([]byte(nil), a.WeightsFingerprint[:]...)})
	}
	return out
}

// EncodeIdentity returns the canonical encoding of a validated identity
// (without the shard): the bytes its root hashes and every envelope stores.
func EncodeIdentity(id Identity) []byte {
	out := append([]byte(identityTag), FormatVersion, 0)
	for _, f := range fields(&id) {
		out = append(out, f.bytes...)
	}
	return out
}

// FirstDifference returns the dotted path of the first salient field in which
// a and b differ, in encoding order, or "" when they encode the same.
func FirstDifference(a, b Identity) string {
	fa, fb := fields(&a), fields(&b)
	for i := 0; i < len(fa) && i < len(fb); i++ {
		if !bytes.Equal(fa[i].bytes, fb[i].bytes) {
			return fa[i].path
		}
	}
	return ""
}

// reader consumes an encoding; any short read or bad value sets bad.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || n > len(r.b) {
		r.bad = true
		return make([]byte, n)
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}
func (r *reader) u8() byte    { return r.take(1)[0] }
func (r *reader) u32() uint32 { return binary.LittleEndian.Uint32(r.take(4)) }
func (r *reader) u64() uint64 { return binary.LittleEndian.Uint64(r.take(8)) }
func (r *reader) digest() (d Digest) {
	copy(d[:], r.take(32))
	return d
}
func (r *reader) str() string {
	n := r.u32()
	if n > 1024 { // longer than any valid string
		r.bad = true
		return ""
	}
	return string(r.take(int(n)))
}
func (r *reader) flag() bool {
	b := r.u8()
	r.bad = r.bad || b > 1
	return b == 1
}
func (r *reader) dtype() DType {
	d := DType(r.u8())
	r.bad = r.bad || !d.Valid()
	return d
}
func (r *reader) optDigest() *Digest {
	if !r.flag() {
		return nil
	}
	d := r.digest()
	return &d
}

// DecodeIdentity parses an identity encoding of the current format version.
// It reports false unless b is exactly one well-formed encoding. The values
// are not validated; the shard is left zero.
func DecodeIdentity(b []byte) (Identity, bool) {
	r := &reader{b: b}
	var id Identity
	if string(r.take(len(identityTag))) != identityTag || binary.LittleEndian.Uint16(r.take(2)) != FormatVersion {
		return id, false
	}
	id.Tenant = r.str()
	id.Model.Name = r.str()
	id.Model.Revision = r.str()
	id.Model.WeightsEpoch = r.u64()
	id.Model.WeightsFingerprint = r.optDigest()
	id.Model.PositionalFingerprint = r.optDigest()
	id.KV.DType = r.dtype()
	id.KV.Quant.Scheme = r.str()
	id.KV.Quant.GroupSize = r.u32()
	if r.flag() {
		d := r.dtype()
		id.KV.Quant.ScaleDType = &d
	}
	id.KV.Quant.ZeroPoint = r.flag()
	id.KV.Quant.ScalesFingerprint = r.optDigest()
	id.KV.BlockSize = r.u32()
	id.KV.NumLayers = r.u32()
	id.KV.NumKVHeads = r.u32()
	id.KV.HeadDim = r.u32()
	id.KV.Layout = r.str()
	id.KV.MLA = r.flag()
	if r.flag() {
		id.Adapter = &Adapter{Name: r.str(), WeightsFingerprint: r.digest()}
	}
	return id, !r.bad && len(r.b) == 0
}
