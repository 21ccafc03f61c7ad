// SPDX-License-Identifier: Apache-2.0

package kvkey

import (
	"fmt"
	"reflect"
	"testing"
	"unicode/utf8"
)

// The C++ field table's export (docs/conformance.md, "The identity schema").
type schemaFile struct {
	FormatVersion int `json:"format_version"`
	DTypes        []struct {
		Name string `json:"name"`
		Code int    `json:"code"`
	} `json:"dtypes"`
	Charsets struct {
		Unsafe [][2]rune `json:"unsafe_code_points"`
	} `json:"charsets"`
	Policy struct {
		Key    string   `json:"key"`
		After  string   `json:"after"`
		Values []string `json:"values"`
	} `json:"policy"`
	Confidential struct {
		Key      string `json:"key"`
		After    string `json:"after"`
		Type     string `json:"type"`
		Nullable bool   `json:"nullable"`
		Default  bool   `json:"default"`
		Rule     string `json:"rule"`
	} `json:"confidential"`
	IdentityFile struct {
		MaxBytes int `json:"max_bytes"`
		MaxDepth int `json:"max_depth"`
	} `json:"identity_file"`
	Fields     []schemaField    `json:"fields"`
	Validation []map[string]any `json:"validation"`
}

type schemaField struct {
	Path          string  `json:"path"`
	Key           string  `json:"key"`
	Type          string  `json:"type"`
	Optional      bool    `json:"optional"`
	Default       any     `json:"default"`
	Rule          *string `json:"rule"`
	MaxBytes      *int    `json:"max_bytes"`
	Salient       bool    `json:"salient"`
	EncodingIndex *int    `json:"encoding_index"`
	FileRequired  bool    `json:"file_required"`
	FileAltKey    *string `json:"file_alt_key"`
}

func readSchema(t *testing.T) schemaFile {
	var s schemaFile
	readJSON(t, "identity-schema.json", &s)
	if len(s.Fields) == 0 || len(s.Validation) == 0 {
		t.Fatal("empty schema")
	}
	return s
}

var schemaTypes = map[fieldType]string{typeString: "string", typeU32: "u32", typeU64: "u64", typeBool: "bool",
	typeDType: "dtype", typeOptDType: "dtype", typeDigest: "digest", typeOptDigest: "digest", typePart: "object",
	typeOptPart: "object"}

// goSchemaFields is the Go table as schema entries, depth first in table order.
func goSchemaFields() []schemaField {
	salient := fields(&Identity{Adapter: &Adapter{}})
	defaults := jsonDefaults()
	defaults.Adapter = &Adapter{}
	var out []schemaField
	var walk func(part reflect.Value, table []fieldInfo, salientPart bool)
	walk = func(part reflect.Value, table []fieldInfo, salientPart bool) {
		for i := range table {
			f := &table[i]
			e := schemaField{Path: f.path, Key: f.key, Type: schemaTypes[f.typ], Salient: salientPart && !f.notSalient,
				FileRequired: f.required,
				Optional:     f.typ == typeOptDType || f.typ == typeOptDigest || f.typ == typeOptPart}
			if f.kind != kindValue {
				rule := string(f.kind)
				e.Rule = &rule
			}
			if f.limit != 0 {
				e.MaxBytes = &f.limit
			}
			if f.fileAlt {
				k := fileKeyOf(f.key)
				e.FileAltKey = &k
			}
			for n, s := range salient {
				if s.path == f.path && f.typ != typePart {
					n := n
					e.EncodingIndex = &n
				}
			}
			v := f.member(part)
			switch f.typ {
			case typeString:
				e.Default = v.String()
			case typeU32, typeU64:
				e.Default = float64(v.Uint())
			case typeBool:
				e.Default = v.Bool()
			case typeDigest:
				e.Default = v.Interface().(Digest).String()
			}
			out = append(out, e)
			if f.typ == typePart {
				walk(v, f.part, e.Salient)
			} else if f.typ == typeOptPart {
				walk(v.Elem(), f.part, e.Salient)
			}
		}
	}
	walk(reflect.ValueOf(defaults), identityFields, true)
	return out
}

