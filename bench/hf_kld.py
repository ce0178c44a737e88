#!/usr/bin/env python3
"""KL divergence of kvq cache policies inside transformers, vs transformers' own cache.

The model (a GGUF file loaded by transformers' GGUF loader) reads windows of
--ctx tokens of a text in chunks of --batch tokens (as `kvq kld` does: the
cache is filled chunk by chunk, each chunk attending to the compressed
earlier ones); the second half of each window is scored. The base is the
same model with transformers' DynamicCache and SDPA (float32 weights as
dequantized by transformers). One JSON object per policy on stdout.

    python bench/hf_kld.py -m models/SmolLM2-135M-Instruct.Q4_1.gguf -f corpora/prose-heldout.txt \
        --ctx 1024 --chunks 2 --policies "f16 q8 tq-mse:4/tq-mse:4 tq-mse:4+chscale/tq-mse:4"

`kvq kld` with the same --ctx/--batch/--policy measures the same quantity on
kvq's own engine; with --base f32 --acts f32 its base and activations are
float32 as here (docs/RESULTS.md puts them side by side).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import kvq.transformers as kt  # noqa: E402
from kvq.transformers.hf_models import load_gguf  # noqa: E402


def window_logits(model, ids: torch.Tensor, batch: int, cache) -> torch.Tensor:
    """Logits (T, vocab) of one window read in chunks of `batch` tokens through `cache`."""
    out = []
    for i in range(0, ids.shape[1], batch):
        r = model(input_ids=ids[:, i:i + batch], **kt.cache_kwargs(cache), use_cache=True)
        out.append(r.logits[0].float())
    return torch.cat(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("-f", "--file", default="corpora/prose-heldout.txt")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--chunks", type=int, default=1)
    ap.add_argument("--policies", default="f16 tq-mse:4/tq-mse:4")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    model, tok = load_gguf(a.model)
    text = open(a.file, encoding="utf-8").read()
    ids = tok(text, return_tensors="pt", add_special_tokens=False).input_ids
    n = min(a.chunks, ids.shape[1] // a.ctx)
    if n < 1:
        print(f"{a.file}: {ids.shape[1]} tokens, fewer than --ctx {a.ctx}", file=sys.stderr)
        return 2
    half = a.ctx // 2
    # as `kvq kld`: the first token of each window is replaced by BOS for models that want one (Gemma 3)
    bos = tok.bos_token_id if tok("a").input_ids[:1] == [tok.bos_token_id] else None
    bases = []
    with torch.inference_mode():
        for w in range(n):
            win = ids[:, w * a.ctx:(w + 1) * a.ctx].clone()
            if bos is not None:
                win[0, 0] = bos
            from transformers import DynamicCache
            bases.append((win, torch.log_softmax(window_logits(model, win, a.batch, DynamicCache()), -1)[half:]))
        for pol in a.policies.replace("|", " ").split():
            t0 = time.time()
            kl_sum, top1, nll, count = 0.0, 0, 0.0, 0
            for win, base in bases:
                cache = kt.Cache(model, policy=pol, seed=a.seed)
                lp = torch.log_softmax(window_logits(model, win, a.batch, cache), -1)[half:]
                kl_sum += float((base.exp() * (base - lp)).sum())
                top1 += int((base.argmax(-1) == lp.argmax(-1)).sum())
                tgt = win[0, half + 1:]
                nll += float(-lp[:-1].gather(1, tgt[:, None]).sum())
                count += base.shape[0]
            print(json.dumps({"model": os.path.basename(a.model), "policy": pol, "ctx": a.ctx, "batch": a.batch,
                              "windows": n, "tokens": count, "kld": kl_sum / count, "top1": top1 / count,
                              "ppl": float(torch.exp(torch.tensor(nll / (count - n)))),
                              "cache_bytes": cache.memory_bytes(), "seconds": round(time.time() - t0, 2)}),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
