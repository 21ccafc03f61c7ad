// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/hex"
	"strconv"
	"strings"

	kvkey "github.com/kvkey/kvkey/ports/go"
	"github.com/kvkey/kvkey/ports/go/internal/hook"
	"github.com/kvkey/kvkey/ports/go/internal/strictjson"
)

// request is one decoded conformance request.
type request struct {
	identity *kvkey.IdentityFile
	secret   []byte
	tokens   []uint32
	options  kvkey.HashOptions
	verify   *verifyRequest
	open     *openRequest
}

type verifyRequest struct {
	header      []byte
	blockIndex  uint64
	payloadSize uint64
	payload     []byte // non-nil: the payload's bytes (payload_hex), checked with them
}

type openRequest struct {
	value      []byte
	blockIndex uint64
}

func bad(field, msg string) error {
	return &kvkey.Error{Kind: kvkey.InputErrorKind, Field: field, Msg: msg}
}

// unsigned reads an integer written without sign, fraction or exponent that
// fits in bits (as the C++ testee: "-0", "1.0" and "1e3" are refused).
func unsigned(v any, bits int) (uint64, bool) {
	n, ok := v.(strictjson.Number)
	if !ok {
		return 0, false
	}
	u, err := strconv.ParseUint(string(n), 10, bits)
	return u, err == nil
}

// readU64s reads the unsigned members keys[i] of o into outs[i]; an error
// names field, or field+key when field ends in a dot.
func readU64s(o *strictjson.Object, field string, keys []string, outs ...*uint64) error {
	for i, key := range keys {
		v, _ := o.Get(key)
		u, ok := unsigned(v, 64)
		if !ok {
			if strings.HasSuffix(field, ".") {
				return bad(field+key, "expected an unsigned integer")
			}
			return bad(field, key+": expected an unsigned integer")
		}
		*outs[i] = u
	}
	return nil
}

// member returns the member unless it is absent or null.
func member(o *strictjson.Object, key string) (any, bool) {
	v, ok := o.Get(key)
	return v, ok && v != nil
}

func hexMember(o *strictjson.Object, key, field string) ([]byte, error) {
	v, ok := member(o, key)
	if !ok {
		return nil, nil
	}
	s, isString := v.(string)
	b, err := hex.DecodeString(s)
	if !isString || err != nil {
		return nil, bad(field, "expected hex digits (an even number)")
	}
	return b, nil
}

// requestMembers are the members the protocol defines.
var requestMembers = []string{"id", "identity", "identity_file", "single_tenant", "secret_hex", "confidential",
	"tokens", "salt_hex", "extras", "verify", "open"}

// decodeIdentity reads "identity_file" (the text of an identity file, read
// with kvkey.ParseIdentity) or "identity" (the protocol's identity object):
// exactly one of them.
func decodeIdentity(raw *strictjson.Object) (*kvkey.IdentityFile, error) {
	v, hasIdentity := member(raw, "identity")
	file, hasFile := member(raw, "identity_file")
	if hasIdentity == hasFile {
		return nil, bad("identity", "give identity or identity_file (one of them)")
	}
	if hasFile {
		text, isString := file.(string)
		if !isString {
			return nil, bad("identity_file", "expected the text of an identity file (a string)")
		}
		return kvkey.ParseIdentity([]byte(text))
	}
	f, err := hook.DecodeRequestIdentity(v)
	if err != nil {
		return nil, err
	}
	return f.(*kvkey.IdentityFile), nil
}

// decodeRequest reads the members in the protocol's order: unknown members
// (the first in byte order is named), the identity, single_tenant,
// secret_hex, confidential, tokens, salt_hex, extras, verify, open.
func decodeRequest(raw *strictjson.Object) (*request, error) {
	if unknown, found := raw.FirstUnknown(requestMembers); found {
		return nil, bad(unknown, "not a member of a request (docs/conformance.md)")
	}
	r := &request{}
	var err error
	if r.identity, err = decodeIdentity(raw); err != nil {
		return nil, err
	}
	if v, ok := member(raw, "single_tenant"); ok {
		b, isBool := v.(bool)
		if !isBool {
			return nil, bad("single_tenant", "expected true or false")
		}
		r.identity.SingleTenant = r.identity.SingleTenant || b
	}
	if _, ok := member(raw, "secret_hex"); ok {
		if r.secret, err = hexMember(raw, "secret_hex", "secret_hex"); err != nil {
			return nil, err
		}
		if r.secret == nil {
			r.secret = []byte{}
		}
	}
	if v, ok := member(raw, "confidential"); ok { // format v4: AES-256-GCM values
		b, isBool := v.(bool)
		if !isBool {
			return nil, bad("confidential", "expected true or false")
		}
		r.identity.Confidential = r.identity.Confidential || b
	}
	if v, ok := member(raw, "tokens"); ok {
		list, isList := v.([]any)
		if !isList {
			return nil, bad("tokens", "expected an array of token ids")
		}
		r.tokens = make([]uint32, 0, len(list))
		for _, t := range list {
			u, ok := unsigned(t, 32)
			if !ok {
				return nil, bad("tokens", "token ids are integers in [0, 2^32)")
			}
			r.tokens = append(r.tokens, uint32(u))
		}
	}
	if r.options.Salt, err = hexMember(raw, "salt_hex", "salt_hex"); err != nil {
		return nil, err
	}
	if v, ok := member(raw, "extras"); ok {
		list, isList := v.([]any)
		if !isList {
			return nil, bad("extras", "expected an array")
		}
		for _, x := range list {
			m, isObject := x.(*strictjson.Object)
			if !isObject {
				return nil, bad("extras", "expected objects")
			}
			var k kvkey.ExtraKey
			if err := readU64s(m, "extras", []string{"token_begin", "token_end"}, &k.TokenBegin, &k.TokenEnd); err != nil {
				return nil, err
			}
			if k.Key, err = hexMember(m, "key_hex", "extras"); err != nil {
				return nil, err
			}
			r.options.Extras = append(r.options.Extras, k)
		}
	}
	if v, ok := member(raw, "verify"); ok {
		m, isObject := v.(*strictjson.Object)
		if !isObject {
			return nil, bad("verify", "expected an object")
		}
		ver := &verifyRequest{}
		if ver.header, err = hexMember(m, "header_hex", "verify.header_hex"); err != nil {
			return nil, err
		}
		if err := readU64s(m, "verify.", []string{"block_index"}, &ver.blockIndex); err != nil {
			return nil, err
		}
		if _, ok := member(m, "payload_hex"); ok {
			if ver.payload, err = hexMember(m, "payload_hex", "verify.payload_hex"); err != nil {
				return nil, err
			}
			if ver.payload == nil {
				ver.payload = []byte{}
			}
			if _, both := member(m, "payload_size"); both {
				return nil, bad("verify.payload_size", "give payload_size or payload_hex, not both")
			}
		} else if err := readU64s(m, "verify.", []string{"payload_size"}, &ver.payloadSize); err != nil {
			return nil, err
		}
		r.verify = ver
	}
	if v, ok := member(raw, "open"); ok {
		m, isObject := v.(*strictjson.Object)
		if !isObject {
			return nil, bad("open", "expected an object")
		}
		if r.verify != nil {
			return nil, bad("open", "give verify or open, not both")
		}
		o := &openRequest{}
		if o.value, err = hexMember(m, "value_hex", "open.value_hex"); err != nil {
			return nil, err
		}
		if err := readU64s(m, "open.", []string{"block_index"}, &o.blockIndex); err != nil {
			return nil, err
		}
		r.open = o
	}
	return r, nil
}
