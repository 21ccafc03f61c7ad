"""kvkey.testing.check_store: a conformance kit for store adapters and connectors.

``check_store(make_store)`` drives ``kvkey.Connector`` against stores made by
``make_store()`` through a matrix of faults: foreign objects under the right key (one
per identity field), an epoch bump, a cross-tenant read, keyed versus plain, header and
payload bit flips, torn, truncated, empty and non-kvkey values, transplanted headers and
swapped values, a value of another format version, a stale writer racing an epoch bump
and concurrent writers of one key. Damaged values are written with the store's own
``put``, as a broken or hostile writer would.

Every case must end with 0 wrong loads (a payload served, or bytes written into a
``load_into`` buffer, that is not what this deployment last saved for the block), 0
lookups that count a block whose header does not verify, and nothing lost (an intact
block that does not load, or a lookup that stops before it). Every case runs twice,
into one result: through ``save`` and ``load_into`` with buffers, then through the
zero-copy path (``save_from`` and ``load_into`` with ``kvkey.Slots`` in memory the store
registers), its errors marked ``zero-copy:``. See docs/python.md.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import hashlib
import importlib
import inspect
import os
import secrets
import threading
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import kvkey as kv
from .connector import Connector, Slots, _is_async as _is_async_method
from .stores import Store

__all__ = ["CaseResult", "Report", "check_store"]

_HEADER = kv.envelope_size
BLOCKS = 4  # blocks per prompt; faults hit block 2 unless a case says otherwise
TP = 2  # ranks of the deployment under test

# The case table, defined once in C++ (kvkey::testing::cases(), include/kvkey/testing.hpp):
# (name, scenario, damage, arg, field, keyed reader). Both kits run it.
_binding: Any = importlib.import_module("kvkey._kvkey")
CASES: List[Tuple[str, str, str, int, str, bool]] = list(_binding._check_store_cases())
# The fields of a case's report, in order (kvkey::testing::report_fields): CaseResult's.
REPORT_FIELDS: Tuple[str, ...] = tuple(_binding._check_store_report_fields)


@dataclasses.dataclass
class CaseResult:
    """The counts of one case of the matrix."""

    name: str
    lookups: int = 0  # lookup calls
    counted: int = 0  # blocks the lookups counted
    counted_rejected: int = 0  # blocks counted although a rank's header does not verify (must be 0)
    loaded: int = 0  # blocks loaded with the expected bytes (load and load_into)
    rejected: int = 0  # load_into results "rejected"
    missing: int = 0  # load_into results "missing"
    wrong_loads: int = 0  # payloads served that are not the deployment's, or buffers written (must be 0)
    lost: int = 0  # intact blocks not loaded, or not counted by a lookup (must be 0)
    reasons: "collections.Counter[str]" = dataclasses.field(default_factory=collections.Counter)
    errors: List[str] = dataclasses.field(default_factory=list)  # exceptions and failed expectations

    @property
    def ok(self) -> bool:
        return not (self.wrong_loads or self.counted_rejected or self.lost or self.errors)

    def __str__(self) -> str:
        why = ", ".join(f"{k}: {v}" for k, v in sorted(self.reasons.items()))
        line = (f"{'ok  ' if self.ok else 'FAIL'} {self.name}: lookups {self.lookups} (counted {self.counted}, "
                f"rejected headers counted {self.counted_rejected}); loaded {self.loaded}, rejected {self.rejected}"
                f"{f' ({why})' if why else ''}, missing {self.missing}; wrong loads {self.wrong_loads}; "
                f"lost {self.lost}")
        return "\n".join([line] + [f"       error: {e}" for e in self.errors])


@dataclasses.dataclass
class Report:
    """What ``check_store`` found: ``ok`` when every case is."""

    cases: List[CaseResult]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.cases)

    @property
    def wrong_loads(self) -> int:
        return sum(c.wrong_loads for c in self.cases)

    @property
    def counted_rejected(self) -> int:
        return sum(c.counted_rejected for c in self.cases)

    @property
    def lost(self) -> int:
        return sum(c.lost for c in self.cases)

    @property
    def failed(self) -> List[CaseResult]:
        return [c for c in self.cases if not c.ok]

    def case(self, name: str) -> CaseResult:
        return next(c for c in self.cases if c.name == name)

    def __str__(self) -> str:
        head = (f"check_store: {'ok' if self.ok else 'FAILED'}: {len(self.cases)} cases, "
                f"{len(self.failed)} failed; wrong loads {self.wrong_loads}, lookups counting a rejected header "
                f"{self.counted_rejected}, intact blocks lost {self.lost}")
        return "\n".join([head] + ["  " + str(c) for c in self.cases])


# ---- deployments ----------------------------------------------------------------------------

_MakeConnector = Callable[..., Any]


def _identity(tenant: str, rank: int, changes: Dict[str, Any]) -> kv.Identity:
    i = kv.Identity(
        tenant=tenant,
        model=kv.Model(name="kvkey-check", revision="0123456789abcdef0123456789abcdef01234567"),
        kv=kv.Kv(dtype=kv.KvDtype.int8,
                 quant=kv.Quant(scheme="per_token_head", group_size=8, scale_dtype=kv.KvDtype.fp16),
                 block_size=4, num_layers=2, num_kv_heads=2, head_dim=8, layout="kvkey.check.v1"),
        shard=kv.Shard(tp_size=TP, tp_rank=rank))
    for path, value in changes.items():
        target: Any = i
        parts = path.split(".")
        for part in parts[:-1]:
            target = getattr(target, part)
        setattr(target, parts[-1], value)
    return i


class _Deployment:
    """The namespaces of one deployment's ranks and the payloads it writes. A payload
    depends on the namespace's root, the rank's slice, the block and a version, so
    another deployment's, rank's, block's or version's bytes never match."""

    def __init__(self, tenant: str, changes: Optional[Dict[str, Any]] = None,
                 secret: Optional[kv.TenantSecret] = None, ranks: int = TP, confidential: bool = False) -> None:
        changes = dict(changes or {})
        confidential = confidential and secret is not None  # the confidential passes: keyed deployments only
        self.ranks = [kv.KeyNamespace(_identity(tenant, r, changes), secret=secret, confidential=confidential)
                      for r in range(ranks)]

    def with_epoch(self, epoch: int) -> "_Deployment":
        """The same deployment under another weights epoch (``ns.with_epoch``)."""
        d = _Deployment.__new__(_Deployment)
        d.ranks = [ns.with_epoch(epoch) for ns in self.ranks]
        return d

    def payload(self, rank: int, block: bytes, version: int = 0) -> bytes:
        ns = self.ranks[rank]
        s = ns.slice
        size = 256 * (s.kv_head_end - s.kv_head_begin) * (s.layer_end - s.layer_begin)
        seed = b"%s|%d|%d|%s|%d" % (ns.root, s.kv_head_begin, s.layer_begin, bytes(block), version)
        return hashlib.shake_256(seed).digest(size)

    def hashes(self, family: int = 0) -> List[bytes]:
        bs = self.ranks[0].block_size
        return self.ranks[0].block_hashes([(family * 7919 + t * 104729) % 65536 for t in range(BLOCKS * bs)])

    def tenant_prefix(self) -> str:
        return self.ranks[0].tenant_prefix


class _Case:
    """One case: its store, connectors, the bytes each (rank, block) may load as, and
    the checks."""

    def __init__(self, name: str, make_store: Callable[[], Store], make_connector: _MakeConnector,
                 tenant: str, zero_copy: bool = False, confidential: bool = False) -> None:
        self.result = CaseResult(name)
        self.store = make_store()
        self.zero_copy = zero_copy  # saves and load_into through kvkey.Slots
        self.confidential = confidential  # every keyed deployment confidential (format v4)
        self._make_connector = make_connector
        self.tenant = tenant
        self.tenants: Set[str] = set()
        # (key) -> payloads that may be loaded from it; absent or empty: nothing may.
        self.allowed: Dict[str, Set[bytes]] = {}

    def deployment(self, suffix: str = "", changes: Optional[Dict[str, Any]] = None,
                   secret: Optional[kv.TenantSecret] = None, ranks: int = TP) -> _Deployment:
        d = _Deployment(self.tenant + suffix, changes, secret, ranks, self.confidential)
        self.tenants.add(d.tenant_prefix())
        return d

    def connector(self, d: _Deployment) -> Any:
        return self._make_connector(self.store, d.ranks)

    def save(self, conn: Any, d: _Deployment, hashes: Sequence[bytes], version: int = 0,
             ranks: Optional[Sequence[int]] = None) -> None:
        """Saves through the connector; what it saved becomes the only bytes allowed."""
        for r in (range(len(d.ranks)) if ranks is None else ranks):
            payloads = [d.payload(r, h, version) for h in hashes]
            if self.zero_copy and hashes:
                with _slots(self.store, len(hashes), len(payloads[0])) as slots:
                    for i, p in enumerate(payloads):
                        slots.payload(i)[:] = p
                    if hasattr(conn, "save_from"):
                        saved = conn.save_from(hashes, slots, rank=r)
                    else:  # a connector under test without the zero-copy path: the slots' payloads
                        saved = conn.save(hashes, [slots.payload(i) for i in range(len(hashes))], rank=r)
            else:
                saved = conn.save(hashes, payloads, rank=r)
            if saved != len(hashes):
                self.result.errors.append(f"save stored {saved} of {len(hashes)} values")
            for h, p in zip(hashes, payloads):
                self.allowed[d.ranks[r].store_key(h)] = {p}

    def value(self, ns: kv.KeyNamespace, h: bytes) -> bytes:
        v = self.store.get([ns.store_key(h)])[0]
        if v is None:
            raise AssertionError(f"no value under {ns.store_key(h)} right after it was saved")
        return bytes(v)

    def put_raw(self, key: str, value: Optional[bytes]) -> None:
        """Damage: a value written by the store's put, past the connector. A store that
        refuses the write (its put reports False for the key, as Mooncake does for an
        empty value) keeps the value it held, and that value may still load."""
        if value is None and hasattr(self.store, "delete"):
            self.store.delete([key])
        else:
            stored = self.store.put([key], [b"" if value is None else value])  # no delete: an empty value
            if stored is not None and not list(stored)[0]:
                return
        self.allowed[key] = set()

    def check(self, conn: Any, d: _Deployment, hashes: Sequence[bytes], *, strict: bool = True) -> None:
        """A lookup and a load and a load_into on every rank, checked against what may be
        loaded. ``strict``: nothing writes meanwhile, so the lookup must count exactly
        the leading blocks whose headers verify, and intact blocks must load."""
        r = self.result
        hashes = list(hashes)
        counted = conn.lookup(hashes)
        r.lookups += 1
        r.counted += counted
        # The oracle: read every value and check its header with the namespace itself.
        keys = [ns.store_key(h) for h in hashes for ns in d.ranks]
        values = list(self.store.get(keys))
        verifies, complete = [], []  # the header verifies; and the value's length agrees with it
        for b, h in enumerate(hashes):
            good = whole = True
            for k, ns in enumerate(d.ranks):
                v = values[b * len(d.ranks) + k]
                ok = v is not None and bool(ns.verify_header(memoryview(v)[:_HEADER], h).ok)
                good = good and ok
                whole = whole and ok and v is not None and ns.verify(
                    memoryview(v)[:_HEADER], h, max(0, len(v) - _HEADER)).reason != "size_mismatch"
            verifies.append(good)
            complete.append(whole)
        if strict:
            r.counted_rejected += sum(1 for b in range(min(counted, len(hashes))) if not verifies[b])
            # A lookup may also stop at a value whose length disagrees with its header.
            expected = next((b for b, ok in enumerate(complete) if not ok), len(hashes))
            if counted < expected:
                r.lost += expected - counted
                r.errors.append(f"lookup counted {counted} blocks; {expected} have headers that verify")
        # Payloads served by load are checked only after every other read of this check:
        # what was served must stay what was verified, whatever the store does with its
        # buffers afterwards (a store that recycles them under a zero-copy connector fails).
        served: List[Tuple[str, Any]] = []
        in_slots: List[Tuple[Slots, int, bytes]] = []
        for rank, ns in enumerate(d.ranks):
            rank_keys = [ns.store_key(h) for h in hashes]
            for key, p in zip(rank_keys, conn.load(hashes, rank=rank)):
                allowed = self.allowed.get(key, set())
                if p is None:
                    if strict and allowed:
                        r.lost += 1
                else:
                    served.append((key, p))
            sizes = [len(next(iter(self.allowed[k]))) if self.allowed.get(k) else len(d.payload(rank, h))
                     for k, h in zip(rank_keys, hashes)]
            sentinel = [bytes([0xA5]) * n for n in sizes]
            buffers: List[Any] = [bytearray(s) for s in sentinel]
            if self.zero_copy and hashes:
                # The zero-copy load: a loaded slot's payload is checked now, and again
                # after the last read (the store may not write into it after the call).
                slots = _slots(self.store, len(hashes), len(d.payload(rank, hashes[0])))
                buffers = [slots.payload(i) for i in range(len(hashes))]
                # A connector under test without the zero-copy path loads into the slots' payloads.
                results = conn.load_into(hashes, slots if hasattr(conn, "save_from") else buffers, rank=rank)
                in_slots.extend((slots, i, bytes(slots.payload(i))) for i, res in enumerate(results) if res.loaded)
            else:
                results = conn.load_into(hashes, buffers, rank=rank)
            for key, buf, before, res in zip(rank_keys, buffers, sentinel, results):
                allowed = self.allowed.get(key, set())
                if res.loaded:
                    if bytes(buf) in allowed:
                        r.loaded += 1
                    else:
                        r.wrong_loads += 1
                    continue
                if not self.zero_copy and bytes(buf) != before:
                    r.wrong_loads += 1  # unverified bytes written into the caller's buffer (a slot may hold them)
                if res.status == "rejected":
                    r.rejected += 1
                    r.reasons[f"{res.verdict.reason} {res.verdict.field}"] += 1
                else:
                    r.missing += 1
                if strict and allowed:
                    r.lost += 1
        conn.lookup(hashes)  # one more read of every rank's values
        for key, p in served:
            if bytes(p) in self.allowed.get(key, set()):
                r.loaded += 1
            else:
                r.wrong_loads += 1
        for slots, i, loaded in in_slots:  # written after the load returned: not what was verified
            if bytes(slots.payload(i)) != loaded:
                r.wrong_loads += 1
        for slots in {id(s): s for s, _, _ in in_slots}.values():
            slots.close()

    def cleanup(self) -> None:
        for prefix in sorted(self.tenants):
            if not (hasattr(self.store, "scan_prefix") and hasattr(self.store, "delete")):
                return  # a store with only get and put: its values stay
            try:
                keys = list(self.store.scan_prefix(prefix))
            except NotImplementedError:  # a store that cannot list keys: its values stay
                return
            if keys:
                self.store.delete(keys)
            left = list(self.store.scan_prefix(prefix))
            if left:
                self.result.errors.append(f"delete left {len(left)} keys under {prefix}")


# ---- the matrix -----------------------------------------------------------------------------

# A damage hits one rank (every case runs it on each rank in turn).
_Damage = Callable[["_Case", _Deployment, List[bytes], int], None]
_Change = Callable[[bytes, "_Case", _Deployment, List[bytes], int], Optional[bytes]]

# The value each identity field takes in its foreign writer's deployment (the
# C++ kit's change_field). Which fields have a foreign case comes from the
# identity's field table (kvkey::testing::foreign_fields, through the binding):
# a field added there without a value here fails at import, naming it.
_FOREIGN_VALUES: Dict[str, Any] = {
    "model.name": "kvkey-check-other",
    "model.revision": "fedcba9876543210fedcba9876543210fedcba98",
    "model.weights_epoch": 1,
    "model.weights_fingerprint": kv.fingerprint(b"other weights"),
    "model.positional_fingerprint": kv.fingerprint(b"rope x4"),
    "kv.dtype": kv.KvDtype.uint8,
    "kv.quant.scheme": "per_token",
    "kv.quant.group_size": 4,
    "kv.quant.scale_dtype": kv.KvDtype.bf16,
    "kv.quant.zero_point": True,
    "kv.quant.scales_fingerprint": kv.fingerprint(b"scales"),
    "kv.block_size": 8,
    "kv.num_layers": 3,
    "kv.num_kv_heads": 4,
    "kv.head_dim": 16,
    "kv.layout": "kvkey.check.v2",
    "kv.mla": True,
    "shard.tp_size": 1,
    "adapter": kv.Adapter("lora-a", kv.fingerprint(b"lora-a weights")),
}

# The identity fields a foreign writer differs in, in the case table's order.
FOREIGN_FIELDS: Tuple[str, ...] = tuple(_binding._check_store_foreign_fields)


def _field_changes() -> List[Tuple[str, Dict[str, Any]]]:
    missing = [f for f in FOREIGN_FIELDS if f != "tenant" and f not in _FOREIGN_VALUES]
    if missing:
        raise RuntimeError("kvkey.testing: no foreign value for identity field(s) " + ", ".join(missing))
    # tenant: another tenant, see _foreign
    return [(f, {} if f == "tenant" else {f: _FOREIGN_VALUES[f]}) for f in FOREIGN_FIELDS]


FIELD_CHANGES: List[Tuple[str, Dict[str, Any]]] = _field_changes()


def _foreign(field: str, changes: Dict[str, Any]) -> _Damage:
    """Another deployment's value for the same block hash, written under our key."""

    def damage(case: _Case, d: _Deployment, hashes: List[bytes], rank: int) -> None:
        suffix = "-x" if field == "tenant" else ""
        ch = dict(changes)
        if field == "shard.tp_size":
            other = case.deployment(suffix, ch, ranks=1)
        else:
            other = case.deployment(suffix, ch)
        h, r = hashes[2], min(rank, len(other.ranks) - 1)
        case.put_raw(d.ranks[rank].store_key(h), other.ranks[r].seal_value(h, other.payload(r, h)))

    return damage


