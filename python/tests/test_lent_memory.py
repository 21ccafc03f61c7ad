"""Memory the connector lends a Python store is never freed under it: a store whose
get_into keeps a view of the buffers it was handed (np.frombuffer, memoryview(view),
view.obj) and uses it after the call reads and writes valid memory, and what it writes
later never reaches a destination."""

import gc
import secrets

import numpy as np

import kvkey
from kvkey.stores import MemoryStore

from conftest import make_identity


class Keeper(MemoryStore):
    """get_into writes each value, and keeps what `keep` makes of the buffer."""

    def __init__(self, keep):
        super().__init__()
        self.keep = keep
        self.kept = []

    def get_into(self, keys, buffers):
        out = []
        for k, buf in zip(keys, buffers):
            v = self.values.get(k)
            self.kept.append(self.keep(buf))
            if v is None:
                out.append(None)
                continue
            n = min(len(v), len(buf))
            buf[:n] = v[:n]
            out.append(len(v))
        return out


KEEPS = {
    "np.frombuffer": lambda buf: np.frombuffer(buf, np.uint8),
    "memoryview": lambda buf: memoryview(buf),
    "obj": lambda buf: buf.obj,
    "nothing": lambda buf: None,
}


def made(keep, n=4):
    store = Keeper(KEEPS[keep])
    ns = kvkey.KeyNamespace(make_identity(tenant=f"lent-{secrets.token_hex(3)}"))
    conn = kvkey.Connector(store, ns, log=False)
    hashes = ns.block_hashes(range(64 * n))
    payloads = [secrets.token_bytes(ns.payload_size) for _ in hashes]
    assert conn.save(hashes, payloads) == n
    return store, ns, conn, hashes, payloads


def scribble(kept):
    for k in kept:
        if k is None:
            continue
        a = np.frombuffer(k, np.uint8) if not isinstance(k, np.ndarray) else k
        a[:] = 0x5A


def test_a_store_that_keeps_views_of_the_lent_memory_reads_and_writes_valid_memory():
    for keep in KEEPS:
        store, ns, conn, hashes, payloads = made(keep)
        dest = [np.zeros(ns.payload_size, np.uint8) for _ in hashes]
        res = conn.load_into(hashes, dest)
        assert all(r.loaded for r in res), keep
        assert [d.tobytes() for d in dest] == payloads, keep
        gc.collect()
        # after the call: the kept views still show what the store wrote, in memory that is alive
        for i, k in enumerate(store.kept):
            if keep in ("np.frombuffer", "memoryview"):
                assert bytes(k[kvkey.envelope_size:]) == payloads[i], keep
        scribble(store.kept)  # and writing through them harms nothing
        assert [d.tobytes() for d in dest] == payloads, keep
        # the next call gets memory of its own, and serves verified payloads again
        store.kept.clear()
        dest2 = [np.zeros(ns.payload_size, np.uint8) for _ in hashes]
        assert all(r.loaded for r in conn.load_into(hashes, dest2)), keep
        assert [d.tobytes() for d in dest2] == payloads, keep


def test_later_writes_through_kept_views_never_reach_a_destination():
    store, ns, conn, hashes, payloads = made("np.frombuffer")
    dest = [np.zeros(ns.payload_size, np.uint8) for _ in hashes]
    conn.load_into(hashes, dest)
    first = list(store.kept)
    scribble(first)
    store.kept.clear()
    dest2 = [np.zeros(ns.payload_size, np.uint8) for _ in hashes]
    assert all(r.loaded for r in conn.load_into(hashes, dest2))
    scribble(store.kept + first)
    assert [d.tobytes() for d in dest2] == payloads


def test_a_store_that_damages_the_value_through_a_kept_view_is_rejected_not_served():
    """A view kept from one call and written during the next call's get_into (as a store
    thread could) damages only memory the next call does not verify."""

    class Late(Keeper):
        def get_into(self, keys, buffers):
            out = super().get_into(keys, buffers)
            scribble(self.old)  # through the views of the previous call
            return out

    store, ns, conn, hashes, payloads = made("np.frombuffer")
    store.__class__ = Late
    dest = [np.zeros(ns.payload_size, np.uint8) for _ in hashes]
    store.old = []
    assert all(r.loaded for r in conn.load_into(hashes, dest))
    store.old, store.kept = store.kept, []
    assert all(r.loaded for r in conn.load_into(hashes, dest))
    assert [d.tobytes() for d in dest] == payloads


def test_a_store_that_keeps_views_with_slots():
    store, ns, conn, hashes, payloads = made("np.frombuffer")
    with kvkey.Slots(store, len(hashes), ns.payload_size) as slots:
        res = conn.load_into(hashes, slots)
        assert all(r.loaded for r in res)
        assert [bytes(slots.payload(i)) for i in range(len(hashes))] == payloads
        scribble(store.kept)
        assert [bytes(slots.payload(i)) for i in range(len(hashes))] == payloads
