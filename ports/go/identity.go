// SPDX-License-Identifier: Apache-2.0

package kvkey

import (
	"fmt"
	"reflect"
	"strconv"
	"unicode/utf8"
)

// DType is the element type of the stored KV (and of quantization scales).
// The codes are part of the byte format and never change.
type DType uint8

// The KV dtypes. DTypeUnset is not a type: validation rejects it.
const (
	DTypeUnset DType = iota
	FP32
	FP16
	BF16
	FP8E4M3
	FP8E5M2
	Int8
	Int4
	UInt8
	UInt4
	FP4E2M1
	FP8E4M3FNUZ // e4m3 with another exponent bias, no infinities, one NaN (AMD MI300)
	FP8E5M2FNUZ // e5m2, likewise
)

var dtypeNames = [...]string{"unset", "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "uint8",
	"uint4", "fp4_e2m1", "fp8_e4m3fnuz", "fp8_e5m2fnuz"}

// String returns the dtype's name as identity files spell it ("fp16",
// "fp8_e4m3"), "unset", or "invalid" for an unknown code.
func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return "invalid"
}

// Valid reports whether d names a real type (not unset, not an unknown code).
func (d DType) Valid() bool { return d != DTypeUnset && int(d) < len(dtypeNames) }

// ParseDType reads a dtype name as String prints it; "unset" is no type.
func ParseDType(name string) (DType, error) {
	for code, n := range dtypeNames[1:] {
		if n == name {
			return DType(code + 1), nil
		}
	}
	return DTypeUnset, inputError("", "unknown dtype "+strconv.Quote(name))
}

// Model is the model's weights lineage.
type Model struct {
	Name                  string  // readable name, e.g. "Qwen/Qwen2.5-7B-Instruct"
	Revision              string  // immutable checkpoint id
	WeightsEpoch          uint64  // bumped on every accepted weight update
	WeightsFingerprint    *Digest // optional fingerprint of the live weights
	PositionalFingerprint *Digest // optional fingerprint of the RoPE configuration
}

// Quant says how KV values are quantized. Scheme "none" (unquantized KV)
// requires every other field at its zero value. The zero Quant means "none";
// an empty Scheme with any other field set is invalid.
type Quant struct {
	Scheme            string
	GroupSize         uint32
	ScaleDType        *DType
	ZeroPoint         bool
	ScalesFingerprint *Digest
}

// KV says what one stored KV object's bytes are.
type KV struct {
	DType      DType
	Quant      Quant
	BlockSize  uint32 // tokens per block
	NumLayers  uint32 // layers of the whole model
	NumKVHeads uint32 // KV heads of the whole model (1 for an MLA latent cache)
	HeadDim    uint32
	Layout     string // the engine's byte layout of one object
	MLA        bool   // multi-head latent attention: the latent cache is whole on every rank
}

// Shard is the rank's place in the tensor/pipeline-parallel grid. A single
// rank is Shard{TPSize: 1, PPSize: 1}, and so is the zero Shard; a zero size
// in an otherwise non-zero Shard is invalid.
type Shard struct {
	TPSize, TPRank, PPSize, PPRank uint32
}

// Adapter is a LoRA (or other) adapter: its weights, not only its name, are identity.
type Adapter struct {
	Name               string
	WeightsFingerprint Digest
}

// Identity is everything that changes the meaning or the ownership of stored
// KV bytes. Routers read it from the engine's identity file (docs/cli.md).
type Identity struct {
	Tenant  string // empty under the single-tenant policy
	Model   Model
	KV      KV
	Shard   Shard
	Adapter *Adapter // nil: no adapter
}

// Slice is the KV-head and layer range [begin, end) one rank holds.
type Slice struct {
	KVHeadBegin, KVHeadEnd, LayerBegin, LayerEnd uint32
}

// SingleTenantName is the tenant a single-tenant namespace encodes.
const SingleTenantName = "_single"

// Limits on the identity's strings, in bytes.
const (
	MaxTenant      = 64
	MaxModelName   = 128
	MaxRevision    = 128
	MaxQuantScheme = 32
	MaxLayout      = 64
	MaxAdapterName = 128
)

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func checkLength(field, s string, max int) error {
	if s == "" {
		return identityError(field, "must not be empty")
	}
	if len(s) > max {
		return identityError(field, fmt.Sprintf("is %d bytes, at most %d allowed", len(s), max))
	}
	return nil
}

