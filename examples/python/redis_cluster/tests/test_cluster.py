# SPDX-License-Identifier: Apache-2.0
"""kvkey objects on a live 6-node Redis Cluster (3 primaries, 3 replicas).

Each scenario prints one result line beginning `cluster <scenario>:`. They run
in file order; the failover scenario kills a primary for good, so it runs last.
Waits are bounded with generous limits and progress is counted in operations,
never in seconds, so a slow machine changes the figures, not the verdicts.
"""

import collections
import os
import signal
import subprocess
import time

import kvkey
from kvkey_cluster import LoadStatus, rotate_epoch

import support
from support import Deployment, Workload


def report(line: str):
    print("\n" + line, flush=True)


def per_primary(conn, prefix: str) -> list:
    """Object counts under prefix on each primary, in port order."""
    return [len(keys) for _, keys in sorted(conn.keys(prefix).items())]


def test_isolation():
    conn = support.connector()
    t1, t2 = support.tenant("iso-a"), support.tenant("iso-b")
    deps = [
        Deployment("base", support.identity(t1)),
        Deployment("dtype", support.identity(t1, dtype="fp8_e4m3")),
        Deployment("epoch", support.identity(t1, epoch=1)),
        Deployment("tenant", support.identity(t2)),
        Deployment("adapter", support.identity(t1, adapter="lora-a")),
        Deployment("tp2", support.identity(t1, tp=2)),
    ]
    families = {d.name: [100 + 10 * i + k for k in range(4)] for i, d in enumerate(deps)}
    for d in deps:
        for f in families[d.name]:
            d.save(conn, d.hashes(f))
    spread = [a + b for a, b in zip(per_primary(conn, deps[0].ranks[0].tenant_prefix),
                                    per_primary(conn, deps[3].ranks[0].tenant_prefix))]
    assert len(spread) == 3 and all(n > 0 for n in spread), f"objects per primary: {spread}"

    # Every deployment looks up and loads every family: its own ones hit in
    # full and load exactly; the other deployments' (same tokens) never hit.
    own_hits = cross_hits = cross_lookups = 0
    loads = collections.Counter()
    for reader in deps:
        for writer in deps:
            for f in families[writer.name]:
                h = reader.hashes(f)
                hits = conn.lookup(reader.ranks, h).prefix.blocks
                loads += reader.load(conn, h)
                if writer is reader:
                    own_hits += hits
                else:
                    cross_hits += hits
                    cross_lookups += 1
    own_blocks = sum(len(families[d.name]) * 4 for d in deps)
    own_loads = sum(len(families[d.name]) * 4 * len(d.ranks) for d in deps)

    # Forced cross-reads: a writer's value for a prompt stored raw under the
    # reader's key for the same prompt (each hashes it in its own namespace).
    forced = rejected = 0
    reasons = collections.Counter()
    stored = {}
    for d in deps:
        d.save(conn, d.hashes(999))
        stored[d.name] = [conn.client.get(d.ranks[0].store_key(h)) for h in d.hashes(999)]  # before any copy
    for reader in deps:
        for writer in deps:
            if writer is reader:
                continue
            for h, value in zip(reader.hashes(999), stored[writer.name]):
                conn.client.set(reader.ranks[0].store_key(h), value)
                got = conn.load(reader.ranks[0], [h], reader.payload_size(0))[0]
                forced += 1
                if got.status is LoadStatus.REJECTED:
                    rejected += 1
                    reasons[got.field] += 1
                elif got.loaded and got.payload != reader.payload(0, h):
                    loads["wrong"] += 1

    report(f"cluster isolation: {len(deps)} deployments ({', '.join(d.name for d in deps)}) over 3 primaries "
           f"(objects per primary: {' / '.join(map(str, spread))}); own hits {own_hits} of {own_blocks} blocks, "
           f"exact loads {loads['exact']} of {own_loads}; cross-deployment hits: {cross_hits} "
           f"({cross_lookups} lookups); forced cross-reads rejected: {rejected} of {forced} "
           f"({', '.join(f'{k} {v}' for k, v in sorted(reasons.items()))}); wrong loads: {loads['wrong']}")
    assert own_hits == own_blocks and loads["exact"] == own_loads
    assert cross_hits == 0
    assert rejected == forced
    assert loads["wrong"] == 0
    for d in deps:
        conn.purge(d.ranks[0].tenant_prefix)