def _rewrite(change: _Change, block: int = 2) -> _Damage:
    def damage(case: _Case, d: _Deployment, hashes: List[bytes], rank: int) -> None:
        ns = d.ranks[rank]
        good = case.value(ns, hashes[block])
        case.put_raw(ns.store_key(hashes[block]), change(good, case, d, hashes, rank))

    return damage


def _flip(offset: int) -> _Change:
    def change(v: bytes, case: _Case, d: _Deployment, hashes: List[bytes], rank: int) -> bytes:
        at = offset if offset >= 0 else len(v) + offset
        return v[:at] + bytes([v[at] ^ 0x04]) + v[at + 1:]

    return change


def _torn(cut: int) -> _Change:
    """The first ``cut`` bytes of a newer value of the block, the rest of the old one."""

    def change(v: bytes, case: _Case, d: _Deployment, hashes: List[bytes], rank: int) -> bytes:
        newer = d.ranks[rank].seal_value(hashes[2], d.payload(rank, hashes[2], 3))
        at = cut if cut >= 0 else len(v) + cut
        return newer[:at] + v[at:]

    return change


def _transplant(case: _Case, d: _Deployment, hashes: List[bytes], rank: int) -> None:
    """Block 3's header with block 2's payload under block 2's key (this rank), and this
    rank's header of block 2 with the next rank's payload under the next rank's key."""
    ns0, ns1 = d.ranks[rank], d.ranks[(rank + 1) % len(d.ranks)]
    v2, v3, r1 = case.value(ns0, hashes[2]), case.value(ns0, hashes[3]), case.value(ns1, hashes[2])
    case.put_raw(ns0.store_key(hashes[2]), v3[:_HEADER] + v2[_HEADER:])
    case.put_raw(ns1.store_key(hashes[2]), v2[:_HEADER] + r1[_HEADER:])


