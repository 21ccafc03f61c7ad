"""Shared scopes (format v4, docs/format.md section 12) through the binding: the scope's
namespace, the transition into the tenant's chain (checked against hashlib), the grants."""

import hashlib
import struct

import pytest

import kvkey
from conftest import make_identity


def sha(m):
    return hashlib.sha256(m).digest()


def block(parent, toks):
    return sha(b"B" + parent + struct.pack("<%dI" % len(toks), *toks) + b"\0\0\0\0")


def test_transition_follows_the_format():
    scope = kvkey.SharedScope("sys", make_identity(), readers=["team-b"], publishers=["team-a"])
    ns = scope.namespace
    assert ns.scope == "sys" and ns.identity.tenant == "_scope.sys"
    assert ns.key_prefix.startswith("kvk4/_scope.sys/p/")
    tenant = kvkey.KeyNamespace(make_identity())
    assert tenant.scope is None
    toks = list(range(64 * 3))
    h = kvkey.scoped_block_hashes(scope, tenant, toks, 64)
    assert h[0] == block(ns.root, toks[:64])
    parent = sha(b"T" + tenant.root + h[0])
    assert tenant.scope_transition(h[0]) == parent
    assert h[1] == block(parent, toks[64:128])
    assert h[2] == block(h[1], toks[128:])
    other = kvkey.KeyNamespace(make_identity(tenant="team-b"))
    hb = kvkey.scoped_block_hashes(scope, other, toks, 64)
    assert hb[0] == h[0] and hb[1] != h[1] and hb[2] != h[2]
    assert kvkey.scoped_block_hashes(scope, tenant, toks, 0) == tenant.block_hashes(toks)
    with pytest.raises(kvkey.InputError):
        kvkey.scoped_block_hashes(scope, tenant, toks, 10)


def test_grants():
    scope = kvkey.SharedScope("sys", make_identity(), readers=["team-b"], publishers=["team-a"],
                              secret=kvkey.TenantSecret(bytes(range(40))), confidential=True)
    assert scope.namespace.confidential
    assert scope.may_read("team-a") and scope.may_read("team-b") and not scope.may_read("team-c")
    assert scope.check_read("team-b") is None
    v = scope.check_read("team-c")
    assert (v.ok, v.reason, v.field) == (False, "not_granted", "scope.readers")
    scope.check_publish("team-a")
    with pytest.raises(kvkey.ScopeError) as e:
        scope.check_publish("team-b")
    assert e.value.field == "scope.publishers"
    with pytest.raises(kvkey.IdentityError):
        kvkey.KeyNamespace(make_identity(tenant="_scope.sys"))
