"""The two ways of keying the soak's traffic, each with the same wrong-load oracle.

- LegacyEngine keys blocks the lmdeploy way (kvkey.compat.lmdeploy: model name,
  KV-head rank, a hash of the tokens and the adapter's name) and stores the raw
  KV bytes. Its load reads `size` bytes into the block's buffer, as a get into a
  registered buffer does: a value shorter than the buffer is a failed read (a
  miss), a longer one fills it.
- KvkeyEngine keys blocks with kvkey (one KeyNamespace per rank) and goes
  through kvkey.Connector, which verifies what it looks up and loads and
  records into a kvkey.Metrics.

Both look up the longest cached prefix on both ranks, load it, use the blocks
up to the first one that fails to load, and compute and save the rest. The
oracle compares every block the engine uses with traffic.expected_payload of
the request's lineage: a difference is a wrong load, attributed to the first
lineage component in which the writer differed (or to a store fault).
"""

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

import kvkey
from kvkey.compat import lmdeploy as lm

import traffic as tr
from traffic import BLOCK_SIZE, TP_SIZE, Fault, Lineage, Request

_FAULT = "store fault"


@dataclasses.dataclass
class Served:
    """What one request did."""

    blocks: int = 0  # full blocks in the prompt
    counted: int = 0  # blocks the lookup counted as reusable
    used: int = 0  # blocks loaded and used
    wrong: int = 0  # used (block, rank) payloads that differ from the oracle's
    causes: Dict[str, int] = dataclasses.field(default_factory=dict)


class _Oracle:
    """Who wrote each key (a lineage, or a store fault), to say why a load was wrong."""

    def __init__(self) -> None:
        self.writer: Dict[str, Optional[Lineage]] = {}

    def check(self, served: Served, key: str, reader: Lineage, digest: bytes, payload: bytes) -> None:
        if bytes(payload) == tr.expected_payload(reader, digest):
            return
        served.wrong += 1
        writer = self.writer.get(key)
        cause = _FAULT if writer is None else (reader.differs_in(writer) or _FAULT)
        served.causes[cause] = served.causes.get(cause, 0) + 1


def _damage(fault: Fault, value: bytes, other: bytes, header: int) -> bytes:
    """The value after a bit flip, tear or cut (a foreign object is written whole)."""
    n = len(value)
    if fault.kind == "bit_flip":  # in the KV bytes (anywhere in a value already cut shorter than a header)
        if n == 0:
            return value
        i = header + int(fault.position * (n - header)) if n > header else int(fault.position * n)
        return value[:i] + bytes([value[i] ^ (1 << (i % 8))]) + value[i + 1:]
    if fault.kind == "torn":  # the KV bytes from a cut on are another block's: a payload write torn halfway
        # (A cut inside a plain header, between its block hash and its digest, would splice two
        # self-consistent halves: a forgery, which only a keyed namespace's tag stops; a torn
        # write of one key mixes two versions of the same block, so the soak cuts in the KV bytes.)
        cut = header + int(fault.position * max(0, n - header))
        return value[:cut] + other[cut:]
    assert fault.kind == "truncated"
    return value[:int(fault.position * n)]


