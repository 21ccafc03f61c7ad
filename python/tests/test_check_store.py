"""kvkey.testing.check_store: passes for a correct store and connector, and catches
broken ones (stale or lossy stores, a connector that skips verification)."""

import dataclasses

import kvkey
from kvkey.connector import BlockResult
from kvkey.stores import MemoryStore
from kvkey.testing import check_store

from test_connector_core import ArenaStore


def test_memory_store_passes_every_case():
    report = check_store(MemoryStore)
    assert report.ok, str(report)
    assert report.wrong_loads == 0 and report.counted_rejected == 0 and report.lost == 0
    names = [c.name for c in report.cases]
    for expected in ["baseline", "foreign tenant", "foreign kv.dtype", "foreign model.weights_epoch",
                     "foreign adapter", "foreign shard.tp_size", "epoch bump", "cross-tenant read",
                     "keyed value under a plain reader's key", "plain value under a keyed reader's key",
                     "header bit flip at 0 (magic)", "payload bit flip (last byte)", "torn value (newer header, "
                     "older payload tail)", "truncated by one byte", "empty value", "non-kvkey value (text)",
                     "transplanted header", "swapped values (blocks)", f"format version {kvkey.format_version - 1}",
                     "stale writer racing an epoch bump", "concurrent writers of one key"]:
        assert expected in names, expected
    assert len(report.cases) >= 60
    # The damage hits each of the two ranks in turn, on both paths (buffers, then Slots).
    foreign = report.case("foreign kv.dtype")
    assert foreign.rejected == 2 * 2 and foreign.reasons == {"identity_mismatch kv.dtype": 2 * 2}
    assert "check_store: ok" in str(report) and "foreign kv.dtype" in str(report)


def test_case_filter():
    report = check_store(MemoryStore, cases=["baseline"])
    assert [c.name for c in report.cases] == ["baseline", "baseline, keyed"]


class StaleStore(MemoryStore):
    """Keeps the first value written under a key: later writes are acknowledged, not applied."""

    def put(self, keys, values):
        with self._lock:
            for k, v in zip(keys, values):
                self.values.setdefault(k, bytes(v))


class LossyStore(MemoryStore):
    """Acknowledges every write and keeps none."""

    def put(self, keys, values):
        return None


class Unverified:
    """A connector that trusts the store: existence counts, and every value longer than a
    header is served as a payload."""

    def __init__(self, store, ranks):
        self.store, self.ranks = store, list(ranks)
        self.inner = kvkey.Connector(store, self.ranks)

    def save(self, hashes, payloads, *, rank=0):
        return self.inner.save(hashes, payloads, rank=rank)

    def lookup(self, hashes, *, max_tokens=None):
        return self.inner.lookup_existing(hashes, max_tokens=max_tokens)

    def load(self, hashes, *, rank=0):
        values = self.store.get([self.ranks[rank].store_key(h) for h in hashes])
        return [None if v is None else memoryview(v)[kvkey.envelope_size:] for v in values]

    def load_into(self, hashes, buffers, *, rank=0):
        out = []
        for p, b in zip(self.load(hashes, rank=rank), buffers):
            if p is None or len(p) != len(b):
                out.append(BlockResult("missing"))
            else:
                memoryview(b).cast("B")[:] = p
                out.append(BlockResult("loaded", None, len(p)))
        return out


class ExistenceLookup(Unverified):
    """Verifies loads, but counts blocks by existence."""

    def load(self, hashes, *, rank=0):
        return self.inner.load(hashes, rank=rank)

    def load_into(self, hashes, buffers, *, rank=0):
        return self.inner.load_into(hashes, buffers, rank=rank)


class SkipsRank1(Unverified):
    """Checks rank 0 fully, but looks up with rank 0's headers only and serves rank 1's
    payloads unverified."""

    def lookup(self, hashes, *, max_tokens=None):
        return kvkey.Connector(self.store, self.ranks[:1]).lookup(hashes, max_tokens=max_tokens)

    def load(self, hashes, *, rank=0):
        return self.inner.load(hashes, rank=0) if rank == 0 else super().load(hashes, rank=rank)

    def load_into(self, hashes, buffers, *, rank=0):
        if rank == 0:
            return self.inner.load_into(hashes, buffers, rank=0)
        return super().load_into(hashes, buffers, rank=rank)


class RecyclingStore(ArenaStore):
    """Answers get with views into one buffer that the next call overwrites (a receive
    arena), and says it hands its values over (owned_values): it does not."""

    def __init__(self):
        super().__init__(owned=True)


class HonestRecyclingStore(ArenaStore):
    """The same arena, and the store says its values are not the caller's."""


def test_a_stale_store_is_caught():
    report = check_store(StaleStore)
    assert not report.ok
    assert report.wrong_loads > 0  # the first value, served after it was replaced
    assert not report.case("baseline").ok
    assert "FAILED" in str(report) and "FAIL baseline" in str(report)


def test_a_lossy_store_is_caught():
    report = check_store(LossyStore, cases=["baseline", "foreign kv.dtype"])
    assert not report.ok and report.wrong_loads == 0 and report.lost > 0


