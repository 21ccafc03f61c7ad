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
