// SPDX-License-Identifier: Apache-2.0

// Package kvkey computes kvkey's identity encodings, block hashes, store keys
// and envelope verdicts in Go, byte for byte as the C++ library does
// (docs/format.md, format version 4). It is meant for the services that route
// requests to engines by the KV blocks they hold: KV-aware routers and cache
// indexers compute the engine's block hashes and keys without linking C++.
//
// Read the engine's identity file (the one `kvkey init` writes), build its
// Namespace, then hash token sequences and derive keys:
//
//	file, err := kvkey.LoadIdentity("identity.json")
//	ns, err := file.NewNamespace()
//	blocks, err := ns.BlockHashes(tokens, nil)
//	key := ns.StoreKey(blocks[0])
//	indexKey := blocks[0].U64()
//
// An Identity built in code may leave out Quant and Shard: their zero values
// are the defaults (scheme "none", a single rank).
//
// A reader of KV bytes opens each stored value whole with OpenValue (or
// Verify with the header and payload apart): the XXH3-128 digest of a plain
// value, the Poly1305 tag of a keyed one. Routers, which do not read
// payloads, check headers with VerifyHeader.
package kvkey