def epoch_offset(ident) -> int:
    """The envelope offset of the weights epoch's lowest byte: the one byte in
    which the headers of two identities differing only there differ."""
    other = ident.copy()
    other.model.weights_epoch ^= 1
    a = kvkey.KeyNamespace(ident).seal(bytes(32), b"")
    b = kvkey.KeyNamespace(other).seal(bytes(32), b"")
    digest = range(96, 112)  # the payload digest covers the header (format v3): it differs too
    diffs = [i for i in range(len(a)) if a[i] != b[i] and i not in digest]
    assert len(diffs) == 1
    return diffs[0]


def flip(value: bytes, offset: int) -> bytes:
    return value[:offset] + bytes([value[offset] ^ 0x01]) + value[offset + 1:]


def test_faults():
    conn = support.connector()
    ident = support.identity(support.tenant("faults"))
    d = Deployment("faults", ident)
    foreign = Deployment("foreign", support.identity(support.tenant("faults-x")))
    blocks = d.hashes(200, blocks=24)
    d.save(conn, blocks)
    foreign_blocks = foreign.hashes(200, blocks=24)  # the same prompt, hashed in its own namespace
    foreign.save(conn, foreign_blocks)
    ns, size = d.ranks[0], d.payload_size(0)
    client = conn.client

    # One victim block per primary, damaged directly on that primary.
    victims = {}
    for i, h in enumerate(blocks[:-1]):
        victims.setdefault(support.owner_port(client, ns.store_key(h)), i)
    assert len(victims) == 3, f"24 blocks did not cover all 3 primaries: {victims}"
    at = epoch_offset(ident)
    faults = [
        ("truncated inside the header", lambda v, i: v[:700], "malformed", "envelope.size"),
        ("empty", lambda v, i: b"", "malformed", "envelope.size"),
        ("payload truncated by one byte", lambda v, i: v[:-1], "size_mismatch", "payload_size"),
        ("payload extended by one byte", lambda v, i: v + b"x", "size_mismatch", "payload_size"),
        ("payload byte flipped", lambda v, i: flip(v, len(v) - 100), "payload_mismatch", "payload"),
        ("payload tail zeroed (torn write)", lambda v, i: v[:-64] + bytes(64), "payload_mismatch", "payload"),
        ("magic flipped", lambda v, i: flip(v, 0), "malformed", "envelope.magic"),
        ("epoch bit flipped", lambda v, i: flip(v, at), "identity_mismatch", "model.weights_epoch"),
        ("swapped with the next block's value", lambda v, i: raw(ns.store_key(blocks[i + 1])),
         "block_mismatch", "block_hash"),
        ("another tenant's value", lambda v, i: raw(foreign.ranks[0].store_key(foreign_blocks[i])),
         "identity_mismatch", "tenant"),
    ]

    def raw(key):
        return support.node(support.owner_port(client, key)).get(key)

    damaged = rejected = recomputed = wrong = 0
    reasons = collections.Counter()
    for name, damage, reason, field in faults:
        for port, i in sorted(victims.items()):
            key = ns.store_key(blocks[i])
            good = raw(key)
            support.node(port).set(key, damage(good, i))  # directly on the primary, not through the connector
            damaged += 1
            got = conn.load(ns, [blocks[i]], size)[0]
            if got.loaded:
                wrong += got.payload != d.payload(0, blocks[i])
            assert got.status is LoadStatus.REJECTED, f"{name}: {got}"
            assert (got.reason, got.field) == (reason, field), f"{name}: {got.reason} {got.field}"
            rejected += 1
            reasons[got.reason] += 1
            # The reusable prefix ends at the damaged block: lookup counts keys,
            # the load's verdicts count what can be used.
            results = [b.loaded for b in conn.load(ns, blocks, size)]
            assert ns.reusable_prefix(results, 1).blocks == i
            # The engine recomputes the block and saves it again.
            d.save(conn, [blocks[i]])
            again = conn.load(ns, [blocks[i]], size)[0]
            assert again.loaded and again.payload == d.payload(0, blocks[i]), f"{name}: not recomputed"
            recomputed += 1

    report(f"cluster faults: {len(faults)} kinds of damage x {len(victims)} primaries = {damaged} values damaged "
           f"directly on the primary; rejected {rejected} "
           f"({', '.join(f'{k} {v}' for k, v in sorted(reasons.items()))}); recomputed and loaded {recomputed}; "
           f"wrong loads: {wrong}")
    assert rejected == damaged == recomputed and wrong == 0
    conn.purge(ns.tenant_prefix)
    conn.purge(foreign.ranks[0].tenant_prefix)


