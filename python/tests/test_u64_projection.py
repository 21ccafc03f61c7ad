"""kvkey.u64_projection against tests/vectors/u64-projection.json (docs/format.md, section 11)."""
import json
import os

import pytest

import kvkey

VECTORS = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "vectors", "u64-projection.json")


def test_the_committed_vectors():
    with open(VECTORS) as f:
        vectors = json.load(f)["vectors"]
    assert vectors
    for v in vectors:
        block = bytes.fromhex(v["block"])
        assert kvkey.u64_projection(block) == v["u64"], v["block"]
        assert kvkey.u64_projection(bytearray(block)) == int(v["u64_hex"], 16)


def test_big_endian():
    assert kvkey.u64_projection(bytes(range(1, 33))) == 0x0102030405060708


@pytest.mark.parametrize("size", [0, 8, 31, 33])
def test_only_digests(size):
    with pytest.raises(kvkey.InputError, match=f"32 bytes, got {size}"):
        kvkey.u64_projection(bytes(size))
