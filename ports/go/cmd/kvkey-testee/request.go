// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"math"
	"strconv"

	kvkey "github.com/kvkey/kvkey/ports/go"
)

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// request is one decoded conformance request.
type request struct {
	identity     kvkey.Identity
	singleTenant bool
	secret       []byte
	tokens       []uint32
	options      kvkey.HashOptions
	verify       *verifyRequest
}

type verifyRequest struct {
	header      []byte
	blockIndex  uint64
	payloadSize uint64
}

func bad(field, msg string) error {
	return &kvkey.Error{Kind: kvkey.InputErrorKind, Field: field, Msg: msg}
}

// object is one JSON object of the identity; absent and null members keep the
// C++ library's defaults, and every error names the member's dotted path.
type object struct {
	m    map[string]any
	path string
}

func newObject(v any, path string, keys ...string) (*object, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, bad(path, "expected an object")
	}
	o := &object{m: m, path: path}
	for k := range m {
		known := false
		for _, want := range keys {
			known = known || k == want
		}
		if !known {
			return nil, bad(o.field(k), "unknown key")
		}
	}
	return o, nil
}

func (o *object) field(k string) string {
	if o.path == "identity" {
		return k
	}
	return o.path + "." + k
}

func (o *object) get(k string) (any, bool) {
	v, ok := o.m[k]
	return v, ok && v != nil
}

func (o *object) text(k string, out *string) error {
	if v, ok := o.get(k); ok {
		s, isString := v.(string)
		if !isString {
			return bad(o.field(k), "expected a string")
		}
		*out = s
	}
	return nil
}

func unsigned(v any, bits int) (uint64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	u, err := strconv.ParseUint(string(n), 10, bits)
	return u, err == nil
}

func (o *object) u32(k string, out *uint32) error {
	if v, ok := o.get(k); ok {
		u, ok := unsigned(v, 32)
		if !ok {
			return bad(o.field(k), "expected an integer in [0, 2^32)")
		}
		*out = uint32(u)
	}
	return nil
}

func (o *object) u64(k string, out *uint64) error {
	if v, ok := o.get(k); ok {
		u, ok := unsigned(v, 64)
		if !ok {
			return bad(o.field(k), "expected an integer in [0, 2^64)")
		}
		*out = u
	}
	return nil
}

func (o *object) flag(k string, out *bool) error {
	if v, ok := o.get(k); ok {
		b, isBool := v.(bool)
		if !isBool {
			return bad(o.field(k), "expected true or false")
		}
		*out = b
	}
	return nil
}

func (o *object) dtype(k string) (*kvkey.DType, error) {
	v, ok := o.get(k)
	if !ok {
		return nil, nil
	}
	s, _ := v.(string)
	d, err := kvkey.ParseDType(s)
	if _, isString := v.(string); !isString || err != nil {
		return nil, bad(o.field(k), "expected a dtype name")
	}
	return &d, nil
}

func (o *object) digest(k string) (*kvkey.Digest, error) {
	v, ok := o.get(k)
	if !ok {
		return nil, nil
	}
	s, _ := v.(string)
	d, err := kvkey.ParseDigest(s)
	if _, isString := v.(string); !isString || err != nil {
		return nil, bad(o.field(k), "expected 64 hex digits")
	}
	return &d, nil
}

// first returns the first non-nil error.
func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func decodeIdentity(v any, r *request) error {
	id := &r.identity
	id.KV.Quant.Scheme = "none"
	id.Shard = kvkey.Shard{TPSize: 1, PPSize: 1}
	top, err := newObject(v, "identity", "tenant", "policy", "model", "kv", "shard", "adapter")
	if err != nil {
		return err
	}
	policy := "required"
	if err := first(top.text("tenant", &id.Tenant), top.text("policy", &policy)); err != nil {
		return err
	}
	switch policy {
	case "single_tenant":
		r.singleTenant = true
	case "required":
	default:
		return bad("policy", `expected "required" or "single_tenant"`)
	}
	if v, ok := top.get("model"); ok {
		m, err := newObject(v, "model", "name", "revision", "weights_epoch", "weights_fingerprint", "positional_fingerprint")
		if err != nil {
			return err
		}
		if err := first(m.text("name", &id.Model.Name), m.text("revision", &id.Model.Revision),
			m.u64("weights_epoch", &id.Model.WeightsEpoch)); err != nil {
			return err
		}
		if id.Model.WeightsFingerprint, err = m.digest("weights_fingerprint"); err != nil {
			return err
		}
		if id.Model.PositionalFingerprint, err = m.digest("positional_fingerprint"); err != nil {
			return err
		}
	}
	if v, ok := top.get("kv"); ok {
		if err := decodeKV(v, &id.KV); err != nil {
			return err
		}
	}
	if v, ok := top.get("shard"); ok {
		s, err := newObject(v, "shard", "tp_size", "tp_rank", "pp_size", "pp_rank")
		if err != nil {
			return err
		}
		if err := first(s.u32("tp_size", &id.Shard.TPSize), s.u32("tp_rank", &id.Shard.TPRank),
			s.u32("pp_size", &id.Shard.PPSize), s.u32("pp_rank", &id.Shard.PPRank)); err != nil {
			return err
		}
	}
	if v, ok := top.get("adapter"); ok {
		a, err := newObject(v, "adapter", "name", "weights_fingerprint")
		if err != nil {
			return err
		}
		id.Adapter = &kvkey.Adapter{}
		if err := a.text("name", &id.Adapter.Name); err != nil {
			return err
		}
		fp, err := a.digest("weights_fingerprint")
		if err != nil {
			return err
		}
		if fp != nil {
			id.Adapter.WeightsFingerprint = *fp
		}
	}
	return nil
}

