"""kvkey.Metrics (the binding of kvkey/metrics.hpp) and kvkey.prometheus.Collector."""

import threading

import pytest

import kvkey


def make_ns(dtype="bf16"):
    identity = kvkey.Identity(
        tenant="team-a",
        model=kvkey.Model(name="Qwen/Qwen2.5-0.5B-Instruct", revision="main", weights_epoch=1),
        kv=kvkey.Kv(dtype=dtype, block_size=16, num_layers=24, num_kv_heads=2, head_dim=64, layout="test.v1"),
    )
    return kvkey.KeyNamespace(identity)


def test_counters_add_up():
    m = kvkey.Metrics()
    m.record_lookup(3, 1, 2)
    m.record_lookup(hit=4, miss=0, rejected=0)
    m.record_load(5, 1, 1)
    m.record_save(7, 2)
    m.record_false_hits(2)
    m.record_payload_bytes(4096)
    m.record_store_error("timeout")
    m.record_store_error("no such kind")
    d = m.as_dict()
    assert d["lookups"] == 2
    assert d["lookup_blocks"] == {"hit": 7, "miss": 1, "rejected": 2}
    assert d["loads"] == 1
    assert d["load_blocks"] == {"loaded": 5, "missing": 1, "rejected": 1}
    assert d["saves"] == 1
    assert d["save_blocks"] == {"saved": 7, "failed": 2}
    assert d["false_hits"] == 2
    assert d["payload_verified_bytes"] == 4096
    assert d["store_errors"] == {"connection": 0, "timeout": 1, "protocol": 0, "server": 0, "other": 1}
    assert d["rejections"] == 0 and d["rejected_blocks"] == {}


def test_rejections_by_reason_and_field_from_real_verdicts():
    reader, writer = make_ns("bf16"), make_ns("fp8_e4m3")
    h = reader.block_hashes(list(range(32)))
    payload = bytes(range(256))
    m = kvkey.Metrics()
    m.record_rejection(reader.verify(writer.seal(h[0], payload), h[0], payload))
    m.record_rejection(reader.verify(reader.seal(h[1], payload), h[0], payload))
    m.record_rejection(reader.verify(reader.seal(h[0], payload), h[0], payload[:-1] + b"\0"))
    m.record_rejection(reader.verify(b"not a header", h[0], payload))
    m.record_rejection(reader.verify(reader.seal(h[0], payload), h[0], payload))  # ok: not counted
    m.record_rejection("malformed", "value.size")
    m.record_rejection("identity_mismatch", "not.a.field")
    d = m.as_dict()
    assert d["rejected_blocks"] == {
        "identity_mismatch": {"kv.dtype": 1, "other": 1},
        "block_mismatch": {"block_hash": 1},
        "payload_mismatch": {"payload": 1},
        "malformed": {"envelope.size": 1, "value.size": 1},
    }
    assert d["rejections"] == 6
    text = m.render()
    assert 'kvkey_rejected_blocks_total{reason="identity_mismatch",field="kv.dtype"} 1' in text
    assert 'kvkey_rejected_blocks_total{reason="malformed",field="value.size"} 1' in text


def test_field_names_cover_the_identity():
    assert "kv.dtype" in kvkey.metrics_field_names
    assert "adapter.weights_fingerprint" in kvkey.metrics_field_names
    assert "envelope.magic" in kvkey.metrics_field_names
    assert kvkey.metrics_field_names[-1] == "other"


@pytest.mark.parametrize("call, error", [
    (lambda m: m.record_lookup(-1, 0, 0), kvkey.InputError),
    (lambda m: m.record_lookup(1.5, 0, 0), TypeError),
    (lambda m: m.record_rejection("nonsense", "payload"), kvkey.InputError),
    (lambda m: m.record_rejection("payload_mismatch"), kvkey.InputError),
    (lambda m: m.record_rejection(42), TypeError),
    (lambda m: m.record_store_error(b"timeout"), TypeError),
])
def test_bad_arguments_are_named(call, error):
    m = kvkey.Metrics()
    with pytest.raises(error):
        call(m)
    assert m.as_dict()["rejections"] == 0 and m.as_dict()["lookups"] == 0


def test_threads_give_exact_totals():
    m = kvkey.Metrics()
    rounds = 2000

    def work():
        for _ in range(rounds):
            m.record_lookup(2, 1, 1)
            m.record_rejection("payload_mismatch", "payload")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    d = m.as_dict()
    assert d["lookups"] == 4 * rounds
    assert d["lookup_blocks"]["hit"] == 8 * rounds
    assert d["rejected_blocks"] == {"payload_mismatch": {"payload": 4 * rounds}}


def test_prometheus_collector_serves_the_counters():
    import prometheus_client
    import kvkey.prometheus

    m = kvkey.Metrics()
    registry = prometheus_client.CollectorRegistry()
    registry.register(kvkey.prometheus.Collector(m))
    m.record_lookup(3, 1, 0)
    m.record_rejection("identity_mismatch", "model.weights_epoch")
    m.record_rejection("identity_mismatch", "model.weights_epoch")
    get = registry.get_sample_value
    assert get("kvkey_lookups_total") == 1
    assert get("kvkey_lookup_blocks_total", {"result": "hit"}) == 3
    assert get("kvkey_rejected_blocks_total", {"reason": "identity_mismatch", "field": "model.weights_epoch"}) == 2
    text = prometheus_client.generate_latest(registry).decode()
    assert "# TYPE kvkey_rejected_blocks_total counter" in text
    with pytest.raises(ValueError):  # a second collector of the same names is refused
        registry.register(kvkey.prometheus.Collector(m))
    with pytest.raises(TypeError):
        kvkey.prometheus.Collector(object())
