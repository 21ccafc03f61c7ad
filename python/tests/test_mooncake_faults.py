"""Faults of a real Mooncake Store: the client that holds the objects dies mid-run, then the
master restarts. Loads become misses and errors, never wrong bytes, and the same
connector works again once the store is back.

The test starts its own master (scripts/mooncake.sh start with a state folder and ports of
its own), so it can stop and restart it without disturbing the stage's master. Marked
mooncake: stage 44-mooncake runs it (it needs the build that stage makes).
"""

import collections
import os
import pathlib
import secrets
import socket
import subprocess
import threading
import time

import pytest

import kvkey
from kvkey.stores import MooncakeStore
from kvkey.stores import mooncake as mc

from conftest import make_identity, server_env

pytestmark = pytest.mark.mooncake
ROOT = pathlib.Path(__file__).resolve().parents[2]
BLOCKS, SIZE = 64, 16 << 10


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Master:
    """A master of this test's own, started and stopped with scripts/mooncake.sh."""

    def __init__(self, state):
        self.env = dict(os.environ, MOONCAKE_STATE_DIR=str(state), MOONCAKE_RPC_PORT=str(free_port()),
                        MOONCAKE_HTTP_PORT=str(free_port()), MOONCAKE_METRICS_PORT=str(free_port()))

    def start(self):
        out = subprocess.run([str(ROOT / "scripts" / "mooncake.sh"), "start"], env=self.env, capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stderr
        found = dict(line.split("=", 1) for line in out.stdout.split())
        self.addr, self.metadata = found["MOONCAKE_MASTER_ADDR"], found["MOONCAKE_METADATA_URL"]

    def stop(self):
        subprocess.run([str(ROOT / "scripts" / "mooncake.sh"), "stop"], env=self.env, capture_output=True)


def payloads(version):
    return [bytes([(i * 7 + version) % 256]) * SIZE for i in range(BLOCKS)]


def test_a_killed_client_and_a_restarted_master(tmp_path):
    server_env("MOONCAKE_MASTER_ADDR", "44-mooncake", "mooncake")  # run only where the stage runs
    master = Master(tmp_path)
    master.start()
    holder = store = None
    try:
        holder = mc.spawn_holder(master.addr, master.metadata, segment=64 << 20)
        store = MooncakeStore.connect(master.addr, master.metadata, global_segment_size=0,
                                      local_buffer_size=32 << 20)
        ns = kvkey.KeyNamespace(make_identity(tenant=f"mc-fault-{secrets.token_hex(3)}"))
        conn = kvkey.Connector(store, ns, payload_size=SIZE)
        hashes = ns.block_hashes(range(64 * BLOCKS))
        expected = payloads(0)
        assert conn.save(hashes, expected) == BLOCKS
        assert conn.lookup(hashes) == BLOCKS

        outcomes = collections.Counter()
        stop = threading.Event()
        killed = threading.Event()

        def reader():
            while not stop.is_set():
                after = killed.is_set()  # a round that starts after the kill: the objects are gone
                bufs = [bytearray(SIZE) for _ in hashes]
                for r, b, want in zip(conn.load_into(hashes, bufs), bufs, expected):
                    if r.loaded:
                        outcomes["wrong" if bytes(b) != want else ("loaded after" if after else "loaded")] += 1
                    else:
                        outcomes[f"{r.status} after" if after else r.status] += 1
                for p, want in zip(conn.load(hashes), expected):
                    if p is not None and bytes(p) != want:
                        outcomes["wrong"] += 1
                outcomes["lookup counted after" if after else "lookup counted"] += conn.lookup(hashes)
                outcomes["rounds after" if after else "rounds"] += 1

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        time.sleep(1.0)
        holder.kill()  # the engine holding the store's memory crashes: its objects vanish
        holder.wait()
        killed.set()
        # Reads of the dead client's objects may wait for the transfer to time out (a lookup
        # took about a minute here): let the reader finish two rounds after the kill.
        deadline = time.monotonic() + 180
        while outcomes["rounds after"] < 2 and time.monotonic() < deadline and t.is_alive():
            time.sleep(0.5)
        stop.set()
        t.join(180)
        print(f"\nkilled client: {dict(outcomes)}; last store error: {conn.last_error}")
        assert outcomes["wrong"] == 0
        assert outcomes["loaded"] > 0  # the reader ran before the kill
        assert outcomes["rounds after"] >= 2 and outcomes["missing after"] > 0  # and after it
        assert outcomes["loaded after"] == 0 and outcomes["lookup counted after"] == 0  # the objects are gone
        # With no client lending memory, saves store nothing (-200 NO_AVAILABLE_HANDLE): never an exception.
        assert conn.save(hashes[:2], expected[:2]) == 0

        # The master restarts (its metadata is gone); a new engine lends memory; the same
        # connector and client work again.
        master.stop()
        master.start()
        holder = mc.spawn_holder(master.addr, master.metadata, segment=64 << 20)
        fresh = payloads(1)
        deadline, recovered, attempts = time.monotonic() + 90, False, 0
        while time.monotonic() < deadline and not recovered:
            attempts += 1
            if conn.save(hashes, fresh) == BLOCKS and conn.lookup(hashes) == BLOCKS:
                bufs = [bytearray(SIZE) for _ in hashes]
                recovered = all(r.loaded for r in conn.load_into(hashes, bufs)) and \
                    [bytes(b) for b in bufs] == fresh
            if not recovered:
                time.sleep(1.0)
        print(f"recovered after the restart: {recovered} ({attempts} attempts); last error {conn.last_error}")
        assert recovered
    finally:
        if store is not None:
            store.close()
        if holder is not None and holder.poll() is None:
            holder.stdin.close()
            holder.wait(timeout=30)
        master.stop()