// checkPrintable: printable ASCII without space (revisions, layouts).
func checkPrintable(field, s string, max int) error {
	if err := checkLength(field, s, max); err != nil {
		return err
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return identityError(field, fmt.Sprintf("byte %d is not printable ASCII", i))
		}
	}
	return nil
}

// isUnsafeCodePoint reports the code points a terminal or log viewer does not
// show as themselves, as the C++ library's kvkey::is_unsafe_code_point: C0
// controls, DEL and C1 controls, U+061C, U+200B..U+200F, U+2028..U+202E,
// U+2060..U+206F, U+FEFF and U+FFF9..U+FFFB.
func isUnsafeCodePoint(cp rune) bool {
	return cp < 0x20 || cp >= 0x7f && cp <= 0x9f || cp == 0x061c || cp >= 0x200b && cp <= 0x200f ||
		cp >= 0x2028 && cp <= 0x202e || cp >= 0x2060 && cp <= 0x206f || cp == 0xfeff ||
		cp >= 0xfff9 && cp <= 0xfffb
}

// isBidiFormat reports the unsafe code points that are bidirectional
// formatting characters (the rest are invisible ones), for messages.
func isBidiFormat(cp rune) bool {
	return cp == 0x061c || cp == 0x200e || cp == 0x200f || cp >= 0x202a && cp <= 0x202e ||
		cp >= 0x2066 && cp <= 0x2069
}

// checkText: free text (model and adapter names) without the unsafe code
// points. Bytes that are not well-formed UTF-8 are not code points and pass,
// as in the C++ library.
func checkText(field, s string, max int) error {
	if err := checkLength(field, s, max); err != nil {
		return err
	}
	for i := 0; i < len(s); {
		cp, size := utf8.DecodeRuneInString(s[i:])
		if cp == utf8.RuneError && size == 1 {
			i++
			continue
		}
		if isUnsafeCodePoint(cp) {
			if cp < 0x20 || cp == 0x7f {
				return identityError(field, fmt.Sprintf("byte %d is a control character", i))
			}
			kind := "an invisible formatting character"
			if cp >= 0x80 && cp <= 0x9f {
				kind = "a C1 control character"
			} else if isBidiFormat(cp) {
				kind = "a bidirectional formatting character"
			}
			return identityError(field, fmt.Sprintf("byte %d starts %s (U+%04X)", i, kind, cp))
		}
		i += size
	}
	return nil
}

func checkTenant(t string) error { return checkTenantUpTo(t, MaxTenant) }

// ScopeTenantPrefix is what a shared scope's tenant starts with (format v4,
// docs/format.md section 12): scope N has tenant "_scope.N", which no
// tenant can be (a tenant starts with a letter or digit).
const ScopeTenantPrefix = "_scope."

// scopeTenant is "_scope.<name>"; an identity_error on "scope.name" unless
// name is 1..57 bytes of the tenant charset, first byte alphanumeric.
func scopeTenant(name string) (string, error) {
	if err := checkTenantUpTo(name, MaxTenant-len(ScopeTenantPrefix)); err != nil {
		return "", identityError("scope.name", "the scope name "+err.(*Error).Msg)
	}
	return ScopeTenantPrefix + name, nil
}

func checkTenantUpTo(t string, max int) error {
	if err := checkLength("tenant", t, max); err != nil {
		return err
	}
	if !isAlnum(t[0]) {
		return identityError("tenant", "must start with a letter or digit")
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return identityError("tenant", fmt.Sprintf("byte %d is not allowed: use letters, digits, '.', '_' and '-'", i))
		}
	}
	return nil
}

func checkScheme(s string) error {
	if err := checkLength("kv.quant.scheme", s, MaxQuantScheme); err != nil {
		return err
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return identityError("kv.quant.scheme", "use lowercase letters, digits, '.', '_' and '-' only")
		}
	}
	return nil
}

func checkPositive(field string, v uint32) error {
	if v == 0 {
		return identityError(field, "must be greater than 0")
	}
	return nil
}

