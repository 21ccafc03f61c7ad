"""Rotating a tenant secret end to end against a real redis-server (docs/operations.md,
"Rotating a tenant secret"): values under the old and the new secret coexist with 0 wrong
loads, and purging the old secret's id removes exactly its values and none of the new ones.

Stage 40-redis starts the server and exports KVKEY_REDIS_PORT; the test is marked redis."""

import secrets

import numpy as np
import pytest
import redis

import kvkey
from kvkey.stores import RedisStore

from conftest import make_identity, server_env

pytestmark = pytest.mark.redis


def payloads(ns, n, seed):
    size = ns.payload_size
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size, dtype=np.uint8) for _ in range(n)]


def test_rotating_a_tenant_secret():
    port = int(server_env("KVKEY_REDIS_PORT", "40-redis", "redis"))
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10, socket_connect_timeout=5)
    store = RedisStore(client)
    tenant = f"rot-{secrets.token_hex(3)}"
    identity = make_identity(tenant=tenant)
    old_secret = kvkey.TenantSecret(secrets.token_bytes(32))
    new_secret = kvkey.TenantSecret(secrets.token_bytes(32))
    old_ns = kvkey.KeyNamespace(identity, secret=old_secret)
    new_ns = kvkey.KeyNamespace(identity, secret=new_secret)
    plain_ns = kvkey.KeyNamespace(identity)  # the tenant's plain values must survive too
    assert old_ns.secret_id != new_ns.secret_id
    assert old_ns.secret_prefix == kvkey.secret_key_prefix(tenant, kvkey.secret_id(old_secret))

    prompts = [[(p * 7919 + t) % 50000 for t in range(old_ns.block_size * 6)] for p in range(5)]
    old, new, plain = kvkey.Connector(store, old_ns), kvkey.Connector(store, new_ns), kvkey.Connector(store, plain_ns)

    # 1. Before the rollout every engine seals under the old secret.
    saved = {}
    for i, prompt in enumerate(prompts):
        hashes = old_ns.block_hashes(prompt)
        data = payloads(old_ns, len(hashes), i)
        assert old.save(hashes, data) == len(hashes)
        saved[("old", i)] = (hashes, data)
        phashes = plain_ns.block_hashes(prompt)
        assert plain.save(phashes, payloads(plain_ns, len(phashes), 100 + i)) == len(phashes)

    # 2. Start sealing under the new secret; engines of both secrets share the store.
    for i, prompt in enumerate(prompts[:3]):
        hashes = new_ns.block_hashes(prompt)
        data = payloads(new_ns, len(hashes), 1000 + i)
        assert new.save(hashes, data) == len(hashes)
        saved[("new", i)] = (hashes, data)

    wrong_loads = 0
    for (which, i), (hashes, data) in saved.items():
        conn, other = (old, new) if which == "old" else (new, old)
        assert conn.lookup(hashes) == len(hashes)  # blocks
        loaded = conn.load(hashes)
        wrong_loads += sum(1 for got, want in zip(loaded, data) if got is not None and bytes(got) != want.tobytes())
        assert all(got is not None for got in loaded)
        # The other secret's engine computes other keys for the same prompt: no hit, nothing served.
        other_hashes = (new_ns if which == "old" else old_ns).block_hashes(prompts[i])
        if (("new" if which == "old" else "old"), i) not in saved:
            assert other.lookup(other_hashes) == 0
            assert all(x is None for x in other.load(other_hashes))
    assert wrong_loads == 0

    # A value of the old secret copied under a new-secret key is a named miss, never served.
    h_old, d_old = saved[("old", 4)]
    h_new = new_ns.block_hashes(prompts[4])
    client.set(new_ns.store_key(h_new[0]), client.get(old_ns.store_key(h_old[0])))
    assert new.lookup(h_new[:1]) == 0
    assert new.load(h_new[:1]) == [None]
    v = new_ns.verify_header(client.getrange(new_ns.store_key(h_new[0]), 0, kvkey.envelope_size - 1), h_new[0])
    assert (v.reason, v.field) == ("identity_mismatch", "tenant.secret_id")
    client.delete(new_ns.store_key(h_new[0]))

    # 3. Drain (no engine uses the old secret any more), 4. purge the old secret's id.
    old_keys = set(store.scan_prefix(old_ns.secret_prefix))
    new_keys = set(store.scan_prefix(new_ns.secret_prefix))
    plain_keys = set(store.scan_prefix(plain_ns.secret_prefix))
    assert len(old_keys) == sum(len(h) for (w, _), (h, _) in saved.items() if w == "old")
    assert len(new_keys) == sum(len(h) for (w, _), (h, _) in saved.items() if w == "new")
    assert old_keys and new_keys and plain_keys and not (old_keys & new_keys)
    purge_prefix = kvkey.secret_key_prefix(tenant, kvkey.secret_id(old_secret))
    assert store.delete(list(store.scan_prefix(purge_prefix))) == len(old_keys)

    # Exactly the old secret's values are gone; the new secret's and the plain ones remain and load.
    assert not set(store.scan_prefix(old_ns.tenant_prefix)) & old_keys
    assert set(store.scan_prefix(new_ns.secret_prefix)) == new_keys
    assert set(store.scan_prefix(plain_ns.secret_prefix)) == plain_keys
    for (which, i), (hashes, data) in saved.items():
        conn = old if which == "old" else new
        loaded = conn.load(hashes)
        if which == "old":
            assert loaded == [None] * len(hashes)
        else:
            assert [bytes(x) for x in loaded] == [d.tobytes() for d in data]

    store.delete(list(store.scan_prefix(old_ns.tenant_prefix)))
    client.close()