class LegacyEngine:
    name = "legacy"

    def __init__(self, store: object) -> None:
        self.store = store  # a kvkey.stores.Store holding raw KV values under legacy keys
        self.oracle = _Oracle()

    def _hashes(self, req: Request) -> List[bytes]:
        return lm.build_prefix_block_hashes(req.tokens, BLOCK_SIZE, extra_identity=tr.ADAPTER if req.adapter else "")

    @staticmethod
    def _key(h: bytes, rank: int) -> str:
        return lm.build_store_key("", tr.MODEL, lm.kv_head_rank(rank, TP_SIZE, 2), h)

    def serve(self, req: Request) -> Served:
        hashes = self._hashes(req)
        digests = tr.prefix_digests(req.tokens)
        out = Served(blocks=len(hashes))
        keys = [[self._key(h, r) for r in range(TP_SIZE)] for h in hashes]
        found = self.store.exists([k for ks in keys for k in ks])  # type: ignore[attr-defined]
        while out.counted < len(hashes) and all(found[out.counted * TP_SIZE:(out.counted + 1) * TP_SIZE]):
            out.counted += 1
        values = self.store.get([k for ks in keys[:out.counted] for k in ks])  # type: ignore[attr-defined]
        for b in range(out.counted):
            got = []
            for r in range(TP_SIZE):
                size = tr.payload_size(req.lineage(r).dtype)
                v = values[b * TP_SIZE + r]
                if v is None or len(v) < size:
                    break
                got.append(v[:size])
            if len(got) < TP_SIZE:
                break
            for r in range(TP_SIZE):
                self.oracle.check(out, keys[b][r], req.lineage(r), digests[b], got[r])
            out.used += 1
        todo = [(b, r) for b in range(out.used, len(hashes)) for r in range(TP_SIZE)]
        self.store.put([keys[b][r] for b, r in todo],  # type: ignore[attr-defined]
                       [tr.expected_payload(req.lineage(r), digests[b]) for b, r in todo])
        for b, r in todo:
            self.oracle.writer[keys[b][r]] = req.lineage(r)
        return out

    def inject(self, fault: Fault) -> bool:
        req = fault.target
        key = self._key(self._hashes(req)[fault.block], fault.rank)
        value = self.store.get([key])[0]  # type: ignore[attr-defined]
        if value is None:
            return False
        digests = tr.prefix_digests(req.tokens)
        if fault.kind == "foreign":
            value = tr.expected_payload(fault.foreign_lineage(), digests[fault.block])
        else:
            other = tr.expected_payload(req.lineage(fault.rank), digests[fault.block - 1 if fault.block else 1])
            value = _damage(fault, bytes(value), other, 0)
        self.store.put([key], [value])  # type: ignore[attr-defined]
        self.oracle.writer[key] = None
        return True


def identity(lineage: Lineage) -> "kvkey.Identity":
    adapter = None
    if lineage.adapter is not None:
        name, version = lineage.adapter
        adapter = kvkey.Adapter(name, kvkey.fingerprint("%s weights v%d" % (name, version)))
    return kvkey.Identity(
        tenant=lineage.tenant,
        model=kvkey.Model(name=tr.MODEL, revision="7ae557604adf67be50417f59c2c2f167def9a775",
                          weights_epoch=lineage.epoch),
        kv=kvkey.Kv(dtype=lineage.dtype, block_size=BLOCK_SIZE, num_layers=24, num_kv_heads=2, head_dim=64,
                    layout="soak.v1"),
        shard=kvkey.Shard(tp_size=TP_SIZE, tp_rank=lineage.rank),
        adapter=adapter)


