// SPDX-License-Identifier: Apache-2.0

// Package hook lets the conformance testee (cmd/kvkey-testee) reach what
// package kvkey does not export: decoding a request's "identity" member by
// the protocol's rules (docs/conformance.md), which differ from an identity
// file's (absent members take the C++ defaults instead of being required).
// Package kvkey sets the functions when it is initialised.
package hook

// DecodeRequestIdentity decodes the "identity" member of a conformance
// request (a strictjson value) into a *kvkey.IdentityFile, or returns the
// input error naming the member.
var DecodeRequestIdentity func(member any) (identityFile any, err error)