def _transplant_payload(case: _Case, d: _Deployment, hashes: List[bytes], rank: int) -> None:
    """Block 2's header with block 3's payload (of the same size) under block 2's key:
    the header verifies, the bytes do not."""
    ns = d.ranks[rank]
    v2, v3 = case.value(ns, hashes[2]), case.value(ns, hashes[3])
    case.put_raw(ns.store_key(hashes[2]), v2[:_HEADER] + v3[_HEADER:])


def _swap_blocks(case: _Case, d: _Deployment, hashes: List[bytes], rank: int) -> None:
    ns = d.ranks[rank]
    v2, v3 = case.value(ns, hashes[2]), case.value(ns, hashes[3])
    case.put_raw(ns.store_key(hashes[2]), v3)
    case.put_raw(ns.store_key(hashes[3]), v2)


def _swap_ranks(case: _Case, d: _Deployment, hashes: List[bytes], rank: int) -> None:
    ns0, ns1 = d.ranks[rank], d.ranks[(rank + 1) % len(d.ranks)]
    a, b = case.value(ns0, hashes[2]), case.value(ns1, hashes[2])
    case.put_raw(ns0.store_key(hashes[2]), b)
    case.put_raw(ns1.store_key(hashes[2]), a)


def _version(version: int) -> _Change:
    """The value with another format version in its header (offset 8, u16le)."""

    def change(v: bytes, case: _Case, d: _Deployment, hashes: List[bytes], rank: int) -> bytes:
        return v[:8] + version.to_bytes(2, "little") + v[10:]

    return change


