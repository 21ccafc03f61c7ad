"""A tiny engine around lmdeploy's own Mooncake store connector, on the CPU.

lmdeploy's engine needs a GPU; its connector code does not. This module gives the
connector what lmdeploy's engine gives it, and nothing of the connector is replaced:

- lmdeploy's real objects: ``CacheConfig``, ``KVTransferConfig``, ``ModelConfig.from_pretrained``
  on the model directory, ``prepare_kv_connector_config`` and ``build_kv_connector`` (called
  as ``Engine.__init__`` calls them, engine/engine.py:152 and :209, and as
  ``BaseModelAgent.build_cache_engine`` does, engine/model_agent/agent.py:1538), the KV
  pool laid out by lmdeploy's cache engine (``build_model_block_cache_tensor_specs`` and
  ``PackedBlockCacheLayout``: one row per layer, a block's K, V and scales side by side),
  its rows registered as ``CacheEngine.connector_kv_caches`` hands them over, and lmdeploy's
  scheduler-side connector driving lookups, loads and saves.
- Fakes, only for engine objects (each named ``Fake*`` or marked below):
  ``FakeDeviceRow`` (a KV row that says it is on the device: the worker registers only
  CUDA rows, worker.py:295), ``FakeEvent`` (``torch.cuda.Event``, which ``start_save_kv``
  records, worker.py:392), ``fake_local_hostname`` (the host's routing table, worker.py:47:
  loopback here), ``FakeSequence`` (the attributes of ``SchedulerSequence`` the scheduler
  side reads) and ``FakeAgent`` / ``FakeEngine`` (what lmdeploy's weight-update methods
  touch when no tensors are sent).
- The model: ``TinyDecoder``, a Llama-style decoder in torch (RMSNorm, RoPE, grouped-query
  attention over the paged KV cache, SwiGLU), random weights from the model directory's
  ``model.safetensors``, optional LoRA adapters. Prefill runs in block-sized chunks, so a
  block's KV is computed with the same shapes whoever computes it, and on one thread: KV
  loaded from the store gives bit-identical logits to a recompute.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import time
import types
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

torch.set_num_threads(1)

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
GEOMETRY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, vocab_size=96, max_position_embeddings=1024, rope_theta=10000.0,
                rms_norm_eps=1e-6)


# ---------------------------------------------------------------- model files


def random_weights(seed: int) -> Dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    c = GEOMETRY
    h, kv = c["hidden_size"], c["num_key_value_heads"] * c["head_dim"]

    def w(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) / math.sqrt(shape[-1])).contiguous()

    t: Dict[str, torch.Tensor] = {"model.embed_tokens.weight": torch.randn(c["vocab_size"], h, generator=g),
                                  "model.norm.weight": torch.ones(h), "lm_head.weight": w(c["vocab_size"], h)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = torch.ones(h)
        t[p + "post_attention_layernorm.weight"] = torch.ones(h)
        t[p + "self_attn.q_proj.weight"] = w(c["num_attention_heads"] * c["head_dim"], h)
        t[p + "self_attn.k_proj.weight"] = w(kv, h)
        t[p + "self_attn.v_proj.weight"] = w(kv, h)
        t[p + "self_attn.o_proj.weight"] = w(h, c["num_attention_heads"] * c["head_dim"])
        t[p + "mlp.gate_proj.weight"] = w(c["intermediate_size"], h)
        t[p + "mlp.up_proj.weight"] = w(c["intermediate_size"], h)
        t[p + "mlp.down_proj.weight"] = w(h, c["intermediate_size"])
    return t


def write_model(path: str, *, seed: int, torch_dtype: str = "float16",
                geometry: Optional[Dict[str, Any]] = None) -> str:
    """A model directory lmdeploy's ``ModelConfig.from_pretrained`` and kvkey's
    ``Identity.from_model_dir`` read: config.json (Llama) and model.safetensors.
    ``geometry``: another geometry for the config, with placeholder weights (for a
    TinyEngine without decoder, e.g. the benchmark)."""
    from safetensors.torch import save_file

    os.makedirs(path, exist_ok=True)
    cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", torch_dtype=torch_dtype, bos_token_id=1,
               eos_token_id=2, tie_word_embeddings=False, **(geometry or GEOMETRY))
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    weights = random_weights(seed) if geometry is None else {"seed": torch.full((4,), float(seed))}
    save_file(weights, os.path.join(path, "model.safetensors"))
    return path


def write_adapter(path: str, *, seed: int, rank: int = 4) -> str:
    """A LoRA adapter directory (PEFT layout) on q_proj and v_proj of every layer."""
    from safetensors.torch import save_file

    os.makedirs(path, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    c = GEOMETRY
    h = c["hidden_size"]
    t = {}
    for i in range(c["num_hidden_layers"]):
        for proj, out in (("q_proj", c["num_attention_heads"] * c["head_dim"]),
                          ("v_proj", c["num_key_value_heads"] * c["head_dim"])):
            p = f"base_model.model.model.layers.{i}.self_attn.{proj}."
            t[p + "lora_A.weight"] = torch.randn(rank, h, generator=g) / math.sqrt(h)
            t[p + "lora_B.weight"] = torch.randn(out, rank, generator=g) / math.sqrt(rank)
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": rank, "lora_alpha": rank, "target_modules": ["q_proj", "v_proj"]}, f)
    save_file(t, os.path.join(path, "adapter_model.safetensors"))
    return path


def load_tensors(path: str) -> Dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(path)


# ---------------------------------------------------------------- the decoder


class TinyDecoder:
    """Greedy Llama-style decoding over lmdeploy's paged KV views.

    ``k_cache`` / ``v_cache`` are lmdeploy's typed views ``[layers, blocks, block_size,
    kv_heads, head_dim]`` of the pool; with ``quant_policy`` 8 they are uint8 and
    ``scales`` holds lmdeploy's per token and head (scale, zero) pairs; with 16 they are
    float8_e4m3fn."""

    def __init__(self, weights: Dict[str, torch.Tensor], views: Sequence[torch.Tensor], block_size: int,
                 quant_policy: int = 0) -> None:
        self.w = {k: v.float() for k, v in weights.items()}
        self.lora: Dict[str, Dict[str, torch.Tensor]] = {}
        self.c = GEOMETRY
        self.views = list(views)
        self.bs = block_size
        self.qp = quant_policy

    def add_adapter(self, name: str, tensors: Dict[str, torch.Tensor]) -> None:
        self.lora[name] = {k.replace("base_model.model.", ""): v.float() for k, v in tensors.items()}

    def _proj(self, x: torch.Tensor, name: str, adapter: Optional[str]) -> torch.Tensor:
        y = x @ self.w[name + ".weight"].T
        lo = self.lora.get(adapter) if adapter else None
        if lo is not None and name + ".lora_A.weight" in lo:
            y = y + (x @ lo[name + ".lora_A.weight"].T) @ lo[name + ".lora_B.weight"].T
        return y

    @staticmethod
    def _norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1]
        inv = 1.0 / (self.c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        ang = pos[:, None].float() * inv[None, :]
        cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None, :], torch.cat([ang.sin()] * 2, -1)[:, None, :]
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def _write(self, layer: int, blocks: Sequence[int], start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        for t in range(k.shape[0]):
            p = start + t
            b, o = blocks[p // self.bs], p % self.bs
            for which, x in ((0, k[t]), (1, v[t])):
                view = self.views[which]
                if self.qp == 8:
                    mn, mx = x.min(-1, keepdim=True).values, x.max(-1, keepdim=True).values
                    scale = ((mx - mn) / 255.0).clamp_min(1e-8)
                    view[layer, b, o] = torch.round((x - mn) / scale).clamp(0, 255).to(torch.uint8)
                    self.views[2 + which][layer, b, o] = torch.cat([scale, mn], -1).to(self.views[2 + which].dtype)
                else:
                    view[layer, b, o] = x.to(view.dtype)

    def _read(self, layer: int, blocks: Sequence[int], end: int) -> Tuple[torch.Tensor, torch.Tensor]:
        out = []
        for which in (0, 1):
            view = self.views[which]
            rows = torch.cat([view[layer, blocks[i]] for i in range(math.ceil(end / self.bs))], 0)[:end]
            if self.qp == 8:
                sz = torch.cat([self.views[2 + which][layer, blocks[i]]
                                for i in range(math.ceil(end / self.bs))], 0)[:end].float()
                out.append(rows.float() * sz[..., :1] + sz[..., 1:])
            else:
                out.append(rows.float())
        return out[0], out[1]

    def forward(self, tokens: Sequence[int], start: int, blocks: Sequence[int],
                adapter: Optional[str] = None) -> torch.Tensor:
        """Runs ``tokens`` at positions ``start..``, writing their KV into ``blocks``
        and attending to the KV of every earlier position there; the logits of the last."""
        c = self.c
        n = len(tokens)
        x = self.w["model.embed_tokens.weight"][torch.tensor(list(tokens), dtype=torch.long)]
        pos = torch.arange(start, start + n)
        hq, hk, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        for i in range(c["num_hidden_layers"]):
            p = f"model.layers.{i}."
            hs = self._norm(x, self.w[p + "input_layernorm.weight"], c["rms_norm_eps"])
            q = self._rope(self._proj(hs, p + "self_attn.q_proj", adapter).view(n, hq, d), pos)
            k = self._rope(self._proj(hs, p + "self_attn.k_proj", adapter).view(n, hk, d), pos)
            v = self._proj(hs, p + "self_attn.v_proj", adapter).view(n, hk, d)
            self._write(i, blocks, start, k, v)
            K, V = self._read(i, blocks, start + n)
            K = K.repeat_interleave(hq // hk, 1)
            V = V.repeat_interleave(hq // hk, 1)
            att = torch.einsum("qhd,khd->hqk", q, K) / math.sqrt(d)
            mask = torch.arange(start + n)[None, :] > pos[:, None]
            att = att.masked_fill(mask[None], float("-inf")).softmax(-1)
            o = torch.einsum("hqk,khd->qhd", att, V).reshape(n, hq * d)
            x = x + self._proj(o, p + "self_attn.o_proj", adapter)
            hs = self._norm(x, self.w[p + "post_attention_layernorm.weight"], c["rms_norm_eps"])
            mlp = torch.nn.functional.silu(self._proj(hs, p + "mlp.gate_proj", None)) * self._proj(hs, p + "mlp.up_proj",
                                                                                                 None)
            x = x + self._proj(mlp, p + "mlp.down_proj", None)
        x = self._norm(x, self.w["model.norm.weight"], c["rms_norm_eps"])
        return (x[-1] @ self.w["lm_head.weight"].T).clone()


# ---------------------------------------------------------------- engine fakes


class FakeDeviceRow(torch.Tensor):
    """A KV-cache row on the host that reports ``is_cuda``: lmdeploy's worker registers
    only device rows (``_build_registrations``, worker.py:295). Everything else is the
    tensor's own (data_ptr, contiguity, storage)."""

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True


