// SPDX-License-Identifier: Apache-2.0

package kvkey

import "testing"

// The ends of every range the C++ library's kvkey::is_unsafe_code_point
// refuses, and the code points one step outside them, which names may hold.
var (
	unsafeCodePoints = []rune{0x00, 0x09, 0x1f, 0x7f, 0x80, 0x85, 0x9f, 0x061c, 0x200b, 0x200d, 0x200f,
		0x2028, 0x202a, 0x202e, 0x2060, 0x2066, 0x2069, 0x206f, 0xfeff, 0xfff9, 0xfffa, 0xfffb}
	safeNeighbours = []rune{0x20, 0x7e, 0xa0, 0x061b, 0x061d, 0x200a, 0x2010, 0x2027, 0x202f, 0x205f, 0x2070,
		0xfefe, 0xff00, 0xfff8, 0xfffc, 0x1f999}
)

func textIdentity(model, adapter string) Identity {
	return Identity{Tenant: "t", Model: Model{Name: model, Revision: "r"},
		KV: KV{DType: FP16, Quant: Quant{Scheme: "none"}, BlockSize: 16, NumLayers: 4, NumKVHeads: 4, HeadDim: 8,
			Layout: "l"}, Shard: Shard{TPSize: 1, PPSize: 1}, Adapter: &Adapter{Name: adapter}}
}

func TestNamesRefuseUnsafeCodePoints(t *testing.T) {
	for _, cp := range unsafeCodePoints {
		name := "a" + string(cp) + "b"
		if _, err := NewNamespace(textIdentity(name, "x")); !hasField(err, IdentityErrorKind, "model.name") {
			t.Errorf("model name with U+%04X: got %v", cp, err)
		}
		if _, err := NewNamespace(textIdentity("m", name)); !hasField(err, IdentityErrorKind, "adapter.name") {
			t.Errorf("adapter name with U+%04X: got %v", cp, err)
		}
	}
}

func TestNamesTakeTheNeighboursOfUnsafeRanges(t *testing.T) {
	for _, cp := range safeNeighbours {
		name := "a" + string(cp) + "b"
		if _, err := NewNamespace(textIdentity(name, name)); err != nil {
			t.Errorf("name with U+%04X: %v", cp, err)
		}
	}
}

// Bytes that are not well-formed UTF-8 (overlong forms, surrogates, values
// above U+10FFFF, truncation) are no code points: the C++ library lets them
// pass, even when their bits would spell an unsafe one.
func TestNamesPassMalformedUTF8(t *testing.T) {
	for _, name := range []string{"\xc0\x80", "\xc1\x9f", "\xe0\x80\x85", "\xe0\x9f\xbf", "\xed\xa0\x80",
		"\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80", "a\xe2\x80", "\xe2\x80\x8b"[:2] + "b", "\x80\x85"} {
		if _, err := NewNamespace(textIdentity(name, "x")); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	if _, err := NewNamespace(textIdentity("\xff\xc2\x85", "x")); !hasField(err, IdentityErrorKind, "model.name") {
		t.Errorf("U+0085 after a stray byte: got %v", err)
	}
}
