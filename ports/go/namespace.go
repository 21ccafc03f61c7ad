// SPDX-License-Identifier: Apache-2.0

package kvkey

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"sort"
	"strconv"
)

// Tenant secret sizes of a keyed namespace, in bytes.
const (
	MinSecretSize = 32
	MaxSecretSize = 256
)

// StoreKeyTag opens every store key.
const StoreKeyTag = "kvk4/"

// SecretIDSize is the size of a tenant secret's public id, in bytes.
const SecretIDSize = 8

// Option configures NewNamespace.
type Option func(*options)

type options struct {
	singleTenant bool
	secret       []byte
	confidential bool
	scope        bool // the tenant is a shared scope's "_scope.<name>"
}

// SingleTenant selects the single-tenant policy: the identity's Tenant must be
// empty and SingleTenantName is encoded.
func SingleTenant() Option { return func(o *options) { o.singleTenant = true } }

// WithSecret makes the namespace keyed: every hash is an HMAC-SHA-256 under
// the tenant secret (MinSecretSize to MaxSecretSize bytes). The namespace
// keeps its own copy.
func WithSecret(secret []byte) Option {
	return func(o *options) { o.secret = append([]byte{}, secret...) }
}

// Confidential makes a keyed namespace confidential (format v4,
// docs/format.md section 6, "Mode aes256_gcm"): its payloads are stored
// encrypted with AES-256-GCM under keys derived from the tenant secret, and
// its keys carry the segment c<secret id>. It needs WithSecret (else an
// identity_error on "confidential").
func Confidential() Option { return func(o *options) { o.confidential = true } }

// Namespace holds everything one deployment's rank derives from its Identity:
// the root, the chain of block hashes, the store keys and the header a writer
// of this namespace seals. It is safe for concurrent use.
type Namespace struct {
	id        Identity
	keyed     bool
	confident bool // confidential (keyed only)
	scope     bool // a shared scope's namespace (NewScopeNamespace)
	secret    []byte
	secretID  [SecretIDSize]byte // zero in a plain namespace
	slice     Slice
	encoding  []byte
	root      Digest
	keyPrefix string
}

// NewNamespace validates id (an *Error of kind identity_error names the first
// invalid field; "tenant_secret" for a secret of the wrong size) and
// precomputes the root and the key prefix.
func NewNamespace(id Identity, opts ...Option) (*Namespace, error) {
	return newNamespace(id, false, opts...)
}

// newNamespace is NewNamespace; strict: without the zero-value defaults.
func newNamespace(id Identity, strict bool, opts ...Option) (*Namespace, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if !strict {
		id = withDefaults(id)
	}
	v, err := validatedAs(id, o.singleTenant, o.scope)
	if err != nil {
		return nil, err
	}
	if o.secret != nil && (len(o.secret) < MinSecretSize || len(o.secret) > MaxSecretSize) {
		return nil, identityError("tenant_secret", fmt.Sprintf("is %d bytes; a tenant secret has %d to %d bytes",
			len(o.secret), MinSecretSize, MaxSecretSize))
	}
	if o.confidential && o.secret == nil {
		return nil, identityError("confidential", "a confidential namespace encrypts under a key derived from "+
			"the tenant secret: give WithSecret")
	}
	slice, _ := ResolveSlice(v.KV, v.Shard) // Validated checked it
	ns := &Namespace{id: v, keyed: o.secret != nil, confident: o.confidential, scope: o.scope, secret: o.secret, slice: slice,
		encoding: EncodeIdentity(v)}
	ns.root = ns.hash(ns.encoding)
	if ns.keyed {
		ns.secretID = SecretID(ns.secret)
	}
	ns.keyPrefix = ns.SecretPrefix() + modelKeySegment(v.Model.Name) + "/e" +
		strconv.FormatUint(v.Model.WeightsEpoch, 10) + "/"
	return ns, nil
}

// NewScopeNamespace returns the namespace of the shared scope named name
// (format v4, docs/format.md section 12): base's identity with tenant
// "_scope.<name>", plain, or keyed under the scope's own secret (WithSecret)
// and then optionally Confidential. An identity_error on "scope.name" for a
// bad name (1..57 bytes of the tenant charset, first byte a letter or
// digit), on "tenant" with SingleTenant. Which tenants may read or publish
// to the scope is the serving side's to decide; ScopedBlockHashes chains a
// tenant's private blocks after the scope's.
func NewScopeNamespace(name string, base Identity, opts ...Option) (*Namespace, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.singleTenant {
		return nil, identityError("tenant", "a shared scope's namespace is not single_tenant")
	}
	tenant, err := scopeTenant(name)
	if err != nil {
		return nil, err
	}
	base.Tenant = tenant
	return newNamespace(base, false, append(opts, func(o *options) { o.scope = true })...)
}

// Scope returns the shared scope's name of a scope's namespace
// (NewScopeNamespace), and false for any other.
func (ns *Namespace) Scope() (string, bool) {
	if !ns.scope {
		return "", false
	}
	return ns.id.Tenant[len(ScopeTenantPrefix):], true
}