def downgrade(value: bytes, payload: bytes, keep_tag: bool = False) -> bytes:
    """A keyed value rewritten by someone without the secret: integrity mode none
    (byte 73), nonce and tag zeroed (unless keep_tag), the payload of its choice."""
    h = bytearray(value[:kvkey.envelope_size])
    h[73] = 0
    if not keep_tag:
        h[80:112] = bytes(32)
    h[48:56] = len(payload).to_bytes(8, "little")
    return bytes(h) + payload


def test_keyed_downgrade():
    conn = support.connector()
    secret = kvkey.TenantSecret(os.urandom(32))
    forged = rejected = wrong = 0
    reasons = collections.Counter()
    for check in ("required", "size_only"):
        d = Deployment(f"keyed-{check}", support.identity(support.tenant(f"keyed-{check}")), secret=secret,
                       payload_check=check)
        blocks = d.hashes(400, blocks=6)
        d.save(conn, blocks)
        ns, size = d.ranks[0], d.payload_size(0)
        client = conn.client
        variants = [
            ("attacker's bytes", lambda v, i: downgrade(v, bytes([i]) * size), "envelope.integrity_mode"),
            ("genuine bytes", lambda v, i: downgrade(v, v[kvkey.envelope_size:]), "envelope.integrity_mode"),
            ("tag kept", lambda v, i: downgrade(v, bytes(size), keep_tag=True), "envelope.nonce"),
        ]
        for i, (name, damage, field) in enumerate(variants):
            key = ns.store_key(blocks[i])
            port = support.owner_port(client, key)
            support.node(port).set(key, damage(support.node(port).get(key), i))
            forged += 1
            got = conn.load(ns, [blocks[i]], size)[0]
            wrong += got.loaded
            assert got.status is LoadStatus.REJECTED, f"{check}, {name}: {got}"
            assert got.field == field, f"{check}, {name}: {got.reason} {got.field}"
            reasons[f"{got.reason} {got.field}"] += 1
            rejected += 1
        # The untouched blocks still load.
        assert [b.loaded for b in conn.load(ns, blocks[3:], size)] == [True] * 3
        conn.purge(ns.tenant_prefix)
    report(f"cluster keyed: {forged} keyed values downgraded to integrity mode none (payload_check required and "
           f"size_only) rejected {rejected} "
           f"({', '.join(f'{k} {v}' for k, v in sorted(reasons.items()))}); wrong loads: {wrong}")
    assert rejected == forged and wrong == 0