func decodeKV(v any, kv *kvkey.KV) error {
	k, err := newObject(v, "kv", "dtype", "quant", "block_size", "num_layers", "num_kv_heads", "head_dim", "layout", "mla")
	if err != nil {
		return err
	}
	d, err := k.dtype("dtype")
	if err != nil {
		return err
	}
	if d != nil {
		kv.DType = *d
	}
	if v, ok := k.get("quant"); ok {
		q, err := newObject(v, "kv.quant", "scheme", "group_size", "scale_dtype", "zero_point", "scales_fingerprint")
		if err != nil {
			return err
		}
		if err := first(q.text("scheme", &kv.Quant.Scheme), q.u32("group_size", &kv.Quant.GroupSize)); err != nil {
			return err
		}
		if kv.Quant.ScaleDType, err = q.dtype("scale_dtype"); err != nil {
			return err
		}
		if err := q.flag("zero_point", &kv.Quant.ZeroPoint); err != nil {
			return err
		}
		if kv.Quant.ScalesFingerprint, err = q.digest("scales_fingerprint"); err != nil {
			return err
		}
	}
	return first(k.u32("block_size", &kv.BlockSize), k.u32("num_layers", &kv.NumLayers),
		k.u32("num_kv_heads", &kv.NumKVHeads), k.u32("head_dim", &kv.HeadDim), k.text("layout", &kv.Layout),
		k.flag("mla", &kv.MLA))
}

func hexMember(m map[string]any, k, field string) ([]byte, error) {
	v, ok := m[k]
	if !ok || v == nil {
		return nil, nil
	}
	s, isString := v.(string)
	b, err := hex.DecodeString(s)
	if !isString || err != nil {
		return nil, bad(field, "expected hex digits (an even number)")
	}
	return b, nil
}

func decodeRequest(raw map[string]any) (*request, error) {
	r := &request{}
	id, ok := raw["identity"].(map[string]any)
	if !ok {
		return nil, bad("identity", "expected an object")
	}
	if err := decodeIdentity(id, r); err != nil {
		return nil, err
	}
	if v, ok := raw["single_tenant"]; ok && v != nil {
		b, isBool := v.(bool)
		if !isBool {
			return nil, bad("single_tenant", "expected true or false")
		}
		r.singleTenant = r.singleTenant || b
	}
	var err error
	if v, ok := raw["secret_hex"]; ok && v != nil {
		if r.secret, err = hexMember(raw, "secret_hex", "secret_hex"); err != nil {
			return nil, err
		}
		if r.secret == nil {
			r.secret = []byte{}
		}
	}
	if v, ok := raw["tokens"]; ok && v != nil {
		list, isList := v.([]any)
		if !isList {
			return nil, bad("tokens", "expected an array of token ids")
		}
		r.tokens = make([]uint32, 0, len(list))
		for _, t := range list {
			u, ok := unsigned(t, 32)
			if !ok || u > math.MaxUint32 {
				return nil, bad("tokens", "token ids are integers in [0, 2^32)")
			}
			r.tokens = append(r.tokens, uint32(u))
		}
	}
	if r.options.Salt, err = hexMember(raw, "salt_hex", "salt_hex"); err != nil {
		return nil, err
	}
	if v, ok := raw["extras"]; ok && v != nil {
		list, isList := v.([]any)
		if !isList {
			return nil, bad("extras", "expected an array")
		}
		for _, x := range list {
			m, isObject := x.(map[string]any)
			if !isObject {
				return nil, bad("extras", "expected objects")
			}
			begin, ok1 := unsigned(m["token_begin"], 64)
			end, ok2 := unsigned(m["token_end"], 64)
			if !ok1 || !ok2 {
				return nil, bad("extras", "token_begin and token_end are unsigned integers")
			}
			key, err := hexMember(m, "key_hex", "extras")
			if err != nil {
				return nil, err
			}
			r.options.Extras = append(r.options.Extras, kvkey.ExtraKey{TokenBegin: begin, TokenEnd: end, Key: key})
		}
	}
	if v, ok := raw["verify"]; ok && v != nil {
		m, isObject := v.(map[string]any)
		if !isObject {
			return nil, bad("verify", "expected an object")
		}
		ver := &verifyRequest{}
		if ver.header, err = hexMember(m, "header_hex", "verify.header_hex"); err != nil {
			return nil, err
		}
		for _, k := range []string{"block_index", "payload_size"} {
			u, ok := unsigned(m[k], 64)
			if !ok {
				return nil, bad("verify."+k, "expected an unsigned integer")
			}
			if k == "block_index" {
				ver.blockIndex = u
			} else {
				ver.payloadSize = u
			}
		}
		r.verify = ver
	}
	return r, nil
}
