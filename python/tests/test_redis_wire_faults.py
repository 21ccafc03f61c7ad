"""kvkey.stores.RedisStore and kvkey.Connector through a proxy that damages the reply
stream (tests/integration/fault_proxy.py): a flipped bit in a bulk length, fragments,
bit flips, cut connections and a trickle. Whatever arrives: no block loads with bytes
that are not its own, every call reads its own replies (the call after a StoreError
too), no lookup counts a block that was never saved, and a slow link ends the call.

Runs by operation counts; the counts go to the log as
``wire faults: mode python-M: calls N, store errors E, wrong loads 0, out-of-step calls 0``.
Needs a redis-server: KVKEY_REDIS_PORT (scripts/ci/stages/40-redis.sh starts one).
"""

import pathlib
import random
import secrets
import sys

import pytest
import redis

import kvkey
from kvkey.stores import RedisStore, StoreError

from conftest import make_unsized_identity as make_identity, server_env  # payloads of any size

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "integration"))
from fault_proxy import FaultProxy  # noqa: E402

pytestmark = pytest.mark.redis

HOST = "127.0.0.1"
PAYLOAD = 1024  # the value is 2048 bytes: its reply starts "$2048\r\n"


@pytest.fixture
def port():
    return int(server_env("KVKEY_REDIS_PORT", "40-redis", "redis"))


