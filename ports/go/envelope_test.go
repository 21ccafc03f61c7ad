// SPDX-License-Identifier: Apache-2.0

package kvkey

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
)

func testIdentity() Identity {
	return Identity{Tenant: "team-a", Model: Model{Name: "Qwen/Qwen2.5-7B-Instruct", Revision: "r1"},
		KV: KV{DType: FP16, Quant: Quant{Scheme: "none"}, BlockSize: 4, NumLayers: 4, NumKVHeads: 2, HeadDim: 8,
			Layout: "l"}, Shard: Shard{TPSize: 2, TPRank: 1, PPSize: 1}}
}

func secretOf(b byte) []byte { return bytes.Repeat([]byte{b}, MinSecretSize) }

// keyedHeader is what a keyed writer seals (mode poly1305, a nonce and a tag;
// the tag is not checked by the size-only verify).
func keyedHeader(ns *Namespace, block Digest, size uint64) []byte {
	h := ns.SealSizeOnly(block, size)
	h[offIntegrity] = byte(ModePoly1305)
	for i := offNonce; i < offSecretID; i++ {
		h[i] = byte(i)
	}
	return h
}

func TestEnvelopeV4Layout(t *testing.T) {
	ns, err := NewNamespace(testIdentity(), WithSecret(secretOf(7)))
	if err != nil {
		t.Fatal(err)
	}
	block := Digest{1, 2, 3}
	h := ns.SealSizeOnly(block, 99)
	if binary.LittleEndian.Uint16(h[8:]) != 4 {
		t.Errorf("version bytes % x", h[8:10])
	}
	sid, keyed := ns.SecretID()
	if !keyed || !bytes.Equal(h[112:120], sid[:]) || sid == ([SecretIDSize]byte{}) {
		t.Errorf("secret id at 112: % x, namespace's % x", h[112:120], sid)
	}
	n := binary.LittleEndian.Uint32(h[12:])
	if !bytes.Equal(h[120:120+n], ns.Encoding()) || !allZero(h[120+n:]) {
		t.Errorf("identity encoding not at 120")
	}
	env, v := ParseEnvelope(h)
	if env == nil || env.SecretID != sid || env.Kind != Keyed {
		t.Fatalf("parse: %+v %v", env, v)
	}
	plain, _ := NewNamespace(testIdentity())
	if sid, keyed := plain.SecretID(); keyed || !allZero(plain.SealSizeOnly(block, 99)[112:120]) ||
		sid != ([SecretIDSize]byte{}) {
		t.Errorf("a plain namespace has a secret id")
	}
}

func TestSecretIDDependsOnlyOnTheSecret(t *testing.T) {
	a := testIdentity()
	b := testIdentity()
	b.Tenant, b.Model.WeightsEpoch, b.Shard.TPRank = "team-b", 9, 0
	na, _ := NewNamespace(a, WithSecret(secretOf(7)))
	nb, _ := NewNamespace(b, WithSecret(secretOf(7)))
	nc, _ := NewNamespace(a, WithSecret(secretOf(8)))
	sa, _ := na.SecretID()
	sb, _ := nb.SecretID()
	sc, _ := nc.SecretID()
	if sa != sb || sa == sc || sa != SecretID(secretOf(7)) {
		t.Errorf("secret ids: %x %x %x", sa, sb, sc)
	}
}

