// SPDX-License-Identifier: Apache-2.0

// Command kvkey-testee answers kvkey conformance requests with the Go port:
// one JSON request per line on stdin, one JSON response per line on stdout
// (docs/conformance.md). Run it under the runner:
//
//	kvkey conformance --testee 'go run ./ports/go/cmd/kvkey-testee'
//
// Every line gets exactly one answer, whatever its bytes: a line that is not
// one strict JSON object (empty, bad UTF-8, a byte order mark, a lone
// surrogate, trailing data, a duplicate key, a number beyond a double, NaN,
// nesting deeper than maxRequestDepth) is an input_error on "request"
// (docs/conformance.md, "Lines that are not requests").
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	kvkey "github.com/kvkey/kvkey/ports/go"
	"github.com/kvkey/kvkey/ports/go/internal/strictjson"
)

// maxRequestDepth bounds the nesting of a request line, the request object
// being level 1 (docs/conformance.md).
const maxRequestDepth = 32

func main() {
	in := bufio.NewReaderSize(os.Stdin, 1<<16)
	out := bufio.NewWriter(os.Stdout)
	for {
		line, err := in.ReadBytes('\n')
		// A line ends in a newline, or at the end of input when it has bytes.
		if complete := len(line) > 0 && line[len(line)-1] == '\n'; complete || len(line) > 0 {
			if complete {
				line = line[:len(line)-1]
			}
			out.Write(append(strictjson.Append(nil, respond(line)), '\n'))
			if ferr := out.Flush(); ferr != nil {
				fmt.Fprintln(os.Stderr, "kvkey-testee:", ferr)
				os.Exit(2)
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "kvkey-testee:", err)
			os.Exit(2)
		}
	}
}

// respond answers one request line.
func respond(line []byte) *strictjson.Object {
	v, err := strictjson.Parse(line, maxRequestDepth)
	raw, isObject := v.(*strictjson.Object)
	if err != nil || !isObject {
		msg := "expected a JSON object"
		if err != nil {
			msg = "not one strict JSON value: " + err.Error()
		}
		return refusal(nil, &kvkey.Error{Kind: kvkey.InputErrorKind, Field: "request", Msg: msg})
	}
	id, _ := raw.Get("id")
	req, err := decodeRequest(raw)
	if err != nil {
		return refusal(id, err)
	}
	resp, err := req.answer()
	if err != nil {
		return refusal(id, err)
	}
	resp.Keys, resp.Values = append([]string{"id"}, resp.Keys...), append([]any{id}, resp.Values...)
	return resp
}

func refusal(id any, err error) *strictjson.Object {
	var e *kvkey.Error
	if !errors.As(err, &e) {
		e = &kvkey.Error{Kind: kvkey.InputErrorKind, Field: "request", Msg: err.Error()}
	}
	return &strictjson.Object{Keys: []string{"id", "error"}, Values: []any{id, &strictjson.Object{
		Keys: []string{"kind", "field", "message"}, Values: []any{string(e.Kind), e.Field, e.Msg}}}}
}

type response struct{ strictjson.Object }

func (r *response) set(key string, v any) {
	r.Keys, r.Values = append(r.Keys, key), append(r.Values, v)
}

func (r *response) setVerdict(v kvkey.Verdict) {
	r.set("verdict", &strictjson.Object{Keys: []string{"ok", "reason", "field"},
		Values: []any{v.OK(), v.Reason.String(), v.Field}})
}

func (r *request) answer() (*strictjson.Object, error) {
	var opts []kvkey.Option
	if r.secret != nil {
		opts = append(opts, kvkey.WithSecret(r.secret))
	}
	ns, err := r.identity.NewNamespace(opts...)
	if err != nil {
		return nil, err
	}
	blocks, err := ns.BlockHashes(r.tokens, &r.options)
	if err != nil {
		return nil, err
	}
	hexes, u64s, keys := []any{}, []any{}, []any{}
	for _, b := range blocks {
		hexes = append(hexes, b.String())
		u64s = append(u64s, strictjson.Number(fmt.Sprint(b.U64())))
		keys = append(keys, ns.StoreKey(b))
	}
	var resp response
	resp.set("encoding", fmt.Sprintf("%x", ns.Encoding()))
	resp.set("root", ns.Root().String())
	resp.set("prefix", ns.KeyPrefix())
	resp.set("blocks", hexes)
	resp.set("blocks_u64", u64s)
	resp.set("keys", keys)
	if v := r.verify; v != nil {
		if v.blockIndex >= uint64(len(blocks)) {
			return nil, &kvkey.Error{Kind: kvkey.InputErrorKind, Field: "verify.block_index",
				Msg: fmt.Sprintf("there are %d blocks", len(blocks))}
		}
		var verdict kvkey.Verdict
		if v.payload != nil { // with the bytes: the whole check
			verdict = ns.Verify(v.header, blocks[v.blockIndex], v.payload)
		} else {
			verdict = ns.VerifyHeader(v.header, blocks[v.blockIndex], v.payloadSize)
		}
		resp.setVerdict(verdict)
	}
	if o := r.open; o != nil {
		if o.blockIndex >= uint64(len(blocks)) {
			return nil, &kvkey.Error{Kind: kvkey.InputErrorKind, Field: "open.block_index",
				Msg: fmt.Sprintf("there are %d blocks", len(blocks))}
		}
		_, verdict := ns.OpenValue(o.value, blocks[o.blockIndex])
		resp.setVerdict(verdict)
	}
	return &resp.Object, nil
}
