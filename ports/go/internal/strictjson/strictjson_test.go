// SPDX-License-Identifier: Apache-2.0

package strictjson

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestRefuses(t *testing.T) {
	for _, c := range []struct{ name, text string }{
		{"invalid UTF-8", "\"a\xffb\""},
		{"UTF-8 surrogate", "\"\xed\xa0\x80\""},
		{"overlong", "\"\xc0\xaf\""},
		{"lone high surrogate", `"\ud800"`},
		{"lone high surrogate then text", `"\ud800abcdef"`},
		{"high surrogate then non-low", `"\ud800\u0041"`},
		{"lone low surrogate", `"\udc00"`},
		{"trailing data", `{"a":1} x`},
		{"two values", `{} {}`},
		{"NaN", `{"a":NaN}`},
		{"Infinity", `[Infinity]`},
		{"-Infinity", `[-Infinity]`},
		{"leading zero", `[01]`},
		{"plus", `[+1]`},
		{"bare fraction", `[1.]`},
		{"control character", "\"a\tb\""},
		{"single quotes", `{'a':1}`},
		{"trailing comma", `[1,]`},
		{"empty", ``},
		{"bad escape", `"\x41"`},
		{"short unicode escape", `"\u41"`},
		{"signed unicode escape", `"\u+041"`},
		{"non-ASCII outside strings", "[1\xc2\xa0]"},
		{"beyond a double", `[1e400]`},
		{"a 400-digit integer", "[" + strings.Repeat("9", 400) + "]"},
		{"too deep", strings.Repeat("[", 5) + strings.Repeat("]", 5)},
	} {
		if v, err := Parse([]byte(c.text), 4); err == nil {
			t.Errorf("%s: parsed as %#v", c.name, v)
		}
	}
}

func TestDuplicateKeysNameTheirPath(t *testing.T) {
	_, err := Parse([]byte(`{"model":{"name":"a","x":[{"y":1}],"name":"b"},"kv":{}}`), 32)
	var e *Error
	if !errors.As(err, &e) || e.Duplicate != "model.name" {
		t.Fatalf("got %v", err)
	}
	for text, want := range map[string]string{`{"":1,"":2}`: ".", `{"a":{"":1,"":2}}`: "a.",
		`{"a":[{"b":{"c":1,"c":2}}]}`: "a.b.c", `[{"k":1},{"k":1,"k":2}]`: "k"} {
		if _, err := Parse([]byte(text), 32); !errors.As(err, &e) || e.Duplicate != want {
			t.Errorf("%s: %v, want the duplicate %q", text, err, want)
		}
	}
	// A syntax error later in the text is named before a duplicate key.
	_, err = Parse([]byte(`{"a":1,"a":2,}`), 32)
	if !errors.As(err, &e) || e.Duplicate != "" {
		t.Fatalf("got %v", err)
	}
}

func TestDeepNestingIsAnError(t *testing.T) {
	deep := strings.Repeat(`{"id":`, 100000) + "1" + strings.Repeat("}", 100000)
	if _, err := Parse([]byte(deep), 512); err == nil {
		t.Fatal("parsed 100,000 levels")
	}
	ok := strings.Repeat("[", 512) + strings.Repeat("]", 512)
	if _, err := Parse([]byte(ok), 512); err != nil {
		t.Fatal(err)
	}
}

func TestRoundTrip(t *testing.T) {
	text := `{"b":[1,-0.5e+3,true,false,null,"\u00e9\ud83d\ude00\n\"\\\u2028"],"a":{"z":{}},"c":[],` +
		`"n":123456789012345678901234567890}`
	v, err := Parse([]byte(" \n"+text+"\r\n\t"), 8)
	if err != nil {
		t.Fatal(err)
	}
	o := v.(*Object)
	if strings.Join(o.Keys, ",") != "b,a,c,n" {
		t.Errorf("keys %v", o.Keys)
	}
	if s := o.Values[0].([]any)[5].(string); s != "é😀\n\"\\\u2028" {
		t.Errorf("string %q", s)
	}
	out := Append(nil, v)
	if !json.Valid(out) {
		t.Fatalf("not JSON: %s", out)
	}
	back, err := Parse(out, 8)
	if err != nil || string(Append(nil, back)) != string(out) {
		t.Errorf("round trip: %s, %v", out, err)
	}
	if want := `"n":123456789012345678901234567890`; !strings.Contains(string(out), want) {
		t.Errorf("numbers are written as given: %s", out)
	}
}

// What Parse accepts is JSON, and what Append writes parses back to the same
// text (go test -fuzz FuzzParse).
func FuzzParse(f *testing.F) {
	for _, seed := range []string{`{"a":[1,-2.5e3,"\u00e9\ud83d\ude00"],"b":{"c":null}}`, `"\ud800"`, `[1e400]`, `{"a":1,"a":2}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Parse(data, 64)
		if err != nil {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted what encoding/json refuses: %q", data)
		}
		out := Append(nil, v)
		back, err := Parse(out, 64)
		if err != nil || string(Append(nil, back)) != string(out) {
			t.Fatalf("%q: wrote %q, %v", data, out, err)
		}
	})
}

func TestFirstUnknownInByteOrder(t *testing.T) {
	v, _ := Parse([]byte(`{"zz":1,"b":2,"aa":3,"":4}`), 2)
	for _, c := range []struct {
		known []string
		want  string
		found bool
	}{{[]string{"b"}, "", true}, {[]string{"", "b"}, "aa", true}, {[]string{"", "aa", "b", "zz"}, "", false}} {
		if got, found := v.(*Object).FirstUnknown(c.known); got != c.want || found != c.found {
			t.Errorf("known %q: %q %v", c.known, got, found)
		}
	}
}
