"""tests/vectors/format-v4.json through the binding: identities, roots, block hashes,
keys, envelopes with their payload digests (format version 4: XXH3-128 of payload ||
header'), the keyed secret id, the splice that must be refused, and the digests against
libxxhash called directly (ctypes), not through kvkey."""

import ctypes
import ctypes.util
import json
import os

import numpy as np
import pytest

import kvkey

VECTORS = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "vectors", "format-v4.json")


def load_vectors():
    with open(VECTORS) as f:
        return json.load(f)


class XXH128(ctypes.Structure):
    _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]


def xxh3_128(data):
    """XXH3-128 in canonical form (high64 then low64, big-endian), from libxxhash itself."""
    lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    lib.XXH3_128bits.restype = XXH128
    lib.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    h = lib.XXH3_128bits(bytes(data), len(data))
    return (h.high64.to_bytes(8, "big") + h.low64.to_bytes(8, "big")).hex()


def identity_of(fields, shard):
    i = kvkey.Identity()
    i.tenant = fields["tenant"]
    m, kv, q = i.model, i.kv, i.kv.quant
    m.name, m.revision, m.weights_epoch = fields["model.name"], fields["model.revision"], fields["model.weights_epoch"]
    for name in ("weights_fingerprint", "positional_fingerprint"):
        v = fields["model." + name]
        setattr(m, name, None if v is None else bytes.fromhex(v))
    kv.dtype = fields["kv.dtype"]
    q.scheme, q.group_size = fields["kv.quant.scheme"], fields["kv.quant.group_size"]
    q.scale_dtype, q.zero_point = fields["kv.quant.scale_dtype"], fields["kv.quant.zero_point"]
    v = fields["kv.quant.scales_fingerprint"]
    q.scales_fingerprint = None if v is None else bytes.fromhex(v)
    kv.block_size, kv.num_layers = fields["kv.block_size"], fields["kv.num_layers"]
    kv.num_kv_heads, kv.head_dim = fields["kv.num_kv_heads"], fields["kv.head_dim"]
    kv.layout, kv.mla = fields["kv.layout"], fields["kv.mla"]
    a = fields["adapter"]
    i.adapter = None if a is None else kvkey.Adapter(a["name"], bytes.fromhex(a["weights_fingerprint"]))
    for k, v in shard.items():
        setattr(i.shard, k, v)
    return i


def payload(case, block):
    return np.fromiter(((j + 31 * block) % 251 for j in range(case["payload_size"])), dtype=np.uint8)


@pytest.mark.parametrize("case", load_vectors()["cases"], ids=lambda c: c["name"])
def test_plain_cases(case):
    doc = load_vectors()
    assert doc["format_version"] == kvkey.format_version == 4
    ns = kvkey.KeyNamespace(identity_of(case["identity"], case["shard"]),
                            single_tenant=case["tenant_policy"] == "single_tenant")
    assert ns.encoding.hex() == case["encoding"]
    assert ns.root.hex() == case["root"]
    extras = [(e["token_begin"], e["token_end"], e["key"]) for e in case["extras"]]
    blocks = ns.block_hashes(doc["tokens"]["values"], salt=case["salt"] or None, extras=extras or None)
    assert [b.hex() for b in blocks] == case["blocks"]
    assert [ns.store_key(b) for b in blocks] == case["keys"]
    for i, b in enumerate(blocks):
        p = payload(case, i)
        header = bytes.fromhex(case["envelopes"][i])
        zeroed = header[:96] + bytes(16) + header[112:]  # header': the digest bytes zero
        assert xxh3_128(p.tobytes() + zeroed) == case["payload_digests"][i] == header[96:112].hex()
        assert ns.seal(b, p).hex() == case["envelopes"][i]
        assert ns.verify(header, b, p).ok
        p[7] ^= 1
        v = ns.verify(header, b, p)
        assert (v.reason, v.field) == ("payload_mismatch", "payload")


def test_payload_digests():
    for p in load_vectors()["payloads"]:
        assert xxh3_128(bytes.fromhex(p["hex"])) == p["xxh3_128"]


def test_keyed_secret_id_and_keys():
    doc = load_vectors()
    k = doc["keyed"]
    case = next(c for c in doc["cases"] if c["name"] == k["case"])
    secret = kvkey.TenantSecret(bytes.fromhex(k["secret_hex"]))
    ns = kvkey.KeyNamespace(identity_of(case["identity"], case["shard"]), secret=secret)
    assert kvkey.secret_id(secret) == ns.secret_id == k["secret_id"]
    # The id is the first 8 bytes of HMAC-SHA-256(secret, b"I"), computed here without kvkey.
    import hashlib
    import hmac
    assert hmac.new(bytes.fromhex(k["secret_hex"]), b"I", hashlib.sha256).digest()[:8].hex() == k["secret_id"]
    assert ns.secret_prefix == k["secret_prefix"] == "kvk4/%s/k%s/" % (case["identity"]["tenant"], k["secret_id"])
    assert kvkey.secret_key_prefix(case["identity"]["tenant"], k["secret_id"]) == k["secret_prefix"]
    assert ns.key_prefix == k["key_prefix"]
    blocks = ns.block_hashes(doc["tokens"]["values"])
    assert [ns.store_key(b) for b in blocks] == k["keys"]
    assert all(key.startswith(k["secret_prefix"]) for key in k["keys"])
    for i, b in enumerate(blocks):
        v = ns.verify(bytes.fromhex(k["envelopes"][i]), b, payload(case, i))
        assert v.ok, (v.reason, v.field)
    rotated = kvkey.KeyNamespace(identity_of(case["identity"], case["shard"]),
                                 secret=kvkey.TenantSecret(bytes.fromhex(k["rotated"]["secret_hex"])))
    assert rotated.secret_id == k["rotated"]["secret_id"] != k["secret_id"]
    assert rotated.key_prefix == k["rotated"]["key_prefix"]
    # A value sealed under the old secret, read under the rotated one: named on the secret id.
    v = rotated.verify(bytes.fromhex(k["envelopes"][0]), blocks[0], payload(case, 0))
    assert (v.ok, v.reason, v.field) == (False, "identity_mismatch", "tenant.secret_id")


def test_splice_is_refused():
    doc = load_vectors()
    sp = doc["splice"]
    case = next(c for c in doc["cases"] if c["name"] == sp["case"])
    ns = kvkey.KeyNamespace(identity_of(case["identity"], case["shard"]))
    blocks = ns.block_hashes(doc["tokens"]["values"])
    header = bytes.fromhex(sp["header_hex"])
    p = payload(case, sp["payload_block"])
    v = ns.verify(header, blocks[sp["read_as_block"]], p)
    assert not v.ok
    assert (v.reason, v.field) == (sp["verdict"]["reason"], sp["verdict"]["field"])
    value = header + p.tobytes()
    assert not ns.open_value(value, blocks[sp["read_as_block"]]).ok
    # The splice is B's header with A's block hash: B's own header verifies as B.
    original = header[:16] + blocks[sp["payload_block"]] + header[48:]
    assert ns.verify(original, blocks[sp["payload_block"]], p).ok


def test_format_v2_values_are_unsupported():
    doc = load_vectors()
    case = doc["cases"][0]
    ns = kvkey.KeyNamespace(identity_of(case["identity"], case["shard"]))
    blocks = ns.block_hashes(doc["tokens"]["values"])
    header = bytearray(bytes.fromhex(case["envelopes"][0]))
    header[8] = 2  # format version 2
    v = ns.verify(bytes(header), blocks[0], payload(case, 0))
    assert (v.reason, v.field) == ("unsupported_version", "envelope.format_version")