def test_a_connector_that_skips_verification_is_caught():
    report = check_store(MemoryStore, make_connector=Unverified)
    assert not report.ok
    assert report.wrong_loads > 0 and report.counted_rejected > 0
    for name in ["foreign kv.dtype", "payload bit flip (middle byte)", "swapped values (blocks)",
                 f"format version {kvkey.format_version - 1}", "transplanted header"]:
        assert report.case(name).wrong_loads > 0, name


def test_a_lookup_by_existence_is_caught():
    report = check_store(MemoryStore, make_connector=ExistenceLookup)
    assert not report.ok
    assert report.wrong_loads == 0  # loads still verify
    assert report.case("foreign tenant").counted_rejected == 2 * 2  # rank 0's turn and rank 1's, on both paths
    assert report.case("payload bit flip (first byte)").counted_rejected == 0  # its header verifies


def test_an_exception_in_a_case_is_reported_not_raised():
    class Broken(MemoryStore):
        def scan_prefix(self, prefix):
            raise RuntimeError("no scan")

    report = check_store(Broken, cases=["baseline"])
    assert not report.ok and "no scan" in str(report)


class GetPut:
    """The least a store can be: batched get and put over a dict."""

    def __init__(self):
        self.values = {}

    def get(self, keys):
        return [self.values.get(k) for k in keys]

    def put(self, keys, values):
        self.values.update(zip(keys, (bytes(v) for v in values)))


def test_a_store_with_only_get_and_put_passes():
    report = check_store(GetPut)
    assert report.ok, str(report)
    store = GetPut()
    ns = kvkey.KeyNamespace(kvkey.Identity(tenant="t", model=kvkey.Model(name="m", revision="r"), kv=kvkey.Kv(
        dtype=kvkey.KvDtype.fp16, block_size=4, num_layers=1, num_kv_heads=1, head_dim=8, layout="l")))
    conn = kvkey.Connector(store, ns)
    hashes = ns.block_hashes(range(8))
    conn.save(hashes, [b"a" * 128, b"b" * 128])  # the identity's payload size: 2 x 1 x 1 x 8 x 4 x 2
    assert conn.lookup(hashes) == 2 and conn.lookup_existing(hashes) == 2


def test_a_connector_that_skips_rank_1s_checks_is_caught():
    report = check_store(MemoryStore, make_connector=SkipsRank1)
    assert not report.ok
    assert report.wrong_loads > 0 and report.counted_rejected > 0
    for name in ["foreign kv.dtype", "payload bit flip (middle byte)", "header bit flip at 16 (block hash)"]:
        assert not report.case(name).ok, name


def test_a_store_that_recycles_its_buffers_under_a_zero_copy_connector_is_caught():
    report = check_store(RecyclingStore, cases=["baseline", "payload bit flip (middle byte)"])
    assert not report.ok and report.wrong_loads > 0, str(report)
    # The same store, honest about its buffers: the connector copies, and nothing is wrong.
    report = check_store(HonestRecyclingStore, cases=["baseline", "payload bit flip (middle byte)"])
    assert report.ok, str(report)


def test_the_python_and_cpp_kits_run_the_same_cases_with_the_same_report_fields():
    # The case table lives in C++ (kvkey::testing::cases()); the Python kit runs it as is.
    table = [c[0] for c in kvkey._kvkey._check_store_cases()]
    report = check_store(MemoryStore, cases=["baseline", "foreign kv.dtype"])
    assert [c.name for c in report.cases] == ["baseline", "baseline, keyed", "foreign kv.dtype"]
    assert kvkey.testing.CASES and [c[0] for c in kvkey.testing.CASES] == table
    assert len(set(table)) == len(table)
    # Every damage and scenario of the table has a Python implementation.
    for name, scenario, damage, arg, field, keyed in kvkey.testing.CASES:
        if scenario == "fault":
            assert callable(kvkey.testing._damage(damage, arg, field, keyed)), name
    # The report's fields: kvkey::testing::report_fields, CaseResult's, in order.
    fields = [f.name for f in dataclasses.fields(kvkey.testing.CaseResult)]
    assert fields == list(kvkey._kvkey._check_store_report_fields)


class RefusesEmpty(MemoryStore):
    """Refuses empty values, as Mooncake does (-600): the key keeps its old value."""

    def put(self, keys, values):
        stored = [len(memoryview(v)) > 0 for v in values]
        super().put([k for k, s in zip(keys, stored) if s], [v for v, s in zip(values, stored) if s])
        return stored


def test_damage_the_store_refused_is_not_a_wrong_load():
    # The kit's empty-value damage does not take on such a store: the intact value stays,
    # and loading it is right, not a wrong load (nor are refused writes lost blocks).
    report = check_store(RefusesEmpty, cases=["empty value", "baseline"])
    assert report.ok, str(report)
    empty = report.case("empty value")
    assert empty.wrong_loads == 0 and empty.rejected == 0 and empty.loaded > 0
