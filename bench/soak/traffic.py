"""The soak's traffic: a deterministic stream of requests and store faults.

Everything here is a function of the seed, so the legacy run and the kvkey run
see the same requests and the same faults in the same order.

- Two tenants share one model served at TP=2. Conversations start from one of
  a few system prompts (one shared by both tenants, one per tenant) and grow
  turn by turn (multi-turn prompts reuse their own earlier blocks).
- Some conversations run on a LoRA adapter ("sql-lora"); its weights are
  replaced mid-run under the same name.
- The deployment's state changes at phase boundaries: the adapter swap, a
  weight update (epoch bump), a KV dtype switch (bf16 to fp8).
- Faults hit a block of a recent request on one rank: a bit flip in the
  payload, a torn value (its tail from another object), a truncated value,
  or a foreign object (another lineage's block) under the live key.

The shared-scope scenario (scope_events) is a second stream: more tenants, one
model state, a common system prompt that the operator declares as a shared scope
(a new revision every SCOPE_REVISION_REQUESTS requests) and private suffixes, some
the same canned first turn in several tenants; its faults splice one tenant's
private block under another tenant's key for the same tokens.
"""

import dataclasses
import hashlib
import random
from typing import Iterator, List, Optional, Tuple, Union

BLOCK_SIZE = 16
TP_SIZE = 2
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
ADAPTER = "sql-lora"
TENANTS = ("team-a", "team-b")
ELEMENTS_PER_RANK = 512  # KV elements per block and rank: a stand-in for the real geometry, kept small
ITEMSIZE = {"bf16": 2, "fp8_e4m3": 1}


@dataclasses.dataclass(frozen=True)
class State:
    """What the deployment runs in a phase."""

    epoch: int
    adapter_version: int
    dtype: str


@dataclasses.dataclass(frozen=True)
class Phase:
    name: str
    state: State
    event: str  # what changed at its start ("" for the first phase)


PHASES = (
    Phase("warm-up", State(1, 1, "bf16"), ""),
    Phase("adapter swap", State(1, 2, "bf16"), "adapter swap"),
    Phase("weight update", State(2, 2, "bf16"), "weight update"),
    Phase("dtype switch", State(2, 2, "fp8_e4m3"), "dtype switch"),
)


@dataclasses.dataclass(frozen=True)
class Lineage:
    """Everything a block's KV bytes depend on, except the tokens."""

    tenant: str
    epoch: int
    adapter: Optional[Tuple[str, int]]  # (name, weights version) or None for the base model
    dtype: str
    rank: int

    def differs_in(self, other: "Lineage") -> str:
        """The first component in which other differs ("" when equal)."""
        for name in ("tenant", "epoch", "adapter", "dtype", "rank"):
            if getattr(self, name) != getattr(other, name):
                return name
        return ""


def payload_size(dtype: str) -> int:
    return ELEMENTS_PER_RANK * ITEMSIZE[dtype]


