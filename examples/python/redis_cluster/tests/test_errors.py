# SPDX-License-Identifier: Apache-2.0
"""The connector's error kinds and glob escaping; no cluster needed."""

import socket

import pytest
import redis.exceptions as rex

from kvkey_cluster import ClusterConnector, ClusterError, display_key, error_kind, glob_escape, key_bytes


@pytest.mark.parametrize("exc, kind", [
    (rex.ConnectionError("refused"), "connect"),
    (rex.BusyLoadingError("loading"), "connect"),
    (rex.TimeoutError("timed out"), "timeout"),
    (rex.ClusterDownError("CLUSTERDOWN The cluster is down"), "down"),
    (rex.SlotNotCoveredError('Slot "7" is not covered by the cluster.'), "down"),
    (rex.MasterDownError("MASTERDOWN Link with MASTER is down"), "failover"),
    (rex.ReadOnlyError("READONLY You can't write against a read only replica."), "failover"),
    (rex.MovedError("3999 127.0.0.1:6381"), "moved"),
    (rex.AskError("3999 127.0.0.1:6381"), "moved"),
    (rex.TryAgainError("TRYAGAIN"), "moved"),
    (rex.ClusterError("TTL exhausted."), "moved"),
    (rex.RedisClusterException("Redis Cluster cannot be connected. Please provide at least one reachable node."),
     "connect"),
    (rex.InvalidResponse("Protocol Error"), "protocol"),
    (rex.AuthenticationError("WRONGPASS"), "server"),
    (rex.ResponseError("ERR unknown command"), "server"),
])
def test_error_kinds(exc, kind):
    assert error_kind(exc) == kind


def test_other_exceptions_are_not_store_errors():
    assert error_kind(ValueError("bad input")) is None
    with pytest.raises(ValueError):
        ClusterError("bogus", "no such kind")


def test_unreachable_cluster_is_a_connect_error():
    with socket.socket() as s:  # bound, never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        conn = ClusterConnector([("127.0.0.1", port)], connect_timeout=1.0)
        with pytest.raises(ClusterError) as e:
            conn.client
        assert e.value.kind == "connect"
        assert "[redis_cluster.connect]" in str(e.value)


def test_glob_escape():
    assert glob_escape("kvk1/team-a/") == "kvk1/team-a/"
    assert glob_escape("a*b?c[d]e\\") == "a\\*b\\?c\\[d\\]e\\\\"


def test_keys_are_bytes_and_display_with_escapes():
    assert glob_escape(b"kvk1/t\xff*/") == b"kvk1/t\xff\\*/"
    assert glob_escape(bytearray(b"[a]")) == b"\\[a\\]"
    assert key_bytes("kvk1/\u00e9/") == b"kvk1/\xc3\xa9/"
    assert key_bytes(memoryview(b"\x00\xff")) == b"\x00\xff"
    with pytest.raises(TypeError):
        key_bytes(7)
    assert display_key(b"kvk1/t/\xff\xfe\x00\n\\ok") == "kvk1/t/\\xff\\xfe\\x00\\x0a\\x5cok"
    assert display_key("kvk1/\u00e9") == "kvk1/\\xc3\\xa9"
