"""Confidential namespaces (format v4): KeyNamespace(identity, secret=..., confidential=True)
stores payloads as AES-256-GCM ciphertext. Opened here against an independent
reference of docs/format.md ("Mode aes256_gcm") written with hashlib/hmac and the
`cryptography` package, never kvkey."""

import hashlib
import hmac

import numpy as np
import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

import kvkey
from conftest import PROBE_PROMPT, make_identity

SECRET = bytes(range(40))


def reference_open(secret, root, value):
    nonce = value[80:96]
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"kvkey v4 confidential",
               info=b"C" + root + nonce[:4]).derive(secret)
    aad = value[:96] + bytes(16) + value[112:1024]
    return AESGCM(key).decrypt(nonce[4:], value[1024:] + value[96:112], aad)


def confidential(identity=None, secret=SECRET):
    return kvkey.KeyNamespace(identity or make_identity(), secret=kvkey.TenantSecret(secret), confidential=True)


def test_a_value_is_ciphertext_the_reference_opens():
    ns = confidential()
    assert ns.confidential and ns.keyed
    sid = hmac.new(SECRET, b"I", hashlib.sha256).digest()[:8].hex()
    assert ns.secret_prefix == "kvk4/team-a/c%s/" % sid
    assert ns.key_prefix.startswith(ns.secret_prefix)
    assert kvkey.secret_key_prefix("team-a", sid, confidential=True) == ns.secret_prefix
    assert "confidential=True" in repr(ns)
    h = ns.block_hashes(PROBE_PROMPT)
    payload = np.arange(4096, dtype=np.uint16)
    value = ns.seal_value(h[0], payload)
    assert value[73] == 3  # integrity mode aes256_gcm
    assert payload.tobytes()[:64] not in value
    assert reference_open(SECRET, ns.root, value) == payload.tobytes()
    opened = ns.open_value(value, h[0])
    assert opened.ok
    assert bytes(opened.payload) == payload.tobytes()
    # Per-layer parts: the value holds their concatenation, encrypted.
    parts = [payload[:1000], payload[1000:]]
    assert bytes(ns.open_value(ns.seal_value(h[0], parts), h[0]).payload) == payload.tobytes()


def test_rejections_are_named_misses_without_plaintext():
    ns = confidential()
    h = ns.block_hashes(PROBE_PROMPT)
    value = ns.seal_value(h[0], b"\x07" * 2048)
    for offset, reason, field in [(16, "block_mismatch", "block_hash"), (80, "payload_mismatch", "payload"),
                                  (90, "payload_mismatch", "payload"), (100, "payload_mismatch", "payload"),
                                  (1024 + 5, "payload_mismatch", "payload"), (112, "identity_mismatch",
                                                                               "tenant.secret_id")]:
        bad = bytearray(value)
        bad[offset] ^= 1
        o = ns.open_value(bytes(bad), h[0])
        assert (o.verdict.reason, o.verdict.field) == (reason, field), offset
        assert o.payload is None
        with pytest.raises(InvalidTag):
            reference_open(SECRET, ns.root, bytes(bad))
    other = confidential(secret=bytes(range(1, 41)))
    assert other.open_value(value, h[0]).verdict.field == "tenant.secret_id"
    other_tenant = confidential(make_identity(tenant="team-b"))
    assert other_tenant.open_value(value, h[0]).verdict.field == "tenant"
    keyed = kvkey.KeyNamespace(make_identity(), secret=kvkey.TenantSecret(SECRET))
    v = keyed.open_value(value, h[0]).verdict
    assert (v.reason, v.field) == ("payload_mismatch", "envelope.integrity_mode")
    plain = kvkey.KeyNamespace(make_identity())
    assert plain.open_value(value, h[0]).verdict.field == "envelope.namespace_kind"


def test_misuse_is_refused():
    with pytest.raises(kvkey.IdentityError) as e:
        kvkey.KeyNamespace(make_identity(), confidential=True)
    assert e.value.field == "confidential"
    ns = confidential()
    h = ns.block_hashes(PROBE_PROMPT)
    with pytest.raises(kvkey.InputError):
        ns.seal(h[0], b"x" * 64)
    assert ns.with_epoch(3).confidential and ns.for_rank(0).confidential


def test_nonces_never_repeat():
    ns = confidential()
    h = ns.block_hashes(PROBE_PROMPT)
    nonces = {ns.seal_value(h[0], b"same bytes")[80:96] for _ in range(5000)}
    assert len(nonces) == 5000


def test_the_identity_files_confidential_is_the_default():
    # Left out, confidential= is the identity file's "confidential", as single_tenant and payload_check
    # are the file's policy; given, it wins.
    import json as _json

    text = _json.dumps({"tenant": "t", "confidential": True, "model": {"name": "m", "revision": "r"},
                        "kv": {"dtype": "fp16", "block_size": 4, "num_layers": 2, "num_kv_heads": 2,
                               "head_dim": 8, "layout": "l"}})
    identity = kvkey.Identity.from_json(text)
    secret = kvkey.TenantSecret(b"x" * 32)
    assert kvkey.KeyNamespace(identity, secret=secret).confidential
    assert not kvkey.KeyNamespace(identity, secret=secret, confidential=False).confidential
    with pytest.raises(kvkey.IdentityError) as e:
        kvkey.KeyNamespace(identity)
    assert e.value.field == "confidential"
    plain_file = kvkey.Identity.from_json(text.replace('"confidential": true, ', ""))
    assert not kvkey.KeyNamespace(plain_file, secret=secret).confidential
