// SPDX-License-Identifier: Apache-2.0

package kvkey

import (
	"bytes"
	"encoding/binary"
	"reflect"
)

// FormatVersion is the byte format this package reads and writes.
const FormatVersion = 4

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
// section 1), from the field table. The adapter contributes its presence byte,
// then its members.
func fields(id *Identity) []field {
	var out []field
	visitSalient(reflect.ValueOf(id).Elem(), identityFields, func(path string, b []byte) {
		out = append(out, field{path, b})
	})
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
	decodeSalient(r, reflect.ValueOf(&id).Elem(), identityFields)
	return id, !r.bad && len(r.b) == 0
}
