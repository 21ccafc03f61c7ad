"""KeyNamespace.block_hashes_batch equals block_hashes per sequence."""

import random

import numpy as np
import pytest

import kvkey
from conftest import PROBE_PROMPT


@pytest.mark.parametrize("threads", [0, 1, 3])
def test_batch_equals_the_loop(ns, threads):
    rng = random.Random(threads)
    sequences = []
    for k in range(12):
        n = rng.choice([0, 5, 64, 300, 40000])  # 40000: above the parallel threshold together
        toks = [rng.randrange(150000) for _ in range(n)]
        sequences.append(rng.choice([list, tuple, lambda t: np.asarray(t, dtype=np.int32),
                                     lambda t: np.asarray(t, dtype=np.int64),
                                     lambda t: np.asarray(t, dtype=np.uint32)])(toks))
    assert ns.block_hashes_batch(sequences, threads=threads) == [ns.block_hashes(s) for s in sequences]
    assert ns.block_hashes_batch([]) == []


def test_the_first_bad_sequence_is_reported(ns):
    good = np.asarray(PROBE_PROMPT, dtype=np.int32)
    bad_i64 = np.asarray([0] * 64 + [-5] + [0] * 63, dtype=np.int64)
    bad_list = [0] * 10 + [2**32] + [0] * 53
    with pytest.raises(kvkey.InputError, match=r"^\[kvkey.input_error\] sequences\[1\]: token 10 is 4294967296"):
        ns.block_hashes_batch([good, bad_list, bad_i64])
    with pytest.raises(kvkey.InputError, match="token 64 is -5"):
        ns.block_hashes_batch([good, bad_i64, bad_list])
    with pytest.raises(TypeError, match=r"^sequences\[1\]: token 1 is not an int"):
        ns.block_hashes_batch([good, [1, "x"]])
    with pytest.raises(TypeError, match="sequences must be"):
        ns.block_hashes_batch(5)
    with pytest.raises(kvkey.InputError, match="threads is -1"):
        ns.block_hashes_batch([good], threads=-1)