def test_purge_and_epochs():
    conn = support.connector()
    names = [support.tenant(t) for t in ("purge-a", "purge-b", "purge-c")]
    deps = [Deployment(f"{t}/{dtype}", support.identity(t, dtype=dtype))
            for t in names for dtype in ("fp16", "fp8_e4m3")]
    for d in deps:
        for f in range(300, 306):
            d.save(conn, d.hashes(f))
    prefixes = [f"{kvkey.store_key_tag}{t}/" for t in names]
    before = [per_primary(conn, p) for p in prefixes]
    assert all(n > 0 for counts in before for n in counts), f"a tenant is missing on a primary: {before}"

    removed = conn.purge(prefixes[0])
    after = [per_primary(conn, p) for p in prefixes]
    assert removed == sum(before[0])
    assert after[0] == [0, 0, 0]
    assert after[1:] == before[1:]
    wrong = 0
    survivors = collections.Counter()
    for d in deps:
        for f in range(300, 306):
            c = d.load(conn, d.hashes(f))
            wrong += c["wrong"]
            survivors[d.ranks[0].identity.tenant] += c["exact"]
    assert survivors[names[0]] == 0
    assert survivors[names[1]] == survivors[names[2]] == 2 * 6 * 4

    # Epochs: after the rotation nothing of the old epoch is served, not even
    # an old object copied under a new key; purging the old epoch leaves the new.
    old = Deployment("epoch", support.identity(support.tenant("epochs"), tp=2))
    new = Deployment("epoch+1", support.identity(support.tenant("epochs"), tp=2, epoch=1))
    assert [ns.key_prefix for ns in new.ranks] == [ns.key_prefix for ns in rotate_epoch(old.ranks, 1)]
    assert [ns.root for ns in new.ranks] == [ns.root for ns in rotate_epoch(old.ranks, 1)]
    families = range(310, 318)
    for f in families:
        old.save(conn, old.hashes(f))
    new_hits = sum(conn.lookup(new.ranks, new.hashes(f)).prefix.blocks for f in families)
    new_loads = collections.Counter()
    for f in families:
        new_loads += new.load(conn, new.hashes(f))
    old_h, new_h = old.hashes(310)[0], new.hashes(310)[0]  # one block, hashed under each epoch
    conn.client.set(new.ranks[0].store_key(new_h), conn.client.get(old.ranks[0].store_key(old_h)))
    copied = conn.load(new.ranks[0], [new_h], new.payload_size(0))[0]
    assert (copied.reason, copied.field) == ("identity_mismatch", "model.weights_epoch")
    for f in families:
        new.save(conn, new.hashes(f))
    old_count, new_count = sum(per_primary(conn, old.ranks[0].key_prefix)), sum(per_primary(conn, new.ranks[0].key_prefix))
    purged_epoch = conn.purge(old.ranks[0].key_prefix)
    new_after = sum(per_primary(conn, new.ranks[0].key_prefix))
    new_exact = collections.Counter()
    for f in families:
        new_exact += new.load(conn, new.hashes(f))
    wrong += new_loads["wrong"] + new_exact["wrong"]

    report(f"cluster purge: tenants a / b / c had {' / '.join(str(sum(c)) for c in before)} objects "
           f"(per primary {before[0]} / {before[1]} / {before[2]}); purging a removed {removed}; after: "
           f"{' / '.join(str(sum(c)) for c in after)}; b and c still load {survivors[names[1]]} / "
           f"{survivors[names[2]]} blocks exactly; epoch 0 -> 1: {new_hits} hits and {new_loads['exact']} loads "
           f"from the old epoch (copied old object rejected: {copied.reason} {copied.field}); purging epoch 0 "
           f"removed {purged_epoch} of {old_count}, epoch 1 kept {new_after} of {new_count}; wrong loads: {wrong}")
    assert new_hits == 0 and new_loads["exact"] == 0 and new_loads["missing"] == len(families) * 4 * 2
    assert purged_epoch == old_count == len(families) * 4 * 2
    assert new_after == new_count and new_exact["exact"] == len(families) * 4 * 2
    assert wrong == 0
    for t in names + [support.tenant("epochs")]:
        conn.purge(f"{kvkey.store_key_tag}{t}/")


def test_purge_and_keys_take_any_bytes():
    """Keys that are not ASCII, not UTF-8, hold control bytes or glob specials are
    listed as the bytes they are and purged with the rest; nothing aborts part-way."""
    conn = support.connector()
    d = Deployment("bytes", support.identity(support.tenant("bytes")))
    families = range(330, 334)
    for f in families:
        d.save(conn, d.hashes(f))
    prefix = d.ranks[0].tenant_prefix
    planted = [prefix.encode() + suffix for suffix in (
        b"\xff\xfe not utf-8", "κλειδί-ключ".encode(), b"\x00\x01\x1b[31m", b"glob*?[x]\\", b"\x80" * 40)]
    for i, key in enumerate(planted):
        conn.client.set(key, b"planted %d" % i)
    listed = sorted(k for keys in conn.keys(prefix).values() for k in keys)
    saved = sorted(ns.store_key(h).encode() for f in families for h in d.hashes(f) for ns in d.ranks)
    assert all(isinstance(k, bytes) for k in listed)
    assert listed == sorted(saved + planted)
    assert conn.keys(prefix.encode()) == conn.keys(prefix)
    removed = conn.purge(prefix.encode() + b"\xff")  # a prefix that is not UTF-8 either
    assert removed == 1
    removed += conn.purge(prefix)
    report(f"cluster purge: {len(planted)} planted keys that are not plain ASCII among {len(saved)} objects; "
           f"purge removed {removed}")
    assert removed == len(saved) + len(planted)
    assert sum(per_primary(conn, prefix)) == 0
    assert all(conn.client.get(k) is None for k in planted)