class FakeEvent:
    """``torch.cuda.Event`` for a host "device": work is done when it is recorded."""

    def record(self, *args: Any) -> None:
        return None

    def synchronize(self) -> None:
        return None


def fake_local_hostname() -> str:
    return "127.0.0.1"


@contextlib.contextmanager
def engine_fakes() -> Iterator[None]:
    """Installs the two process-level fakes (the stream event, the host address) while active."""
    from lmdeploy.pytorch.kv_connector.mooncake.store import worker

    saved = (torch.cuda.Event, worker._get_local_hostname)
    torch.cuda.Event = FakeEvent  # type: ignore[misc,assignment]
    worker._get_local_hostname = fake_local_hostname
    try:
        yield
    finally:
        torch.cuda.Event, worker._get_local_hostname = saved  # type: ignore[misc]


class FakeSequence:
    """What lmdeploy's scheduler-side connector reads of a ``SchedulerSequence``."""

    def __init__(self, seq_id: int, tokens: Sequence[int], adapter_name: Optional[str] = None) -> None:
        import numpy as np

        self.seq_id = seq_id
        self.all_ids = np.asarray(list(tokens), dtype=np.int64)
        self.adapter_name = adapter_name
        self.history_multimodals = types.SimpleNamespace(empty=lambda: True)
        self.history_embeddings: List[Any] = []
        self.prefix_cache = types.SimpleNamespace(recompute_overlap=types.SimpleNamespace(recompute_blocks=0))

    def get_prefix_cache_max_candidate_step(self) -> int:
        return len(self.all_ids) - 1  # the last prompt token is always computed

    def clamp_prefix_cache_match_step(self, step: int) -> int:
        return step


