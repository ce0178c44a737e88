#!/usr/bin/env python3
"""Weights + cache table (docs/RESULTS.md "Weights and cache together") from
the kld runs (*-source / *-tq-mse_4 / *-tcq_4_chscale .jsonl: weight_bytes,
kv_bytes at ctx 2048, KLD vs the source model with an f16 cache) and kvq
memplan (*-memplan.jsonl: the cache's bytes at 2K / 8K / 32K). Memory =
weight bytes (kvq's accounting: the tensors as stored / coded, token_embd
included) + KV bytes at the context; the memplan 2K figure is checked
against the kld run's measured kv_bytes at ctx 2048."""
import json, os, sys

D = os.path.dirname(os.path.abspath(__file__))
MiB = 1024.0 * 1024.0
for name, title in (("smollm2", "SmolLM2-135M (source Q4_1)"), ("gemma3", "Gemma 3 270M (source Q4_K_M)")):
    kv = {}
    for l in open(os.path.join(D, name + "-memplan.jsonl")):
        d = json.loads(l)
        kv[d["policy"]] = {p["ctx"]: p["kv_bytes"] for p in d["points"]}
    print(f"**{title}**\n")
    print("| weights | cache policy | weights MiB | KV MiB @8K | total MiB @8K | KV MiB @32K | total MiB @32K | KLD | top-1 | ppl |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for w, label in (("source", "source (GGUF)"), ("tq-mse_4", "`tq-mse:4`"), ("tcq_4_chscale", "`tcq:4+chscale`")):
        path = os.path.join(D, f"{name}-{w}.jsonl")
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            print(f"| {label} | (run missing) |||||||||")
            continue
        for l in open(path):
            d = json.loads(l)
            if d.get("record") != "summary":
                continue
            p = d["policy"]
            k = kv[p]
            if k[2048] != d["kv_bytes"]:
                sys.exit(f"{name} {w} {p}: memplan KV at 2K {k[2048]} != measured {d['kv_bytes']}")
            wb = d["weight_bytes"]
            print(f"| {label} | `{p}` | {wb / MiB:.1f} | {k[8192] / MiB:.1f} | {(wb + k[8192]) / MiB:.1f} | "
                  f"{k[32768] / MiB:.1f} | {(wb + k[32768]) / MiB:.1f} | {d['kld']:.4f} | {d['top1']:.3f} | {d['ppl']:.2f} |")
    print()
