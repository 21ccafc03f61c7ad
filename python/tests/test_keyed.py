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
    with pytest.raises(kvkey.IdentityError) as e:
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
    with pytest.raises(kvkey.IdentityError) as e:
        kvkey.TenantSecret.from_env("KVKEY_TEST_SECRET")
    assert "not hex" not in str(e.value)


# ---- a keyed namespace authenticates every payload (docs/security.md, "The keyed payload rule")


def downgraded(header, payload_size):
    """What a writer without the secret can make of a keyed header: integrity mode none
    (byte 73), nonce and tag zeroed, the payload size of its choice."""
    h = bytearray(header)
    h[73] = 0
    h[80:112] = bytes(32)
    h[48:56] = struct.pack("<Q", payload_size)
    return bytes(h)


@pytest.mark.parametrize("payload_check", ["required", "size_only"])
def test_keyed_namespaces_refuse_downgraded_headers(payload_check):
    ns = kvkey.KeyNamespace(make_identity(), secret=kvkey.TenantSecret(SECRET), payload_check=payload_check)
    assert ns.payload_check == payload_check
    h = ns.block_hashes(PROBE_PROMPT)[0]
    genuine_bytes = bytes(range(256)) * 8
    header = ns.seal(h, genuine_bytes)
    assert ns.verify(header, h, genuine_bytes).ok
    for forged in (b"attacker's bytes" * 128, genuine_bytes, b"", b"\0" * 10):
        v = ns.verify(downgraded(header, len(forged)), h, forged)
        assert (v.reason, v.field) == ("payload_mismatch", "envelope.integrity_mode"), forged[:16]
        v = ns.verify(downgraded(header, len(forged)), h, len(forged))  # size only: nothing authenticated
        assert (v.reason, v.field) == ("payload_mismatch", "envelope.integrity_mode")
        v = ns.verify_header(downgraded(header, len(forged)), h)
        assert (v.reason, v.field) == ("payload_mismatch", "envelope.integrity_mode")
    kept = bytearray(header)
    kept[73] = 0  # mode none with the tag left in place
    assert not ns.verify(bytes(kept), h, genuine_bytes).ok
    # A genuine header is never ok by size alone, and the namespace never seals by size.
    v = ns.verify(header, h, len(genuine_bytes))
    assert (v.reason, v.field) == ("payload_mismatch", "payload")
    with pytest.raises(kvkey.InputError, match="keyed"):
        ns.seal(h, 4096)


def test_a_header_spliced_from_two_objects_is_rejected_in_keyed_namespaces():
    """One object's block hash (offsets 16..47) in another object's header, with the other's bytes:
    the keyed tag covers the whole header, so the splice is refused (docs/security.md: a plain digest
    covers the payload only)."""
    ns = kvkey.KeyNamespace(make_identity(), secret=kvkey.TenantSecret(SECRET))
    first, second = ns.block_hashes(PROBE_PROMPT)[:2]
    value_a, value_b = ns.seal_value(first, b"A" * 96), ns.seal_value(second, b"B" * 96)
    spliced = value_b[:16] + value_a[16:48] + value_b[48:]
    opened = ns.open_value(spliced, first)
    assert (opened.verdict.reason, opened.verdict.field) == ("payload_mismatch", "payload")
    assert opened.payload is None
    assert ns.open_value(value_a, first).verdict.ok


def test_verify_header_checks_what_the_header_alone_shows():
    ns = kvkey.KeyNamespace(make_identity(), secret=kvkey.TenantSecret(SECRET))
    other = kvkey.KeyNamespace(make_identity(), secret=kvkey.TenantSecret(b"\x01" + SECRET[1:]))
    plain = kvkey.KeyNamespace(make_identity())
    h = ns.block_hashes(PROBE_PROMPT)
    header = ns.seal(h[0], b"kv bytes")
    assert ns.verify_header(header, h[0]).ok
    assert ns.verify_header(memoryview(header), h[0]).ok
    v = ns.verify_header(header, h[1])
    assert (v.reason, v.field) == ("block_mismatch", "block_hash")
    v = other.verify_header(header, other.block_hashes(PROBE_PROMPT)[0])
    assert (v.reason, v.field) == ("identity_mismatch", "tenant.secret_id")  # the header names its secret
    v = plain.verify_header(header, h[0])
    assert (v.reason, v.field) == ("identity_mismatch", "envelope.namespace_kind")
    for wrong_length in (header[:1023], header + b"\0", b""):
        v = ns.verify_header(wrong_length, h[0])
        assert (v.reason, v.field) == ("malformed", "envelope.size")
    with pytest.raises(TypeError):
        ns.verify_header("not bytes", h[0])
    loose = kvkey.KeyNamespace(make_identity(), payload_check="size_only")
    ph = loose.block_hashes(PROBE_PROMPT)[0]
    assert loose.verify_header(loose.seal(ph, 77), ph).ok
    v = plain.verify_header(loose.seal(ph, 77), ph)
    assert (v.reason, v.field) == ("payload_mismatch", "envelope.integrity_mode")


@pytest.mark.parametrize("payload_check", ["required", "size_only"])
def test_with_epoch_keeps_the_secret_and_the_policy(payload_check):
    secret = kvkey.TenantSecret(SECRET)
    ns = kvkey.KeyNamespace(make_identity(), secret=secret, payload_check=payload_check)
    rotated = ns.with_epoch(ns.identity.model.weights_epoch + 5)
    identity = make_identity()
    identity.model.weights_epoch += 5
    direct = kvkey.KeyNamespace(identity, secret=secret, payload_check=payload_check)
    assert rotated.keyed and rotated.payload_check == payload_check
    assert rotated.identity == direct.identity
    assert rotated.root == direct.root and rotated.key_prefix == direct.key_prefix
    assert rotated.block_hashes(PROBE_PROMPT) == direct.block_hashes(PROBE_PROMPT)
    assert rotated.root != kvkey.KeyNamespace(identity).root
    h = rotated.block_hashes(PROBE_PROMPT)[0]
    assert rotated.seal(h, b"kv")[73] == 2  # poly1305
    assert direct.verify(rotated.seal(h, b"kv"), h, b"kv").ok
    assert rotated.with_epoch(ns.identity.model.weights_epoch).root == ns.root
    single = make_identity()
    single.tenant = ""
    s = kvkey.KeyNamespace(single, single_tenant=True).with_epoch(9)
    assert s.single_tenant and not s.keyed and s.identity.model.weights_epoch == 9
    with pytest.raises(kvkey.InputError):
        ns.with_epoch(-1)
    with pytest.raises(TypeError):
        ns.with_epoch("1")
