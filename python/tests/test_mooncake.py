"""kvkey.stores.MooncakeStore against a real Mooncake Store, over TCP between two processes.

Stage 44-mooncake installs the pinned Mooncake wheel (scripts/mooncake.sh install), starts a
master from it on loopback and exports MOONCAKE_MASTER_ADDR and MOONCAKE_METADATA_URL. Every test here is marked mooncake (deselected elsewhere with -m "not mooncake");
selected without a master it fails. The objects live in a second process that lends the
store its memory (kvkey.stores.mooncake.spawn_holder); this process lends none, so every
value crosses TCP.
"""

import pathlib
import secrets
import subprocess
import sys

import pytest

import kvkey
from kvkey.stores import MooncakeStore, StoreError
from kvkey.stores import mooncake as mc
from kvkey.testing import check_store

from conftest import make_identity, server_env

pytestmark = pytest.mark.mooncake
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def master():
    return (server_env("MOONCAKE_MASTER_ADDR", "44-mooncake", "mooncake"),
            server_env("MOONCAKE_METADATA_URL", "44-mooncake", "mooncake"))


@pytest.fixture(scope="module")
def holder(master):
    proc = mc.spawn_holder(*master, segment=512 << 20)
    yield proc
    proc.stdin.close()
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def store(master, holder):
    s = MooncakeStore.connect(*master, global_segment_size=0, local_buffer_size=128 << 20)
    yield s
    s.close()


def namespace(**changes):
    return kvkey.KeyNamespace(make_identity(tenant=f"mc-{secrets.token_hex(3)}", **changes))


