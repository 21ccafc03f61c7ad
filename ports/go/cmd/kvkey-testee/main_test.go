// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/kvkey/kvkey/ports/go/internal/strictjson"
)

const valid = `{"id":1,"identity":{"tenant":"t","model":{"name":"m","revision":"r"},` +
	`"kv":{"dtype":"fp16","block_size":2,"num_layers":2,"num_kv_heads":2,"head_dim":8,"layout":"l"}},"tokens":[1,2,3]}`

type answer struct {
	ID    any `json:"id"`
	Error *struct {
		Kind, Field string
	} `json:"error"`
	Keys []string `json:"keys"`
}

func ask(t *testing.T, line string) answer {
	t.Helper()
	out := strictjson.Append(nil, respond([]byte(line)))
	var a answer
	if !json.Valid(out) || json.Unmarshal(out, &a) != nil {
		t.Fatalf("%.60q: answer is not JSON: %s", line, out)
	}
	return a
}

func TestHostileLinesAreRequestErrors(t *testing.T) {
	for _, line := range []string{
		strings.Replace(valid, `"m"`, "\"m\xff\"", 1),
		strings.Replace(valid, `"m"`, `"m\ud800"`, 1),
		strings.Replace(valid, `"m"`, `"m\udfff\ud800"`, 1),
		valid + ` {"id":2}`,
		valid + `x`,
		strings.Replace(valid, `"id":1`, `"id":1e400`, 1),
		strings.Replace(valid, `"id":1`, `"id":`+strings.Repeat("7", 400), 1),
		strings.Replace(valid, `"id":1`, `"id":NaN`, 1),
		strings.Replace(valid, `"id":1`, `"id":Infinity`, 1),
		strings.Replace(valid, `"id":1`, `"id":-Infinity`, 1),
		strings.Replace(valid, `"id":1`, `"id":`+strings.Repeat("[", 100000)+strings.Repeat("]", 100000), 1),
		strings.Replace(valid, `"tokens"`, `"id":2,"tokens"`, 1),
		`[1,2]`, `"text"`, `null`, `{`, "\xff", "", " \r", "\xef\xbb\xbf" + valid,
		strings.Replace(valid, `"id":1`, `"id":`+strings.Repeat("[", 32)+strings.Repeat("]", 32), 1), // level 33
	} {
		a := ask(t, line)
		if a.Error == nil || a.Error.Kind != "input_error" || a.Error.Field != "request" || a.ID != nil {
			t.Errorf("%.60q: %+v", line, a)
		}
	}
}

func TestBadMembersNameTheMember(t *testing.T) {
	for _, c := range []struct{ line, field string }{
		{strings.Replace(valid, `"tenant":"t"`, `"zz":1,"tenant":"t","aa":2`, 1), "aa"},
		{strings.Replace(valid, `"layout":"l"`, `"layout":"l","x2":1,"x1":1`, 1), "kv.x1"},
		{strings.Replace(valid, `[1,2,3]`, `[1,`+strings.Repeat("9", 30)+`]`, 1), "tokens"},
		{strings.Replace(valid, `[1,2,3]`, `[1,-0]`, 1), "tokens"},
		{strings.Replace(valid, `"head_dim":8`, `"head_dim":1e3`, 1), "kv.head_dim"},
		{strings.Replace(valid, `"head_dim":8`, `"head_dim":18446744073709551616`, 1), "kv.head_dim"},
		{`{"id":1,"identity_file":"{\"tenant\":\"t\"} x"}`, "identity_file"},
		{`{"id":1,"identity_file":7}`, "identity_file"},
		{`{"id":1}`, "identity"},
		{`{"id":1,"identity":{},"identity_file":"{}"}`, "identity"},
		{`{"id":1,"identity":[]}`, "identity"},
		{`{"id":1,"identity_file":"[]"}`, "identity_file"},
		{`{"id":1,"identity_file":"{\"model\":{\"weights_file\":\"x\"}}","zz":1,"identities":2}`, "identities"},
		{`{"id":1,"identity":{"model":{"weights_file":"x"}}}`, "model.weights_file"},
		{`{"id":1,"identity":{"kv":{"quant":{"scheme":5}},"zz":1},"tokens":[-1]}`, "zz"},
		{`{"id":1,"identity":{"kv":{"quant":{"scheme":5}},"shard":{"tp_size":-1}},"tokens":[-1]}`, "kv.quant.scheme"},
		{`{"id":1,"identity":{"shard":{"tp_size":-1},"adapter":{"name":5}},"tokens":[-1]}`, "shard.tp_size"},
		{`{"id":1,"identity":{"tenant":"t"},"tokens":[-1]}`, "tokens"},
	} {
		a := ask(t, c.line)
		if a.Error == nil || a.Error.Kind != "input_error" || a.Error.Field != c.field {
			t.Errorf("%.60q: %+v, want %s", c.line, a, c.field)
		}
	}
}

// The request object is level 1: an id of 31 nested arrays is level 32, the deepest allowed.
func TestDeepestAllowedId(t *testing.T) {
	if a := ask(t, strings.Replace(valid, `"id":1`, `"id":`+strings.Repeat("[", 31)+strings.Repeat("]", 31), 1)); a.Error != nil {
		t.Errorf("level 32: %+v", a.Error)
	}
}

// An identity file and the same identity as a request member give the same keys.
func TestIdentityFileMember(t *testing.T) {
	file, _ := json.Marshal(`{"tenant":"t","model":{"name":"m","revision":"r"},` +
		`"kv":{"dtype":"fp16","block_size":2,"num_layers":2,"num_kv_heads":2,"head_dim":8,"layout":"l"}}`)
	a := ask(t, `{"id":1,"identity_file":`+string(file)+`,"tokens":[1,2,3]}`)
	b := ask(t, valid)
	if a.Error != nil || len(a.Keys) != 1 || a.Keys[0] != b.Keys[0] {
		t.Errorf("identity_file: %+v, identity: %+v", a, b)
	}
}

// The program answers every line, one line each, and keeps going.
func TestEveryLineGetsOneAnswer(t *testing.T) {
	lines := []string{valid, "\xff\xfe", "", `{"id":"\ud800"}`, valid + "}", "", "{}", valid}
	cmd := exec.Command("go", "run", ".")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n")) // the last line without a newline
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	answers := bytes.Split(bytes.TrimSuffix(out, []byte("\n")), []byte("\n"))
	if len(answers) != len(lines) {
		t.Fatalf("%d answers to %d lines:\n%s", len(answers), len(lines), out)
	}
	for i, a := range answers {
		if !json.Valid(a) {
			t.Errorf("answer %d is not JSON: %s", i, a)
		}
	}
}

// Any line gets one JSON answer and no panic (go test -fuzz FuzzRespond).
func FuzzRespond(f *testing.F) {
	for _, seed := range []string{valid, `{"id":1,"identity":{"adapter":{},"shard":{"tp_size":2},"policy":"single_tenant"}}`,
		`{"identity_file":"{\"model\":{\"weights_file\":\"/dev/null\"}}"}`, `{"verify":{},"extras":[{}],"identity":{}}`,
		`{"id":[{"a":"\u00e9"}],"identity":{"kv":{"quant":null}},"secret_hex":"00"}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		out := strictjson.Append(nil, respond(line))
		if !json.Valid(out) || bytes.IndexByte(out, '\n') >= 0 {
			t.Fatalf("%q: answer %s", line, out)
		}
	})
}
