#!/usr/bin/env python3
"""One vLLM CPU engine process over a tiny decoder: runs requests, prints a JSON result.

    python examples/vllm/engine.py write-model DIR [--seed N]     # a tiny Llama, random weights
    python examples/vllm/engine.py run --model DIR --connector kvkey|example|none [...] REQUESTS_JSON

``write-model`` writes ``config.json`` (LlamaForCausalLM: 2 layers, hidden 64, 4 heads of
32, 2 KV heads, vocab 512) and ``model.safetensors`` (bf16 weights drawn from ``--seed``:
another seed is another checkpoint of the same model). ``run`` starts ``vllm.LLM`` on
the CPU (``skip_tokenizer_init``, ``enforce_eager``, block size 32, ``--dtype`` default bfloat16) with the connector
given by ``--kv-transfer-config`` as vLLM takes it, runs each request of REQUESTS_JSON
(a list of ``{"tokens": [...], "salt": null | "s", "weight_version": null | "v", "before": null |
argv, "max_tokens": null | n}``, one ``generate`` each, greedy, ``max_tokens`` or
``--max-tokens``; ``weight_version`` first calls
``LLMEngine.set_weight_version``, ``before`` first runs a command, e.g. one that stops
the store), and prints ``{"results": [{"tokens", "cached", "seconds"}],
"kvkey": kvkey.integrations.vllm.metrics().as_dict()}`` on its last line. The engine
runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so the metrics are its
connector's. ``seconds`` is the wall time of the request's ``generate``: with
``max_tokens`` 1 its time to first token.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List

HIDDEN, INTER, LAYERS, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 64, 128, 2, 4, 2, 32, 512
BLOCK = 32


def write_model(d: str, seed: int) -> None:
    import torch
    from safetensors.torch import save_file

    os.makedirs(d, exist_ok=True)
    cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=HIDDEN, intermediate_size=INTER,
               num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
               vocab_size=VOCAB, max_position_embeddings=512, rms_norm_eps=1e-5, torch_dtype="bfloat16",
               tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, rope_theta=10000.0)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    g = torch.Generator().manual_seed(seed)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    t = {"model.embed_tokens.weight": torch.randn(VOCAB, HIDDEN, generator=g),
         "model.norm.weight": torch.ones(HIDDEN), "lm_head.weight": torch.randn(VOCAB, HIDDEN, generator=g) * 0.5}
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        for name, shape in [("self_attn.q_proj", (q, HIDDEN)), ("self_attn.k_proj", (kv, HIDDEN)),
                            ("self_attn.v_proj", (kv, HIDDEN)), ("self_attn.o_proj", (HIDDEN, q)),
                            ("mlp.gate_proj", (INTER, HIDDEN)), ("mlp.up_proj", (INTER, HIDDEN)),
                            ("mlp.down_proj", (HIDDEN, INTER))]:
            t[p + name + ".weight"] = torch.randn(*shape, generator=g) * 0.3
        t[p + "input_layernorm.weight"] = torch.ones(HIDDEN)
        t[p + "post_attention_layernorm.weight"] = torch.ones(HIDDEN)
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in t.items()}, os.path.join(d, "model.safetensors"))


def run(args: argparse.Namespace, requests: List[Dict[str, Any]]) -> Dict[str, Any]:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    kv = json.loads(args.kv_transfer_config) if args.kv_transfer_config else None
    llm = LLM(model=args.model, served_model_name=args.name, skip_tokenizer_init=True, max_model_len=512,
              enforce_eager=True, block_size=BLOCK, kv_transfer_config=kv, max_num_seqs=4,
              kv_cache_dtype=args.kv_cache_dtype, dtype=args.dtype, seed=0)
    results = []
    for r in requests:
        params = SamplingParams(temperature=0, max_tokens=int(r.get("max_tokens") or args.max_tokens), ignore_eos=True)
        if r.get("before"):
            subprocess.run(r["before"], check=True)
        if r.get("weight_version") is not None:
            llm.llm_engine.set_weight_version(str(r["weight_version"]))
        prompt = TokensPrompt(prompt_token_ids=list(r["tokens"]))
        if r.get("salt") is not None:
            prompt["cache_salt"] = r["salt"]
        t0 = time.perf_counter()
        out = llm.generate([prompt], params, use_tqdm=False)[0]
        seconds = time.perf_counter() - t0
        results.append({"tokens": list(out.outputs[0].token_ids), "cached": int(out.num_cached_tokens or 0),
                        "seconds": seconds})
    kvkey_metrics = None
    if kv and kv.get("kv_connector") == "KvkeyConnector":
        from kvkey.integrations import vllm as kvkey_vllm

        kvkey_metrics = kvkey_vllm.metrics().as_dict()
    return {"results": results, "kvkey": kvkey_metrics}


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write-model")
    w.add_argument("dir")
    w.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("run")
    r.add_argument("--model", required=True)
    r.add_argument("--name", default="tiny-llama")
    r.add_argument("--kv-transfer-config", default=None)
    r.add_argument("--kv-cache-dtype", default="auto")
    r.add_argument("--dtype", default="bfloat16")
    r.add_argument("--max-tokens", type=int, default=8)
    r.add_argument("requests")
    args = ap.parse_args(argv)
    if args.cmd == "write-model":
        write_model(args.dir, args.seed)
        return 0
    print(json.dumps(run(args, json.loads(args.requests))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