// The Go field table agrees with the C++ table's export, field by field.
func TestFieldTableMatchesTheSchema(t *testing.T) {
	s := readSchema(t)
	got := goSchemaFields()
	if len(got) != len(s.Fields) {
		t.Errorf("%d Go fields, %d in the schema", len(got), len(s.Fields))
	}
	for i := 0; i < len(got) && i < len(s.Fields); i++ {
		g, w := fmt.Sprintf("%+v", describeField(got[i])), fmt.Sprintf("%+v", describeField(s.Fields[i]))
		if g != w {
			t.Errorf("field %d:\n  Go     %s\n  schema %s", i, g, w)
		}
	}
	for i, d := range s.DTypes {
		if DType(d.Code).String() != d.Name || i+1 != d.Code {
			t.Errorf("dtype %d: %s, Go %s", d.Code, d.Name, DType(d.Code))
		}
	}
	if len(s.DTypes) != len(dtypeNames)-1 {
		t.Errorf("%d dtypes, Go has %d", len(s.DTypes), len(dtypeNames)-1)
	}
	for cp := rune(0); cp <= utf8.MaxRune; cp++ {
		inSchema := false
		for _, r := range s.Charsets.Unsafe {
			inSchema = inSchema || cp >= r[0] && cp <= r[1]
		}
		if inSchema != isUnsafeCodePoint(cp) {
			t.Errorf("U+%04X: unsafe in the schema %v, in Go %v", cp, inSchema, isUnsafeCodePoint(cp))
		}
	}
	if s.IdentityFile.MaxBytes != MaxIdentityFileSize || s.IdentityFile.MaxDepth != MaxIdentityFileDepth ||
		s.Policy.Key != "policy" || s.Policy.After != "tenant" ||
		fmt.Sprint(s.Policy.Values) != "[required single_tenant]" {
		t.Errorf("identity file limits or policy: %+v %+v", s.IdentityFile, s.Policy)
	}
	// IdentityFile.Confidential: read after "policy", a bool (null: absent), false by default.
	if c := s.Confidential; c.Key != "confidential" || c.After != "policy" || c.Type != "bool" || !c.Nullable ||
		c.Default || c.Rule != "keyed" {
		t.Errorf("the schema's confidential: %+v", c)
	}
	if s.FormatVersion != FormatVersion {
		t.Errorf("schema of format version %d, Go writes %d", s.FormatVersion, FormatVersion)
	}
}

func describeField(f schemaField) string {
	deref := func(p any) any {
		v := reflect.ValueOf(p)
		if v.IsNil() {
			return nil
		}
		return v.Elem().Interface()
	}
	return fmt.Sprintf("path=%s key=%s type=%s optional=%v default=%v rule=%v max=%v salient=%v index=%v "+
		"required=%v alt=%v", f.Path, f.Key, f.Type, f.Optional, f.Default, deref(f.Rule), deref(f.MaxBytes),
		f.Salient, deref(f.EncodingIndex), f.FileRequired, deref(f.FileAltKey))
}

// ---- the validation order ---------------------------------------------------

// A case: an identity, its policy and secret.
type validationCase struct {
	id           Identity
	single       bool
	secret       []byte // nil: a plain namespace
	confidential bool
}

func (c *validationCase) at(path string) reflect.Value {
	v := reflect.ValueOf(&c.id).Elem()
	table := identityFields
	for {
		var f *fieldInfo
		for i := range table {
			if table[i].path == path || len(path) > len(table[i].path) && path[:len(table[i].path)+1] == table[i].path+"." {
				f = &table[i]
			}
		}
		v = f.member(v)
		if f.path == path {
			return v
		}
		if f.typ == typeOptPart {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		table = f.part
	}
}

func (c *validationCase) uint(path string) uint64 { return c.at(path).Uint() }

// broken evaluates one rule of the schema's validation list, from the schema
// alone (docs/conformance.md), on the case.
func broken(t *testing.T, s *schemaFile, rule map[string]any, c *validationCase) bool {
	if when, ok := rule["when"].(map[string]any); ok {
		switch {
		case when["policy"] != nil && (when["policy"] == "single_tenant") != c.single,
			when["present"] == "adapter" && c.id.Adapter == nil,
			when["namespace"] == "keyed" && c.secret == nil,
			when["namespace"] == "plain" && c.secret != nil,
			when["field"] != nil && c.at(when["field"].(string)).String() != when["equals"]:
			return false
		}
	}
	field := rule["field"].(string)
	max, _ := rule["max_bytes"].(float64)
	bytesOK := func(s string, ok func(i int, b byte) bool) bool {
		if len(s) == 0 || len(s) > int(max) {
			return false
		}
		for i := 0; i < len(s); i++ {
			if !ok(i, s[i]) {
				return false
			}
		}
		return true
	}
	alnum := func(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' }
	other := func() uint64 { return c.uint(rule["other"].(string)) }
	switch rule["rule"] {
	case "empty":
		return c.id.Tenant != ""
	case "tenant":
		return !bytesOK(c.id.Tenant, func(i int, b byte) bool {
			return alnum(b) || i > 0 && (b == '.' || b == '_' || b == '-')
		})
	case "identifier":
		return !bytesOK(c.at(field).String(), func(_ int, b byte) bool { return b >= 0x21 && b <= 0x7e })
	case "scheme":
		return !bytesOK(c.at(field).String(), func(_ int, b byte) bool {
			return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-'
		})
	case "text":
		text := c.at(field).String()
		if !bytesOK(text, func(int, byte) bool { return true }) {
			return true
		}
		for _, cp := range text {
			for _, r := range s.Charsets.Unsafe {
				if cp >= r[0] && cp <= r[1] {
					return true
				}
			}
		}
		return false
	case "dtype":
		v := c.at(field)
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return false
			}
			v = v.Elem()
		}
		for _, d := range s.DTypes {
			if uint64(d.Code) == v.Uint() {
				return false
			}
		}
		return true
	case "positive":
		return c.uint(field) == 0
	case "default":
		v := c.at(field)
		return !v.IsZero()
	case "below":
		return c.uint(field) >= other()
	case "splits_heads":
		if c.at(rule["unless"].(string)).Bool() {
			return false
		}
		tp, heads := c.uint(field), other()
		return tp <= heads && heads%tp != 0 || tp > heads && tp%heads != 0
	case "divides":
		return other()%c.uint(field) != 0
	case "secret_length":
		return len(c.secret) < int(rule["min_bytes"].(float64)) || len(c.secret) > int(rule["max_bytes"].(float64))
	case "keyed":
		return c.confidential
	}
	t.Fatalf("unknown rule %v", rule)
	return false
}

