#!/usr/bin/env python3
"""Generate with a transformers model whose KV cache kvq keeps compressed.

    python examples/generate_hf.py                                   # SmolLM2, tq-mse:4+chscale/tq-mse:4
    python examples/generate_hf.py --policy q8 --prompt "Write a haiku about the sea."
    python examples/generate_hf.py -m models/gemma-3-270m-q4_k_m.gguf --no-chat --policy "tq-mse:4+chscale/tq-mse:4"

The model is one of kvq's GGUF files, loaded by transformers' own GGUF
loader (kvq.transformers.hf_models.load_gguf keeps the converted checkpoint
next to it, so the second run starts in seconds). Everything else is plain
transformers: `model.generate(..., **kt.cache_kwargs(kvq.transformers.Cache(model, policy=...)))`
(`cache=` from transformers 5.24, `past_key_values=` before).
Prints the text, then the cache's bytes against an f16 cache of the same tokens.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

import kvq
import kvq.transformers as kt  # `pip install .` at the repository root (README)
from kvq.transformers.hf_models import load_gguf

LONG_CTX = 32768  # the context the memory figure is given for
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main() -> int:
    ap = argparse.ArgumentParser(description="generate through kvq.transformers.Cache")
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-p", "--prompt", default="Explain in three sentences why the sky is blue.")
    ap.add_argument("--policy", default="tq-mse:4+chscale/tq-mse:4",
                    help="kvq cache policy (docs/CACHE.md), e.g. f16, q8, tq-mse:4/tq-mse:4, 'q8/tq-mse:4,w=128'")
    ap.add_argument("-n", "--max-new-tokens", type=int, default=96)
    ap.add_argument("--no-chat", action="store_true", help="plain text prompt (base models), no chat template")
    a = ap.parse_args()
    if not os.path.isfile(a.model):
        print(f"{a.model}: not found; run `bash scripts/fetch-models.sh` first", file=sys.stderr)
        return 1
    model, tok = load_gguf(a.model)
    if a.no_chat or not tok.chat_template:
        ids = tok(a.prompt, return_tensors="pt").input_ids
    else:
        ids = tok.apply_chat_template([{"role": "user", "content": a.prompt}], add_generation_prompt=True,
                                      return_tensors="pt", return_dict=True)["input_ids"]
    cache = kt.Cache(model, policy=a.policy)
    t0 = time.time()
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=a.max_new_tokens, do_sample=False, **kt.cache_kwargs(cache))
    dt = time.time() - t0
    new = out[0, ids.shape[1]:]
    print(tok.decode(new, skip_special_tokens=True))
    g = cache.geometry
    n = cache.get_seq_length()
    # the same policy (and f16) in a bare kvq.Cache of the model's geometry: what a long context costs,
    # prefilled in chunks of 256 tokens (the exact plan; sliding-window layers hold their window only)
    long = {}
    for pol in (cache.policy, "f16"):
        with kvq.Cache(g["n_layers"], g["n_kv_heads"], g["head_dim"], pol, sliding_window=g["windows"]) as c:
            long[pol == "f16"] = c.memory_plan(LONG_CTX, batch=256).at
    long_kv, long_f16 = long[False], long[True]
    mib = 1 << 20
    print(f"\n[{a.policy}] {len(new)} tokens in {dt:.1f} s; {cache.memory_bytes()} B held now for {n} positions "
          f"(whole pages, f16 windows: docs/CACHE.md); at {LONG_CTX} tokens K/V {long_kv / mib:.1f} MiB vs f16 "
          f"{long_f16 / mib:.1f} MiB ({long_f16 / long_kv:.2f}x smaller)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
