// SPDX-License-Identifier: Apache-2.0

// Command kvkey-testee answers kvkey conformance requests with the Go port:
// one JSON request per line on stdin, one JSON response per line on stdout
// (docs/conformance.md). Run it under the runner:
//
//	kvkey conformance --testee 'go run ./ports/go/cmd/kvkey-testee'
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	kvkey "github.com/kvkey/kvkey/ports/go"
)

func main() {
	in := bufio.NewReader(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	for {
		line, err := in.ReadBytes('\n')
		if len(line) > 0 && !(len(line) == 1 && line[0] == '\n') {
			resp, _ := json.Marshal(respond(line))
			out.Write(append(resp, '\n'))
			if ferr := out.Flush(); ferr != nil {
				fmt.Fprintln(os.Stderr, "kvkey-testee:", ferr)
				os.Exit(2)
			}
		}
		if err != nil {
			return
		}
	}
}

// respond answers one request line.
func respond(line []byte) map[string]any {
	var raw map[string]any
	dec := json.NewDecoder(bytesReader(line))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil || raw == nil {
		return refusal(nil, &kvkey.Error{Kind: kvkey.InputErrorKind, Field: "request", Msg: "not a JSON object"})
	}
	id := raw["id"]
	req, err := decodeRequest(raw)
	if err != nil {
		return refusal(id, err)
	}
	resp, err := req.answer()
	if err != nil {
		return refusal(id, err)
	}
	resp["id"] = id
	return resp
}

func refusal(id any, err error) map[string]any {
	var e *kvkey.Error
	if !errors.As(err, &e) {
		e = &kvkey.Error{Kind: kvkey.InputErrorKind, Field: "request", Msg: err.Error()}
	}
	return map[string]any{"id": id, "error": map[string]any{"kind": string(e.Kind), "field": e.Field, "message": e.Msg}}
}

func (r *request) answer() (map[string]any, error) {
	var opts []kvkey.Option
	if r.singleTenant {
		opts = append(opts, kvkey.SingleTenant())
	}
	if r.secret != nil {
		opts = append(opts, kvkey.WithSecret(r.secret))
	}
	ns, err := kvkey.NewNamespace(r.identity, opts...)
	if err != nil {
		return nil, err
	}
	blocks, err := ns.BlockHashes(r.tokens, &r.options)
	if err != nil {
		return nil, err
	}
	hexes, u64s, keys := []string{}, []uint64{}, []string{}
	for _, b := range blocks {
		hexes = append(hexes, b.String())
		u64s = append(u64s, b.U64())
		keys = append(keys, ns.StoreKey(b))
	}
	root := ns.Root()
	resp := map[string]any{"encoding": fmt.Sprintf("%x", ns.Encoding()), "root": root.String(),
		"prefix": ns.KeyPrefix(), "blocks": hexes, "blocks_u64": u64s, "keys": keys}
	if v := r.verify; v != nil {
		if v.blockIndex >= uint64(len(blocks)) {
			return nil, &kvkey.Error{Kind: kvkey.InputErrorKind, Field: "verify.block_index",
				Msg: fmt.Sprintf("there are %d blocks", len(blocks))}
		}
		verdict := ns.VerifyHeader(v.header, blocks[v.blockIndex], v.payloadSize)
		resp["verdict"] = map[string]any{"ok": verdict.OK(), "reason": verdict.Reason.String(), "field": verdict.Field}
	}
	return resp, nil
}
