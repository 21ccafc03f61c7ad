// SPDX-License-Identifier: Apache-2.0

package kvkey

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/zeebo/xxh3"
)

// The committed vectors (tests/vectors/), read from the repository.
const vectorsDir = "../../tests/vectors/"

type vectorCase struct {
	Name         string            `json:"name"`
	TenantPolicy string            `json:"tenant_policy"`
	Identity     map[string]any    `json:"identity"`
	Shard        map[string]uint32 `json:"shard"`
	Slice        [4]uint32         `json:"slice"`
	Salt         string            `json:"salt"`
	Extras       []struct {
		TokenBegin uint64 `json:"token_begin"`
		TokenEnd   uint64 `json:"token_end"`
		Key        string `json:"key"`
	} `json:"extras"`
	PayloadSize    uint64   `json:"payload_size"`
	PayloadDigests []string `json:"payload_digests"`
	Encoding       string   `json:"encoding"`
	Root           string   `json:"root"`
	FirstParent    string   `json:"first_parent"`
	Blocks         []string `json:"blocks"`
	Objects        []string `json:"objects"`
	Keys           []string `json:"keys"`
	Envelopes      []string `json:"envelopes"`
}

type vectorFile struct {
	Tokens struct {
		Values []uint32 `json:"values"`
	} `json:"tokens"`
	Cases    []vectorCase `json:"cases"`
	Payloads []struct {
		Hex     string `json:"hex"`
		XXH3128 string `json:"xxh3_128"`
	} `json:"payloads"`
	Keyed struct {
		Case         string   `json:"case"`
		SecretHex    string   `json:"secret_hex"`
		SecretID     string   `json:"secret_id"`
		KeyPrefix    string   `json:"key_prefix"`
		SecretPrefix string   `json:"secret_prefix"`
		Root         string   `json:"root"`
		Blocks       []string `json:"blocks"`
		Keys         []string `json:"keys"`
		Envelopes    []string `json:"envelopes"`
		Rotated      struct {
			SecretHex string `json:"secret_hex"`
			SecretID  string `json:"secret_id"`
			KeyPrefix string `json:"key_prefix"`
		} `json:"rotated"`
	} `json:"keyed"`
	Splice struct {
		Case         string `json:"case"`
		HeaderHex    string `json:"header_hex"`
		PayloadBlock int    `json:"payload_block"`
		ReadAsBlock  int    `json:"read_as_block"`
		Verdict      struct {
			OK     bool   `json:"ok"`
			Reason string `json:"reason"`
			Field  string `json:"field"`
		} `json:"verdict"`
	} `json:"splice"`
}