def prefix_digests(tokens: List[int]) -> List[bytes]:
    """One digest per full block: a chain over every token so far."""
    out: List[bytes] = []
    prev = b""
    for b in range(len(tokens) // BLOCK_SIZE):
        block = tokens[b * BLOCK_SIZE:(b + 1) * BLOCK_SIZE]
        prev = hashlib.blake2b(prev + b"".join(t.to_bytes(4, "little") for t in block), digest_size=16).digest()
        out.append(prev)
    return out


def expected_payload(lineage: Lineage, prefix_digest: bytes) -> bytes:
    """The oracle: the KV bytes a block of this lineage and token prefix holds."""
    adapter = "-" if lineage.adapter is None else "%s@%d" % lineage.adapter
    seed = "%s|%d|%s|%s|%d|" % (lineage.tenant, lineage.epoch, adapter, lineage.dtype, lineage.rank)
    return hashlib.shake_128(seed.encode() + prefix_digest).digest(payload_size(lineage.dtype))


@dataclasses.dataclass(frozen=True)
class Request:
    index: int
    phase: int
    tenant: str
    adapter: bool  # runs on the LoRA adapter
    tokens: List[int]

    def lineage(self, rank: int) -> Lineage:
        st = PHASES[self.phase].state
        adapter = (ADAPTER, st.adapter_version) if self.adapter else None
        return Lineage(self.tenant, st.epoch, adapter, st.dtype, rank)


@dataclasses.dataclass(frozen=True)
class Fault:
    """A store fault on one block of an earlier request, on one rank."""

    kind: str  # "bit_flip", "torn", "truncated", "foreign"
    target: Request
    block: int
    rank: int
    position: float  # where in the value (bit flip, tear, cut), as a fraction of its length
    foreign: str  # for "foreign": the lineage component that differs ("tenant", "epoch", "adapter", "dtype")

    def foreign_lineage(self) -> Lineage:
        own = self.target.lineage(self.rank)
        if self.foreign == "tenant":
            return dataclasses.replace(own, tenant=TENANTS[1 - TENANTS.index(own.tenant)])
        if self.foreign == "epoch":
            return dataclasses.replace(own, epoch=own.epoch + 1)
        if self.foreign == "adapter":
            assert own.adapter is not None
            return dataclasses.replace(own, adapter=(own.adapter[0], own.adapter[1] + 1))
        return dataclasses.replace(own, dtype="fp8_e4m3" if own.dtype == "bf16" else "bf16")


Event = Union[Request, Fault]

_SYSTEM_PROMPT_BLOCKS = {"shared": 6, "team-a": 4, "team-b": 5}


def events(seed: int, requests_per_phase: int, fault_rate: float, conversations: int) -> Iterator[Event]:
    """The run: requests_per_phase requests in each phase from `conversations`
    concurrent conversations, a fault after a request with probability fault_rate."""
    rng = random.Random(seed)
    system = {name: [rng.randrange(1, 150000) for _ in range(n * BLOCK_SIZE)]
              for name, n in _SYSTEM_PROMPT_BLOCKS.items()}

    def new_conversation() -> dict:
        tenant = rng.choice(TENANTS)
        prompt = "shared" if rng.random() < 0.5 else tenant
        return {"tenant": tenant, "adapter": rng.random() < 0.35, "tokens": list(system[prompt]),
                "turns": rng.randint(2, 7)}

    active = [new_conversation() for _ in range(conversations)]
    recent: List[Request] = []
    index = 0
    for phase in range(len(PHASES)):
        for _ in range(requests_per_phase):
            slot = rng.randrange(len(active))
            conv = active[slot]
            conv["tokens"] += [rng.randrange(1, 150000) for _ in range(rng.randint(8, 40))]  # the user's turn
            req = Request(index, phase, conv["tenant"], conv["adapter"], list(conv["tokens"]))
            index += 1
            yield req
            conv["tokens"] += [rng.randrange(1, 150000) for _ in range(rng.randint(16, 64))]  # the answer
            conv["turns"] -= 1
            if conv["turns"] == 0 or len(conv["tokens"]) > 40 * BLOCK_SIZE:
                active[slot] = new_conversation()
            recent = (recent + [req])[-20:]
            if rng.random() < fault_rate:
                target = rng.choice(recent)
                blocks = len(target.tokens) // BLOCK_SIZE
                kind = rng.choice(("bit_flip", "torn", "truncated", "foreign"))
                choices = ["tenant", "epoch", "dtype"] + (["adapter"] if target.adapter else [])
                yield Fault(kind, target, rng.randrange(blocks), rng.randrange(TP_SIZE), rng.random(),
                            rng.choice(choices))


# The shared-scope scenario.
SCOPE = "support-bot"
SCOPE_OWNER = "_scope." + SCOPE  # the scope namespace's tenant: the owner of its blocks' KV bytes
SCOPE_PUBLISHERS = ("team-a", "team-b")
SCOPE_READERS = ("team-c", "team-d", "team-e")
SCOPE_UNGRANTED = ("team-f",)  # carries the same system prompt, may not read the scope
SCOPE_TENANTS = SCOPE_PUBLISHERS + SCOPE_READERS + SCOPE_UNGRANTED
SCOPE_BLOCKS = 8  # the system prompt's full blocks: the scope's part of each request
SCOPE_REVISION_REQUESTS = 100  # the system prompt is replaced after this many requests
SCOPE_CONVERSATIONS = 16  # concurrent conversations in a revision
CANNED_TURNS = 3  # first user turns sent verbatim by every tenant (2 blocks each)
CANNED_BLOCKS = 2


@dataclasses.dataclass(frozen=True)
class ScopedRequest:
    """A request whose first scope_tokens tokens the serving side declares as the scope's."""

    index: int
    revision: int
    tenant: str
    tokens: List[int]
    scope_tokens: int

    def lineage(self, rank: int, tenant: Optional[str] = None) -> Lineage:
        """The KV lineage of a block owned by tenant (default: the requester) in the scenario's one state."""
        st = PHASES[0].state
        return Lineage(tenant or self.tenant, st.epoch, None, st.dtype, rank)


@dataclasses.dataclass(frozen=True)
class Splice:
    """Tenant source.tenant's private block `block` of source, written under tenant's key for the same tokens."""

    source: ScopedRequest
    tenant: str
    block: int
    rank: int


def scope_events(seed: int, requests: int, fault_rate: float) -> Iterator[Union[ScopedRequest, Splice]]:
    """The scenario: `requests` requests from SCOPE_CONVERSATIONS concurrent conversations of
    SCOPE_TENANTS, every one starting with the current revision of the system prompt;
    after a request, with probability fault_rate, a splice between two active
    conversations of different tenants that share a canned turn."""
    rng = random.Random("scope-%d" % seed)
    scope_tokens = SCOPE_BLOCKS * BLOCK_SIZE

    def tokens(n: int) -> List[int]:
        return [rng.randrange(1, 150000) for _ in range(n)]

    canned = [tokens(CANNED_BLOCKS * BLOCK_SIZE) for _ in range(CANNED_TURNS)]
    per_revision = SCOPE_REVISION_REQUESTS
    revision, system = 0, tokens(scope_tokens)

    def new_conversation(tenants: Tuple[str, ...] = SCOPE_TENANTS) -> dict:
        c = rng.randrange(-CANNED_TURNS, CANNED_TURNS)  # half of them open with a canned turn
        return {"tenant": rng.choice(tenants), "tokens": list(system), "turns": rng.randint(2, 7),
                "canned": c, "first": list(canned[c]) if c >= 0 else None}

    def roll_out() -> List[dict]:
        """A revision's conversations. The first one's request comes first: a publisher's, as the
        deployment publishes the new prompt when it rolls it out, so that readers do not wait for one.
        Revision 0 starts cold instead: a reader's request comes first (it computes the prompt and
        may not store it in the scope), then a publisher's."""
        head = [new_conversation(SCOPE_PUBLISHERS)]
        if revision == 0:
            head.insert(0, new_conversation(SCOPE_READERS))
        return head + [new_conversation() for _ in range(SCOPE_CONVERSATIONS - len(head))]

    active = roll_out()
    last: List[Optional[ScopedRequest]] = [None] * len(active)
    for index in range(requests):
        at = index % per_revision
        if index and at == 0:  # the operator rolls out a new system prompt
            revision, system = revision + 1, tokens(scope_tokens)
            active = roll_out()
            last = [None] * len(active)
        heads = 2 if revision == 0 else 1  # the conversations roll_out put first, in request order
        slot = at if at < heads else rng.randrange(len(active))
        conv = active[slot]
        conv["tokens"] += conv.pop("first", None) or tokens(rng.randint(8, 40))  # the user's turn
        req = ScopedRequest(index, revision, conv["tenant"], list(conv["tokens"]), scope_tokens)
        yield req
        last[slot] = req
        conv["tokens"] += tokens(rng.randint(16, 64))  # the answer
        conv["turns"] -= 1
        if conv["turns"] == 0 or len(conv["tokens"]) > 40 * BLOCK_SIZE:
            active[slot], last[slot] = new_conversation(), None
        if rng.random() < fault_rate:
            pairs = [(s, v) for s in range(len(active)) for v in range(len(active))
                     if last[s] is not None and active[s]["canned"] >= 0
                     and active[v]["canned"] == active[s]["canned"] and active[v]["tenant"] != active[s]["tenant"]]
            if pairs:
                s, v = rng.choice(pairs)
                source = last[s]
                assert source is not None
                yield Splice(source, active[v]["tenant"], SCOPE_BLOCKS + rng.randrange(CANNED_BLOCKS),
                             rng.randrange(TP_SIZE))
