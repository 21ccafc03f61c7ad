// SPDX-License-Identifier: Apache-2.0

package kvkey

import (
	"bytes"
	"encoding/hex"
	"os"
	"testing"
)

func TestConfidentialValues(t *testing.T) {
	id := Identity{Tenant: "t", Model: Model{Name: "m", Revision: "r"},
		KV: KV{DType: FP16, BlockSize: 4, NumLayers: 2, NumKVHeads: 2, HeadDim: 8, Layout: "l"}}
	secret := bytes.Repeat([]byte{9}, 32)
	ns, err := NewNamespace(id, WithSecret(secret), Confidential())
	if err != nil {
		t.Fatal(err)
	}
	keyed, _ := NewNamespace(id, WithSecret(secret))
	other, _ := NewNamespace(id, WithSecret(bytes.Repeat([]byte{8}, 32)), Confidential())
	if _, err := NewNamespace(id, Confidential()); !hasField(err, IdentityErrorKind, "confidential") {
		t.Errorf("confidential without a secret: %v", err)
	}
	blocks, _ := ns.BlockHashes([]uint32{1, 2, 3, 4}, nil)
	if got, want := ns.SecretPrefix()[len("kvk4/t/"):][0], byte('c'); got != want {
		t.Errorf("segment %c, want c", got)
	}
	p := payload(2, 1000)
	value := ns.SealValue(blocks[0], p)
	if IntegrityMode(value[offIntegrity]) != ModeAESGCM || bytes.Equal(value[EnvelopeSize:], p) {
		t.Fatalf("mode %d; the payload is stored in the clear: %v", value[offIntegrity],
			bytes.Equal(value[EnvelopeSize:], p))
	}
	if out := os.Getenv("KVKEY_CONFIDENTIAL_OUT"); out != "" { // a cross-check with another AES-GCM
		_ = os.WriteFile(out, []byte(hex.EncodeToString(secret)+" "+ns.Root().String()+" "+
			hex.EncodeToString(value)+" "+hex.EncodeToString(p)), 0o600)
	}
	got, v := ns.OpenValue(value, blocks[0])
	if !v.OK() || !bytes.Equal(got, p) {
		t.Fatalf("open: %v %s", v.Reason, v.Field)
	}
	for name, c := range map[string]struct {
		at   int
		want Verdict
	}{
		"ciphertext": {EnvelopeSize + 500, Verdict{ReasonPayloadMismatch, "payload"}},
		"tag":        {offPayloadDigest + 3, Verdict{ReasonPayloadMismatch, "payload"}},
		"iv":         {offNonce + 7, Verdict{ReasonPayloadMismatch, "payload"}},
		"selector":   {offNonce + 1, Verdict{ReasonPayloadMismatch, "payload"}},
		"header":     {offPayloadSize, Verdict{ReasonSizeMismatch, "payload_size"}},
	} {
		bad := append([]byte(nil), value...)
		bad[c.at] ^= 1
		if got, v := ns.OpenValue(bad, blocks[0]); v != c.want || got != nil {
			t.Errorf("a flipped %s bit: %v %s", name, v.Reason, v.Field)
		}
	}
	if _, v := other.OpenValue(value, blocks[0]); v != (Verdict{ReasonIdentityMismatch, "tenant.secret_id"}) {
		t.Errorf("another tenant secret: %v %s", v.Reason, v.Field)
	}
	// A keyed value read by a confidential reader, and the reverse: named by the mode.
	kv := keyed.SealValue(blocks[0], p)
	mode := Verdict{ReasonPayloadMismatch, "envelope.integrity_mode"}
	if _, v := ns.OpenValue(kv, blocks[0]); v != mode {
		t.Errorf("a keyed value read confidentially: %v %s", v.Reason, v.Field)
	}
	if _, v := keyed.OpenValue(value, blocks[0]); v != mode {
		t.Errorf("a confidential value read by a keyed reader: %v %s", v.Reason, v.Field)
	}
	if a, b := ns.SealValue(blocks[0], p), ns.SealValue(blocks[0], p); bytes.Equal(a[offNonce:offSecretID],
		b[offNonce:offSecretID]) {
		t.Error("two seals share a nonce")
	}
}

func TestConfidentialIdentityFile(t *testing.T) {
	text := `{"tenant": "t", "confidential": true, "model": {"name": "m", "revision": "r"},
		"kv": {"dtype": "fp16", "block_size": 4, "num_layers": 2, "num_kv_heads": 2, "head_dim": 8, "layout": "l"}}`
	f, err := ParseIdentity([]byte(text))
	if err != nil || !f.Confidential {
		t.Fatalf("%+v %v", f, err)
	}
	if _, err := f.NewNamespace(); !hasField(err, IdentityErrorKind, "confidential") {
		t.Errorf("a confidential file without a secret: %v", err)
	}
	ns, err := f.NewNamespace(WithSecret(bytes.Repeat([]byte{3}, 32)))
	if err != nil || ns.Mode() != ModeAESGCM {
		t.Fatalf("%v %v", ns, err)
	}
	back, _ := f.MarshalJSON()
	if again, err := ParseIdentity(back); err != nil || !again.Confidential {
		t.Errorf("written back: %s %v", back, err)
	}
	bad := []byte(`{"tenant": "t", "confidential": 1}`)
	if _, err := ParseIdentity(bad); !hasField(err, InputErrorKind, "confidential") {
		t.Errorf("confidential: 1: %v", err)
	}
}