def _damage(kind: str, arg: int, field: str, keyed: bool) -> _Damage:
    """The Python side of the damage named ``kind`` in the case table (kvkey/testing.hpp)."""
    changes = dict(FIELD_CHANGES)
    rewrites: Dict[str, Callable[[], _Change]] = {
        "other_rank": lambda: lambda v, c, d, hs, r: c.value(d.ranks[(r + 1) % len(d.ranks)], hs[2]),
        "flip": lambda: _flip(arg),
        "torn": lambda: _torn(arg),
        "cut": lambda: lambda v, *a: v[:arg],
        "extend": lambda: lambda v, *a: v + b"\0",
        "empty": lambda: lambda v, *a: b"",
        "random_bytes": lambda: lambda v, *a: os.urandom(len(v)),
        "text": lambda: lambda v, *a: b"not a kvkey value",
        "payload_only": lambda: lambda v, *a: v[_HEADER:],
        "deleted": lambda: lambda v, *a: None,
        "version": lambda: _version(arg),
    }
    if kind in rewrites:
        return _rewrite(rewrites[kind]())
    others: Dict[str, Callable[[], _Damage]] = {
        "foreign": lambda: _foreign(field, changes[field]),
        "transplant_header": lambda: _transplant,
        "transplant_payload": lambda: _transplant_payload,
        "swap_blocks": lambda: _swap_blocks,
        "swap_ranks": lambda: _swap_ranks,
        "plain_value": lambda: _keyed_mix(reader_keyed=True),
        "keyed_value": lambda: _keyed_mix(reader_keyed=keyed, other_secret=keyed),
    }
    return others[kind]()