// breakRule edits the case so that the rule fails.
func breakRule(rule map[string]any, c *validationCase) {
	field := rule["field"].(string)
	switch rule["rule"] {
	case "empty":
		c.single, c.id.Tenant = true, "t"
	case "tenant":
		c.single, c.id.Tenant = false, "-t"
	case "text", "identifier":
		c.at(field).SetString("")
	case "scheme":
		c.id.KV.Quant.Scheme = "None"
	case "dtype":
		if field == "kv.dtype" {
			c.id.KV.DType = DTypeUnset
		} else {
			bad := DType(99)
			c.id.KV.Quant.ScaleDType = &bad
		}
	case "positive":
		c.at(field).SetUint(0)
	case "default":
		c.id.KV.Quant.Scheme = "none"
		v := c.at(field)
		switch v.Kind() {
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Uint32:
			v.SetUint(4)
		default:
			v.Set(reflect.New(v.Type().Elem()))
		}
	case "below":
		c.at(field).SetUint(c.uint(rule["other"].(string)))
	case "splits_heads":
		c.id.KV.MLA, c.id.KV.NumKVHeads, c.id.Shard.TPSize = false, 4, 3
	case "divides":
		c.id.KV.NumLayers, c.id.Shard.PPSize = 8, 3
	case "secret_length":
		c.secret = make([]byte, 31)
	case "keyed":
		c.secret, c.confidential = nil, true
	}
}

// Identities breaking every pair and triple of the schema's rules are refused
// on the field of the first broken rule in the schema's order.
func TestValidationOrderMatchesTheSchema(t *testing.T) {
	s := readSchema(t)
	rules := s.Validation
	base := func() validationCase {
		return validationCase{id: Identity{Tenant: "t", Model: Model{Name: "m", Revision: "r"},
			KV: KV{DType: FP16, Quant: Quant{Scheme: "none"}, BlockSize: 4, NumLayers: 8, NumKVHeads: 4, HeadDim: 8,
				Layout: "l"}, Shard: Shard{TPSize: 2, TPRank: 1, PPSize: 2, PPRank: 1}, Adapter: &Adapter{Name: "a"}},
			secret: make([]byte, 32)}
	}
	checked := 0
	try := func(picks ...int) {
		c := base()
		for _, p := range picks {
			breakRule(rules[p], &c)
		}
		want := ""
		for _, r := range rules {
			if broken(t, &s, r, &c) {
				want = r["field"].(string)
				break
			}
		}
		var opts []Option
		if c.secret != nil {
			opts = append(opts, WithSecret(c.secret))
		}
		if c.confidential {
			opts = append(opts, Confidential())
		}
		if c.single {
			opts = append(opts, SingleTenant())
		}
		_, err := newNamespace(c.id, true, opts...)
		if want == "" && err != nil || want != "" && !hasField(err, IdentityErrorKind, want) {
			t.Errorf("rules %v: got %v, want %q", picks, err, want)
		}
		checked++
	}
	for i := range rules {
		try(i)
		for j := i + 1; j < len(rules); j++ {
			try(i, j)
			try(j, i)
			for k := j + 1; k < len(rules); k++ {
				try(i, j, k)
			}
		}
	}
	if testing.Verbose() {
		t.Logf("%d cases", checked)
	}
}
