// SPDX-License-Identifier: Apache-2.0

// Command redisread reads the values a kvkey writer (the C++ library, its
// kvkey tool, an engine's connector) stored in Redis, and verifies each one
// whole before it would serve it: header, payload digest (plain namespaces)
// or Poly1305 tag (keyed ones).
//
//	go run ./examples/redisread [-secret HEX] HOST:PORT IDENTITY_FILE TOKENS...
//
// The tokens are the prompt's token ids; for each full block it prints
// "block I KEY ok N" (N payload bytes), "block I KEY miss" (no such key) or
// "block I KEY rejected REASON FIELD". It speaks RESP with the standard
// library: one GET per key.
package main

import (
	"bufio"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"

	kvkey "github.com/kvkey/kvkey/ports/go"
)

// get sends GET key and reads the bulk-string reply; nil when the key is absent.
func get(conn net.Conn, r *bufio.Reader, key string) ([]byte, error) {
	if _, err := fmt.Fprintf(conn, "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(key), key); err != nil {
		return nil, err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("GET %s: malformed reply %q", key, line)
	}
	switch line[0] {
	case '-':
		return nil, fmt.Errorf("GET %s: %s", key, line[1:len(line)-2])
	case '$':
	default:
		return nil, fmt.Errorf("GET %s: unexpected reply %q", key, line)
	}
	n, err := strconv.Atoi(line[1 : len(line)-2])
	if err != nil || n < -1 {
		return nil, fmt.Errorf("GET %s: malformed length %q", key, line)
	}
	if n == -1 {
		return nil, nil
	}
	value := make([]byte, n+2)
	if _, err := io.ReadFull(r, value); err != nil {
		return nil, err
	}
	if string(value[n:]) != "\r\n" {
		return nil, errors.New("GET " + key + ": bulk string not terminated")
	}
	return value[:n], nil
}

func main() {
	secretHex := flag.String("secret", "", "the tenant secret, hex (a keyed namespace)")
	flag.Parse()
	if flag.NArg() < 2 {
		log.Fatal("usage: redisread [-secret HEX] HOST:PORT IDENTITY_FILE TOKENS...")
	}
	file, err := kvkey.LoadIdentity(flag.Arg(1))
	if err != nil {
		log.Fatal(err)
	}
	var opts []kvkey.Option
	if *secretHex != "" {
		secret, err := hex.DecodeString(*secretHex)
		if err != nil {
			log.Fatal("-secret: ", err)
		}
		opts = append(opts, kvkey.WithSecret(secret))
	}
	ns, err := file.NewNamespace(opts...)
	if err != nil {
		log.Fatal(err)
	}
	var tokens []uint32
	for _, a := range flag.Args()[2:] {
		t, err := strconv.ParseUint(a, 10, 32)
		if err != nil {
			log.Fatalf("token %q: %v", a, err)
		}
		tokens = append(tokens, uint32(t))
	}
	blocks, err := ns.BlockHashes(tokens, nil)
	if err != nil {
		log.Fatal(err)
	}
	conn, err := net.Dial("tcp", flag.Arg(0))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	for i, b := range blocks {
		key := ns.StoreKey(b)
		value, err := get(conn, r, key)
		if err != nil {
			log.Fatal(err)
		}
		if value == nil {
			fmt.Println("block", i, key, "miss")
			continue
		}
		payload, v := ns.OpenValue(value, b)
		if !v.OK() {
			fmt.Println("block", i, key, "rejected", v.Reason, v.Field)
			continue
		}
		fmt.Println("block", i, key, "ok", len(payload))
	}
}