def _keyed_mix(reader_keyed: bool, other_secret: bool = False) -> _Damage:
    def damage(case: _Case, d: _Deployment, hashes: List[bytes], rank: int) -> None:
        if other_secret or not reader_keyed:
            other = case.deployment("", secret=kv.TenantSecret(secrets.token_bytes(32)))
        else:
            other = case.deployment("")
        h = hashes[2]
        case.put_raw(d.ranks[rank].store_key(h), other.ranks[rank].seal_value(h, other.payload(rank, h)))

    return damage


def _run_fault(case: _Case, damage: _Damage, keyed: bool) -> None:
    """The damage on each rank in turn, each time on a fresh deployment."""
    for rank in range(TP):
        d = case.deployment(secret=kv.TenantSecret(secrets.token_bytes(32)) if keyed else None)
        conn = case.connector(d)
        hashes = d.hashes(family=rank)  # keys of their own for each rank's turn
        case.save(conn, d, hashes)
        case.check(conn, d, hashes)  # all intact
        damage(case, d, hashes, rank)
        case.check(conn, d, hashes)
        case.save(conn, d, hashes, version=1)  # the engine recomputes and saves again
        case.check(conn, d, hashes)


def _epoch_bump(case: _Case) -> None:
    """After a rotation nothing of the old epoch is served, not even an old value
    copied under a new key; a keyed namespace keeps its secret."""
    d = case.deployment(secret=kv.TenantSecret(secrets.token_bytes(32)))
    conn = case.connector(d)
    hashes = d.hashes()
    case.save(conn, d, hashes)
    new = d.with_epoch(1)
    if not all(ns.keyed for ns in new.ranks):
        case.result.errors.append("with_epoch dropped the tenant secret")
    rotated = conn.with_epoch(1) if hasattr(conn, "with_epoch") else case.connector(new)
    new_hashes = new.hashes()
    case.check(rotated, new, new_hashes)
    for r, (old_ns, new_ns) in enumerate(zip(d.ranks, new.ranks)):
        for old_h, new_h in zip(hashes, new_hashes):
            case.put_raw(new_ns.store_key(new_h), case.value(old_ns, old_h))
    case.check(rotated, new, new_hashes)
    case.save(rotated, new, new_hashes, version=1)
    case.check(rotated, new, new_hashes)
    case.check(conn, d, hashes)  # the old epoch, for readers not yet rotated