class FakeAgent:
    """What ``BaseModelAgent.update_params`` touches for a request that carries no tensors."""

    def __init__(self, kv_connector: Any) -> None:
        self.kv_connector = kv_connector
        self.dist_ctx = types.SimpleNamespace(tp_group=types.SimpleNamespace(rank=0))
        self.patched_model = types.SimpleNamespace(get_model=lambda: None)
        self.spec_agent = types.SimpleNamespace(get_model=lambda: None, is_enabled=lambda: False)
        self._update_params_ipc_event = None
        self._update_params_ipc_tensor = None

    @contextlib.contextmanager
    def all_context(self) -> Iterator[None]:
        with torch.inference_mode():
            yield


class FakeEngine:
    """What ``Engine.update_params`` touches: the executor, and the scheduler's connector."""

    def __init__(self, kv_connector: Any) -> None:
        self.executor = types.SimpleNamespace(update_params=lambda request: None)
        self.scheduler = types.SimpleNamespace(kv_connector=kv_connector)


def empty_update_request(finished: bool = True) -> Any:
    """An ``UpdateParamsRequest`` that ends a weight update (flattened bucket, no tensors)."""
    from multiprocessing.reduction import ForkingPickler

    from lmdeploy.serve.openai.protocol import UpdateParamsRequest

    data = base64.b64encode(ForkingPickler.dumps({"metadata": []})).decode()
    return UpdateParamsRequest(serialized_named_tensors=data, load_format="flattened_bucket", finished=finished)


