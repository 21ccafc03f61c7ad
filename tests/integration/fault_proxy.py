#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A fault-injecting TCP proxy for the Redis connector tests, on loopback only.

Every connection a client makes to the proxy gets a connection of its own to
the upstream server; bytes are relayed both ways, and faults are injected as
the options ask:

  --fragment         relay in chunks of 1 to 7 bytes, each sent on its own
                     (TCP_NODELAY), in both directions
  --flip-rate R      flip one random bit of each byte of the server->client
                     stream with probability R (framing bytes included)
  --flip-at C:O:M    on connection C (0-based, in accept order), XOR byte O of
                     the server->client stream with mask M (decimal or 0x..);
                     may repeat
  --cut-rate R       after each server->client byte, with probability R,
                     close both sides of the connection (a cut mid-reply)
  --trickle B:S      relay at most B server->client bytes every S seconds

Options combine. The faults are a function of --seed, the connection's index
and the byte offsets in its streams, never of timing: the same client traffic
under the same seed meets the same faults.

As a program it prints `port N` (the port it listens on) and serves until
stdin closes or it is killed. As a module: FaultProxy(...).start() returns the
port; close() stops it.
"""

from __future__ import annotations

import argparse
import math
import random
import socket
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

LOOPBACK = "127.0.0.1"


def _geometric(rng: random.Random, rate: float) -> int:
    """Bytes until the next event of per-byte probability rate (at least 1)."""
    if rate <= 0.0:
        return sys.maxsize
    if rate >= 1.0:
        return 1
    # Inverse transform of the geometric distribution: one draw per event.
    return 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - rate))


class FaultProxy:
    def __init__(self, upstream_port: int, *, seed: int = 0, fragment: bool = False, flip_rate: float = 0.0,
                 flip_at: Sequence[Tuple[int, int, int]] = (), cut_rate: float = 0.0,
                 trickle: Optional[Tuple[int, float]] = None, port: int = 0) -> None:
        self.upstream = (LOOPBACK, upstream_port)
        self.seed = seed
        self.fragment = fragment
        self.flip_rate = flip_rate
        self.flip_at: Dict[int, Dict[int, int]] = {}
        for conn, offset, mask in flip_at:
            self.flip_at.setdefault(conn, {})[offset] = self.flip_at.get(conn, {}).get(offset, 0) ^ mask
        self.cut_rate = cut_rate
        self.trickle = trickle
        self.connections = 0  # accepted so far
        self.flips = 0        # bits flipped so far
        self.cuts = 0         # connections cut so far
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((LOOPBACK, port))
        self._listener.listen(64)
        self._lock = threading.Lock()
        self._open: List[socket.socket] = []
        self._closed = False
        self._thread: Optional[threading.Thread] = None

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def start(self) -> int:
        self._thread = threading.Thread(target=self._accept_loop, name="fault-proxy", daemon=True)
        self._thread.start()
        return self.port

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets = list(self._open)
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        for s in sockets:
            _shut(s)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> "FaultProxy":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- relaying ---------------------------------------------------------------

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._closed:
                    client.close()
                    return
                index = self.connections
                self.connections += 1
            try:
                server = socket.create_connection(self.upstream, timeout=30)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._open += [client, server]
            pair = _Pair(self, index, client, server)
            threading.Thread(target=pair.upstream_loop, daemon=True).start()
            threading.Thread(target=pair.downstream_loop, daemon=True).start()

    def _forget(self, *sockets: socket.socket) -> None:
        with self._lock:
            for s in sockets:
                if s in self._open:
                    self._open.remove(s)


def _shut(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _Pair:
    """One client connection and its upstream connection."""

    def __init__(self, proxy: FaultProxy, index: int, client: socket.socket, server: socket.socket) -> None:
        self.proxy = proxy
        self.index = index
        self.client = client
        self.server = server
        self.up_rng = random.Random(f"{proxy.seed}:{index}:up")
        self.down_rng = random.Random(f"{proxy.seed}:{index}:down")
        self.down_offset = 0  # server->client bytes relayed so far
        self.next_flip = _geometric(self.down_rng, proxy.flip_rate) - 1
        self.next_cut = _geometric(self.down_rng, proxy.cut_rate) - 1
        self.flips_here = dict(proxy.flip_at.get(index, {}))
        self.done = threading.Event()

    def _finish(self) -> None:
        if not self.done.is_set():
            self.done.set()
            _shut(self.client)
            _shut(self.server)
            self.proxy._forget(self.client, self.server)
            self.client.close()
            self.server.close()

    def _send(self, dest: socket.socket, data: bytes, rng: random.Random) -> None:
        if not self.proxy.fragment:
            dest.sendall(data)
            return
        at = 0
        while at < len(data):
            n = rng.randint(1, 7)
            dest.sendall(data[at:at + n])
            at += n

    def upstream_loop(self) -> None:  # client -> server: fragmented at most
        try:
            while True:
                data = self.client.recv(65536)
                if not data:
                    break
                self._send(self.server, data, self.up_rng)
        except OSError:
            pass
        self._finish()

    def downstream_loop(self) -> None:  # server -> client: every fault
        try:
            while True:
                data = self.server.recv(65536)
                if not data:
                    break
                if not self._relay_down(bytearray(data)):
                    break
        except OSError:
            pass
        self._finish()

    def _relay_down(self, data: bytearray) -> bool:
        """Damages and relays one read; False when the connection was cut."""
        proxy = self.proxy
        start = self.down_offset
        end = start + len(data)
        while self.next_flip < end:
            data[self.next_flip - start] ^= 1 << self.down_rng.randrange(8)
            proxy.flips += 1
            self.next_flip += _geometric(self.down_rng, proxy.flip_rate)
        for offset in [o for o in self.flips_here if start <= o < end]:
            data[offset - start] ^= self.flips_here.pop(offset)
            proxy.flips += 1
        cut = self.next_cut < end
        if cut:
            data = data[:self.next_cut + 1 - start]
        self.down_offset = start + len(data)
        if proxy.trickle is None:
            self._send(self.client, bytes(data), self.down_rng)
        else:
            step, interval = proxy.trickle
            for at in range(0, len(data), step):
                if self.done.is_set():
                    return False
                self._send(self.client, bytes(data[at:at + step]), self.down_rng)
                time.sleep(interval)
        if cut:
            proxy.cuts += 1
            return False
        return True


def _flip_spec(text: str) -> Tuple[int, int, int]:
    conn, offset, mask = text.split(":")
    return int(conn, 0), int(offset, 0), int(mask, 0)


def _trickle_spec(text: str) -> Tuple[int, float]:
    step, interval = text.split(":")
    return max(1, int(step)), float(interval)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--upstream-port", type=int, required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fragment", action="store_true")
    p.add_argument("--flip-rate", type=float, default=0.0)
    p.add_argument("--flip-at", type=_flip_spec, action="append", default=[])
    p.add_argument("--cut-rate", type=float, default=0.0)
    p.add_argument("--trickle", type=_trickle_spec, default=None)
    a = p.parse_args(argv)
    proxy = FaultProxy(a.upstream_port, seed=a.seed, fragment=a.fragment, flip_rate=a.flip_rate,
                       flip_at=a.flip_at, cut_rate=a.cut_rate, trickle=a.trickle, port=a.port)
    print(f"port {proxy.start()}", flush=True)
    try:
        sys.stdin.read()  # until the parent closes our stdin (or exits)
    except KeyboardInterrupt:
        pass
    proxy.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