// ResolveSlice returns the KV heads and layers the identity's rank holds
// (docs/format.md, section 4), or an identity error naming the field when the
// geometry does not split.
func ResolveSlice(kv KV, shard Shard) (Slice, error) {
	for _, c := range []struct {
		field string
		v     uint32
	}{{"kv.num_layers", kv.NumLayers}, {"kv.num_kv_heads", kv.NumKVHeads}, {"shard.tp_size", shard.TPSize},
		{"shard.pp_size", shard.PPSize}} {
		if err := checkPositive(c.field, c.v); err != nil {
			return Slice{}, err
		}
	}
	if shard.TPRank >= shard.TPSize {
		return Slice{}, identityError("shard.tp_rank",
			fmt.Sprintf("%d is not below shard.tp_size %d", shard.TPRank, shard.TPSize))
	}
	if shard.PPRank >= shard.PPSize {
		return Slice{}, identityError("shard.pp_rank",
			fmt.Sprintf("%d is not below shard.pp_size %d", shard.PPRank, shard.PPSize))
	}
	heads, tp, r := kv.NumKVHeads, shard.TPSize, shard.TPRank
	var s Slice
	switch {
	case kv.MLA:
		s.KVHeadBegin, s.KVHeadEnd = 0, heads
	case tp <= heads:
		if heads%tp != 0 {
			return Slice{}, identityError("shard.tp_size", fmt.Sprintf("%d does not divide kv.num_kv_heads %d", tp, heads))
		}
		s.KVHeadBegin, s.KVHeadEnd = r*(heads/tp), (r+1)*(heads/tp)
	default:
		if tp%heads != 0 {
			return Slice{}, identityError("shard.tp_size", fmt.Sprintf("%d is not a multiple of kv.num_kv_heads %d", tp, heads))
		}
		head := r / (tp / heads)
		s.KVHeadBegin, s.KVHeadEnd = head, head+1
	}
	if kv.NumLayers%shard.PPSize != 0 {
		return Slice{}, identityError("shard.pp_size",
			fmt.Sprintf("%d does not divide kv.num_layers %d", shard.PPSize, kv.NumLayers))
	}
	per := kv.NumLayers / shard.PPSize
	s.LayerBegin, s.LayerEnd = shard.PPRank*per, (shard.PPRank+1)*per
	return s, nil
}

// withDefaults gives the zero Quant and the zero Shard their documented
// meaning: no quantization (scheme "none") and a single rank.
func withDefaults(id Identity) Identity {
	if id.KV.Quant == (Quant{}) {
		id.KV.Quant.Scheme = "none"
	}
	if id.Shard == (Shard{}) {
		id.Shard = Shard{TPSize: 1, PPSize: 1}
	}
	return id
}

// Validated checks the identity and returns it as it is encoded: under the
// single-tenant policy the (empty) tenant becomes SingleTenantName. The zero
// Quant is scheme "none" and the zero Shard a single rank (TPSize and PPSize
// 1). The error names the first invalid field in the order of docs/format.md:
// every member by its own rule in table (encoding) order, then the quant
// rules, then the geometry (ResolveSlice).
func Validated(id Identity, singleTenant bool) (Identity, error) {
	return validated(withDefaults(id), singleTenant)
}

// validated is Validated without the zero-value defaults: an explicit empty
// scheme or zero shard is refused, as by the C++ library.
func validated(id Identity, singleTenant bool) (Identity, error) {
	return validatedAs(id, singleTenant, false)
}

// validatedAs is validated; scoped: the tenant is a scope's "_scope.<name>",
// checked by scopeTenant.
func validatedAs(id Identity, singleTenant, scoped bool) (Identity, error) {
	if singleTenant {
		if id.Tenant != "" {
			return id, identityError("tenant", "must be empty under the single-tenant policy")
		}
		id.Tenant = SingleTenantName
	}
	if err := checkMembers(reflect.ValueOf(&id).Elem(), identityFields, singleTenant || scoped); err != nil {
		return id, err
	}
	if q := id.KV.Quant; q.Scheme == "none" {
		switch {
		case q.GroupSize != 0:
			return id, identityError("kv.quant.group_size", `must be 0 when kv.quant.scheme is "none"`)
		case q.ScaleDType != nil:
			return id, identityError("kv.quant.scale_dtype", `must be empty when kv.quant.scheme is "none"`)
		case q.ZeroPoint:
			return id, identityError("kv.quant.zero_point", `must be false when kv.quant.scheme is "none"`)
		case q.ScalesFingerprint != nil:
			return id, identityError("kv.quant.scales_fingerprint", `must be empty when kv.quant.scheme is "none"`)
		}
	}
	_, err := ResolveSlice(id.KV, id.Shard)
	return id, err
}
