#!/usr/bin/env python3
"""The weights rows of run.sh's bench JSON: prefill and decode tok/s and their ratio to the Q4_K file of the same run."""
import json
import os
import sys

R = os.path.dirname(os.path.abspath(__file__))
for m in ("smollm2", "gemma3"):
    print(f"\n**{m}** (ratios vs the Q4_K file of the same run)\n")
    print("| binary | weights | prefill tok/s | x Q4_K | decode tok/s | x Q4_K | decode median ms |")
    print("|---|---|---|---|---|---|---|")
    for b in ("new", "old"):
        rows = [json.loads(l) for l in open(os.path.join(R, f"{m}_{b}.json")) if l.startswith("{")]
        q4k = next(r for r in rows if r["weights"].endswith("Q4_K.gguf"))
        for r in rows:
            print(f"| {b} | {r['weights']} | {r['prefill_tok_s']:.1f} | {r['prefill_tok_s'] / q4k['prefill_tok_s']:.2f} | "
                  f"{r['gen_tok_s']:.1f} | {r['gen_tok_s'] / q4k['gen_tok_s']:.2f} | {r['gen_ms_median']:.2f} |")
