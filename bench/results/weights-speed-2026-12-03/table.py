#!/usr/bin/env python3
"""Prefill and decode tok/s per weights of the kvq bench runs in this folder (one run per model, interleaved
rounds; ratios against the source GGUF of the same run).  python3 bench/results/weights-speed-2026-12-03/table.py"""
import json, glob, os
for f in sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), '*.jsonl'))):
    rows = [json.loads(l) for l in open(f)]
    print(f"\n**{rows[0]['model']}** (ctx {rows[0]['ctx']}, {rows[0]['threads']} threads, {rows[0]['kernels']})\n")
    print('| weights | prefill tok/s | × source | decode tok/s | × source | decode median ms |')
    print('|---|---|---|---|---|---|')
    for d in rows:
        w = os.path.basename(d['weights']) if d['weights'] != 'stored' else 'source (stored)'
        print(f"| {w} | {d['prefill_tok_s']:.1f} | {d['prefill_speedup']:.2f} | {d['gen_tok_s']:.1f} | {d['gen_speedup']:.2f} | {d['gen_ms_median']:.2f} |")
