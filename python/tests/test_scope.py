"""Shared scopes (format v4, docs/format.md section 12) through the binding: the scope's
namespace, the transition into the tenant's chain (checked against hashlib), the grants."""

import hashlib
import struct

import pytest

import kvkey
from kvkey.stores import MemoryStore

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


def _scoped(tenant, store, **grants):
    grants = grants or dict(readers=["team-b"], publishers=["team-a"])
    scope = kvkey.SharedScope("sys", make_identity(), **grants)
    return kvkey.ScopedConnector(store, scope, kvkey.KeyNamespace(make_identity(tenant=tenant)))


def _payload(tag, i):
    return (tag + b"%03d" % i) * (786432 // 4)  # make_identity's block: 24 layers x K,V x 2 x 64 x fp16


TOKENS = list(range(64 * 4))  # blocks 0 and 1 in the scope, 2 and 3 private


def test_scoped_connector_shares_the_scope_and_isolates_the_rest():
    store = MemoryStore()
    a, b = _scoped("team-a", store), _scoped("team-b", store)
    ha, hb = a.block_hashes(TOKENS, 128), b.block_hashes(TOKENS, 128)
    assert ha[:2] == hb[:2] and ha[2] != hb[2] and ha[3] != hb[3]
    assert a.save(ha, 2, [_payload(b"A", i) for i in range(4)]) == 4
    # team-b reads the scope's two blocks that team-a published, and none of team-a's private ones.
    assert b.lookup(hb, 2) == 2
    assert [bytes(p) if p is not None else None for p in b.load(hb, 2)] == [
        _payload(b"A", 0), _payload(b"A", 1), None, None]
    assert b.save_private(hb, 2, [_payload(b"B", 2), _payload(b"B", 3)]) == 2
    assert b.lookup(hb, 2) == 4
    bufs = [bytearray(len(_payload(b"B", 0))) for _ in range(4)]
    r = b.load_into(hb, 2, bufs)
    assert [x.status for x in r] == ["loaded"] * 4
    assert bufs[0] == _payload(b"A", 0) and bufs[3] == _payload(b"B", 3)
    assert bytes(a.load(ha, 2)[2]) == _payload(b"A", 2)  # team-b's save left team-a's blocks alone


def test_scoped_connector_keeps_the_grants():
    store = MemoryStore()
    a, b, c = _scoped("team-a", store), _scoped("team-b", store), _scoped("team-c", store)
    ha, hb, hc = a.block_hashes(TOKENS, 128), b.block_hashes(TOKENS, 128), c.block_hashes(TOKENS, 128)
    a.save(ha, 2, [_payload(b"A", i) for i in range(4)])
    stored = len(store)
    # A reader may not publish: ScopeError naming the grant, and nothing written.
    with pytest.raises(kvkey.ScopeError) as e:
        b.save(hb, 2, [_payload(b"B", i) for i in range(4)])
    assert e.value.field == "scope.publishers"
    assert b.lookup(hb, 2) == 2  # still only the scope's blocks: b's private ones were not written
    assert len(store) == stored
    # An ungranted tenant: a named miss on every scope block, the store not asked.
    calls = []
    for name in ("get", "get_prefix", "exists"):
        def counting(keys, *args, _f=getattr(store, name)):
            calls.append(list(keys))
            return _f(keys, *args)
        setattr(store, name, counting)
    assert c.lookup(hc, 2) == 0
    bufs = [bytearray(b"\xee" * len(_payload(b"A", 0))) for _ in range(4)]
    r = c.load_into(hc, 2, bufs)
    assert [(x.status, x.verdict.reason, x.verdict.field)
            for x in r[:2]] == [("missing", "not_granted", "scope.readers")] * 2
    assert all(buf == b"\xee" * len(buf) for buf in bufs[:2])
    assert c.load(hc, 2)[:2] == [None, None]
    scope_keys = {c.scope_connector.ns.store_key(h) for h in hc[:2]}
    assert calls and not any(k in scope_keys for call in calls for k in call)
    with pytest.raises(kvkey.InputError):
        c.lookup(hc, 5)
    with pytest.raises(kvkey.InputError):
        a.save(ha, 2, [_payload(b"A", 0)])


def test_scoped_connector_checks_its_ranks():
    scope = kvkey.SharedScope("sys", make_identity(), readers=["team-b"])
    other = kvkey.SharedScope("sys", make_identity(), readers=["team-c"])
    ns = kvkey.KeyNamespace(make_identity(tenant="team-b"))
    with pytest.raises(kvkey.InputError, match="one of each per rank"):
        kvkey.ScopedConnector(MemoryStore(), [scope, scope], [ns])
    with pytest.raises(kvkey.InputError, match="grants"):
        kvkey.ScopedConnector(MemoryStore(), [scope, other], [ns, ns])
    with pytest.raises(kvkey.InputError, match="tenants"):
        kvkey.ScopedConnector(MemoryStore(), [scope, scope], [ns, kvkey.KeyNamespace(make_identity(tenant="x"))])
    with pytest.raises(kvkey.InputError, match="scope"):
        kvkey.ScopedConnector(MemoryStore(), "sys", ns)