func TestStoreKeyV4(t *testing.T) {
	id := testIdentity()
	plain, _ := NewNamespace(id)
	keyed, _ := NewNamespace(id, WithSecret(secretOf(7)))
	sid, _ := keyed.SecretID()
	if got := plain.KeyPrefix(); got != "kvk4/team-a/p/Qwen%2FQwen2.5-7B-Instruct/e0/" {
		t.Errorf("plain prefix %s", got)
	}
	want := "kvk4/team-a/k" + hex.EncodeToString(sid[:]) + "/"
	if keyed.SecretPrefix() != want || !strings.HasPrefix(keyed.KeyPrefix(), want) {
		t.Errorf("keyed prefixes %s %s, want %s...", keyed.SecretPrefix(), keyed.KeyPrefix(), want)
	}
	if plain.TenantPrefix() != "kvk4/team-a/" || keyed.TenantPrefix() != "kvk4/team-a/" {
		t.Errorf("tenant prefixes %s %s", plain.TenantPrefix(), keyed.TenantPrefix())
	}
	// The model segment: at most 80 characters, an escape never split.
	for _, c := range []struct{ name, want string }{
		{strings.Repeat("a", 128), strings.Repeat("a", 80)},
		{strings.Repeat("a", 78) + "/b", strings.Repeat("a", 78)},
		{strings.Repeat("a", 77) + "/b", strings.Repeat("a", 77) + "%2F"},
	} {
		id.Model.Name = c.name
		ns, err := NewNamespace(id)
		if err != nil {
			t.Fatal(err)
		}
		if got := ns.KeyPrefix(); got != "kvk4/team-a/p/"+c.want+"/e0/" {
			t.Errorf("%s: prefix %s", c.name, got)
		}
	}
	// The longest key fits max_store_key_size (256).
	id.Tenant, id.Model.Name, id.Model.WeightsEpoch = strings.Repeat("t", MaxTenant), strings.Repeat("a", 128), ^uint64(0)
	ns, _ := NewNamespace(id, WithSecret(secretOf(1)))
	if k := ns.StoreKey(Digest{}); len(k) != 255 {
		t.Errorf("longest key is %d bytes: %s", len(k), k)
	}
}

func TestVerifyV3SecretID(t *testing.T) {
	id := testIdentity()
	block := Digest{9}
	plain, _ := NewNamespace(id)
	keyed, _ := NewNamespace(id, WithSecret(secretOf(7)))
	rotated, _ := NewNamespace(id, WithSecret(secretOf(8)))

	// A plain header with a secret id is malformed, after the digest checks.
	h := plain.SealSizeOnly(block, 10)
	h[115] = 1
	if v := plain.VerifyHeader(h, block, 10); v != (Verdict{ReasonMalformed, "envelope.secret_id"}) {
		t.Errorf("plain header with a secret id: %v %s", v.Reason, v.Field)
	}
	h[offPayloadDigest] = 1 // a digest in mode none is named first
	if v := plain.VerifyHeader(h, block, 10); v != (Verdict{ReasonMalformed, "envelope.payload_digest"}) {
		t.Errorf("plain header with a secret id and a digest in mode none: %v %s", v.Reason, v.Field)
	}

	// A value sealed under another secret of the tenant names the secret.
	old := keyedHeader(keyed, block, 10)
	if v := rotated.VerifyHeader(old, block, 10); v != (Verdict{ReasonIdentityMismatch, "tenant.secret_id"}) {
		t.Errorf("another secret's header: %v %s", v.Reason, v.Field)
	}
	if v := keyed.VerifyHeader(old, block, 10); v != (Verdict{ReasonPayloadMismatch, "payload"}) {
		t.Errorf("own header: %v %s", v.Reason, v.Field)
	}
	// An identity field is named before the secret id, the secret id before the shard and block.
	other := id
	other.Model.WeightsEpoch = 1
	otherNS, _ := NewNamespace(other, WithSecret(secretOf(8)))
	if v := keyed.VerifyHeader(keyedHeader(otherNS, block, 10), block, 10); v !=
		(Verdict{ReasonIdentityMismatch, "model.weights_epoch"}) {
		t.Errorf("another epoch and secret: %v %s", v.Reason, v.Field)
	}
	other = id
	other.Shard.TPRank = 0
	otherNS, _ = NewNamespace(other, WithSecret(secretOf(8)))
	if v := keyed.VerifyHeader(keyedHeader(otherNS, Digest{8}, 11), block, 10); v !=
		(Verdict{ReasonIdentityMismatch, "tenant.secret_id"}) {
		t.Errorf("another rank, block, size and secret: %v %s", v.Reason, v.Field)
	}
	// A plain header read by a keyed reader (and the reverse) is the namespace kind.
	if v := keyed.VerifyHeader(plain.SealSizeOnly(block, 10), block, 10); v !=
		(Verdict{ReasonIdentityMismatch, "envelope.namespace_kind"}) {
		t.Errorf("plain header, keyed reader: %v %s", v.Reason, v.Field)
	}
	// Version 2 is unsupported.
	h = plain.SealSizeOnly(block, 10)
	h[offVersion] = 2
	if v := plain.VerifyHeader(h, block, 10); v != (Verdict{ReasonUnsupportedVersion, "envelope.format_version"}) {
		t.Errorf("a v2 header: %v %s", v.Reason, v.Field)
	}
}
