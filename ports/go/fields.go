// SPDX-License-Identifier: Apache-2.0

package kvkey

import (
	"fmt"
	"reflect"
)

// fieldType is how a member is typed in Go, in the encoding and in JSON.
type fieldType uint8

const (
	typeString    fieldType = iota // str(s)
	typeU32                        // u32le
	typeU64                        // u64le
	typeBool                       // one byte, 0 or 1
	typeDType                      // one byte, a DType code
	typeOptDType                   // 0, or 1 and a DType code (*DType)
	typeDigest                     // 32 bytes
	typeOptDigest                  // 0, or 1 and 32 bytes (*Digest)
	typePart                       // a nested part: its members in order
	typeOptPart                    // 0, or 1 and the part's members (a pointer)
)

// fieldKind is the rule a member's value is checked by: the C++ library's
// kvkey::FieldKind.
type fieldKind string

const (
	kindValue      fieldKind = "value"      // no rule beyond its type
	kindPositive   fieldKind = "positive"   // an integer greater than 0
	kindText       fieldKind = "text"       // 1..limit bytes without unsafe code points
	kindIdentifier fieldKind = "identifier" // 1..limit bytes of printable ASCII without space
	kindTenant     fieldKind = "tenant"     // 1..limit bytes of [A-Za-z0-9._-], the first alphanumeric
	kindScheme     fieldKind = "scheme"     // 1..limit bytes of [a-z0-9._-]
	kindDType      fieldKind = "dtype"      // a DType that names a real type
)

// fieldInfo is one member of the identity: the Go side of the C++ field table
// kvkey::Fields (include/kvkey/identity.hpp), which tests/vectors/identity-schema.json
// exports. The encoder, decoder, FirstDifference, Validated and the
// identity-file reader and writer are derived from identityFields.
type fieldInfo struct {
	key        string // the member's key in its JSON object ("weights_epoch")
	path       string // the dotted path from the identity ("model.weights_epoch")
	goName     string // the Go struct field
	typ        fieldType
	kind       fieldKind
	limit      int  // a string's byte limit, else 0
	required   bool // an identity file must give it
	fileAlt    bool // may be given as "<key minus _fingerprint>_file": the SHA-256 of that file
	notSalient bool // not encoded (the shard enters as the resolved Slice)
	part       []fieldInfo
}

var modelFields = []fieldInfo{
	{key: "name", path: "model.name", goName: "Name", typ: typeString, kind: kindText, limit: MaxModelName, required: true},
	{key: "revision", path: "model.revision", goName: "Revision", typ: typeString, kind: kindIdentifier,
		limit: MaxRevision, required: true},
	{key: "weights_epoch", path: "model.weights_epoch", goName: "WeightsEpoch", typ: typeU64, kind: kindValue},
	{key: "weights_fingerprint", path: "model.weights_fingerprint", goName: "WeightsFingerprint", typ: typeOptDigest,
		kind: kindValue, fileAlt: true},
	{key: "positional_fingerprint", path: "model.positional_fingerprint", goName: "PositionalFingerprint",
		typ: typeOptDigest, kind: kindValue},
}

var quantFields = []fieldInfo{
	{key: "scheme", path: "kv.quant.scheme", goName: "Scheme", typ: typeString, kind: kindScheme, limit: MaxQuantScheme},
	{key: "group_size", path: "kv.quant.group_size", goName: "GroupSize", typ: typeU32, kind: kindValue},
	{key: "scale_dtype", path: "kv.quant.scale_dtype", goName: "ScaleDType", typ: typeOptDType, kind: kindDType},
	{key: "zero_point", path: "kv.quant.zero_point", goName: "ZeroPoint", typ: typeBool, kind: kindValue},
	{key: "scales_fingerprint", path: "kv.quant.scales_fingerprint", goName: "ScalesFingerprint", typ: typeOptDigest,
		kind: kindValue, fileAlt: true},
}

var kvFields = []fieldInfo{
	{key: "dtype", path: "kv.dtype", goName: "DType", typ: typeDType, kind: kindDType, required: true},
	{key: "quant", path: "kv.quant", goName: "Quant", typ: typePart, kind: kindValue, part: quantFields},
	{key: "block_size", path: "kv.block_size", goName: "BlockSize", typ: typeU32, kind: kindPositive, required: true},
	{key: "num_layers", path: "kv.num_layers", goName: "NumLayers", typ: typeU32, kind: kindPositive, required: true},
	{key: "num_kv_heads", path: "kv.num_kv_heads", goName: "NumKVHeads", typ: typeU32, kind: kindPositive,
		required: true},
	{key: "head_dim", path: "kv.head_dim", goName: "HeadDim", typ: typeU32, kind: kindPositive, required: true},
	{key: "layout", path: "kv.layout", goName: "Layout", typ: typeString, kind: kindIdentifier, limit: MaxLayout,
		required: true},
	{key: "mla", path: "kv.mla", goName: "MLA", typ: typeBool, kind: kindValue},
}

var shardFields = []fieldInfo{
	{key: "tp_size", path: "shard.tp_size", goName: "TPSize", typ: typeU32, kind: kindValue, notSalient: true},
	{key: "tp_rank", path: "shard.tp_rank", goName: "TPRank", typ: typeU32, kind: kindValue, notSalient: true},
	{key: "pp_size", path: "shard.pp_size", goName: "PPSize", typ: typeU32, kind: kindValue, notSalient: true},
	{key: "pp_rank", path: "shard.pp_rank", goName: "PPRank", typ: typeU32, kind: kindValue, notSalient: true},
}

