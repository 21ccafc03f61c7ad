// SPDX-License-Identifier: Apache-2.0

package kvkey

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"github.com/kvkey/kvkey/ports/go/internal/hook"
	"github.com/kvkey/kvkey/ports/go/internal/strictjson"
)

// Limits on an identity file, as the kvkey tool's (docs/cli.md, "Limits and
// untrusted input").
const (
	MaxIdentityFileSize  = 1 << 20 // bytes
	MaxIdentityFileDepth = 32      // nested arrays and objects
)

// IdentityFile is an identity file as `kvkey init` writes it (docs/cli.md,
// "Identity files"): the identity and the namespace's tenant policy.
type IdentityFile struct {
	Identity     Identity // as the file gives it; Tenant is empty under the single-tenant policy
	SingleTenant bool     // "policy": "single_tenant"
	Confidential bool     // "confidential": true (format v4; keyed namespaces)
}

// NewNamespace builds the file's namespace (with SingleTenant() when the file
// says so), validating the identity exactly as the file gives it: an explicit
// empty kv.quant.scheme or zero shard size is refused as by the C++ library.
// Pass WithSecret for a keyed namespace.
func (f *IdentityFile) NewNamespace(opts ...Option) (*Namespace, error) {
	if f.SingleTenant {
		opts = append([]Option{SingleTenant()}, opts...)
	}
	if f.Confidential {
		opts = append([]Option{Confidential()}, opts...)
	}
	return newNamespace(f.Identity, true, opts...)
}

// ParseIdentity reads an identity file's bytes (JSON). Errors are *Error
// values of kind input_error naming the member as every kvkey reader does
// (docs/conformance.md, "Identity files"): a duplicate key (Field: its dotted
// path, the first in the file), an unknown key ("kv.blocksize"; with several
// the first in byte order), a missing required key, a wrong type or an
// integer out of range. Field is "identity_file" when the text is not an
// identity file's JSON (a syntax error, bad UTF-8, a lone surrogate, data
// after the object, a number beyond a double, nesting deeper than
// MaxIdentityFileDepth, more than MaxIdentityFileSize bytes, a top level that
// is not an object). The identity is not validated here:
// IdentityFile.NewNamespace does it. A "*_file" key names a file whose SHA-256
// is the fingerprint, relative to the working directory.
func ParseIdentity(data []byte) (*IdentityFile, error) { return parseIdentityFile(data, "") }

// LoadIdentity reads and parses the identity file at path (a regular file of
// at most MaxIdentityFileSize bytes); "*_file" keys are relative to its
// directory.
func LoadIdentity(path string) (*IdentityFile, error) {
	// Checked before opening: opening a FIFO would wait for a writer.
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
		if err != nil {
			return nil, inputError("identity_file", err.Error())
		}
		return nil, inputError("identity_file", path+": not a regular file")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, inputError("identity_file", err.Error())
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxIdentityFileSize+1))
	if err != nil {
		return nil, inputError("identity_file", path+": "+err.Error())
	}
	return parseIdentityFile(data, filepath.Dir(path))
}

// UnmarshalJSON reads an identity file (json.Unmarshal(file, &id)) by
// ParseIdentity's rules and validates it; a single_tenant file needs
// ParseIdentity, which keeps the policy.
func (id *Identity) UnmarshalJSON(data []byte) error {
	f, err := ParseIdentity(data)
	if err != nil {
		return err
	}
	if f.SingleTenant {
		return inputError("policy", `"single_tenant" is not part of an Identity: read the file with ParseIdentity`)
	}
	if _, err := validated(f.Identity, false); err != nil {
		return err
	}
	*id = f.Identity
	return nil
}

// MarshalJSON writes the identity as an identity file: every member, absent
// optional ones (fingerprints, scale dtype, adapter) left out.
func (id Identity) MarshalJSON() ([]byte, error) {
	return strictjson.Append(nil, partJSON(reflect.ValueOf(id), identityFields)), nil
}

