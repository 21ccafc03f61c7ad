# SPDX-License-Identifier: Apache-2.0
"""rotate_epoch keeps everything but the epoch; no cluster needed."""

import struct

import pytest

import kvkey
from kvkey_cluster import rotate_epoch, seal_value, verify_value

import support

SECRET = kvkey.TenantSecret(bytes(range(100, 140)))
TOKENS = list(range(64))


def ranks(**options):
    base = support.identity("rotation", tp=2)
    out = []
    for rank in range(2):
        identity = base.copy()
        identity.shard.tp_rank = rank
        out.append(kvkey.KeyNamespace(identity, **options))
    return out


@pytest.mark.parametrize("payload_check", ["required", "size_only"])
def test_rotation_keeps_the_secret_and_the_payload_policy(payload_check):
    old = ranks(secret=SECRET, payload_check=payload_check)
    new = rotate_epoch(old, 3)
    plain = rotate_epoch(ranks(), 3)
    for o, n, p in zip(old, new, plain):
        assert n.identity.model.weights_epoch == 3 and n.identity.shard.tp_rank == o.identity.shard.tp_rank
        assert n.keyed and n.payload_check == payload_check
        h = n.block_hashes(TOKENS)[0]
        # Nobody without the secret computes these keys: they differ from the plain namespace's.
        assert n.root != p.root
        assert n.store_key(h) != p.store_key(p.block_hashes(TOKENS)[0])
        # The readable prefix, for purging the epoch: the plain one with the secret's id for "p".
        assert n.key_prefix == p.key_prefix.replace(p.secret_prefix, n.secret_prefix, 1)
        assert n.secret_prefix == f"{n.tenant_prefix}k{n.secret_id}/"
        value = seal_value(n, h, b"kv bytes" * 8)
        assert value[73] == 2  # the payload carries a Poly1305 tag
        assert verify_value(n, value, h).ok
        v = verify_value(o, value, o.block_hashes(TOKENS)[0])
        assert (v.reason, v.field) == ("identity_mismatch", "model.weights_epoch")


def test_rotation_keeps_the_single_tenant_policy():
    identity = ranks()[0].identity
    identity.tenant = ""
    ns = kvkey.KeyNamespace(identity, single_tenant=True)
    (rotated,) = rotate_epoch([ns], 1)
    assert rotated.single_tenant and not rotated.keyed and rotated.payload_check == "required"
    assert rotated.identity.model.weights_epoch == 1


def test_a_downgraded_value_is_rejected_in_a_keyed_size_only_namespace():
    """The forged value of issue 'keyed downgrade', checked without a cluster: load
    calls verify_value on exactly these bytes."""
    (ns,) = ranks(secret=SECRET, payload_check="size_only")[:1]
    h = ns.block_hashes(TOKENS)[0]
    value = bytearray(seal_value(ns, h, b"genuine KV" * 10))
    forged = b"attacker KV" * 10
    value[73] = 0
    value[80:112] = bytes(32)
    value[48:56] = struct.pack("<Q", len(forged))
    v = verify_value(ns, bytes(value[:kvkey.envelope_size]) + forged, h)
    assert (v.reason, v.field) == ("payload_mismatch", "envelope.integrity_mode")