def slot_owners(port: int) -> dict:
    """slot -> primary port, by one node's view."""
    out = {}
    for n in support.primaries(port):
        for lo, hi in n["slots"]:
            for s in range(lo, hi + 1):
                out[s] = n["port"]
    return out


def test_resharding():
    ports = sorted(support.cluster_nodes())
    conn = support.connector()
    d = Deployment("reshard", support.identity(support.tenant("reshard"), tp=2))
    families = range(400, 460)
    for f in families:
        d.save(conn, d.hashes(f))
    support.wait_until(lambda: subprocess.run(["redis-cli", "--cluster", "check", f"127.0.0.1:{ports[0]}"],
                                              capture_output=True, timeout=60).returncode == 0,
                       120, "redis-cli --cluster check to pass")
    before = slot_owners(ports[0])
    src, dst = sorted(support.primaries(ports[0]), key=lambda n: n["port"])[:2]
    keys = [k for f in families for k in d.keys(d.hashes(f))]
    moving = [k for k in keys if before[conn.client.keyslot(k)] == src["port"]]

    load = Workload(d, families, threads=3).start()
    support.wait_until(lambda: load.count() >= 30, 120, "30 operations before resharding")
    started = time.monotonic()
    slots = 2000
    res = subprocess.run(["redis-cli", "--cluster", "reshard", f"127.0.0.1:{src['port']}",
                          "--cluster-from", src["id"], "--cluster-to", dst["id"], "--cluster-slots", str(slots),
                          "--cluster-yes", "--cluster-pipeline", "10"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    finished = time.monotonic()
    support.wait_until(lambda: load.count(since=finished, ok_only=True) >= 30, 120, "30 operations after resharding")
    load.join()

    after = support.wait_until(
        lambda: (lambda o: o if sum(1 for s in o if o[s] != before[s]) == slots else None)(slot_owners(ports[0])),
        60, "every node to agree on the moved slots")
    moved = [k for k in keys if after[conn.client.keyslot(k)] != before[conn.client.keyslot(k)]]
    assert moved and set(moved) <= set(moving)
    on_dst = sum(support.node(dst["port"]).exists(k) for k in moved)
    fresh = support.connector()
    found = collections.Counter()
    for f in families:
        found += d.load(fresh, d.hashes(f))
    during = [kind for end, _, kind in load.ops if started <= end <= finished]
    errors = collections.Counter(kind for _, _, kind in load.ops if kind)
    wrong = load.wrong + found["wrong"]

    report(f"cluster resharding: {slots} slots moved from :{src['port']} to :{dst['port']} with redis-cli --cluster "
           f"reshard while 3 clients ran; operations {len(load.ops)} ({len(during)} during the move, "
           f"{load.loaded} blocks loaded); errors {sum(errors.values())} ({dict(errors)}); keys moved {len(moved)}, "
           f"on the new primary {on_dst}; all {len(keys)} keys loaded afterwards: {found['exact']} exact; "
           f"wrong loads: {wrong}")
    assert on_dst == len(moved)
    assert found["exact"] == len(keys)
    assert errors["moved"] == 0, "the store follows MOVED and ASK inside its calls"
    assert wrong == 0
    fresh.purge(d.ranks[0].tenant_prefix)


def test_failover():
    """Runs last: the killed primary stays down (the CI stage reaps it)."""
    nodes = support.cluster_nodes()
    conn = support.connector()
    live = sorted(p for p in nodes if support.alive(p))
    view = support.cluster_view(live[0])

    def replica_of(primary):
        for n in view:
            if n["master"] == primary["id"]:
                return n
        return None

    def in_sync(primary):
        r = replica_of(primary)
        if r is None:
            return False
        info = support.node(r["port"]).info("replication")
        return info.get("master_link_status") == "up"

    victim = support.wait_until(
        lambda: next((n for n in sorted(support.primaries(live[0]), key=lambda n: n["port"]) if in_sync(n)), None),
        120, "a primary with a replica in sync")
    replica = replica_of(victim)
    others = [p for p in live if p != victim["port"]]

    d = Deployment("failover", support.identity(support.tenant("failover"), tp=2))
    families = range(500, 540)
    for f in families:
        d.save(conn, d.hashes(f))
    initial = {k for f in families for k in d.keys(d.hashes(f))}
    on_victim = {k for k in initial if support.owner_port(conn.client, k) == victim["port"]}

    # KVKEY_CLUSTER_FORCE_FAILOVER=1 exercises the forced path: the replica
    # never starts an election by itself, so CLUSTER FAILOVER FORCE promotes it.
    election_wait_s = 30
    if os.environ.get("KVKEY_CLUSTER_FORCE_FAILOVER") == "1":
        support.node(replica["port"]).config_set("cluster-replica-no-failover", "yes")
        election_wait_s = 10

    load = Workload(d, families, threads=4).start()
    for k in initial:
        load.acknowledged.setdefault(k, None)
    support.wait_until(lambda: load.count() >= 60, 120, "60 operations before the kill")
    killed_at = time.monotonic()
    os.kill(nodes[victim["port"]], signal.SIGKILL)

    def promoted():
        try:
            return "master" in {n["port"]: n for n in support.cluster_view(replica["port"])}[replica["port"]]["flags"]
        except Exception:  # noqa: BLE001 - a node busy electing may not answer
            return False

    forced = False
    try:
        support.wait_until(promoted, election_wait_s, "the replica's promotion")
    except AssertionError:
        # No election in time (a very loaded machine): force it.
        support.node(replica["port"]).execute_command("CLUSTER FAILOVER FORCE")
        forced = True
        support.wait_until(promoted, 120, "the forced promotion")
    promoted_at = time.monotonic()
    support.wait_until(lambda: support.cluster_ok(others), 120, "cluster_state:ok on the surviving nodes")
    healed_at = time.monotonic()
    # Until the clients have completed 60 operations after the cluster healed
    # and after their last error.
    support.wait_until(lambda: load.count(since=max(healed_at, load.last_error()), ok_only=True) >= 60, 120,
                       "60 successful operations after the failover")
    load.join()

    recovered_at = max(healed_at, load.last_error())
    before = sum(1 for end, _, _ in load.ops if end < killed_at)
    during = [kind for end, _, kind in load.ops if killed_at <= end <= recovered_at]
    after = sum(1 for end, _, _ in load.ops if end > recovered_at)
    errors = collections.Counter(k for k in during if k)

    fresh = support.connector()
    lost = [k for k in load.acknowledged if not fresh.client.exists(k)]
    # conn's slot map is the one from before the kill (it has seen no error since).
    acked_on_victim = {k for k in load.acknowledged if support.owner_port(conn.client, k) == victim["port"]}
    final = collections.Counter()
    for f in load.families:  # the initial prompts and every prompt saved by all ranks
        final += d.load(fresh, load.hashes[f])
    wrong = load.wrong + final["wrong"]

    report(f"cluster failover: 4 clients; primary :{victim['port']} ({len(on_victim)} of {len(initial)} objects) "
           f"killed with SIGKILL; replica :{replica['port']} promoted {'by CLUSTER FAILOVER FORCE' if forced else 'by election'} "
           f"after {promoted_at - killed_at:.1f} s, cluster ok after {healed_at - killed_at:.1f} s, clients "
           f"recovered after {recovered_at - killed_at:.1f} s; operations before / during / after: {before} / "
           f"{len(during)} / {after}; errors during the window: {sum(errors.values())} ({dict(errors)}); "
           f"{load.loaded} blocks loaded; acknowledged writes lost: {len(lost)} of {len(load.acknowledged)} objects "
           f"({len(acked_on_victim)} of them on the killed primary); "
           f"wrong loads: {wrong}")
    assert wrong == 0
    assert after >= 60
    assert set(lost) <= acked_on_victim, "writes lost on a primary that did not fail"
    # A lost write is a miss: whatever survived loads exactly.
    assert final["exact"] + final["missing"] == len(load.families) * 4 * 2 and final["rejected"] == 0
    fresh.purge(d.ranks[0].tenant_prefix)
