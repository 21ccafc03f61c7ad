// SPDX-License-Identifier: Apache-2.0

// Package kvkey computes kvkey's identity encodings, block hashes, store keys
// and envelope verdicts in Go, byte for byte as the C++ library does
// (docs/format.md, format version 3). It is meant for the services that route
// requests to engines by the KV blocks they hold: KV-aware routers and cache
// indexers compute the engine's block hashes and keys without linking C++.
//
// Build a Namespace from an Identity (the engine's identity file carries every
// field), then hash token sequences and derive keys:
//
//	ns, err := kvkey.NewNamespace(id)
//	blocks, err := ns.BlockHashes(tokens, nil)
//	key := ns.StoreKey(blocks[0])
//	indexKey := blocks[0].U64()
//
// Payload digests (XXH3-128, Poly1305) are not implemented: the standard
// library has neither, and routers do not read payloads. VerifyHeader checks
// every other byte of a header.
package kvkey
