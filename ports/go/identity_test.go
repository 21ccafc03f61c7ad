// SPDX-License-Identifier: Apache-2.0

package kvkey

import "testing"

func minimalIdentity() Identity {
	return Identity{Tenant: "t", Model: Model{Name: "m", Revision: "r"},
		KV: KV{DType: FP16, BlockSize: 16, NumLayers: 4, NumKVHeads: 4, HeadDim: 8, Layout: "l"}}
}

// Identities with several defects are refused on the first in the order of
// docs/format.md: members in table order, then the quant rules, then the
// geometry.
func TestValidationOrderWithSeveralDefects(t *testing.T) {
	for _, c := range []struct {
		field string
		edit  func(*Identity)
	}{
		{"kv.block_size", func(id *Identity) {
			id.KV.Quant = Quant{Scheme: "none", GroupSize: 4}
			id.KV.BlockSize = 0
		}},
		{"kv.num_layers", func(id *Identity) { id.KV.NumLayers, id.KV.Layout = 0, "" }},
		{"kv.num_kv_heads", func(id *Identity) { id.KV.NumKVHeads, id.KV.HeadDim, id.Shard.TPSize = 0, 0, 3 }},
		{"adapter.name", func(id *Identity) {
			id.KV.Quant = Quant{Scheme: "none", ZeroPoint: true}
			id.Adapter = &Adapter{}
		}},
		{"kv.quant.scale_dtype", func(id *Identity) {
			bad := DType(200)
			id.KV.Quant = Quant{Scheme: "none", GroupSize: 1, ScaleDType: &bad}
		}},
		{"kv.quant.zero_point", func(id *Identity) {
			id.KV.Quant = Quant{Scheme: "none", ZeroPoint: true, ScalesFingerprint: &Digest{}}
			id.Shard = Shard{TPSize: 3, PPSize: 1}
		}},
		{"kv.dtype", func(id *Identity) { id.KV.DType, id.KV.Quant.Scheme = DType(99), "A" }},
		{"kv.quant.scheme", func(id *Identity) { id.KV.Quant, id.KV.BlockSize = Quant{Scheme: "A"}, 0 }},
		{"shard.tp_rank", func(id *Identity) { id.Shard = Shard{TPSize: 3, TPRank: 5, PPSize: 3} }},
		{"shard.tp_size", func(id *Identity) { id.Shard = Shard{TPSize: 3, PPSize: 3} }},
	} {
		id := minimalIdentity()
		c.edit(&id)
		if _, err := NewNamespace(id); !hasField(err, IdentityErrorKind, c.field) {
			t.Errorf("%s: got %v", c.field, err)
		}
	}
}

// The zero Quant and the zero Shard are the documented defaults.
func TestZeroValuesAreDefaults(t *testing.T) {
	id := minimalIdentity()
	ns, err := NewNamespace(id)
	if err != nil {
		t.Fatal(err)
	}
	explicit := id
	explicit.KV.Quant, explicit.Shard = Quant{Scheme: "none"}, Shard{TPSize: 1, PPSize: 1}
	want, err := NewNamespace(explicit)
	if err != nil {
		t.Fatal(err)
	}
	if ns.Root() != want.Root() || ns.Slice() != want.Slice() || ns.Identity().KV.Quant.Scheme != "none" {
		t.Errorf("zero values: root %s slice %v, want %s %v", ns.Root(), ns.Slice(), want.Root(), want.Slice())
	}
	// Only the whole zero value is a default: an empty scheme beside another
	// quant member, or a zero size beside a rank, is refused.
	id.KV.Quant = Quant{GroupSize: 8}
	if _, err := NewNamespace(id); !hasField(err, IdentityErrorKind, "kv.quant.scheme") {
		t.Errorf("empty scheme with a group size: %v", err)
	}
	id = minimalIdentity()
	id.Shard = Shard{PPSize: 2, PPRank: 1}
	if _, err := NewNamespace(id); !hasField(err, IdentityErrorKind, "shard.tp_size") {
		t.Errorf("zero tp_size: %v", err)
	}
	// The strict check (identity files, the conformance testee) refuses the
	// zero values as the C++ library does.
	if _, err := validated(minimalIdentity(), false); !hasField(err, IdentityErrorKind, "kv.quant.scheme") {
		t.Errorf("strict check of the zero Quant: %v", err)
	}
}
