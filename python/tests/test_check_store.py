"""kvkey.testing.check_store: passes for a correct store and connector, and catches
broken ones (stale or lossy stores, a connector that skips verification)."""

import kvkey
from kvkey.stores import MemoryStore
from kvkey.testing import check_store


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
    foreign = report.case("foreign kv.dtype")
    assert foreign.rejected == 1 and foreign.reasons == {"identity_mismatch kv.dtype": 1}
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


class Unverified(kvkey.Connector):
    """A connector that trusts the store: existence counts, and every value longer than a
    header is served as a payload."""

    def lookup(self, block_hashes, *, max_tokens=None):
        return self.lookup_existing(block_hashes, max_tokens=max_tokens)

    def _open(self, ns, hashes):
        values = self.store.get([ns.store_key(h) for h in hashes])
        payloads = [None if v is None else memoryview(v)[kvkey.envelope_size:] for v in values]
        return payloads, [None] * len(hashes), values


class ExistenceLookup(kvkey.Connector):
    """Verifies loads, but counts blocks by existence."""

    def lookup(self, block_hashes, *, max_tokens=None):
        return self.lookup_existing(block_hashes, max_tokens=max_tokens)


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
    assert report.case("foreign tenant").counted_rejected == 1
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
    conn.save(hashes, [b"a" * 64, b"b" * 64])
    assert conn.lookup(hashes) == 2 and conn.lookup_existing(hashes) == 2