// MarshalJSON writes the identity file that ParseIdentity reads back as f:
// the identity, and "policy": "single_tenant" after the tenant when f says so.
func (f IdentityFile) MarshalJSON() ([]byte, error) {
	o := partJSON(reflect.ValueOf(f.Identity), identityFields)
	if f.Confidential {
		o.Keys = append([]string{o.Keys[0], "confidential"}, o.Keys[1:]...)
		o.Values = append([]any{o.Values[0], true}, o.Values[1:]...)
	}
	if f.SingleTenant {
		o.Keys = append([]string{"tenant", "policy"}, o.Keys[1:]...)
		o.Values = append([]any{o.Values[0], "single_tenant"}, o.Values[1:]...)
	}
	return strictjson.Append(nil, o), nil
}

// UnmarshalJSON reads an identity file as ParseIdentity does.
func (f *IdentityFile) UnmarshalJSON(data []byte) error {
	parsed, err := ParseIdentity(data)
	if err == nil {
		*f = *parsed
	}
	return err
}

func partJSON(part reflect.Value, table []fieldInfo) *strictjson.Object {
	o := &strictjson.Object{}
	for i := range table {
		f := &table[i]
		v := f.member(part)
		var out any
		switch f.typ {
		case typePart:
			out = partJSON(v, f.part)
		case typeOptPart, typeOptDType, typeOptDigest:
			if v.IsNil() {
				continue
			}
			if f.typ == typeOptPart {
				out = partJSON(v.Elem(), f.part)
			} else {
				out = v.Elem().Interface().(fmt.Stringer).String()
			}
		case typeString:
			out = v.String()
		case typeU32, typeU64:
			out = strictjson.Number(strconv.FormatUint(v.Uint(), 10))
		case typeBool:
			out = v.Bool()
		case typeDType, typeDigest:
			out = v.Interface().(fmt.Stringer).String()
		}
		o.Keys, o.Values = append(o.Keys, f.key), append(o.Values, out)
	}
	return o
}

// MarshalJSON writes the dtype's name ("fp16").
func (d DType) MarshalJSON() ([]byte, error) { return strictjson.Append(nil, d.String()), nil }

// UnmarshalJSON reads a dtype name ("fp16"), as identity files spell it.
func (d *DType) UnmarshalJSON(b []byte) error {
	return unmarshalString(b, "a dtype is a JSON string such as \"fp16\"", ParseDType, d)
}

// MarshalJSON writes the digest as 64 lowercase hex digits.
func (d Digest) MarshalJSON() ([]byte, error) { return strictjson.Append(nil, d.String()), nil }

// UnmarshalJSON reads 64 hex digits.
func (d *Digest) UnmarshalJSON(b []byte) error {
	return unmarshalString(b, "a digest is a JSON string of 64 hex digits", ParseDigest, d)
}

// unmarshalString sets *out to parse(the JSON string b).
func unmarshalString[T any](b []byte, what string, parse func(string) (T, error), out *T) error {
	v, err := strictjson.Parse(b, 1)
	s, isString := v.(string)
	if err != nil || !isString {
		return inputError("", what)
	}
	parsed, err := parse(s)
	if err != nil {
		return err
	}
	*out = parsed
	return nil
}

// jsonDefaults is the C++ kvkey::Identity's default: what an absent member means.
func jsonDefaults() Identity {
	return Identity{KV: KV{Quant: Quant{Scheme: "none"}}, Shard: Shard{TPSize: 1, PPSize: 1}}
}

func parseIdentityFile(data []byte, dir string) (*IdentityFile, error) {
	if len(data) > MaxIdentityFileSize {
		return nil, inputError("identity_file", fmt.Sprintf("an identity file holds at most %d bytes",
			MaxIdentityFileSize))
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return nil, inputError("identity_file", fmt.Sprintf("NUL byte (byte %d): not a text file", i))
	}
	v, err := strictjson.Parse(data, MaxIdentityFileDepth)
	var e *strictjson.Error
	if errors.As(err, &e) {
		if e.Duplicate != "" {
			return nil, inputError(e.Duplicate, "duplicate key")
		}
		return nil, inputError("identity_file", "invalid JSON: "+e.Error())
	}
	return decodeIdentityObject(v, "identity_file", identityReader{file: true, dir: dir})
}

