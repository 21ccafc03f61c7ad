// SPDX-License-Identifier: Apache-2.0

package kvkey

import (
	"bytes"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

func TestScopedBlockHashes(t *testing.T) {
	id := func(tenant string) Identity {
		return Identity{Tenant: tenant, Model: Model{Name: "m", Revision: "r"},
			KV: KV{DType: FP16, BlockSize: 4, NumLayers: 2, NumKVHeads: 2, HeadDim: 8, Layout: "l"}}
	}
	scope, err := NewScopeNamespace("sys", id("a"))
	if err != nil || scope.Identity().Tenant != "_scope.sys" {
		t.Fatal(err)
	}
	a, _ := NewNamespace(id("a"), WithSecret(bytes.Repeat([]byte{1}, 32)))
	b, _ := NewNamespace(id("b"), WithSecret(bytes.Repeat([]byte{2}, 32)))
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
	opts := &HashOptions{Salt: []byte("salt"), Extras: []ExtraKey{{2, 6, []byte("img")}}}
	ha, err := ScopedBlockHashes(scope, a, tokens, 8, opts)
	if err != nil || len(ha) != 3 {
		t.Fatalf("%v %v", ha, err)
	}
	hs, _ := scope.BlockHashes(tokens[:8], &HashOptions{Extras: opts.Extras})
	hb, _ := ScopedBlockHashes(scope, b, tokens, 8, opts)
	if ha[0] != hs[0] || ha[1] != hs[1] || hb[0] != hs[0] || hb[1] != hs[1] {
		t.Error("the scope's blocks are not the scope's chain")
	}
	if ha[2] == hb[2] {
		t.Error("two tenants' private blocks after one scope prefix are equal")
	}
	plain, _ := a.BlockHashes(tokens, opts)
	if zero, _ := ScopedBlockHashes(scope, a, tokens, 0, opts); len(zero) != 3 || zero[2] != plain[2] {
		t.Error("scope_tokens 0 is not the tenant's chain")
	}
	if _, err := ScopedBlockHashes(scope, a, tokens, 6, opts); !hasField(err, InputErrorKind, "scope_tokens") {
		t.Errorf("scope_tokens 6: %v", err)
	}
	if short, _ := ScopedBlockHashes(scope, a, tokens[:6], 8, opts); len(short) != 1 || short[0] != hs[0] {
		t.Error("a request shorter than the scope")
	}
	if out := os.Getenv("KVKEY_SCOPE_OUT"); out != "" { // a cross-check with another implementation
		hexes := func(ds []Digest) string {
			var s []string
			for _, d := range ds {
				s = append(s, d.String())
			}
			return strings.Join(s, ",")
		}
		_ = os.WriteFile(out, []byte(hex.EncodeToString(scope.Encoding())+" "+hex.EncodeToString(a.Encoding())+" "+
			hexes(ha)), 0o600)
	}
}
