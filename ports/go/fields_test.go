// SPDX-License-Identifier: Apache-2.0

package kvkey

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// The salient fields of the Go table, in encoding order, are the committed
// list the C++ library is checked against (tests/data/identity_fields.txt).
func TestSalientFieldsMatchTheCommittedList(t *testing.T) {
	b, err := os.ReadFile("../../tests/data/identity_fields.txt")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			want = append(want, line)
		}
	}
	id := Identity{Adapter: &Adapter{}}
	var got []string
	for _, f := range fields(&id) {
		got = append(got, f.path)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Go table: %v\ncommitted list: %v", got, want)
	}
}

// Every Go struct field of the identity is in the table, and every table
// entry names a field of the right Go type.
func TestFieldTableCoversTheStructs(t *testing.T) {
	goType := map[fieldType]reflect.Type{
		typeString: reflect.TypeOf(""), typeU32: reflect.TypeOf(uint32(0)), typeU64: reflect.TypeOf(uint64(0)),
		typeBool: reflect.TypeOf(false), typeDType: reflect.TypeOf(DType(0)), typeOptDType: reflect.TypeOf((*DType)(nil)),
		typeDigest: reflect.TypeOf(Digest{}), typeOptDigest: reflect.TypeOf((*Digest)(nil)),
	}
	var check func(st reflect.Type, table []fieldInfo, path string)
	check = func(st reflect.Type, table []fieldInfo, path string) {
		if st.NumField() != len(table) {
			t.Errorf("%s: %d Go fields, %d in the table", st, st.NumField(), len(table))
		}
		for _, f := range table {
			sf, ok := st.FieldByName(f.goName)
			if !ok || f.path != strings.TrimPrefix(path+"."+f.key, ".") {
				t.Errorf("%s: no field %s, or path %s", st, f.goName, f.path)
				continue
			}
			switch f.typ {
			case typePart:
				check(sf.Type, f.part, f.path)
			case typeOptPart:
				check(sf.Type.Elem(), f.part, f.path)
			default:
				if sf.Type != goType[f.typ] {
					t.Errorf("%s: Go type %s", f.path, sf.Type)
				}
			}
		}
	}
	check(reflect.TypeOf(Identity{}), identityFields, "")
}