// decodeIdentityObject decodes an identity object (docs/conformance.md,
// "Decoding an identity"): each object's type, then its keys (the first
// unknown one in byte order is named), then at the top level the policy,
// then its members in table order, each nested object entirely when it is
// reached. field names the whole object in an error.
func decodeIdentityObject(v any, field string, r identityReader) (*IdentityFile, error) {
	top, ok := v.(*strictjson.Object)
	if !ok {
		return nil, inputError(field, "expected an object")
	}
	keys := append([]string{"tenant", "policy", "confidential"}, r.keysOf(identityFields)[1:]...)
	if err := checkUnknownKeys(top, "", keys); err != nil {
		return nil, err
	}
	f := &IdentityFile{Identity: jsonDefaults()}
	if err := readPolicy(top, f); err != nil {
		return nil, err
	}
	return f, r.part(top, reflect.ValueOf(&f.Identity).Elem(), identityFields)
}

func readPolicy(top *strictjson.Object, f *IdentityFile) error {
	p, ok := present(top, "policy")
	if !ok {
		return readConfidential(top, f)
	}
	s, isString := p.(string)
	switch {
	case !isString:
		return inputError("policy", "expected a string")
	case s == "single_tenant":
		f.SingleTenant = true
	case s != "required":
		return inputError("policy", `expected "required" or "single_tenant"`)
	}
	return readConfidential(top, f)
}

// readConfidential reads the top-level "confidential" (format v4): true or
// false, absent or null meaning false.
func readConfidential(top *strictjson.Object, f *IdentityFile) error {
	c, ok := present(top, "confidential")
	if !ok {
		return nil
	}
	b, isBool := c.(bool)
	if !isBool {
		return inputError("confidential", "expected true or false")
	}
	f.Confidential = b
	return nil
}

// keysOf lists the keys an object of the part takes, in a file each "*_file"
// alternative after its digest.
func (r identityReader) keysOf(table []fieldInfo) []string {
	var keys []string
	for _, f := range table {
		keys = append(keys, f.key)
		if f.fileAlt && r.file {
			keys = append(keys, fileKeyOf(f.key))
		}
	}
	return keys
}

// fileKeyOf: "weights_fingerprint" -> "weights_file".
func fileKeyOf(key string) string { return strings.TrimSuffix(key, "_fingerprint") + "_file" }

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// checkUnknownKeys names the key of o that is not one of keys, the first in
// byte order when there are several (whatever order a map keeps).
func checkUnknownKeys(o *strictjson.Object, path string, keys []string) error {
	if unknown, found := o.FirstUnknown(keys); found {
		return inputError(join(path, unknown), "unknown key")
	}
	return nil
}

// present returns the member unless it is absent or null.
func present(o *strictjson.Object, key string) (any, bool) {
	v, ok := o.Get(key)
	return v, ok && v != nil
}

// readLeaf sets out (a member of type t) from the JSON value v; errors name path.
func readLeaf(path string, t fieldType, v any, out reflect.Value) error {
	switch t {
	case typeString:
		s, ok := v.(string)
		if !ok {
			return inputError(path, "expected a string")
		}
		out.SetString(s)
	case typeU32, typeU64:
		bits := 32
		if t == typeU64 {
			bits = 64
		}
		n, ok := v.(strictjson.Number)
		u, err := strconv.ParseUint(string(n), 10, bits)
		if !ok || err != nil {
			return inputError(path, fmt.Sprintf("expected an integer in [0, 2^%d)", bits))
		}
		out.SetUint(u)
	case typeBool:
		b, ok := v.(bool)
		if !ok {
			return inputError(path, "expected true or false")
		}
		out.SetBool(b)
	case typeDType, typeOptDType:
		s, _ := v.(string)
		d, err := ParseDType(s)
		if _, ok := v.(string); !ok || err != nil {
			return inputError(path, "expected a dtype name ("+strings.Join(dtypeNames[1:], ", ")+")")
		}
		if t == typeOptDType {
			out.Set(reflect.ValueOf(&d))
		} else {
			out.Set(reflect.ValueOf(d))
		}
	case typeDigest, typeOptDigest:
		s, _ := v.(string)
		d, err := ParseDigest(s)
		if _, ok := v.(string); !ok || err != nil {
			return inputError(path, "expected 64 hex digits")
		}
		if t == typeOptDigest {
			out.Set(reflect.ValueOf(&d))
		} else {
			out.Set(reflect.ValueOf(d))
		}
	default:
		panic("kvkey: not a leaf")
	}
	return nil
}

