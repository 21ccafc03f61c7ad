"""The list/tuple fast path reads the same ids, with the same errors, as the general path."""

import numpy as np
import pytest

import kvkey
from kvkey.compat import lmdeploy as lm
from conftest import PROBE_PROMPT


class Seq:
    """A sequence that is neither a list nor a tuple, recording which items are read."""

    def __init__(self, items):
        self.items = list(items)
        self.read = set()

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        if i >= len(self.items):
            raise IndexError(i)
        self.read.add(i)
        return self.items[i]


class Index:
    """An int-like object (as numpy scalars are): only __index__."""

    def __init__(self, v):
        self.v = v

    def __index__(self):
        return self.v


@pytest.mark.parametrize("make", [list, tuple, Seq])
def test_containers_agree(ns, make):
    want = ns.block_hashes(np.asarray(PROBE_PROMPT, dtype=np.int64))
    assert ns.block_hashes(make(PROBE_PROMPT)) == want
    mixed = [Index(t) if k % 3 == 0 else (np.int64(t) if k % 3 == 1 else t) for k, t in enumerate(PROBE_PROMPT)]
    assert ns.block_hashes(make(mixed)) == want
    assert ns.block_hashes(make([True] * 64)) == ns.block_hashes([1] * 64)


@pytest.mark.parametrize("make", [list, tuple, Seq])
def test_errors_are_the_same_on_every_path(ns, make):
    with pytest.raises(TypeError, match=r"^token 65 is not an int \(float\)$"):
        ns.block_hashes(make([1] * 65 + [1.0]))
    with pytest.raises(TypeError, match=r"^token 3 is not an int \(str\)$"):
        ns.block_hashes(make([Index(1), 2, 3, "4"]))
    with pytest.raises(kvkey.InputError, match=r"token 64 is -1, outside \[0, 2\^32\)"):
        ns.block_hashes(make([0] * 64 + [-1] + [0] * 63))
    with pytest.raises(kvkey.InputError, match=r"token 2 is 1180591620717411303424, outside \[0, 2\^32\)"):
        ns.block_hashes(make([0, 0, 2**70]))
    with pytest.raises(kvkey.InputError, match=r"token 1 is -1180591620717411303424, token ids must lie in \[0, 2\^64\)"):
        lm.build_prefix_block_hashes(make([0, -2**70]), 2)
    with pytest.raises(kvkey.InputError, match=r"token 0 is -1, token ids must lie in \[0, 2\^64\)"):
        lm.build_prefix_block_hashes(make([-1, 2**63]), 2)


@pytest.mark.parametrize("make", [list, tuple, Seq])
def test_legacy_ids_above_2_63_switch_storage_on_every_path(make):
    ids = [5, Index(6), 2**64 - 1, 2**63, 7, 8]
    want = lm.build_prefix_block_hashes(np.array([5, 6, 2**64 - 1, 2**63, 7, 8], dtype=np.uint64), 2)
    assert lm.build_prefix_block_hashes(make(ids), 2) == want


def test_a_list_changing_size_while_read_is_refused(ns):
    tokens = [1] * 128

    class Shrinking:
        def __index__(self):
            del tokens[64:]
            return 1

    tokens[10] = Shrinking()
    with pytest.raises(ValueError, match="changed size"):
        ns.block_hashes(tokens)


def test_extension_reads_only_the_ids_after_the_known_blocks(ns):
    full = ns.block_hashes(PROBE_PROMPT)
    seq = Seq(PROBE_PROMPT)
    assert ns.extend_block_hashes(full[:5], seq) == full
    assert min(seq.read) == 5 * 64
    # Ids of known blocks are not even looked at: a list with junk there extends the same.
    junk = ["not read"] * (5 * 64) + PROBE_PROMPT[5 * 64:]
    assert ns.extend_block_hashes(full[:5], junk) == full
    assert ns.block_hashes(junk, previous=full[:5]) == full
    with pytest.raises(TypeError, match="token 256 is not an int"):
        ns.extend_block_hashes(full[:4], PROBE_PROMPT[:256] + ["x"] + PROBE_PROMPT[257:])