def _cross_tenant(case: _Case) -> None:
    a, b = case.deployment("-a"), case.deployment("-b")
    ca, cb = case.connector(a), case.connector(b)
    ha, hb = a.hashes(), b.hashes()
    case.save(cb, b, hb)
    case.check(ca, a, ha)  # nothing of b's is reachable under a's keys
    case.check(ca, a, hb)  # not even with b's block hashes
    for r in range(TP):
        for x, y in zip(ha, hb):
            case.put_raw(a.ranks[r].store_key(x), case.value(b.ranks[r], y))
    case.check(ca, a, ha)
    case.save(ca, a, ha)
    case.check(ca, a, ha)
    case.check(cb, b, hb)


def _threads(targets: Sequence[Callable[[], None]], case: _Case) -> None:
    errors: List[str] = []

    def wrap(f: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                f()
            except Exception:  # noqa: BLE001 - reported in the case
                errors.append(traceback.format_exc(limit=3))
        return run

    threads = [threading.Thread(target=wrap(t), daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    case.result.errors.extend(errors)


def _concurrent_writers(case: _Case, rounds: int = 40) -> None:
    """Four writers of one key (three of this deployment with other payloads, one of
    another tenant) while a reader loads: every load is one writer's complete bytes."""
    d, other = case.deployment(), case.deployment("-x")
    conn = case.connector(d)
    hashes = d.hashes()
    h = hashes[0]
    key = d.ranks[0].store_key(h)
    case.save(conn, d, hashes)
    own = {d.payload(0, h, v) for v in (0, 1, 2, 3)}
    case.allowed[key] = set(own)
    done = threading.Event()

    def writer(v: int) -> Callable[[], None]:
        def run() -> None:
            c = case.connector(d)
            for _ in range(rounds):
                c.save([h], [d.payload(0, h, v)])
        return run

    def foreign() -> None:
        value = other.ranks[0].seal_value(h, other.payload(0, h))
        for _ in range(rounds):
            case.store.put([key], [value])

    def reader() -> None:
        c = case.connector(d)
        while not done.is_set():
            case.check(c, d, hashes, strict=False)

    def writers() -> None:
        _threads([writer(1), writer(2), writer(3), foreign], case)
        done.set()

    _threads([writers, reader], case)
    case.save(conn, d, [h], version=3, ranks=[0])
    case.check(conn, d, hashes)


def _stale_writer(case: _Case, rounds: int = 40) -> None:
    """A writer still on epoch 0 keeps saving while the deployment moves to epoch 1,
    and one seals with the old namespace under the new keys: readers of either epoch
    load only their own epoch's bytes."""
    old = case.deployment()
    new = old.with_epoch(1)
    old_conn, new_conn = case.connector(old), case.connector(new)
    oh, nh = old.hashes(), new.hashes()
    case.save(old_conn, old, oh)
    done = threading.Event()

    def stale() -> None:
        c = case.connector(old)
        for i in range(rounds):
            c.save(oh, [old.payload(0, h, i % 2) for h in oh], rank=0)
            keys = [new.ranks[0].store_key(h) for h in nh]
            case.store.put(keys, [old.ranks[0].seal_value(h, old.payload(0, h)) for h in nh])

    def fresh() -> None:
        c = case.connector(new)
        for i in range(rounds):
            c.save(nh, [new.payload(0, h, i % 2) for h in nh], rank=0)

    def reader() -> None:
        while not done.is_set():
            case.check(new_conn, new, nh, strict=False)

    for h in nh:
        case.allowed[new.ranks[0].store_key(h)] = {new.payload(0, h, 0), new.payload(0, h, 1)}
    for h in oh:
        case.allowed[old.ranks[0].store_key(h)] = {old.payload(0, h, 0), old.payload(0, h, 1)}

    def writers() -> None:
        _threads([stale, fresh], case)
        done.set()

    _threads([writers, reader], case)
    case.check(old_conn, old, oh, strict=False)
    case.save(new_conn, new, nh, version=2)
    case.check(new_conn, new, nh)


def _baseline(case: _Case, keyed: bool) -> None:
    d = case.deployment(secret=kv.TenantSecret(secrets.token_bytes(32)) if keyed else None)
    conn = case.connector(d)
    hashes = d.hashes()
    case.check(conn, d, hashes)  # nothing saved yet
    case.save(conn, d, hashes)
    case.check(conn, d, hashes)
    case.save(conn, d, hashes, version=1)  # overwritten: only the newer bytes may load
    case.check(conn, d, hashes)


class _Loop:
    """An event loop in a thread of its own, for the async stores and connectors."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, awaitable: Any) -> Any:
        async def wrapped() -> Any:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(wrapped(), self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


def _is_async(store: Any) -> bool:
    return any(_is_async_method(getattr(store, m, None)) for m in ("get", "put"))


class _SyncStore:
    """An async store's methods run to completion on the kit's loop (the kit's own reads
    and damaging writes); ``inner`` is the async store the connector under test uses."""

    def __init__(self, inner: Any, loop: _Loop) -> None:
        self.inner, self._loop = inner, loop
        for name in ("get", "get_prefix", "put", "exists", "delete"):
            method = getattr(inner, name, None)
            if method is not None:
                setattr(self, name, functools.partial(self._call, method))
        if hasattr(inner, "scan_prefix"):
            self.scan_prefix = self._scan

    def _call(self, method: Callable[..., Any], *args: Any) -> Any:
        result = method(*args)
        return self._loop.run(result) if inspect.isawaitable(result) else result

    def _scan(self, prefix: str) -> Any:
        async def collect() -> List[str]:
            return [k async for k in self.inner.scan_prefix(prefix)]

        return iter(self._loop.run(collect()))


class _SyncAio:
    """A kvkey.aio.Connector driven from the kit's threads: each call awaited on the loop."""

    def __init__(self, conn: Any, loop: _Loop) -> None:
        self._conn, self._loop = conn, loop

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._conn, name)
        if name == "with_epoch":
            return lambda epoch: _SyncAio(method(epoch), self._loop)
        if not inspect.iscoroutinefunction(method):
            return method
        return lambda *a, **k: self._loop.run(method(*a, **k))


def check_store(make_store: Callable[[], Store], *, make_connector: Optional[_MakeConnector] = None,
                cases: Optional[Sequence[str]] = None) -> Report:
    """Runs the fault matrix against stores from ``make_store()`` (called once per case;
    a store on a shared server is fine: every case uses tenants of its own and removes
    its keys at the end). ``make_connector(store, namespaces)`` builds the connector
    under test (default ``kvkey.Connector``). ``cases``: run only the cases whose name
    contains one of these strings. Returns a ``Report``; never raises for what a case
    finds (an exception inside a case is one of its errors).

    An async store (coroutine ``get`` / ``put``, e.g. ``kvkey.stores.aio.RedisStore``) is
    run on an event loop of the kit's own, made inside it (make_store is called on
    that loop's thread), and the connector under test is ``kvkey.aio.Connector`` (or
    ``make_connector(store, namespaces)`` returning one), driven from the kit's threads."""
    if _is_async(make_store()):
        return _check_async_store(make_store, make_connector, cases)
    connect = make_connector or (lambda store, ranks: Connector(store, ranks))
    return _check(make_store, connect, cases)


def _check_async_store(make_store: Callable[[], Any], make_connector: Optional[_MakeConnector],
                       cases: Optional[Sequence[str]]) -> Report:
    from . import aio  # noqa: PLC0415 - asyncio only where an async store is checked

    loop = _Loop()
    try:
        async def made() -> Any:
            return make_store()

        def make() -> Any:
            return _SyncStore(loop.run(made()), loop)

        def connect(store: Any, ranks: Any) -> Any:
            inner = store.inner if isinstance(store, _SyncStore) else store
            conn = make_connector(inner, ranks) if make_connector else aio.Connector(inner, ranks)
            return _SyncAio(conn, loop)

        return _check(make, connect, cases)
    finally:
        loop.close()


def _check(make_store: Callable[[], Any], connect: _MakeConnector, cases: Optional[Sequence[str]]) -> Report:
    run = secrets.token_hex(3)
    scenarios: Dict[str, Callable[..., Callable[[_Case], None]]] = {
        "baseline": lambda keyed, **_: lambda c: _baseline(c, keyed),
        "fault": lambda keyed, damage, arg, field: functools.partial(
            _run_fault, damage=_damage(damage, arg, field, keyed), keyed=keyed),
        "epoch_bump": lambda **_: _epoch_bump,
        "cross_tenant": lambda **_: _cross_tenant,
        "stale_writer": lambda **_: _stale_writer,
        "concurrent_writers": lambda **_: _concurrent_writers,
    }
    plan: List[Tuple[str, Callable[[_Case], None], bool]] = [
        (name, scenarios[scenario](keyed=keyed, damage=damage, arg=arg, field=field), keyed)
        for name, scenario, damage, arg, field, keyed in CASES]
    results = []
    for i, (name, body, keyed) in enumerate(plan):
        if cases is not None and not any(s in name for s in cases):
            continue
        result = CaseResult(name)
        # Every case twice (buffers, then the zero-copy path, Slots); a case with a
        # keyed reader twice more with every keyed deployment confidential.
        passes = [(z, c) for c in (False, True) for z in (False, True) if keyed or not c]
        for zero_copy, confidential in passes:
            tag = ("z" if zero_copy else "") + ("c" if confidential else "")
            case = _Case(name, make_store, connect, f"kvkey-check-{run}-{i}{tag}", zero_copy, confidential)
            try:
                body(case)
            except Exception as e:  # noqa: BLE001 - reported, never raised
                case.result.errors.append(f"{type(e).__name__}: {e}")
            try:
                case.cleanup()
            except Exception as e:  # noqa: BLE001
                case.result.errors.append(f"cleanup: {type(e).__name__}: {e}")
            _add(result, case.result, ("confidential: " if confidential else "") + ("zero-copy: " if zero_copy else ""))
        results.append(result)
    return Report(results)


def _add(into: CaseResult, r: CaseResult, mark: str) -> None:
    for f in dataclasses.fields(CaseResult):
        if f.name in ("name", "reasons", "errors"):
            continue
        setattr(into, f.name, getattr(into, f.name) + getattr(r, f.name))
    into.reasons.update(r.reasons)
    into.errors.extend(mark + e for e in r.errors)


def _slots(store: Any, count: int, payload_size: int) -> Slots:
    """Slots in memory the store registers (an async store's own store: ``inner``)."""
    return Slots(getattr(store, "inner", store), count, payload_size)