// identityReader reads an identity's parts in table order. In an identity
// file (file true: the kvkey tool's reader, tools/cli/identity_config.cpp)
// required members must be given and digests may be given as files to hash,
// relative to dir; in a conformance request every member may be absent.
type identityReader struct {
	file bool
	dir  string
}

func (r identityReader) part(o *strictjson.Object, part reflect.Value, table []fieldInfo) error {
	for i := range table {
		if err := r.member(o, &table[i], part); err != nil {
			return err
		}
	}
	return nil
}

func (r identityReader) member(o *strictjson.Object, f *fieldInfo, part reflect.Value) error {
	out := f.member(part)
	if f.fileAlt && r.file {
		return r.fingerprint(o, f, out)
	}
	v, ok := present(o, f.key)
	if !ok {
		if f.required && r.file {
			return inputError(f.path, "required key is missing")
		}
		return nil // the C++ default
	}
	if f.typ != typePart && f.typ != typeOptPart {
		return readLeaf(f.path, f.typ, v, out)
	}
	sub, isObject := v.(*strictjson.Object)
	if !isObject {
		return inputError(f.path, "expected an object")
	}
	if err := checkUnknownKeys(sub, f.path, r.keysOf(f.part)); err != nil {
		return err
	}
	if f.typ == typeOptPart {
		out.Set(reflect.New(out.Type().Elem()))
		out = out.Elem()
	}
	return r.part(sub, out, f.part)
}

// fingerprint reads a digest given inline or as "<name>_file", a file to hash.
func (r identityReader) fingerprint(o *strictjson.Object, f *fieldInfo, out reflect.Value) error {
	fileKey := fileKeyOf(f.key)
	filePath := strings.TrimSuffix(f.path, f.key) + fileKey
	hex, hasHex := present(o, f.key)
	file, hasFile := present(o, fileKey)
	switch {
	case hasHex && hasFile:
		return inputError(filePath, fmt.Sprintf("give %s or %s, not both", f.path, filePath))
	case hasHex:
		return readLeaf(f.path, f.typ, hex, out)
	case !hasFile:
		if f.required {
			return inputError(f.path, "required key is missing (or give "+filePath+")")
		}
		return nil
	}
	name, isString := file.(string)
	if !isString {
		return inputError(filePath, "expected a string")
	}
	if strings.IndexByte(name, 0) >= 0 {
		return inputError(filePath, "a path cannot hold a NUL byte")
	}
	if !filepath.IsAbs(name) && r.dir != "" {
		name = filepath.Join(r.dir, name)
	}
	d, err := fingerprintFile(name)
	if err != nil {
		return inputError(filePath, err.Error())
	}
	if f.typ == typeOptDigest {
		out.Set(reflect.ValueOf(&d))
	} else {
		out.Set(reflect.ValueOf(d))
	}
	return nil
}

// fingerprintFile is the SHA-256 of a regular file (what sha256sum prints).
func fingerprintFile(name string) (d Digest, err error) {
	if st, err := os.Stat(name); err != nil || !st.Mode().IsRegular() {
		if err != nil {
			return d, err
		}
		return d, fmt.Errorf("%s: not a regular file", name)
	}
	file, err := os.Open(name)
	if err != nil {
		return d, err
	}
	defer file.Close()
	h := sha256.New()
	if _, err := io.Copy(h, file); err != nil {
		return d, err
	}
	h.Sum(d[:0])
	return d, nil
}

// ---- the conformance request's "identity" member (docs/conformance.md) ----

func init() { hook.DecodeRequestIdentity = decodeRequestIdentity }

// decodeRequestIdentity reads a request's identity as an identity file
// (docs/conformance.md, "Decoding an identity"), except that every member may
// be absent (it keeps the C++ default) and there are no "*_file" keys.
func decodeRequestIdentity(member any) (any, error) {
	return decodeIdentityObject(member, "identity", identityReader{})
}
