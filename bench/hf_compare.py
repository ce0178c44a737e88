#!/usr/bin/env python3
"""Output comparison inside transformers: greedy generation through kvq caches vs transformers' own cache.

The same measure as `kvq gen-check` (tools/gen_check.c), on a transformers
model: for each prompt (the first --prompts of gen-check's set, chat style
for models with a chat template, completion style otherwise), greedy
decoding of up to --n tokens with DynamicCache first, then each policy
through kvq.transformers.Cache. Per prompt and policy:
  coherent  tokens before an EOS or the start of the first degenerate repeat
            (the last 3n tokens one n-gram, n >= 4, three times in a row, or
            the last 8 tokens one token; extended backwards);
  diverge   first generated position where the tokens differ from
            DynamicCache's (None when identical).
One JSON object per policy on stdout (with --texts, the generated texts too).

    python bench/hf_compare.py -m models/SmolLM2-135M-Instruct.Q4_1.gguf --prompts 4 --n 128 \
        --policies "f16 q8 tq-mse:4+chscale/tq-mse:4 tq-mse:4/tq-mse:4"
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import List, Optional

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import kvq.transformers as kt  # noqa: E402
from kvq.transformers.hf_models import load_gguf  # noqa: E402

# tools/gen_check.c's first prompts (user message, completion text)
PROMPTS = [
    ("Write a short story about a robot who learns to paint.",
     "Once upon a time, in a small workshop at the edge of the city, there lived a robot who"),
    ("Explain how photosynthesis works in simple terms.", "Photosynthesis is the process by which plants"),
    ("What were the main causes of the French Revolution?",
     "The French Revolution of 1789 had several causes. The first was"),
    ("Write a Python function that checks whether a number is prime, and explain how it works.",
     "def is_prime(n):\n    \"\"\"Return True if n is a prime number.\"\"\"\n"),
]


def degenerate_start(g: List[int]) -> Optional[int]:
    """Start of a degenerate repeat ending at the last token of g, or None (gen_check.c's rule)."""
    n = len(g)
    if n >= 8 and all(t == g[-1] for t in g[-8:]):
        s = n - 8
        while s > 0 and g[s - 1] == g[-1]:
            s -= 1
        return s
    for p in range(4, n // 3 + 1):
        if all(g[i] == g[i + p] for i in range(n - 3 * p, n - p)):
            s = n - 3 * p
            while s > 0 and g[s - 1] == g[s - 1 + p]:
                s -= 1
            return s
    return None


def generate(model, ids: torch.Tensor, n: int, cache, eos: set) -> dict:
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=n, do_sample=False, past_key_values=cache)
    g = out[0, ids.shape[1]:].tolist()
    stop = next((i for i, t in enumerate(g) if t in eos), None)
    if stop is not None:
        g = g[:stop]
    degen = None
    for t in range(1, len(g) + 1):
        degen = degenerate_start(g[:t])
        if degen is not None:
            break
    return {"tokens": g, "eos": stop is not None, "coherent": degen if degen is not None else len(g)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--policies", default="f16 tq-mse:4+chscale/tq-mse:4")
    ap.add_argument("--texts", action="store_true")
    a = ap.parse_args()
    model, tok = load_gguf(a.model)
    eos = {t for t in [tok.eos_token_id, getattr(model.generation_config, "eos_token_id", None)] if t is not None}
    eos = {x for t in eos for x in (t if isinstance(t, list) else [t])}
    chat = bool(tok.chat_template)
    prompts = []
    for user, completion in PROMPTS[:a.prompts]:
        if chat:
            prompts.append(tok.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True,
                                                   return_tensors="pt", return_dict=True)["input_ids"])
        else:
            prompts.append(tok(completion, return_tensors="pt").input_ids)
    from transformers import DynamicCache
    base = [generate(model, ids, a.n, DynamicCache(), eos) for ids in prompts]
    rows = [("transformers", base, 0.0)]
    for pol in a.policies.replace("|", " ").split():
        t0 = time.time()
        rows.append((pol, [generate(model, ids, a.n, kt.Cache(model, policy=pol), eos) for ids in prompts],
                     time.time() - t0))
    for pol, res, sec in rows:
        per = []
        for r, b in zip(res, base):
            div = next((i for i, (x, y) in enumerate(zip(r["tokens"], b["tokens"])) if x != y), None)
            if div is None and len(r["tokens"]) != len(b["tokens"]):
                div = min(len(r["tokens"]), len(b["tokens"]))
            d = {"generated": len(r["tokens"]), "eos": r["eos"], "coherent": r["coherent"], "diverge": div}
            if a.texts:
                d["text"] = tok.decode(r["tokens"])
            per.append(d)
        k = len(per)
        print(json.dumps({"model": os.path.basename(a.model), "policy": pol, "style": "chat" if chat else "completion",
                          "n": a.n, "prompts": k, "mean_coherent": sum(p["coherent"] for p in per) / k,
                          "mean_diverge": sum(p["diverge"] if p["diverge"] is not None else p["generated"]
                                              for p in per) / k,
                          "identical": sum(p["diverge"] is None for p in per), "per_prompt": per,
                          "seconds": round(sec, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
