// SPDX-License-Identifier: Apache-2.0

// Package strictjson parses one JSON text (RFC 8259) strictly: the bytes must
// be well-formed UTF-8, string escapes must not leave a lone surrogate, an
// object must not repeat a key, nesting is bounded, and nothing but white
// space may follow the value. encoding/json accepts all of these (it turns
// bad bytes into U+FFFD and keeps the last of two keys), which would let an
// identity or a request mean something its bytes do not say.
//
// A number beyond the range of a double (1e400, a 400-digit integer) is
// refused too. Values are nil (null), bool, Number, string, []any and *Object.
package strictjson

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Number is a JSON number as written (it is valid JSON number syntax).
type Number string

// Object is a JSON object with its members in the order of the text.
type Object struct {
	Keys   []string
	Values []any
}

// Get returns the member named key and whether it is present.
func (o *Object) Get(key string) (any, bool) {
	for i, k := range o.Keys {
		if k == key {
			return o.Values[i], true
		}
	}
	return nil, false
}

// FirstUnknown returns the key of o that is not one of known, the first in
// byte order when there are several (whatever order the text has), and
// whether there is one (the empty key is a key).
func (o *Object) FirstUnknown(known []string) (string, bool) {
	unknown, found := "", false
	for _, k := range o.Keys {
		isKnown := false
		for _, want := range known {
			isKnown = isKnown || k == want
		}
		if !isKnown && (!found || k < unknown) {
			unknown, found = k, true
		}
	}
	return unknown, found
}

// Error says what is wrong with the text and where (Offset: the byte).
type Error struct {
	Offset    int
	Msg       string
	Duplicate string // for a duplicate key: its dotted path ("model.name"; "." for "" at the top level)
}

func (e *Error) Error() string { return fmt.Sprintf("byte %d: %s", e.Offset, e.Msg) }

type parser struct {
	s        []byte
	i        int
	maxDepth int
	path     []string // the keys of the enclosing objects, for duplicates
	dup      *Error   // the first duplicate key, reported when the text parses
}

// Parse parses data as one JSON value nested at most maxDepth arrays and
// objects deep.
func Parse(data []byte, maxDepth int) (any, error) {
	p := &parser{s: data, maxDepth: maxDepth}
	p.space()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.s) {
		return nil, p.fail("data after the JSON value")
	}
	if p.dup != nil {
		return nil, p.dup
	}
	return v, nil
}

func (p *parser) fail(format string, args ...any) *Error {
	return &Error{Offset: p.i, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) space() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (any, error) {
	if p.i >= len(p.s) {
		return nil, p.fail("unexpected end of the text")
	}
	switch c := p.s[p.i]; {
	case c == '{' || c == '[':
		if depth >= p.maxDepth {
			return nil, p.fail("nested deeper than %d levels", p.maxDepth)
		}
		if c == '{' {
			return p.object(depth + 1)
		}
		return p.array(depth + 1)
	case c == '"':
		return p.str()
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	for _, lit := range []struct {
		text string
		v    any
	}{{"true", true}, {"false", false}, {"null", nil}} {
		if strings.HasPrefix(string(p.s[p.i:min(len(p.s), p.i+len(lit.text))]), lit.text) {
			p.i += len(lit.text)
			return lit.v, nil
		}
	}
	return nil, p.fail("unexpected character %s", describeByte(p.s[p.i]))
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

func describeByte(c byte) string {
	if c >= 0x21 && c <= 0x7e {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("0x%02x", c)
}

func (p *parser) object(depth int) (any, error) {
	p.i++ // '{'
	o := &Object{}
	p.space()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return o, nil
	}
	for {
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != '"' {
			return nil, p.fail("expected a string key")
		}
		at := p.i
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		for _, k := range o.Keys {
			if k == key && p.dup == nil {
				dup := strings.Join(append(append([]string(nil), p.path...), key), ".")
				if dup == "" {
					dup = "." // an empty key at the top level, as the C++ reader names it
				}
				p.dup = &Error{Offset: at, Msg: "duplicate key " + strconv.Quote(key), Duplicate: dup}
			}
		}
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return nil, p.fail("expected ':'")
		}
		p.i++
		p.space()
		p.path = append(p.path, key)
		v, err := p.value(depth)
		p.path = p.path[:len(p.path)-1]
		if err != nil {
			return nil, err
		}
		o.Keys, o.Values = append(o.Keys, key), append(o.Values, v)
		p.space()
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			return o, nil
		}
		return nil, p.fail("expected ',' or '}'")
	}
}

func (p *parser) array(depth int) (any, error) {
	p.i++ // '['
	out := []any{}
	p.space()
	if p.i < len(p.s) && p.s[p.i] == ']' {
		p.i++
		return out, nil
	}
	for {
		p.space()
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		p.space()
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.s) && p.s[p.i] == ']' {
			p.i++
			return out, nil
		}
		return nil, p.fail("expected ',' or ']'")
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (p *parser) digits() int {
	n := 0
	for p.i < len(p.s) && isDigit(p.s[p.i]) {
		p.i++
		n++
	}
	return n
}

func (p *parser) number() (any, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	if p.i < len(p.s) && p.s[p.i] == '0' {
		p.i++
	} else if p.digits() == 0 {
		return nil, p.fail("invalid number")
	}
	if p.i < len(p.s) && p.s[p.i] == '.' {
		p.i++
		if p.digits() == 0 {
			return nil, p.fail("invalid number")
		}
	}
	if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		p.i++
		if p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return nil, p.fail("invalid number")
		}
	}
	// Beyond a double: no parser the ports use represents it (nlohmann's
	// refuses it, Python's is inf), so the text does not say one number.
	if f, _ := strconv.ParseFloat(string(p.s[start:p.i]), 64); math.IsInf(f, 0) {
		p.i = start
		return nil, p.fail("number beyond the range of a double")
	}
	return Number(p.s[start:p.i]), nil
}