// SecretID returns the public id of a tenant secret (docs/format.md, section
// 6): the first 8 bytes of HMAC-SHA-256(secret, "I"). It reveals nothing
// about the secret and names it in keyed headers and store keys, so that one
// retired secret's values can be purged by prefix.
func SecretID(secret []byte) (id [SecretIDSize]byte) {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte{'I'})
	copy(id[:], m.Sum(nil))
	return id
}

func (ns *Namespace) newHash() hash.Hash {
	if ns.keyed {
		return hmac.New(sha256.New, ns.secret)
	}
	return sha256.New()
}

func (ns *Namespace) hash(parts ...[]byte) (d Digest) {
	h := ns.newHash()
	for _, p := range parts {
		h.Write(p)
	}
	h.Sum(d[:0])
	return d
}

// Identity returns the validated identity as encoded (SingleTenantName applied).
func (ns *Namespace) Identity() Identity { return ns.id }

// Keyed reports whether the namespace hashes under a tenant secret.
func (ns *Namespace) Keyed() bool { return ns.keyed }

// SecretID returns the id of the namespace's tenant secret (SecretID) and
// true, or zero bytes and false in a plain namespace.
func (ns *Namespace) SecretID() ([SecretIDSize]byte, bool) { return ns.secretID, ns.keyed }

// Slice returns the KV heads and layers this rank holds.
func (ns *Namespace) Slice() Slice { return ns.slice }

// Encoding returns the canonical identity encoding (a copy).
func (ns *Namespace) Encoding() []byte { return append([]byte(nil), ns.encoding...) }

// Root returns H(encoding), the parent of block 0 for unsalted requests.
func (ns *Namespace) Root() Digest { return ns.root }

// BlockSize returns the tokens per block.
func (ns *Namespace) BlockSize() int { return int(ns.id.KV.BlockSize) }

// ExtraKey is a key that enters only the blocks overlapping the tokens
// [TokenBegin, TokenEnd) of the sequence, e.g. an image's content hash.
type ExtraKey struct {
	TokenBegin, TokenEnd uint64
	Key                  []byte
}

// HashOptions are a request's chain inputs besides the tokens.
type HashOptions struct {
	Salt   []byte     // per-request salt; empty means none
	Extras []ExtraKey // per-block extra keys
}

// FirstParent returns the parent of block 0: the root without a salt,
// H('S' || root || str(salt)) with one.
func (ns *Namespace) FirstParent(salt []byte) Digest {
	if len(salt) == 0 {
		return ns.root
	}
	return ns.hash([]byte{'S'}, ns.root[:], u32le(uint32(len(salt))), salt)
}

// BlockHashes returns the hashes of every full block of tokens; a partial tail
// has none. opts may be nil. An extra key with TokenBegin >= TokenEnd is an
// input error ("extras").
func (ns *Namespace) BlockHashes(tokens []uint32, opts *HashOptions) ([]Digest, error) {
	if opts == nil {
		opts = &HashOptions{}
	}
	extras, err := sortedExtras(opts.Extras)
	if err != nil {
		return nil, err
	}
	return ns.chainFrom(tokens, extras, 0, ns.FirstParent(opts.Salt)), nil
}

// sortedExtras checks the extra keys (an input error on "extras") and sorts
// them by (token_begin, token_end, key bytes).
func sortedExtras(in []ExtraKey) ([]ExtraKey, error) {
	extras := append([]ExtraKey(nil), in...)
	for i, e := range extras {
		if e.TokenBegin >= e.TokenEnd {
			return nil, inputError("extras", fmt.Sprintf("extra key %d: token_begin must be below token_end", i))
		}
	}
	sort.SliceStable(extras, func(i, j int) bool {
		a, b := extras[i], extras[j]
		if a.TokenBegin != b.TokenBegin {
			return a.TokenBegin < b.TokenBegin
		}
		if a.TokenEnd != b.TokenEnd {
			return a.TokenEnd < b.TokenEnd
		}
		return bytes.Compare(a.Key, b.Key) < 0
	})
	return extras, nil
}

// chainFrom hashes the full blocks of tokens from block `from` on, the first
// of them under parent; extras sorted by sortedExtras.
func (ns *Namespace) chainFrom(tokens []uint32, extras []ExtraKey, from int, parent Digest) []Digest {
	bs := ns.BlockSize()
	out := make([]Digest, 0, len(tokens)/bs)
	msg := make([]byte, 0, 1+32+4*bs+4)
	for b := from; (b+1)*bs <= len(tokens); b++ {
		msg = append(append(msg[:0], 'B'), parent[:]...)
		for _, t := range tokens[b*bs : (b+1)*bs] {
			msg = binary.LittleEndian.AppendUint32(msg, t)
		}
		lo, hi := uint64(b*bs), uint64((b+1)*bs)
		var overlapping []ExtraKey
		for _, e := range extras {
			if e.TokenBegin < hi && e.TokenEnd > lo {
				overlapping = append(overlapping, e)
			}
		}
		msg = binary.LittleEndian.AppendUint32(msg, uint32(len(overlapping)))
		for _, e := range overlapping {
			msg = binary.LittleEndian.AppendUint64(msg, e.TokenBegin)
			msg = binary.LittleEndian.AppendUint64(msg, e.TokenEnd)
			msg = append(msg, str(string(e.Key))...)
		}
		parent = ns.hash(msg)
		out = append(out, parent)
	}
	return out
}