var adapterFields = []fieldInfo{
	{key: "name", path: "adapter.name", goName: "Name", typ: typeString, kind: kindText, limit: MaxAdapterName,
		required: true},
	{key: "weights_fingerprint", path: "adapter.weights_fingerprint", goName: "WeightsFingerprint", typ: typeDigest,
		kind: kindValue, required: true, fileAlt: true},
}

// identityFields is the identity's field table, in encoding order.
var identityFields = []fieldInfo{
	{key: "tenant", path: "tenant", goName: "Tenant", typ: typeString, kind: kindTenant, limit: MaxTenant},
	{key: "model", path: "model", goName: "Model", typ: typePart, kind: kindValue, required: true, part: modelFields},
	{key: "kv", path: "kv", goName: "KV", typ: typePart, kind: kindValue, required: true, part: kvFields},
	{key: "shard", path: "shard", goName: "Shard", typ: typePart, kind: kindValue, notSalient: true, part: shardFields},
	{key: "adapter", path: "adapter", goName: "Adapter", typ: typeOptPart, kind: kindValue, part: adapterFields},
}

// member returns the struct field of part (a struct value) that f describes.
func (f *fieldInfo) member(part reflect.Value) reflect.Value { return part.FieldByName(f.goName) }

// checkMember applies the member's own rule (its kind); skipTenant: the
// single-tenant policy has replaced the tenant already.
func checkMember(f *fieldInfo, v reflect.Value, skipTenant bool) error {
	switch f.kind {
	case kindText:
		return checkText(f.path, v.String(), f.limit)
	case kindIdentifier:
		return checkPrintable(f.path, v.String(), f.limit)
	case kindTenant:
		if skipTenant {
			return nil
		}
		return checkTenant(v.String())
	case kindScheme:
		return checkScheme(v.String())
	case kindPositive:
		return checkPositive(f.path, uint32(v.Uint()))
	case kindDType:
		if f.typ == typeOptDType {
			if !v.IsNil() && !v.Elem().Interface().(DType).Valid() {
				return identityError(f.path, "is not a known dtype")
			}
			return nil
		}
		if d := v.Interface().(DType); !d.Valid() {
			if d == DTypeUnset {
				return identityError(f.path, "must be set")
			}
			return identityError(f.path, "is not a known dtype code")
		}
	}
	return nil
}

// checkMembers checks every member's own rule in table order, nested parts
// and a present adapter included.
func checkMembers(part reflect.Value, table []fieldInfo, skipTenant bool) error {
	for i := range table {
		f := &table[i]
		v := f.member(part)
		var err error
		switch f.typ {
		case typePart:
			err = checkMembers(v, f.part, skipTenant)
		case typeOptPart:
			if !v.IsNil() {
				err = checkMembers(v.Elem(), f.part, skipTenant)
			}
		default:
			err = checkMember(f, v, skipTenant)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// visitSalient calls fn with the path and encoded bytes of every salient
// field in encoding order; an optional part contributes its presence byte
// (under its own path), then its members.
func visitSalient(part reflect.Value, table []fieldInfo, fn func(path string, b []byte)) {
	for i := range table {
		f := &table[i]
		if f.notSalient {
			continue
		}
		v := f.member(part)
		switch f.typ {
		case typePart:
			visitSalient(v, f.part, fn)
		case typeOptPart:
			fn(f.path, flag(!v.IsNil()))
			if !v.IsNil() {
				visitSalient(v.Elem(), f.part, fn)
			}
		default:
			fn(f.path, encodeMember(f.typ, v))
		}
	}
}

func encodeMember(t fieldType, v reflect.Value) []byte {
	switch t {
	case typeString:
		return str(v.String())
	case typeU32:
		return u32le(uint32(v.Uint()))
	case typeU64:
		return u64le(v.Uint())
	case typeBool:
		return flag(v.Bool())
	case typeDType:
		return []byte{byte(v.Uint())}
	case typeOptDType:
		if v.IsNil() {
			return []byte{0}
		}
		return []byte{1, byte(v.Elem().Uint())}
	case typeDigest:
		d := v.Interface().(Digest)
		return append([]byte(nil), d[:]...)
	case typeOptDigest:
		return optDigest(v.Interface().(*Digest))
	}
	panic(fmt.Sprintf("kvkey: no encoding for field type %d", t))
}

// decodeSalient reads every salient field of part in encoding order (the
// inverse of visitSalient).
func decodeSalient(r *reader, part reflect.Value, table []fieldInfo) {
	for i := range table {
		f := &table[i]
		if f.notSalient {
			continue
		}
		v := f.member(part)
		switch f.typ {
		case typePart:
			decodeSalient(r, v, f.part)
		case typeOptPart:
			if r.flag() {
				v.Set(reflect.New(v.Type().Elem()))
				decodeSalient(r, v.Elem(), f.part)
			}
		case typeString:
			v.SetString(r.str())
		case typeU32:
			v.SetUint(uint64(r.u32()))
		case typeU64:
			v.SetUint(r.u64())
		case typeBool:
			v.SetBool(r.flag())
		case typeDType:
			v.Set(reflect.ValueOf(r.dtype()))
		case typeOptDType:
			if r.flag() {
				d := r.dtype()
				v.Set(reflect.ValueOf(&d))
			}
		case typeDigest:
			v.Set(reflect.ValueOf(r.digest()))
		case typeOptDigest:
			v.Set(reflect.ValueOf(r.optDigest()))
		}
	}
}
