#!/usr/bin/env python3
"""GGUF weights vs tq-mse:4 codes, same kvq bench run (interleaved rounds),
for the new and the old (commit 0ed5c55) binary: prefill and decode tok/s."""
import json, glob, os
D = os.path.dirname(os.path.abspath(__file__))
print("| model | binary | run | GGUF prefill tok/s | tq-mse:4 prefill | GGUF / tq-mse:4 | GGUF decode tok/s | tq-mse:4 decode | GGUF / tq-mse:4 |")
print("|---|---|---|---|---|---|---|---|---|")
for m in ("smollm2", "gemma3"):
    for b in ("new", "old"):
        for f in sorted(glob.glob(os.path.join(D, f"{m}-{b}-*.jsonl"))):
            g = {r["weights"]: r for r in map(json.loads, open(f))}
            s, t = g["stored"], g["tq-mse:4"]
            print(f"| {m} | {b} | {f[-7]} | {s['prefill_tok_s']:.1f} | {t['prefill_tok_s']:.1f} | {s['prefill_tok_s'] / t['prefill_tok_s']:.2f} | "
                  f"{s['gen_tok_s']:.1f} | {t['gen_tok_s']:.1f} | {s['gen_tok_s'] / t['gen_tok_s']:.2f} |")
