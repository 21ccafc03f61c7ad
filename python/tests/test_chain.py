"""kvkey.Chain: a request's hashes extended as its tokens arrive."""

import gc
import random

import numpy as np
import pytest

import kvkey
from conftest import PROBE_PROMPT, make_identity


@pytest.mark.parametrize("seed", range(6))
def test_appends_in_any_pieces_equal_one_call(ns, seed):
    rng = random.Random(seed)
    tokens = [rng.randrange(150000) for _ in range(rng.randrange(0, 700))]
    salt = rng.choice([None, "s", b"\x00salt"])
    extras = rng.choice([None, [(3, 90, b"img")], [(0, 1, "a"), (200, 260, b"b")]])
    want = ns.block_hashes(tokens, salt=salt, extras=extras)
    chain = ns.chain(salt=salt, extras=extras)
    got, pos = [], 0
    while pos < len(tokens):
        k = rng.choice([1, 7, 63, 64, 65, 200])
        piece = tokens[pos:pos + k]
        kind = rng.choice([list, tuple, lambda p: np.asarray(p, dtype=np.int32), lambda p: np.asarray(p)])
        new = chain.append(kind(piece))
        pos += len(piece)
        assert len(chain) == pos
        assert new == want[len(got):len(got) + len(new)]
        got += new
        assert chain.hashes == got == want[:pos // 64]
    assert got == want and len(chain) == len(tokens)


def test_a_partial_tail_waits(ns):
    chain = ns.chain()
    assert chain.append(PROBE_PROMPT[:63]) == []
    assert chain.hashes == [] and len(chain) == 63
    assert chain.append(PROBE_PROMPT[63:64]) == ns.block_hashes(PROBE_PROMPT[:64])
    assert repr(chain) == "Chain(tokens=64, blocks=1)"


def test_a_bad_append_changes_nothing(ns):
    chain = ns.chain()
    chain.append(PROBE_PROMPT[:100])
    with pytest.raises(kvkey.InputError, match=r"token 130 is -1, outside \[0, 2\^32\)"):
        chain.append(PROBE_PROMPT[100:130] + [-1] + PROBE_PROMPT[131:200])
    with pytest.raises(TypeError, match="token 3 is not an int"):
        chain.append([1, 2, 3, "x"])
    assert len(chain) == 100 and chain.hashes == ns.block_hashes(PROBE_PROMPT[:100])
    chain.append(PROBE_PROMPT[100:])
    assert chain.hashes == ns.block_hashes(PROBE_PROMPT)


def test_arguments_are_checked(ns):
    with pytest.raises(TypeError, match="salt"):
        ns.chain(salt=3)
    with pytest.raises(kvkey.InputError, match=r"extras\[0\].token_begin"):
        ns.chain(extras=[(-1, 2, b"k")])
    with pytest.raises(TypeError):
        ns.chain(None)  # keyword-only


def test_the_chain_keeps_its_namespace_alive():
    chain = kvkey.KeyNamespace(make_identity()).chain()
    gc.collect()
    assert chain.append(PROBE_PROMPT) == kvkey.KeyNamespace(make_identity()).block_hashes(PROBE_PROMPT)


def test_token_by_token_appends(ns):
    chain = ns.chain()
    new = [h for t in PROBE_PROMPT for h in chain.append([t])]  # 384 appends: storage grows geometrically
    assert new == chain.hashes == ns.block_hashes(PROBE_PROMPT)
