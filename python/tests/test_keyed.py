"""Keyed namespaces: kvkey.TenantSecret and KeyNamespace(identity, secret=...).

The keyed root and block hashes are checked against an independent hmac +
struct implementation of docs/format.md sections 2 and 3 with H = HMAC-SHA-256
keyed by the secret, i.e. the C++ KeyNamespace<HmacSha256>.
"""

import copy
import hashlib
import hmac
import os
import pickle
import struct

import pytest

import kvkey
from conftest import PROBE_PROMPT, make_identity

SECRET = bytes(range(40))


def H(secret, msg):
    return hmac.new(secret, msg, hashlib.sha256).digest()


def reference_hashes(secret, encoding, tokens, block_size, salt=b""):
    root = H(secret, encoding)
    parent = root if not salt else H(secret, b"S" + root + struct.pack("<I", len(salt)) + salt)
    out = []
    for b in range(len(tokens) // block_size):
        block = tokens[b * block_size:(b + 1) * block_size]
        parent = H(secret, b"B" + parent + struct.pack(f"<{block_size}I", *block) + b"\0\0\0\0")
        out.append(parent)
    return root, out


def test_keyed_hashes_follow_the_format_with_hmac():
    plain = kvkey.KeyNamespace(make_identity())
    ns = kvkey.KeyNamespace(make_identity(), secret=kvkey.TenantSecret(SECRET))
    assert ns.keyed and not plain.keyed
    assert ns.encoding == plain.encoding  # the identity encoding is not keyed
    root, hashes = reference_hashes(SECRET, ns.encoding, PROBE_PROMPT, 64)
    assert ns.root == root
    assert ns.block_hashes(PROBE_PROMPT) == hashes
    assert plain.root == hashlib.sha256(plain.encoding).digest()  # the same reference, unkeyed
    _, salted = reference_hashes(SECRET, ns.encoding, PROBE_PROMPT, 64, salt=b"s1")
    assert ns.block_hashes(PROBE_PROMPT, salt=b"s1") == salted


def test_keyed_namespaces_work_everywhere_the_plain_one_does():
    secret = kvkey.TenantSecret(SECRET)
    ns = kvkey.KeyNamespace(make_identity(), secret=secret)
    other = kvkey.KeyNamespace(make_identity(), secret=kvkey.TenantSecret(b"\x01" + SECRET[1:]))
    plain = kvkey.KeyNamespace(make_identity())
    h = ns.block_hashes(PROBE_PROMPT)
    assert ns.extend_block_hashes(h[:2], PROBE_PROMPT) == h
    chain = ns.chain()
    assert chain.append(PROBE_PROMPT[:100]) + chain.append(PROBE_PROMPT[100:]) == h
    assert ns.block_hashes_batch([PROBE_PROMPT, PROBE_PROMPT[:128]], threads=2) == [h, h[:2]]
    header = ns.seal(h[1], b"0123456789")
    assert ns.verify(header, h[1], b"0123456789").ok
    assert not ns.verify(header, h[1], b"0123456788").ok  # the payload's MAC
    assert not ns.verify(header, other.block_hashes(PROBE_PROMPT)[1], b"0123456789").ok
    assert ns.store_key(h[1]) != plain.store_key(plain.block_hashes(PROBE_PROMPT)[1])
    assert other.block_hashes(PROBE_PROMPT) != h
    assert ns.store_key(h[1]).startswith(ns.key_prefix)


def test_secrets_are_never_shown_and_cannot_be_copied():
    secret = kvkey.TenantSecret(SECRET)
    ns = kvkey.KeyNamespace(make_identity(), secret=secret)
    for text in (repr(secret), str(secret), repr(ns)):
        assert SECRET.hex() not in text and SECRET.hex()[:8] not in text and "<hidden>" in text
    assert len(secret) == 40
    for op in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(TypeError):
            op(secret)


def test_secret_rules_are_the_cpp_ones(tmp_path, monkeypatch):
    with pytest.raises(kvkey.InputError) as e:
        kvkey.TenantSecret(b"x" * 31)
    assert e.value.field == "tenant_secret"
    with pytest.raises(TypeError, match="secret must be bytes-like, not str"):
        kvkey.TenantSecret("x" * 40)
    with pytest.raises(TypeError, match="secret must be a kvkey.TenantSecret"):
        kvkey.KeyNamespace(make_identity(), secret=SECRET)
    f = tmp_path / "secret.hex"
    f.write_text(SECRET.hex() + "\n")
    os.chmod(f, 0o600)
    from_file = kvkey.KeyNamespace(make_identity(), secret=kvkey.TenantSecret.from_file(f))
    assert from_file.root == reference_hashes(SECRET, from_file.encoding, [], 64)[0]
    os.chmod(f, 0o644)
    with pytest.raises(kvkey.IoError):
        kvkey.TenantSecret.from_file(str(f))
    monkeypatch.setenv("KVKEY_TEST_SECRET", SECRET.hex())
    from_env = kvkey.KeyNamespace(make_identity(), secret=kvkey.TenantSecret.from_env("KVKEY_TEST_SECRET"))
    assert from_env.root == from_file.root
    monkeypatch.setenv("KVKEY_TEST_SECRET", "not hex")
    with pytest.raises(kvkey.InputError) as e:
        kvkey.TenantSecret.from_env("KVKEY_TEST_SECRET")
    assert "not hex" not in str(e.value)