def test_importing_kvkey_stores_does_not_import_mooncake():
    out = subprocess.run([sys.executable, "-c", "import sys, kvkey.stores, kvkey.stores.mooncake; "
                          "print('mooncake' in sys.modules, 'mooncake.store' in sys.modules)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_store_semantics(store):
    p = f"kvk-test-{secrets.token_hex(4)}/"
    keys = [p + f"k{i}" for i in range(300)]  # more than one batch
    assert all(store.put(keys, [b"v%d" % i + bytes(2000) for i in range(300)]))
    assert store.get([keys[3], p + "nope"]) == [b"v3" + bytes(2000), None]  # b"" from Mooncake is a miss
    heads = store.get_prefix(keys + [p + "nope"], 1024)
    assert heads == [(b"v%d" % i + bytes(2000))[:1024] for i in range(300)] + [None]
    # The ranged reads go in concurrent calls (read_streams, 4 here): each header lands in its own place.
    for streams in (1, 3):
        with MooncakeStore(store.client, read_streams=streams) as other:
            assert other.get_prefix(keys[::-1] + [p + "nope"], 1024) == heads[-2::-1] + [None]
    assert store.exists([keys[0], p + "nope"]) == [True, False]
    # put replaces (Mooncake's own put would keep the old value): upsert.
    assert store.put([keys[0]], [b"new" * 10]) == [True]
    assert store.get([keys[0]]) == [b"new" * 10]
    assert store.get_prefix([keys[0]], 1024) == [b"new" * 10]  # shorter than the prefix: read whole
    # An empty value is refused by Mooncake (-600); the old value stays.
    assert store.put([keys[1], keys[2]], [b"", b"two"]) == [False, True]
    assert store.get([keys[1], keys[2]]) == [b"v1" + bytes(2000), b"two"]
    # Reads took leases; removes are forced, so they work at once.
    assert store.delete([keys[0], keys[0], p + "nope"]) == 1
    assert store.get([keys[0]]) == [None]
    with pytest.raises(NotImplementedError):
        store.scan_prefix(p)
    assert store.purge(p) == 299
    assert store.exists(keys[1:4]) == [False] * 3


def test_purge_escapes_the_prefix(store):
    t = secrets.token_hex(3)
    dotted, other, longer = f"kvk1/a.{t}/", f"kvk1/aX{t}/", f"kvk1/a.{t}0/"
    store.put([dotted + "x", other + "x", longer + "x", "z" + dotted + "x"], [b"1", b"2", b"3", b"4"])
    assert store.purge(dotted) == 1  # "." is not a wildcard, and the match is anchored
    assert store.exists([dotted + "x", other + "x", longer + "x", "z" + dotted + "x"]) == [False, True, True, True]
    store.purge(other), store.purge(longer), store.purge("z" + dotted)
    assert mc.regex_escape("a.b*c[d]^$") == r"a\.b\*c\[d\]\^\$"
    with pytest.raises(ValueError):
        store.purge("")


def test_without_a_lease_ttl_removes_are_refused_unless_forced(store, master):
    """What force_remove answers: a remove right after a read is refused (-706) while the
    read's lease lasts, whatever --default_kv_lease_ttl is set to; forced, it succeeds."""
    gentle = MooncakeStore(store.client, force_remove=False)
    k = f"kvk-test-{secrets.token_hex(4)}/k"
    assert store.put([k], [b"x" * 100]) == [True]
    assert gentle.get([k]) == [b"x" * 100]
    with pytest.raises(StoreError) as e:
        gentle.delete([k])
    assert e.value.kind == "server" and "-706" in str(e.value)
    assert store.delete([k]) == 1
    # One key refused among others fails that key alone: the rest are removed.
    held, free = f"kvk-test-{secrets.token_hex(4)}/held", f"kvk-test-{secrets.token_hex(4)}/free"
    assert store.put([held, free], [b"x" * 100, b"y" * 100]) == [True, True]
    assert gentle.get([held]) == [b"x" * 100]
    assert gentle.delete([held, free]) == 1
    assert gentle.key_errors["server"] == 1 and "-706" in str(gentle.last_key_error)
    assert store.exists([held, free]) == [True, False]
    assert store.delete([held]) == 1


def test_the_connector_on_mooncake(store):
    ns = namespace()
    conn = kvkey.Connector(store, ns)
    hashes = ns.block_hashes(range(64 * 6))
    payloads = [bytes([i]) * ns.payload_size for i in range(6)]
    assert conn.save(hashes, payloads) == 6
    assert conn.lookup(hashes) == 6 and conn.lookup_existing(hashes) == 6
    assert [bytes(p) for p in conn.load(hashes)] == payloads
    fp8 = kvkey.Connector(store, kvkey.KeyNamespace(make_identity(tenant=ns.identity.tenant, kv__dtype="fp8_e4m3")))
    assert fp8.lookup(fp8.ns.block_hashes(range(64 * 6))) == 0  # another KV format: other keys
    store.purge(ns.tenant_prefix)
    assert conn.lookup(hashes) == 0


def test_check_store_two_processes(store):
    report = check_store(lambda: store)
    print(report)
    store.purge(kvkey.store_key_tag + "kvkey-check-")
    assert report.ok, str(report)
    assert report.wrong_loads == 0 and report.counted_rejected == 0 and report.lost == 0
    assert report.case("empty value").loaded > 0  # Mooncake refused the empty value: the intact one loads


def test_zero_copy_slots(store):
    ns = namespace()
    conn = kvkey.Connector(store, ns, payload_size=8192)
    hashes = ns.block_hashes(range(64 * 8))
    out = kvkey.Slots(store, 8, 8192)
    for i in range(8):
        out.payload(i)[:] = bytes([i + 1]) * 8192
    assert conn.save_from(hashes, out) == 8
    assert conn.lookup(hashes) == 8
    assert [bytes(p) for p in conn.load(hashes)] == [bytes([i + 1]) * 8192 for i in range(8)]
    into = kvkey.Slots(store, 8, 8192)
    results = conn.load_into(hashes[::-1], into, indices=range(8))
    assert all(r.loaded for r in results)
    assert [bytes(into.payload(i)) for i in range(8)] == [bytes([8 - i]) * 8192 for i in range(8)]
    # Damage: a foreign value (fp8), a flipped payload byte, a truncated and a longer value.
    fp8 = kvkey.KeyNamespace(make_identity(tenant=ns.identity.tenant, kv__dtype="fp8_e4m3"))
    store.put([ns.store_key(hashes[1])], [fp8.seal_value(hashes[1], bytes(8192))])
    v = bytearray(store.get([ns.store_key(hashes[2])])[0])
    v[-1] ^= 1
    store.put([ns.store_key(hashes[2])], [bytes(v)])
    store.put([ns.store_key(hashes[3])], [store.get([ns.store_key(hashes[3])])[0][:700]])
    store.put([ns.store_key(hashes[4])], [ns.seal_value(hashes[4], bytes(9000))])
    store.delete([ns.store_key(hashes[5])])
    metrics = kvkey.Metrics()
    counted = kvkey.Connector(store, ns, payload_size=8192, metrics=metrics)
    assert counted.lookup(hashes) == 1  # block 1's header is foreign
    results = counted.load_into(hashes, into)
    assert [r.status for r in results] == ["loaded", "rejected", "rejected", "rejected", "rejected", "missing",
                                           "loaded", "loaded"]
    assert (results[1].verdict.reason, results[1].verdict.field) == ("identity_mismatch", "kv.dtype")
    assert results[4].verdict.reason == "size_mismatch"
    assert bytes(into.payload(0)) == bytes([1]) * 8192 and bytes(into.payload(7)) == bytes([8]) * 8192
    d = metrics.as_dict()  # the connector's one metrics rule on the zero-copy path
    assert d["load_blocks"] == {"loaded": 3, "missing": 1, "rejected": 4}
    assert d["payload_verified_bytes"] == 3 * 8192
    # In batches of 3, every block gets its own result.
    with MooncakeStore(store.client, batch=3, read_streams=2) as small:
        into2 = kvkey.Slots(small, 8, 8192)
        again = kvkey.Connector(small, ns, payload_size=8192).load_into(hashes[::-1], into2)
        assert [r.status for r in again] == [r.status for r in results[::-1]]
        assert [r.verdict.reason for r in again if r.verdict] == [r.verdict.reason for r in results[::-1] if r.verdict]
        assert bytes(into2.payload(0)) == bytes([8]) * 8192 and bytes(into2.payload(7)) == bytes([1]) * 8192
        into2.close()
    # A plain Connector.load_into with ordinary buffers still copies only verified bytes.
    bufs = [bytearray(8192) for _ in range(2)]
    assert [r.status for r in conn.load_into(hashes[:2], bufs)] == ["loaded", "rejected"]
    assert bufs[1] == bytearray(8192)
    store.purge(ns.tenant_prefix)


def test_check_store_with_stores_dropped_without_close(store):
    """Each case makes a store on the one client and drops it without close(): the memory
    it registered is unregistered with it, so the next store's is never refused."""
    report = check_store(lambda: MooncakeStore(store.client))
    print(report)
    store.purge(kvkey.store_key_tag + "kvkey-check-")
    assert report.ok, str(report)


def test_the_mooncake_guide_runs_against_the_store(master, tmp_path, monkeypatch):
    """Every python block of docs/integration/mooncake.md, in order, against this master."""
    from test_docs import run_page

    monkeypatch.setenv("MOONCAKE_MASTER_ADDR", master[0])
    monkeypatch.setenv("MOONCAKE_METADATA_URL", master[1])
    run_page(ROOT / "docs" / "integration" / "mooncake.md", tmp_path, monkeypatch)