class Oracle:
    """Blocks saved with known payloads, and blocks never saved."""

    def __init__(self, port, tag):
        self.ns = kvkey.KeyNamespace(make_identity(tenant=f"{tag.replace('+', '-')}-{secrets.token_hex(3)}",
                                                   kv__block_size=8))
        hashes = self.ns.block_hashes(list(range(8 * 40)))
        self.saved, self.unsaved = hashes[:24], hashes[24:]
        self.payloads = {h: self.payload(h) for h in self.saved}
        direct = redis.Redis(host=HOST, port=port)
        kvkey.Connector(RedisStore(direct), self.ns, raise_errors=True).save(
            self.saved, [self.payloads[h] for h in self.saved])
        direct.close()

    @staticmethod
    def payload(h, tail=b""):
        body = (h * (PAYLOAD // len(h) + 1))[:PAYLOAD]
        return body[:PAYLOAD - len(tail)] + tail

    def prefix(self, hashes):
        n = 0
        while n < len(hashes) and hashes[n] in self.payloads:
            n += 1
        return n


def through(proxy, oracle, deadline=30.0, **client_options):
    """A connector for the oracle's namespace whose store talks to Redis through proxy."""
    options = {"socket_timeout": 5, "socket_connect_timeout": 5}
    options.update(client_options)
    client = redis.Redis(host=HOST, port=proxy.port, **options)
    return kvkey.Connector(RedisStore(client, deadline=deadline, check=False), oracle.ns), client


@pytest.mark.parametrize("tail", [b"+OKAY!", b":12345", b"$2\r\nZZ", b"-ERR!!", b"?junk!"])
@pytest.mark.parametrize("late", [False, True], ids=["at-once", "rest-late"])
def test_flipped_bit_in_first_get_length(port, tail, late):
    """"$2048" read as "$2040": the value ends 8 bytes early and its last 6 bytes read
    as a reply of their own. With rest-late, the replies after it arrive 0.3 s later,
    after the call returned."""
    o = Oracle(port, "wire-py")
    first, second, third = o.saved[:3]
    never = o.unsaved[0]
    damaged = Oracle.payload(first, tail)
    direct = redis.Redis(host=HOST, port=port)
    kvkey.Connector(RedisStore(direct), o.ns, raise_errors=True).save([first], [damaged])
    direct.close()
    trickle = (7 + 2048 + 2, 0.3) if late else None  # the first reply, then the rest
    with FaultProxy(port, flip_at=[(0, 4, 0x08)], trickle=trickle) as proxy:
        conn, client = through(proxy, o)
        got = conn.load([first, second])
        assert got[0] is None  # never loaded
        assert got[1] is None or bytes(got[1]) == o.payloads[second]
        # The next calls read their own replies.
        got = conn.load([first, never, second, third])
        assert [None if p is None else bytes(p) for p in got] == [damaged, None, o.payloads[second],
                                                                   o.payloads[third]]
        assert conn.lookup([first, second, never, third]) == 2
        assert conn.lookup([never, first]) == 0
        client.close()


MODES = [
    ("fragment", dict(fragment=True), 150, False),
    ("flip-1e-4", dict(flip_rate=1e-4), 300, True),
    ("cut", dict(cut_rate=2e-5), 300, False),
    ("fragment+flip+cut", dict(fragment=True, flip_rate=1e-4, cut_rate=1e-5), 150, True),
]


def drive(conn, o, mode, calls, damages):
    """``calls`` lookups and loads of saved and never-saved blocks, drawn from a generator
    seeded by ``mode``; prints the counts and asserts 0 wrong loads, 0 out-of-step calls
    and no lookup counting a block that was never saved. ``damages``: the faults can
    damage values (a miss then proves nothing about the stream being in step)."""
    rng = random.Random(mode)
    errors = wrong = out_of_step = unsaved_counted = 0
    for _ in range(calls):
        hashes = [rng.choice(o.unsaved) if rng.random() < 0.25 else rng.choice(o.saved)
                  for _ in range(rng.randint(1, 8))]
        conn.last_error = None
        in_step = True
        if rng.random() < 0.5:
            got = conn.lookup(hashes)
            want = o.prefix(hashes)
            unsaved_counted += got > want
            if conn.last_error is None:
                in_step = got <= want if damages else got == want
        else:
            got = conn.load(hashes)
            for h, p in zip(hashes, got):
                if p is not None:
                    wrong += bytes(p) != o.payloads.get(h)
                elif conn.last_error is None and not damages:
                    in_step = in_step and h not in o.payloads
        errors += conn.last_error is not None
        out_of_step += not in_step
    print(f"wire faults: mode {mode}: calls {calls}, store errors {errors}, wrong loads {wrong}, "
          f"out-of-step calls {out_of_step}")
    assert wrong == 0
    assert out_of_step == 0
    assert unsaved_counted == 0


@pytest.mark.parametrize("name,faults,calls,damages", MODES, ids=[m[0] for m in MODES])
def test_through_a_damaging_proxy(port, name, faults, calls, damages):
    o = Oracle(port, "wire-py-" + name)
    with FaultProxy(port, seed=21, **faults) as proxy:
        conn, client = through(proxy, o, socket_timeout=1)
        drive(conn, o, "python-" + name, calls, damages)
        client.close()


def test_a_trickling_server_ends_the_call(port):
    """32 bytes every 20 ms: each read gets bytes well within the 1 s socket timeout, and
    4 values of 2 KiB take about 5 s. With a deadline of 0.5 s the call must end with a
    timeout (and the connection dropped), not run until the last byte."""
    o = Oracle(port, "wire-py-trickle")
    with FaultProxy(port, trickle=(32, 0.02)) as proxy:
        conn, client = through(proxy, o, deadline=0.5, socket_timeout=1)
        got = conn.load(o.saved[:4])
        assert all(p is None for p in got)
        assert conn.last_error is not None and conn.last_error.kind == "timeout"
        # The next call runs on a fresh connection, in step.
        conn.store.deadline = 30.0
        assert proxy.connections == 1
        got = conn.load(o.saved[:1])
        assert proxy.connections == 2 and bytes(got[0]) == o.payloads[o.saved[0]]
        client.close()


def test_flipped_bit_in_a_scan_reply(port):
    """A SCAN page whose key length reads "$40" for "$48": the key ends 8 bytes early and
    its last bytes read as a reply of their own ("+OKAY!"), which arrives after the call.
    scan_prefix must fail (StoreError protocol), and the next call read its own replies.
    Runs on database 9, holding only this test's key, so the page is the only one."""
    prefix = f"scanwire-{secrets.token_hex(3)}/"
    key = prefix + "k" * (40 - len(prefix)) + "??+OKAY!"
    assert len(key) == 48
    direct = redis.Redis(host=HOST, port=port, db=9)
    direct.flushdb()
    direct.set(key, b"value")
    direct.close()
    # SELECT's "+OK\r\n", then "*2\r\n$1\r\n0\r\n*1\r\n$48\r\n": the "8" is byte 22. The first
    # 67 bytes end where the shortened key ends; the rest comes 0.3 s later.
    with FaultProxy(port, flip_at=[(0, 22, 0x08)], trickle=(67, 0.3)) as proxy:
        client = redis.Redis(host=HOST, port=proxy.port, db=9, socket_timeout=5)
        store = RedisStore(client, deadline=30.0, check=False)
        with pytest.raises(StoreError) as caught:
            list(store.scan_prefix(prefix))
        assert caught.value.kind == "protocol"
        assert store.get([key, prefix + "none"]) == [b"value", None]
        assert list(store.scan_prefix(prefix)) == [key]
        client.close()


@pytest.mark.parametrize("offset", range(8))
@pytest.mark.parametrize("bit", range(8))
def test_flipped_bit_in_first_reply_of_a_lookup(port, offset, bit):
    """A lookup's first reply on a connection is redis-py's SCRIPT EXISTS for the header
    script ("*1\r\n:1\r\n"). Damaged ("*1" read as the integer ":1", say), the call is a
    miss with a StoreError, never another exception, and the next call reads its own replies."""
    o = Oracle(port, "wire-py-lookup")
    hashes = o.saved[:3] + o.unsaved[:1]
    with FaultProxy(port, flip_at=[(0, offset, 1 << bit)]) as proxy:
        conn, client = through(proxy, o, deadline=10.0, socket_timeout=2)
        assert conn.lookup(hashes) <= 3
        assert conn.lookup(hashes) == 3
        assert [bytes(p) for p in conn.load(o.saved[:2])] == [o.payloads[h] for h in o.saved[:2]]
        client.close()