class KvkeyEngine:
    name = "kvkey"

    def __init__(self, store: object, metrics: "kvkey.Metrics") -> None:
        self.store = store
        self.metrics = metrics
        self.oracle = _Oracle()
        self._connectors: Dict[Lineage, "kvkey.Connector"] = {}

    def connector(self, lineage: Lineage) -> "kvkey.Connector":
        """The deployment's connector for rank 0's lineage (all ranks' namespaces)."""
        base = dataclasses.replace(lineage, rank=0)
        c = self._connectors.get(base)
        if c is None:
            ranks = [kvkey.KeyNamespace(identity(dataclasses.replace(base, rank=r))) for r in range(TP_SIZE)]
            c = self._connectors[base] = kvkey.Connector(self.store, ranks, metrics=self.metrics,
                                                         payload_size=tr.payload_size(base.dtype))
        return c

    def serve(self, req: Request) -> Served:
        conn = self.connector(req.lineage(0))
        hashes = conn.ns.block_hashes(req.tokens)
        digests = tr.prefix_digests(req.tokens)
        out = Served(blocks=len(hashes))
        out.counted = conn.lookup(hashes)
        loaded = [conn.load(hashes[:out.counted], rank=r) for r in range(TP_SIZE)]
        while out.used < out.counted and all(loaded[r][out.used] is not None for r in range(TP_SIZE)):
            b = out.used
            for r in range(TP_SIZE):
                payload = loaded[r][b]
                assert payload is not None
                self.oracle.check(out, conn.ranks[r].store_key(hashes[b]), req.lineage(r), digests[b], payload)
            out.used += 1
        for r in range(TP_SIZE):
            todo = range(out.used, len(hashes))
            conn.save([hashes[b] for b in todo], [tr.expected_payload(req.lineage(r), digests[b]) for b in todo],
                      rank=r)
            for b in todo:
                self.oracle.writer[conn.ranks[r].store_key(hashes[b])] = req.lineage(r)
        return out

    def _value(self, lineage: Lineage, tokens: List[int], block: int) -> Tuple[str, bytes]:
        """A block's key and its sealed value, as lineage's deployment writes them."""
        conn = self.connector(lineage)
        ns = conn.ranks[lineage.rank]
        h = ns.block_hashes(tokens)[block]
        return ns.store_key(h), ns.seal_value(h, tr.expected_payload(lineage, tr.prefix_digests(tokens)[block]))

    def inject(self, fault: Fault) -> bool:
        req = fault.target
        own = req.lineage(fault.rank)
        key, _ = self._value(own, req.tokens, fault.block)
        value = self.store.get([key])[0]  # type: ignore[attr-defined]
        if value is None:
            return False
        if fault.kind == "foreign":
            _, value = self._value(fault.foreign_lineage(), req.tokens, fault.block)
        else:
            _, other = self._value(own, req.tokens, fault.block - 1 if fault.block else 1)
            value = _damage(fault, bytes(value), other, kvkey.envelope_size)
        self.store.put([key], [value])  # type: ignore[attr-defined]
        self.oracle.writer[key] = None
        return True


# The shared-scope scenario (traffic.scope_events): one engine, three ways of keying it.
#   legacy:   legacy keys (no tenant in them), the system prompt's blocks and the private ones alike.
#   isolated: kvkey, every tenant in its own namespace: the system prompt is a private prefix,
#             computed and stored once per tenant.
#   scoped:   kvkey, the system prompt in the shared scope (traffic.SCOPE), read by the tenants it
#             grants and written by its publishers; the private blocks continue in the tenant's
#             namespace, their hashes bound to the transition (kvkey.scoped_block_hashes).
SCOPE_MODES = ("legacy", "isolated", "scoped")


@dataclasses.dataclass
class ScopeServed:
    """What one request of the scenario did."""

    prefix_blocks: int = 0  # the system prompt's blocks in the prompt
    prefix_used: int = 0  # of those, loaded and used
    private_blocks: int = 0  # the blocks after it
    private_used: int = 0
    counted: int = 0  # blocks the lookups counted as reusable
    wrong: int = 0  # used (block, rank) payloads that differ from the oracle's
    cross_tenant: int = 0  # of those, the bytes of another tenant's private block for the same tokens
    not_granted: int = 0  # scope reads refused: the tenant is not one of the scope's readers
    publish_refused: int = 0  # scope blocks computed but not stored: the tenant may not publish


class _LegacyBlocks:
    """Blocks under legacy keys, read as LegacyEngine reads them."""

    def __init__(self, store: object) -> None:
        self.store = store

    @staticmethod
    def key(h: bytes, rank: int) -> str:
        return LegacyEngine._key(h, rank)

    def lookup(self, hashes: List[bytes]) -> int:
        found = self.store.exists([self.key(h, r) for h in hashes for r in range(TP_SIZE)])  # type: ignore
        n = 0
        while n < len(hashes) and all(found[n * TP_SIZE:(n + 1) * TP_SIZE]):
            n += 1
        return n

    def load(self, hashes: List[bytes], rank: int) -> List[Optional[bytes]]:
        size = tr.payload_size(tr.PHASES[0].state.dtype)
        values = self.store.get([self.key(h, rank) for h in hashes])  # type: ignore[attr-defined]
        return [None if v is None or len(v) < size else bytes(v[:size]) for v in values]

    def save(self, hashes: List[bytes], payloads: List[bytes], rank: int) -> None:
        self.store.put([self.key(h, rank) for h in hashes], payloads)  # type: ignore[attr-defined]