func caseNamed(t *testing.T, v *vectorFile, name string) vectorCase {
	for _, c := range v.Cases {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no case %q", name)
	return vectorCase{}
}

func readJSON(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(vectorsDir + name)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func digestPtr(t *testing.T, v any) *Digest {
	if v == nil {
		return nil
	}
	d, err := ParseDigest(v.(string))
	if err != nil {
		t.Fatal(err)
	}
	return &d
}

// identityOf reads the vectors' flat identity ("kv.dtype": "fp16", ...).
func identityOf(t *testing.T, c vectorCase) Identity {
	m := c.Identity
	num := func(k string) uint64 { return uint64(m[k].(float64)) }
	dtype := func(v any) DType {
		d, err := ParseDType(v.(string))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	id := Identity{
		Tenant: m["tenant"].(string),
		Model: Model{Name: m["model.name"].(string), Revision: m["model.revision"].(string),
			WeightsEpoch: num("model.weights_epoch"), WeightsFingerprint: digestPtr(t, m["model.weights_fingerprint"]),
			PositionalFingerprint: digestPtr(t, m["model.positional_fingerprint"])},
		KV: KV{DType: dtype(m["kv.dtype"]), Quant: Quant{Scheme: m["kv.quant.scheme"].(string),
			GroupSize: uint32(num("kv.quant.group_size")), ZeroPoint: m["kv.quant.zero_point"].(bool),
			ScalesFingerprint: digestPtr(t, m["kv.quant.scales_fingerprint"])},
			BlockSize: uint32(num("kv.block_size")), NumLayers: uint32(num("kv.num_layers")),
			NumKVHeads: uint32(num("kv.num_kv_heads")), HeadDim: uint32(num("kv.head_dim")),
			Layout: m["kv.layout"].(string), MLA: m["kv.mla"].(bool)},
		Shard: Shard{TPSize: c.Shard["tp_size"], TPRank: c.Shard["tp_rank"], PPSize: c.Shard["pp_size"],
			PPRank: c.Shard["pp_rank"]},
	}
	if v := m["kv.quant.scale_dtype"]; v != nil {
		d := dtype(v)
		id.KV.Quant.ScaleDType = &d
	}
	if a, ok := m["adapter"].(map[string]any); ok {
		id.Adapter = &Adapter{Name: a["name"].(string), WeightsFingerprint: *digestPtr(t, a["weights_fingerprint"])}
	}
	return id
}

func unhex(t *testing.T, s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func checkStrings(t *testing.T, what string, got []string, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s[%d] = %s, want %s", what, i, got[i], want[i])
		}
	}
}

func hexes(ds []Digest) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return out
}

// vectorsFile is the one source of golden vectors (CONTRIBUTING.md).
const vectorsFile = "format-v4.json"

// payload is block i's payload by the vectors' payload_rule: size bytes,
// byte j = (j + 31 * i) mod 251.
func payload(i int, size uint64) []byte {
	p := make([]byte, size)
	for j := range p {
		p[j] = byte((j + 31*i) % 251)
	}
	return p
}

// plainDigest is the digest a plain header carries in format v3 (mode
// xxh3_128): XXH3-128(payload || header'), header' the header with the 16
// digest bytes zero.
func plainDigest(header, payload []byte) [16]byte {
	zeroed := append(append([]byte(nil), payload...), header...)
	copy(zeroed[len(payload)+offPayloadDigest:len(payload)+offSecretID], make([]byte, 16))
	return xxh3.Hash128(zeroed).Bytes()
}

func TestPayloadDigestVectors(t *testing.T) {
	var v vectorFile
	readJSON(t, vectorsFile, &v)
	if len(v.Payloads) == 0 {
		t.Fatal("no payloads")
	}
	for _, p := range v.Payloads {
		d := xxh3.Hash128(unhex(t, p.Hex)).Bytes()
		if hex.EncodeToString(d[:]) != p.XXH3128 {
			t.Errorf("XXH3-128 of %.20s...: %x, want %s", p.Hex, d, p.XXH3128)
		}
	}
}

func TestFormatV3Vectors(t *testing.T) {
	var v vectorFile
	readJSON(t, vectorsFile, &v)
	if len(v.Cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range v.Cases {
		t.Run(c.Name, func(t *testing.T) {
			var opts []Option
			if c.TenantPolicy == "single_tenant" {
				opts = append(opts, SingleTenant())
			}
			ns, err := NewNamespace(identityOf(t, c), opts...)
			if err != nil {
				t.Fatal(err)
			}
			if got := hex.EncodeToString(ns.Encoding()); got != c.Encoding {
				t.Errorf("encoding = %s, want %s", got, c.Encoding)
			}
			if ns.Root().String() != c.Root || ns.FirstParent([]byte(c.Salt)).String() != c.FirstParent {
				t.Errorf("root %s first parent %s, want %s %s", ns.Root(), ns.FirstParent([]byte(c.Salt)), c.Root, c.FirstParent)
			}
			if s := ns.Slice(); [4]uint32{s.KVHeadBegin, s.KVHeadEnd, s.LayerBegin, s.LayerEnd} != c.Slice {
				t.Errorf("slice = %v, want %v", s, c.Slice)
			}
			opt := HashOptions{Salt: []byte(c.Salt)}
			for _, x := range c.Extras {
				opt.Extras = append(opt.Extras, ExtraKey{x.TokenBegin, x.TokenEnd, []byte(x.Key)})
			}
			blocks, err := ns.BlockHashes(v.Tokens.Values, &opt)
			if err != nil {
				t.Fatal(err)
			}
			checkStrings(t, "blocks", hexes(blocks), c.Blocks)
			var objects, keys []string
			for _, b := range blocks {
				objects = append(objects, ns.ObjectHash(b).String())
				keys = append(keys, ns.StoreKey(b))
			}
			checkStrings(t, "objects", objects, c.Objects)
			checkStrings(t, "keys", keys, c.Keys)
			for i, e := range c.Envelopes {
				h := unhex(t, e)
				env, verdict := ParseEnvelope(h)
				if env == nil || env.BlockHash != blocks[i] || env.PayloadSize != c.PayloadSize || env.Kind != Plain ||
					env.Mode != ModeXXH3 || FirstDifference(env.Identity, ns.Identity()) != "" {
					t.Errorf("envelope %d: parsed %+v, %v", i, env, verdict)
				}
				if v := ns.VerifyHeader(h, blocks[i], c.PayloadSize); !v.OK() {
					t.Errorf("envelope %d: %v %s", i, v.Reason, v.Field)
				}
				if c.PayloadDigests[i] != hex.EncodeToString(h[offPayloadDigest:offSecretID]) {
					t.Errorf("envelope %d: digest %x, payload_digests %s", i, h[offPayloadDigest:offSecretID],
						c.PayloadDigests[i])
				}
				// The digest covers the payload and the header (format v3).
				if d := plainDigest(h, payload(i, c.PayloadSize)); !bytes.Equal(d[:], h[offPayloadDigest:offSecretID]) {
					t.Errorf("envelope %d: digest %x, XXH3-128(payload || header') %x", i,
						h[offPayloadDigest:offSecretID], d)
				}
				checkPayload(t, ns, h, blocks[i], payload(i, c.PayloadSize))
				other := blocks[(i+1)%len(blocks)]
				if v := ns.VerifyHeader(h, other, c.PayloadSize); v != (Verdict{ReasonBlockMismatch, "block_hash"}) {
					t.Errorf("envelope %d for another block: %v %s", i, v.Reason, v.Field)
				}
				if v := ns.VerifyHeader(h, blocks[i], c.PayloadSize+1); v != (Verdict{ReasonSizeMismatch, "payload_size"}) {
					t.Errorf("envelope %d with another size: %v %s", i, v.Reason, v.Field)
				}
			}
		})
	}
}

func TestKeyedVectors(t *testing.T) {
	var v vectorFile
	readJSON(t, vectorsFile, &v)
	c := caseNamed(t, &v, v.Keyed.Case)
	id := identityOf(t, c)
	ns, err := NewNamespace(id, WithSecret(unhex(t, v.Keyed.SecretHex)))
	if err != nil {
		t.Fatal(err)
	}
	if ns.Root().String() != v.Keyed.Root {
		t.Errorf("root = %s, want %s", ns.Root(), v.Keyed.Root)
	}
	if sid, _ := ns.SecretID(); hex.EncodeToString(sid[:]) != v.Keyed.SecretID ||
		ns.KeyPrefix() != v.Keyed.KeyPrefix || ns.SecretPrefix() != v.Keyed.SecretPrefix {
		t.Errorf("secret id %x, prefixes %s %s; want %s %s %s", sid, ns.KeyPrefix(), ns.SecretPrefix(),
			v.Keyed.SecretID, v.Keyed.KeyPrefix, v.Keyed.SecretPrefix)
	}
	// After a rotation: another secret id and prefix, and the old values are
	// a miss that names the secret.
	rotated, err := NewNamespace(id, WithSecret(unhex(t, v.Keyed.Rotated.SecretHex)))
	if err != nil {
		t.Fatal(err)
	}
	if sid, _ := rotated.SecretID(); hex.EncodeToString(sid[:]) != v.Keyed.Rotated.SecretID ||
		rotated.KeyPrefix() != v.Keyed.Rotated.KeyPrefix {
		t.Errorf("rotated: secret id %x, prefix %s; want %s %s", sid, rotated.KeyPrefix(), v.Keyed.Rotated.SecretID,
			v.Keyed.Rotated.KeyPrefix)
	}
	blocks, err := ns.BlockHashes(v.Tokens.Values, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkStrings(t, "blocks", hexes(blocks), v.Keyed.Blocks)
	plain, _ := NewNamespace(id)
	for i, e := range v.Keyed.Envelopes {
		if ns.StoreKey(blocks[i]) != v.Keyed.Keys[i] {
			t.Errorf("key %d = %s, want %s", i, ns.StoreKey(blocks[i]), v.Keyed.Keys[i])
		}
		h := unhex(t, e)
		// Everything but the tag matches; a keyed namespace accepts no payload it did not authenticate.
		if v := ns.VerifyHeader(h, blocks[i], c.PayloadSize); v != (Verdict{ReasonPayloadMismatch, "payload"}) {
			t.Errorf("keyed envelope %d: %v %s", i, v.Reason, v.Field)
		}
		// With the payload's bytes the tag is checked: Poly1305 under the one-time key of the header's nonce.
		checkPayload(t, ns, h, blocks[i], payload(i, c.PayloadSize))
		if v := rotated.Verify(h, blocks[i], payload(i, c.PayloadSize)); v != (Verdict{ReasonIdentityMismatch,
			"tenant.secret_id"}) {
			t.Errorf("keyed envelope %d and payload under the rotated secret: %v %s", i, v.Reason, v.Field)
		}
		other := blocks[(i+1)%len(blocks)]
		if v := ns.VerifyHeader(h, other, c.PayloadSize); v != (Verdict{ReasonBlockMismatch, "block_hash"}) {
			t.Errorf("keyed envelope %d for another block: %v %s", i, v.Reason, v.Field)
		}
		want := Verdict{ReasonIdentityMismatch, "envelope.namespace_kind"}
		if v := plain.VerifyHeader(h, blocks[i], c.PayloadSize); v != want {
			t.Errorf("keyed envelope %d read by a plain namespace: %v %s", i, v.Reason, v.Field)
		}
		if v := rotated.VerifyHeader(h, blocks[i], c.PayloadSize); v != (Verdict{ReasonIdentityMismatch,
			"tenant.secret_id"}) {
			t.Errorf("keyed envelope %d read under the rotated secret: %v %s", i, v.Reason, v.Field)
		}
	}
	_, err = NewNamespace(id, WithSecret(make([]byte, MinSecretSize-1)))
	if !hasField(err, IdentityErrorKind, "tenant_secret") {
		t.Errorf("a 31-byte secret: %v", err)
	}
}

// The splice: object B's header with object A's block hash, then B's
// payload, read as block A. Every byte but the digest is what A's header
// would hold (the size-only check accepts it, as it must: it sees no bytes),
// and the digest, which covers the header in format v3, is not the one of
// this header and payload: a full verify refuses it, on the payload.
func TestSpliceVector(t *testing.T) {
	var v vectorFile
	readJSON(t, vectorsFile, &v)
	s := v.Splice
	c := caseNamed(t, &v, s.Case)
	ns, err := NewNamespace(identityOf(t, c))
	if err != nil {
		t.Fatal(err)
	}
	blocks, _ := ns.BlockHashes(v.Tokens.Values, &HashOptions{Salt: []byte(c.Salt)})
	h, a, b := unhex(t, s.HeaderHex), blocks[s.ReadAsBlock], s.PayloadBlock
	if s.Verdict.OK || s.Verdict.Reason != "payload_mismatch" || s.Verdict.Field != "payload" || a == blocks[b] {
		t.Fatalf("splice vector: %+v", s)
	}
	if verdict := ns.VerifyHeader(h, a, c.PayloadSize); !verdict.OK() {
		t.Errorf("size-only check of the splice: %v %s", verdict.Reason, verdict.Field)
	}
	if d := plainDigest(h, payload(b, c.PayloadSize)); bytes.Equal(d[:], h[offPayloadDigest:offSecretID]) {
		t.Errorf("the splice's digest verifies")
	}
	if verdict := ns.Verify(h, a, payload(b, c.PayloadSize)); verdict.Reason.String() != s.Verdict.Reason ||
		verdict.Field != s.Verdict.Field {
		t.Errorf("verify of the splice: %v %s, want %+v", verdict.Reason, verdict.Field, s.Verdict)
	}
	// B's own header (its block hash back at offset 16) verifies with B's payload.
	own := append([]byte(nil), h...)
	copy(own[offBlockHash:], blocks[b][:])
	if d := plainDigest(own, payload(b, c.PayloadSize)); !bytes.Equal(d[:], h[offPayloadDigest:offSecretID]) {
		t.Errorf("object B's digest does not verify in its own header")
	}
}

// checkPayload checks that header h and payload verify for block, as a
// header and payload and as one stored value, and that every kind of damage
// to either is refused with the C++ library's reason and field.
func checkPayload(t *testing.T, ns *Namespace, h []byte, block Digest, p []byte) {
	t.Helper()
	if v := ns.Verify(h, block, p); !v.OK() {
		t.Errorf("verify with the payload: %v %s", v.Reason, v.Field)
	}
	value := append(append([]byte(nil), h...), p...)
	if got, v := ns.OpenValue(value, block); !v.OK() || !bytes.Equal(got, p) {
		t.Errorf("open the value: %v %s", v.Reason, v.Field)
	}
	payloadMismatch := Verdict{ReasonPayloadMismatch, "payload"}
	if len(p) > 0 {
		bad := append([]byte(nil), p...)
		bad[len(bad)/2] ^= 0x10
		if v := ns.Verify(h, block, bad); v != payloadMismatch {
			t.Errorf("a flipped payload bit: %v %s", v.Reason, v.Field)
		}
		if v := ns.Verify(h, block, p[:len(p)-1]); v != (Verdict{ReasonSizeMismatch, "payload_size"}) {
			t.Errorf("a payload one byte short: %v %s", v.Reason, v.Field)
		}
	}
	for _, at := range []int{offPayloadDigest, offPayloadDigest + 15, offNonce, offNonce + 15} {
		bad := append([]byte(nil), h...)
		bad[at] ^= 1
		want := payloadMismatch
		if at < offPayloadDigest && !ns.keyed {
			want = Verdict{ReasonMalformed, "envelope.nonce"}
		}
		if v := ns.Verify(bad, block, p); v != want {
			t.Errorf("a flipped header bit at %d: %v %s, want %v %s", at, v.Reason, v.Field, want.Reason, want.Field)
		}
	}
	if _, v := ns.OpenValue(value[:EnvelopeSize-1], block); v != (Verdict{ReasonMalformed, "envelope.size"}) {
		t.Errorf("a value shorter than a header: %v %s", v.Reason, v.Field)
	}
	if _, v := ns.OpenValue(append(value, 0), block); v != (Verdict{ReasonSizeMismatch, "payload_size"}) {
		t.Errorf("a value one byte long: %v %s", v.Reason, v.Field)
	}
}

func TestSealVerifies(t *testing.T) {
	id := Identity{Tenant: "t", Model: Model{Name: "m", Revision: "r"},
		KV: KV{DType: FP16, BlockSize: 4, NumLayers: 2, NumKVHeads: 2, HeadDim: 8, Layout: "l"}}
	plain, _ := NewNamespace(id)
	keyed, err := NewNamespace(id, WithSecret(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []*Namespace{plain, keyed} {
		blocks, _ := ns.BlockHashes([]uint32{1, 2, 3, 4}, nil)
		p := payload(3, 1000)
		h := ns.Seal(blocks[0], p)
		if IntegrityMode(h[offIntegrity]) != ns.Mode() {
			t.Errorf("mode %d, want %d", h[offIntegrity], ns.Mode())
		}
		checkPayload(t, ns, h, blocks[0], p)
		checkPayload(t, ns, ns.Seal(blocks[0], nil), blocks[0], nil)
		if v := ns.Verify(ns.SealSizeOnly(blocks[0], 1000), blocks[0], p); v != (Verdict{ReasonPayloadMismatch,
			"envelope.integrity_mode"}) {
			t.Errorf("a size-only header with the payload: %v %s", v.Reason, v.Field)
		}
	}
	// Two keyed seals of the same bytes draw different nonces, so different tags.
	blocks, _ := keyed.BlockHashes([]uint32{1, 2, 3, 4}, nil)
	a, b := keyed.Seal(blocks[0], []byte("x")), keyed.Seal(blocks[0], []byte("x"))
	if bytes.Equal(a[offNonce:offSecretID], b[offNonce:offSecretID]) {
		t.Error("two seals share a nonce")
	}
}

func hasField(err error, kind ErrorKind, field string) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == kind && e.Field == field
}

func TestU64ProjectionVectors(t *testing.T) {
	var doc struct {
		Vectors []struct {
			Block  string `json:"block"`
			U64    uint64 `json:"u64"`
			U64Hex string `json:"u64_hex"`
		} `json:"vectors"`
	}
	readJSON(t, "u64-projection.json", &doc)
	if len(doc.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range doc.Vectors {
		d, err := ParseDigest(v.Block)
		if err != nil {
			t.Fatal(err)
		}
		if d.U64() != v.U64 || v.U64Hex != v.Block[:16] {
			t.Errorf("%s: U64() = %d, want %d", v.Block, d.U64(), v.U64)
		}
	}
}

func TestValidationNamesTheField(t *testing.T) {
	valid := func() Identity {
		return Identity{Tenant: "t", Model: Model{Name: "m", Revision: "r"},
			KV: KV{DType: FP16, Quant: Quant{Scheme: "none"}, BlockSize: 16, NumLayers: 4, NumKVHeads: 4, HeadDim: 8,
				Layout: "l"}, Shard: Shard{TPSize: 1, PPSize: 1}}
	}
	for _, c := range []struct {
		field string
		edit  func(*Identity)
	}{
		{"tenant", func(id *Identity) { id.Tenant = "-a" }},
		{"model.name", func(id *Identity) { id.Model.Name = "a\u202eb" }},
		{"model.revision", func(id *Identity) { id.Model.Revision = "a b" }},
		{"kv.dtype", func(id *Identity) { id.KV.DType = DTypeUnset }},
		{"kv.quant.group_size", func(id *Identity) { id.KV.Quant.GroupSize = 8 }},
		{"kv.block_size", func(id *Identity) { id.KV.BlockSize = 0 }},
		{"kv.layout", func(id *Identity) { id.KV.Layout = "" }},
		{"adapter.name", func(id *Identity) { id.Adapter = &Adapter{Name: "\u0085"} }},
		{"shard.tp_size", func(id *Identity) { id.Shard.TPSize = 3 }},
		{"shard.pp_rank", func(id *Identity) { id.Shard.PPRank = 1 }},
	} {
		id := valid()
		c.edit(&id)
		if _, err := NewNamespace(id); !hasField(err, IdentityErrorKind, c.field) {
			t.Errorf("%s: got %v", c.field, err)
		}
	}
	if _, err := NewNamespace(valid()); err != nil {
		t.Errorf("valid identity: %v", err)
	}
}