def mooncake_config(path: str, master: str, metadata: str, segment: int = 64 << 20) -> str:
    """lmdeploy's Mooncake JSON (``MooncakeStoreConfig.from_file``, data.py:292), TCP on loopback."""
    with open(path, "w") as f:
        json.dump({"metadata_server": metadata, "master_server_address": master, "protocol": "tcp",
                   "device_name": "", "global_segment_size": segment, "local_buffer_size": segment}, f)
    return path


# ---------------------------------------------------------------- the engine


class TinyEngine:
    """One lmdeploy deployment: its config, its connector (both sides), its KV pool, its model.

    ``kvkey``: None (lmdeploy's connector as released, legacy keys) or the keyword
    arguments of ``kvkey.integrations.lmdeploy.make_settings`` (tenant, ...)."""

    def __init__(self, model_dir: str, *, role: str, mooncake_json: str, dtype: str = "float16",
                 quant_policy: int = 0, block_size: int = 16, num_blocks: int = 64,
                 kvkey: Optional[Dict[str, Any]] = None, adapters: Optional[Dict[str, str]] = None,
                 extra: Optional[Dict[str, Any]] = None, with_decoder: bool = True) -> None:
        from lmdeploy.messages import KVTransferConfig, QuantPolicy
        from lmdeploy.pytorch.config import CacheConfig, ModelConfig
        from lmdeploy.pytorch.engine.cache_engine.layout import PackedBlockCacheLayout
        from lmdeploy.pytorch.engine.cache_engine.schema import build_model_block_cache_tensor_specs
        from lmdeploy.pytorch.kv_connector import KVConnectorRole, build_kv_connector, prepare_kv_connector_config

        self.model_dir = model_dir
        self.adapters = dict(adapters or {})
        self.model_config = ModelConfig.from_pretrained(model_dir, dtype=dtype)
        transfer = KVTransferConfig(kv_connector="MooncakeStoreConnector", kv_role=role,
                                    kv_connector_extra_config={"mooncake_config_path": mooncake_json,
                                                               **(extra or {})})
        self.cache_config = CacheConfig(max_batches=4, block_size=block_size, num_cpu_blocks=0,
                                        num_gpu_blocks=num_blocks, quant_policy=QuantPolicy(quant_policy),
                                        kv_transfer_config=transfer)
        if kvkey is not None:
            from kvkey.integrations import lmdeploy as integration

            settings = integration.make_settings(model_path=model_dir, quant_policy=quant_policy, dtype=dtype,
                                                 adapters=self.adapters, model_config=self.model_config, **kvkey)
            transfer.kv_connector_extra_config[integration.SETTING] = settings
            integration.install()
        # As Engine.__init__ (engine/engine.py:152, :209) and BaseModelAgent.build_cache_engine (agent.py:1538).
        prepare_kv_connector_config(self.cache_config, model_path=model_dir)
        replicas = self.model_config.num_replicate_key_value_heads
        with engine_fakes():
            self.scheduler = build_kv_connector(KVConnectorRole.SCHEDULER, self.cache_config, tp_size=1,
                                                kv_head_replica_num=replicas)
            specs = build_model_block_cache_tensor_specs(self.model_config, self.cache_config, 1)
            self.allocation = PackedBlockCacheLayout(specs, self.model_config.num_layers).allocate(num_blocks, "cpu")
            self.worker = build_kv_connector(KVConnectorRole.WORKER, self.cache_config, global_rank=0, tp_rank=0,
                                             tp_size=1, kv_head_replica_num=replicas)
            # As CacheEngine.connector_kv_caches (cache_engine/engine.py:153): one row per layer of each pool.
            rows = {f"cache_pool.{p}.row.{r}": row.as_subclass(FakeDeviceRow)
                    for p, pool in enumerate(self.allocation.pools) for r, row in enumerate(pool.tensor)}
            self.worker.register_kv_caches(rows)
        self.block_size = block_size
        self.free = list(range(num_blocks))
        if with_decoder:
            self.decoder = TinyDecoder(load_tensors(os.path.join(model_dir, "model.safetensors")),
                                       self.allocation.tensor_views, block_size, quant_policy)
            for name, path in self.adapters.items():
                self.decoder.add_adapter(name, load_tensors(os.path.join(path, "adapter_model.safetensors")))
        self.next_id = 1
        self.agent = FakeAgent(self.worker)
        self.engine = FakeEngine(self.scheduler)

    # -- lmdeploy's step protocol, one request at a time

    def _step(self, step_input: Any = None) -> Any:
        from lmdeploy.pytorch.kv_connector.base import KVConnectorStepInput

        meta = self.scheduler.build_connector_meta(step_input or KVConnectorStepInput())
        if meta is None:
            return None
        with engine_fakes():
            self.worker.bind_connector_metadata(meta)
            self.worker.start_load_kv()
            self.worker.start_save_kv()
            self.worker.clear_connector_metadata()
        return meta

    def _drain(self, want: str, ids: set, timeout: float = 60.0, poll: float = 0.002) -> Any:
        results = []
        deadline = time.monotonic() + timeout
        while ids:
            out = self.worker.get_finished()
            res = self.scheduler.update_connector_output(out)
            results.extend(res.load_results)
            ids -= set(res.completed_save_ids) if want == "save" else {r.request_id for r in res.load_results}
            if ids:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the connector did not finish its {want} in {timeout} s")
                time.sleep(poll)
        return results

    def _alloc(self, n: int) -> List[int]:
        if n > len(self.free):
            raise RuntimeError("out of KV blocks")
        out, self.free = self.free[:n], self.free[n:]
        return out

    def prefill_chunks(self, tokens: Sequence[int], start: int, blocks: Sequence[int],
                       adapter: Optional[str]) -> torch.Tensor:
        logits = None
        p = start
        while p < len(tokens):
            end = min((p // self.block_size + 1) * self.block_size, len(tokens))
            logits = self.decoder.forward(tokens[p:end], p, blocks, adapter)
            p = end
        assert logits is not None
        return logits

    def produce(self, tokens: Sequence[int], adapter: Optional[str] = None) -> int:
        """Prefills the prompt and saves its full blocks through the connector; returns
        the number of blocks the save covered."""
        from lmdeploy.pytorch.kv_connector.base import KVConnectorStepInput

        seq = FakeSequence(self.next_id, tokens, adapter)
        self.next_id += 1
        self.scheduler.on_new_request(seq)
        blocks = self._alloc(math.ceil(len(tokens) / self.block_size))
        self.prefill_chunks(tokens, 0, blocks, adapter)
        step = KVConnectorStepInput(running=[seq], connector_token_lens=(len(tokens),),
                                    connector_block_ids=(tuple(blocks),), connector_logical_block_ids=(tuple(blocks),))
        meta = self._step(step)
        saves = {r.save_id for r in meta.save_requests} if meta is not None else set()
        self._drain("save", saves)
        self.scheduler.request_finished(seq)
        self.free.extend(blocks)
        return len(tokens) // self.block_size

    def generate(self, tokens: Sequence[int], max_new: int, adapter: Optional[str] = None,
                 use_store: bool = True) -> Dict[str, Any]:
        """Looks the prompt up, loads what the store has (``use_store``), computes the rest
        and decodes greedily. Returns tokens, logits per step, and what was loaded."""
        seq = FakeSequence(self.next_id, tokens, adapter)
        self.next_id += 1
        self.scheduler.on_new_request(seq)
        blocks = self._alloc(math.ceil((len(tokens) + max_new) / self.block_size))
        loaded, found = 0, 0
        if use_store:
            deadline = time.monotonic() + 30
            while True:
                n, _ = self.scheduler.get_num_new_matched_tokens(seq, 0)
                if n is not None:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError("the lookup did not finish")
                time.sleep(0.002)
            found = int(n)
            if found > 0:
                self.scheduler.update_state_after_alloc(seq, blocks[:found // self.block_size], found)
                self._step()
                (result,) = self._drain("load", {seq.seq_id})
                loaded = found if result.success else 0
        logits = [self.prefill_chunks(tokens, loaded, blocks, adapter)]
        out = [int(torch.argmax(logits[0]))]
        for _ in range(max_new - 1):
            pos = len(tokens) + len(out) - 1
            logits.append(self.decoder.forward([out[-1]], pos, blocks, adapter))
            out.append(int(torch.argmax(logits[-1])))
        self.scheduler.request_finished(seq)
        self.free.extend(blocks)
        return {"tokens": out, "logits": logits, "found": found, "loaded": loaded}

    # -- weights

    def update_weights(self, weights: Dict[str, torch.Tensor]) -> None:
        """Loads new weights into the model, then ends the update through lmdeploy's own
        ``BaseModelAgent.update_params`` and ``Engine.update_params`` with ``finished=True``
        (kvkey's hook moves the weights epoch there)."""
        from lmdeploy.pytorch.engine.engine import Engine
        from lmdeploy.pytorch.engine.model_agent.agent import BaseModelAgent

        self.decoder.w = {k: v.float() for k, v in weights.items()}
        request = empty_update_request(finished=True)
        BaseModelAgent.update_params(self.agent, request)
        Engine.update_params(self.engine, request)

    # -- the store, for planting values

    @property
    def client(self) -> Any:
        return self.worker.connector_worker.store

    def keys(self, tokens: Sequence[int], adapter: Optional[str] = None) -> List[str]:
        """The store keys this deployment reads for the prompt's full blocks (rank 0)."""
        seq = FakeSequence(10**9 + self.next_id, tokens, adapter)
        self.next_id += 1
        full = (len(tokens) // self.block_size) * self.block_size
        entries = self.scheduler.connector_scheduler._get_request_block_hashes(seq, int(seq.seq_id), full,
                                                                             self.block_size)
        self.scheduler.connector_scheduler._request_hash_trackers.pop(int(seq.seq_id), None)
        w = self.worker.connector_worker
        if getattr(w, "kvkey", None) is not None:
            from kvkey.integrations.lmdeploy import _split

            k = w.kvkey
            out = []
            for e in entries:
                h, tag = _split(e)
                out.append(k.ids.namespace(k.ids.adapter_of(tag), 0).store_key(h))
            return out
        from lmdeploy.pytorch.kv_connector.mooncake.store.data import build_store_key

        return [build_store_key(w.key_metadata, 0, h) for h in entries]

    def close(self) -> None:
        with engine_fakes():
            self.scheduler.shutdown()
            self.worker.shutdown()