class _KvkeyBlocks:
    """Blocks through a kvkey.Connector (all ranks' namespaces of one tenant, or of the scope)."""

    def __init__(self, conn: "kvkey.Connector") -> None:
        self.conn = conn

    def key(self, h: bytes, rank: int) -> str:
        return self.conn.ranks[rank].store_key(h)

    def lookup(self, hashes: List[bytes]) -> int:
        return self.conn.lookup(hashes)

    def load(self, hashes: List[bytes], rank: int) -> List[Optional[memoryview]]:
        return self.conn.load(hashes, rank=rank)

    def save(self, hashes: List[bytes], payloads: List[bytes], rank: int) -> None:
        self.conn.save(hashes, payloads, rank=rank)


@dataclasses.dataclass
class _Segment:
    """Consecutive blocks of a request served from one place."""

    blocks: Any  # _LegacyBlocks or _KvkeyBlocks
    first: int  # the request's index of its first block
    hashes: List[bytes]
    owner: str  # whose KV bytes they are: a tenant, or traffic.SCOPE_OWNER
    save: bool = True  # False: computed, not stored (a scope the tenant may not publish to)


class ScopeEngine:
    """The scenario's engine in one of SCOPE_MODES. Like the other engines it looks
    up the longest cached prefix, uses the blocks up to the first that fails to load,
    and computes and saves the rest; the oracle compares every block it uses with
    traffic.expected_payload of the block's owner (the tenant, or the scope for the
    system prompt where it is shared) and counts a used block whose bytes are
    another tenant's private block for the same tokens as a cross-tenant load."""

    def __init__(self, store: object, mode: str, metrics: Optional["kvkey.Metrics"] = None) -> None:
        if mode not in SCOPE_MODES:
            raise ValueError("mode is one of %s, not %r" % (", ".join(SCOPE_MODES), mode))
        self.name = mode
        self.store = store
        self.metrics = metrics
        self._legacy = _LegacyBlocks(store)
        self._tenants: Dict[str, _KvkeyBlocks] = {}
        self.scope: Optional["kvkey.SharedScope"] = None
        self._scope_blocks: Optional[_KvkeyBlocks] = None
        if mode == "scoped":
            base = tr.ScopedRequest(0, 0, tr.SCOPE_PUBLISHERS[0], [], 0)
            scopes = [kvkey.SharedScope(tr.SCOPE, identity(base.lineage(r)), readers=tr.SCOPE_READERS,
                                        publishers=tr.SCOPE_PUBLISHERS) for r in range(TP_SIZE)]
            self.scope = scopes[0]
            self._scope_blocks = self._connect([s.namespace for s in scopes])

    def _connect(self, ranks: List["kvkey.KeyNamespace"]) -> _KvkeyBlocks:
        return _KvkeyBlocks(kvkey.Connector(self.store, ranks, metrics=self.metrics,
                                            payload_size=tr.payload_size(tr.PHASES[0].state.dtype)))

    def _tenant(self, req: "tr.ScopedRequest") -> _KvkeyBlocks:
        b = self._tenants.get(req.tenant)
        if b is None:
            b = self._tenants[req.tenant] = self._connect(
                [kvkey.KeyNamespace(identity(req.lineage(r))) for r in range(TP_SIZE)])
        return b

    def segments(self, req: "tr.ScopedRequest", served: Optional[ScopeServed] = None) -> List[_Segment]:
        """Where each block of req lives, in order."""
        if self.name == "legacy":
            hashes = lm.build_prefix_block_hashes(req.tokens, BLOCK_SIZE)
            k = req.scope_tokens // BLOCK_SIZE
            return [_Segment(self._legacy, 0, hashes[:k], tr.SCOPE_OWNER),
                    _Segment(self._legacy, k, hashes[k:], req.tenant)]
        tenant = self._tenant(req)
        if self.scope is None or self.scope.check_read(req.tenant) is not None:
            if self.scope is not None and served is not None:
                served.not_granted += 1  # a named miss (not_granted, scope.readers): served as isolated
            return [_Segment(tenant, 0, tenant.conn.ns.block_hashes(req.tokens), req.tenant)]
        assert self._scope_blocks is not None
        hashes = kvkey.scoped_block_hashes(self.scope, tenant.conn.ns, req.tokens, req.scope_tokens)
        k = req.scope_tokens // BLOCK_SIZE
        return [_Segment(self._scope_blocks, 0, hashes[:k], tr.SCOPE_OWNER, self.scope.may_publish(req.tenant)),
                _Segment(tenant, k, hashes[k:], req.tenant)]

    def _check(self, out: ScopeServed, req: "tr.ScopedRequest", owner: str, r: int, digest: bytes,
               payload: Any) -> None:
        got = bytes(payload)
        if got == tr.expected_payload(req.lineage(r, owner), digest):
            return
        out.wrong += 1
        if any(got == tr.expected_payload(req.lineage(r, t), digest) for t in tr.SCOPE_TENANTS if t != req.tenant):
            out.cross_tenant += 1

    def serve(self, req: "tr.ScopedRequest") -> ScopeServed:
        digests = tr.prefix_digests(req.tokens)
        k = req.scope_tokens // BLOCK_SIZE
        out = ScopeServed(prefix_blocks=min(k, len(digests)), private_blocks=max(0, len(digests) - k))
        whole = True  # every block so far was used
        for seg in self.segments(req, out):
            used = 0
            if whole and seg.hashes:
                n = seg.blocks.lookup(seg.hashes)
                out.counted += n
                loaded = [seg.blocks.load(seg.hashes[:n], r) for r in range(TP_SIZE)]
                while used < n and all(loaded[r][used] is not None for r in range(TP_SIZE)):
                    for r in range(TP_SIZE):
                        self._check(out, req, seg.owner, r, digests[seg.first + used], loaded[r][used])
                    used += 1
            whole = whole and used == len(seg.hashes)
            for b in range(seg.first, seg.first + used):
                if b < k:
                    out.prefix_used += 1
                else:
                    out.private_used += 1
            if used == len(seg.hashes):
                continue
            if not seg.save:  # the scope's blocks, computed by a tenant that may not publish them
                assert self.scope is not None
                try:
                    self.scope.check_publish(req.tenant)
                except kvkey.ScopeError as e:
                    assert e.field == "scope.publishers", e.field
                    out.publish_refused += 1
                    continue
                raise AssertionError("%s may publish to the scope, yet its segment is not saved" % req.tenant)
            for r in range(TP_SIZE):
                blocks = range(used, len(seg.hashes))
                seg.blocks.save([seg.hashes[b] for b in blocks],
                                [tr.expected_payload(req.lineage(r, seg.owner), digests[seg.first + b])
                                 for b in blocks], rank=r)
        return out

    def _key(self, req: "tr.ScopedRequest", block: int, rank: int) -> str:
        for seg in self.segments(req):
            if seg.first <= block < seg.first + len(seg.hashes):
                return seg.blocks.key(seg.hashes[block - seg.first], rank)
        raise IndexError("request %d has no block %d" % (req.index, block))

    def inject(self, splice: "tr.Splice") -> bool:
        """Writes splice.source's tenant's value of the block under splice.tenant's key (False when
        the source has none, or when both tenants' keys are one: legacy keys carry no tenant)."""
        src = self._key(splice.source, splice.block, splice.rank)
        dst = self._key(dataclasses.replace(splice.source, tenant=splice.tenant), splice.block, splice.rank)
        value = self.store.get([src])[0]  # type: ignore[attr-defined]
        if value is None or src == dst:
            return False
        self.store.put([dst], [bytes(value)])  # type: ignore[attr-defined]
        return True
