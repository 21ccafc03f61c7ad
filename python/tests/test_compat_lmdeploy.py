"""kvkey.compat.lmdeploy against an independent struct + hashlib implementation
of the legacy scheme (written from the spec, sharing no code with kvkey)."""

import hashlib
import random
import re
import struct

import numpy as np
import pytest

import kvkey
from kvkey.compat import lmdeploy as lm
from conftest import PROBE_PROMPT, make_identity

SCHEMA = b"lmdeploy-mooncake-prefix-block-v1\x00"


def reference_hashes(tokens, block_size, extra=b"", previous=()):
    """Block i: SHA-256(schema, [parent], u32be block size, u64be tokens, u32be len(extra), extra)."""
    if isinstance(extra, str):
        extra = extra.encode("utf-8")
    out = list(previous)
    for b in range(len(out), len(tokens) // block_size):
        h = hashlib.sha256()
        h.update(SCHEMA)
        if b > 0:
            h.update(out[b - 1])
        h.update(struct.pack(">I", block_size))
        h.update(struct.pack(f">{block_size}Q", *tokens[b * block_size:(b + 1) * block_size]))
        h.update(struct.pack(">I", len(extra)) + extra)
        out.append(h.digest())
    return out


def reference_key(prefix, model, rank, block_hash):
    return (f"{prefix}@" if prefix else "") + f"{model}@tp_rank:{rank}@group:0@{block_hash.hex()}"


def test_published_probe_key():
    # lmdeploy issue #4930, output of mc_probe_f2.py (lmdeploy's own build_prefix_block_hashes).
    hashes = lm.build_prefix_block_hashes(PROBE_PROMPT, 64, extra_identity="base")
    assert hashes[2].hex() == "e94120f79296e8af266366a8ac6dcc18b8d8171f87e6f405f6a6f4e22324fe8e"
    assert lm.build_store_key("", "Qwen2.5-0.5B-Instruct", 0, hashes[2]) == (
        "Qwen2.5-0.5B-Instruct@tp_rank:0@group:0@e94120f79296e8af266366a8ac6dcc18b8d8171f87e6f405f6a6f4e22324fe8e")
    other = lm.build_prefix_block_hashes([1, 2, 3, 4] * 64, 64, extra_identity="base")
    assert other[2].hex().startswith("8e4e2fb3")
    assert reference_hashes(PROBE_PROMPT, 64, "base") == hashes


def test_schema_constant():
    assert lm.BLOCK_HASH_SCHEMA == SCHEMA
    assert lm.DEFAULT_MODEL_NAME == "unnamed-model"


@pytest.mark.parametrize("seed", range(12))
def test_random_inputs_match_the_reference(seed):
    rng = random.Random(seed)
    block_size = rng.choice([1, 2, 3, 16, 64, 128, 257])
    n = rng.randrange(0, block_size * 6 + 5)
    top = rng.choice([2**16, 2**32, 2**63, 2**64])
    tokens = [rng.randrange(0, top) for _ in range(n)]
    extra = rng.choice(["", "base", "lora-ü", "a@b", b"\x00\xff raw"])
    expected = reference_hashes(tokens, block_size, extra)
    assert lm.build_prefix_block_hashes(tokens, block_size, extra) == expected
    assert lm.build_prefix_block_hashes(tokens, block_size, extra_identity=extra) == expected
    k = rng.randrange(0, len(expected) + 1)
    assert lm.build_prefix_block_hashes(tokens, block_size, extra, previous_hashes=expected[:k]) == expected
    if top <= 2**63:
        assert lm.build_prefix_block_hashes(np.asarray(tokens, dtype=np.int64), block_size, extra) == expected
    assert lm.build_prefix_block_hashes(np.asarray(tokens, dtype=np.uint64), block_size, extra) == expected


def test_numpy_inputs_are_the_list_result():
    expected = lm.build_prefix_block_hashes(PROBE_PROMPT, 16, "x")
    for dtype in (np.int32, np.int64, np.uint32, np.uint64, np.int16):
        assert lm.build_prefix_block_hashes(np.asarray(PROBE_PROMPT, dtype=dtype), 16, "x") == expected
    assert lm.build_prefix_block_hashes(tuple(PROBE_PROMPT), 16, b"x") == expected


def test_previous_hashes_seed_the_chain_as_in_lmdeploy():
    forged = [b"\x00" * 32]
    got = lm.build_prefix_block_hashes(PROBE_PROMPT, 64, "base", previous_hashes=forged)
    assert got == reference_hashes(PROBE_PROMPT, 64, "base", previous=forged)
    assert got[0] == forged[0]


def test_errors():
    with pytest.raises(kvkey.InputError, match=r"token 2 is -3, token ids must lie in \[0, 2\^64\)"):
        lm.build_prefix_block_hashes([1, 2, -3, 4], 2)
    with pytest.raises(kvkey.InputError, match=r"token 0 is 18446744073709551616"):
        lm.build_prefix_block_hashes([2**64, 1], 2)
    with pytest.raises(kvkey.InputError, match="token 1 is -5"):
        lm.build_prefix_block_hashes(np.array([1, -5], dtype=np.int32), 2)
    with pytest.raises(kvkey.InputError, match="block_size must be greater than 0"):
        lm.build_prefix_block_hashes([1], 0)
    with pytest.raises(kvkey.InputError, match="2 previous hashes but only 1 full blocks"):
        lm.build_prefix_block_hashes([1, 2], 2, "", [b"\0" * 32] * 2)
    with pytest.raises(kvkey.InputError, match="must be 32 bytes"):
        lm.build_store_key("", "M", 0, b"\0" * 31)
    with pytest.raises(kvkey.InputError, match="model_name must not be empty"):
        lm.purge_pattern("p", "")


def test_store_keys_and_geometry():
    h = bytes(range(32))
    for prefix, model, rank in [("", "M", 0), ("tenant/a", "M", 3), ("a@b", "c@d", 12)]:
        assert lm.build_store_key(prefix, model, rank, h) == reference_key(prefix, model, rank, h)
    # tp 8 with 1, 2, 8 KV heads; tp 2 with 8 heads.
    assert [lm.kv_head_rank(r, 8, 2) for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [lm.kv_head_rank(r, 8, 8) for r in range(8)] == list(range(8))
    assert [lm.kv_head_rank(r, 2, 8) for r in range(2)] == [0, 1]
    assert (lm.shard_key_count(8, 8), lm.shard_key_count(8, 2), lm.shard_key_count(8, 1)) == (8, 2, 1)
    assert lm.kv_head_replica_num(8, 2) == 4
    with pytest.raises(kvkey.InputError):
        lm.kv_head_rank(8, 8, 2)
    hashes = reference_hashes(PROBE_PROMPT, 64)
    assert lm.lookup_keys("p", "M", 2, hashes) == [
        reference_key("p", "M", rank, h) for h in hashes for rank in range(2)]


def test_parse_key():
    h = reference_hashes(PROBE_PROMPT, 64, "base")[2]
    k = lm.parse_key(reference_key("tenant/a", "Qwen", 5, h))
    assert (k.cache_prefix, k.model_name, k.kv_head_rank, k.block_hash, k.ambiguous) == ("tenant/a", "Qwen", 5, h, True)
    k = lm.parse_key(reference_key("", "Qwen", 0, h))
    assert (k.cache_prefix, k.model_name, k.ambiguous) == ("", "Qwen", False)
    # The '@' injection: both pairs write the same key; parse returns the last-'@' split.
    same = reference_key("", "tenantA@M", 0, h)
    assert same == reference_key("tenantA", "M", 0, h)
    k = lm.parse_key(same)
    assert (k.cache_prefix, k.model_name, k.ambiguous) == ("tenantA", "M", True)
    for bad in ["", "M@tp_rank:0@group:0@" + h.hex().upper(), "M@tp_rank:01@group:0@" + h.hex(),
                "@tp_rank:0@group:0@" + h.hex(), "kvk4/team-a/p/M/e0/" + h.hex()]:
        assert lm.parse_key(bad) is None
        assert not lm.is_legacy_key(bad)


@pytest.mark.parametrize("prefix,model", [("", "Qwen2.5-0.5B-Instruct"), ("tenant/a", "M"),
                                          ("a.b*c(d)[e]{f}|g^h$i\\j+k?l", "x.y")])
def test_purge_pattern_with_python_re(prefix, model):
    pattern = re.compile(lm.purge_pattern(prefix, model))
    hashes = reference_hashes(PROBE_PROMPT, 64, "base")
    for rank in (0, 1, 9, 10, 4294967295):
        for h in hashes:
            key = reference_key(prefix, model, rank, h)
            assert pattern.search(key)
            assert lm.is_legacy_key_of(key, prefix, model)
    h = hashes[0]
    for other in [reference_key(prefix + "x", model, 0, h), reference_key(prefix, model + "x", 0, h),
                  reference_key(prefix, "other", 0, h), "x" + reference_key(prefix, model, 0, h),
                  reference_key(prefix, model, 0, h) + "0", reference_key(prefix, "xzy", 0, h)]:
        assert not pattern.search(other)
        assert not lm.is_legacy_key_of(other, prefix, model)
    # kvkey keys never match, whatever the identity.
    ns = kvkey.KeyNamespace(make_identity(model__name=model))
    assert not pattern.search(ns.store_key(ns.block_hashes(PROBE_PROMPT)[0]))


def test_purge_glob_escapes_redis_metacharacters():
    glob = lm.purge_glob("t*e?n[a]n\\t", "M")
    assert glob.startswith("t\\*e\\?n\\[a\\]n\\\\t@M@tp_rank:*@group:0@")
    assert glob.endswith("[0-9a-f]" * 64)


def test_legacy_collisions_and_kvkey_keys():
    legacy = lm.build_prefix_block_hashes(PROBE_PROMPT, 64, "base")
    key = lm.build_store_key("", "Qwen2.5-0.5B-Instruct", 0, legacy[2])

    def kvkey_key(**changes):
        ns = kvkey.KeyNamespace(make_identity(**changes))
        return ns.store_key(ns.block_hashes(PROBE_PROMPT)[2])

    base = kvkey_key()
    # fp16 vs fp8: the legacy inputs do not change, so neither does the key.
    assert lm.build_store_key("", "Qwen2.5-0.5B-Instruct", 0,
                              lm.build_prefix_block_hashes(PROBE_PROMPT, 64, "base")[2]) == key
    assert kvkey_key(kv__dtype="fp8_e4m3") != base
    assert kvkey_key(model__weights_epoch=1) != base
    assert kvkey_key(tenant="team-b") != base
    # '@' injection.
    assert lm.build_store_key("tenantA", "M", 0, legacy[2]) == lm.build_store_key("", "tenantA@M", 0, legacy[2])
    assert kvkey_key(tenant="tenantA", model__name="M") != kvkey_key(model__name="tenantA@M")