// ObjectHash returns H('O' || block || slice): this rank's object for the block.
func (ns *Namespace) ObjectHash(block Digest) Digest {
	s := ns.slice
	return ns.hash([]byte{'O'}, block[:], u32le(s.KVHeadBegin), u32le(s.KVHeadEnd), u32le(s.LayerBegin),
		u32le(s.LayerEnd))
}

// StoreKey returns "kvk4/<tenant>/<ns>/<model>/e<epoch>/<object hash>", where
// <ns> is "p" in a plain namespace and "k<secret id, 16 hex>" in a keyed one.
func (ns *Namespace) StoreKey(block Digest) string {
	o := ns.ObjectHash(block)
	return ns.keyPrefix + hex.EncodeToString(o[:])
}

// KeyPrefix returns "kvk4/<tenant>/<ns>/<model>/e<epoch>/", the prefix of
// every key of this namespace's epoch.
func (ns *Namespace) KeyPrefix() string { return ns.keyPrefix }

// SecretPrefix returns "kvk4/<tenant>/p/" in a plain namespace and
// "kvk4/<tenant>/k<secret id>/" in a keyed one: the prefix of every key sealed
// under this namespace's secret (or of the tenant's plain keys), whatever the
// model and epoch. Purging it after a rotation removes exactly the retired
// secret's values.
func (ns *Namespace) SecretPrefix() string {
	if !ns.keyed {
		return TenantKeyPrefix(ns.id.Tenant) + "p/"
	}
	segment := "k"
	if ns.confident {
		segment = "c"
	}
	return TenantKeyPrefix(ns.id.Tenant) + segment + hex.EncodeToString(ns.secretID[:]) + "/"
}

// TenantPrefix returns "kvk4/<tenant>/", the prefix of every key of the tenant.
func (ns *Namespace) TenantPrefix() string { return TenantKeyPrefix(ns.id.Tenant) }

// TenantKeyPrefix returns "kvk4/<tenant>/" for a valid tenant (or SingleTenantName).
func TenantKeyPrefix(tenant string) string { return StoreKeyTag + tenant + "/" }

// modelKeySegment escapes bytes outside [A-Za-z0-9._-] as %XX and cuts the
// result to 80 characters without splitting an escape.
func modelKeySegment(name string) string {
	const max = 80
	var out []byte
	for i := 0; i < len(name); i++ {
		c := name[i]
		plain := isAlnum(c) || c == '.' || c == '_' || c == '-'
		need := 3
		if plain {
			need = 1
		}
		if len(out)+need > max {
			break
		}
		if plain {
			out = append(out, c)
		} else {
			out = append(out, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&15])
		}
	}
	return string(out)
}

// ScopedBlockHashes returns the block hashes of a request whose first
// scopeTokens tokens belong to a shared scope, as the serving side says
// (format v4, docs/format.md sections 3 and 12): blocks [0, k), k =
// scopeTokens / block size, in the scope's chain (unsalted), the rest in the
// tenant's, the first of them under the transition parent
// H_t('T' || p_t || hash_{k-1}). The extras enter both by absolute position,
// the salt the private blocks only. An input error ("scope_tokens") when
// scopeTokens is not a multiple of the block size, ("scope") when the block
// sizes differ; scopeTokens 0 is tenant.BlockHashes.
func ScopedBlockHashes(scope, tenant *Namespace, tokens []uint32, scopeTokens int, opts *HashOptions) ([]Digest,
	error) {
	if opts == nil {
		opts = &HashOptions{}
	}
	bs := tenant.BlockSize()
	if scope.BlockSize() != bs {
		return nil, inputError("scope", fmt.Sprintf("the scope's block size is %d, the tenant's %d", scope.BlockSize(),
			bs))
	}
	if scopeTokens < 0 || scopeTokens%bs != 0 {
		return nil, inputError("scope_tokens", fmt.Sprintf("scope_tokens is %d, not a multiple of the block size %d: "+
			"a block would belong to the scope and to the tenant", scopeTokens, bs))
	}
	if scopeTokens == 0 {
		return tenant.BlockHashes(tokens, opts)
	}
	hashes, err := scope.BlockHashes(tokens[:min(len(tokens), scopeTokens)], &HashOptions{Extras: opts.Extras})
	if err != nil {
		return nil, err
	}
	k := scopeTokens / bs
	if len(tokens)/bs <= k {
		return hashes, nil
	}
	extras, _ := sortedExtras(opts.Extras) // checked by scope.BlockHashes
	p := tenant.FirstParent(opts.Salt)
	parent := tenant.hash([]byte{'T'}, p[:], hashes[k-1][:])
	return append(hashes, tenant.chainFrom(tokens, extras, k, parent)...), nil
}