func hex4(b []byte) (rune, bool) {
	v, err := strconv.ParseUint(string(b), 16, 16)
	return rune(v), err == nil && len(b) == 4 && b[0] != '+' && b[0] != '-'
}

func (p *parser) str() (string, error) {
	p.i++ // '"'
	var out []byte
	for {
		if p.i >= len(p.s) {
			return "", p.fail("unterminated string")
		}
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return string(out), nil
		case c < 0x20:
			return "", p.fail("control character 0x%02x in a string (escape it)", c)
		case c == '\\':
			if p.i+1 >= len(p.s) {
				return "", p.fail("unterminated string")
			}
			e := p.s[p.i+1]
			if simple := strings.IndexByte(`"\/bfnrt`, e); simple >= 0 {
				out = append(out, "\"\\/\b\f\n\r\t"[simple])
				p.i += 2
				continue
			}
			if e != 'u' || p.i+6 > len(p.s) {
				return "", p.fail("invalid escape")
			}
			r, ok := hex4(p.s[p.i+2 : p.i+6])
			if !ok {
				return "", p.fail("invalid \\u escape")
			}
			if utf16.IsSurrogate(r) {
				var lo rune
				ok := r < 0xdc00 && p.i+12 <= len(p.s) && p.s[p.i+6] == '\\' && p.s[p.i+7] == 'u'
				if ok {
					lo, ok = hex4(p.s[p.i+8 : p.i+12])
					ok = ok && lo >= 0xdc00 && lo <= 0xdfff
				}
				if !ok {
					return "", p.fail("lone surrogate \\u%04x (not a character)", r)
				}
				r = utf16.DecodeRune(r, lo)
				p.i += 6
			}
			out = utf8.AppendRune(out, r)
			p.i += 6
		case c < 0x80:
			out = append(out, c)
			p.i++
		default:
			r, size := utf8.DecodeRune(p.s[p.i:])
			if r == utf8.RuneError && size <= 1 {
				return "", p.fail("byte 0x%02x is not UTF-8", c)
			}
			out = append(out, p.s[p.i:p.i+size]...)
			p.i += size
		}
	}
}

// Append appends v (a value Parse returns) to dst as compact JSON.
func Append(dst []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...)
	case bool:
		return strconv.AppendBool(dst, v)
	case Number:
		return append(dst, v...)
	case string:
		return appendString(dst, v)
	case []any:
		dst = append(dst, '[')
		for i, x := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = Append(dst, x)
		}
		return append(dst, ']')
	case *Object:
		dst = append(dst, '{')
		for i, k := range v.Keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(appendString(dst, k), ':')
			dst = Append(dst, v.Values[i])
		}
		return append(dst, '}')
	}
	panic(fmt.Sprintf("strictjson: cannot encode %T", v))
}

// appendString quotes s, which is valid UTF-8 (Parse refuses anything else;
// a bad byte would be written as U+FFFD).
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			dst = append(dst, '\\', byte(r))
		case r < 0x20 || r == 0x2028 || r == 0x2029 || r == 0x7f:
			dst = append(dst, fmt.Sprintf("\\u%04x", r)...)
		default:
			dst = utf8.AppendRune(dst, r)
		}
	}
	return append(dst, '"')
}
