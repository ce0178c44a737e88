#!/usr/bin/env python3
"""The table of RESULTS "At the K-types' own width": one row per *.jsonl here.

    python3 bench/results/weights-fair-2026-12-03/table.py > bench/results/weights-fair-2026-12-03/table.md

Bits per weight are over the changed matrices only (SmolLM2: the 30 ffn_down;
Gemma 3: 18 ffn_down + 18 attn_output): GGUF rows from the spliced tensors'
bytes (splice.py's JSON); kvq rows from `weights_bits` (kvq_model_info
coded_bits: code bytes and the stats tensor of calibrated specs), and without
the stats: +chscale stores 3 x cols floats per matrix = 96 / rows bits per
weight, rows = n_embd for both ffn_down and attn_output (576 / 640).
"""
import glob
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
N_EMBD = {"smollm2": 576, "gemma3": 640}
SOURCE = {"smollm2": "Q4_1 x30 (5.0 bpw)", "gemma3": "ffn_down Q4_K x9 + Q6_K x9, attn_output Q4_K x18"}


def load(path):
    with open(path) as f:
        recs = [json.loads(l) for l in f if l.strip()]
    return recs[-1] if recs else None  # None: a run still going (or failed: see its .err)


def rows(model):
    out = []
    for p in sorted(glob.glob(os.path.join(HERE, f"{model}-*.jsonl"))):
        r = load(p)
        if r is None:
            continue
        kind = os.path.basename(p)[len(model) + 1:].split("-", 1)[0]
        if kind == "gguf":
            t = os.path.basename(p)[len(model) + 6:-6]
            s = json.load(open(os.path.join(HERE, f"{model}-splice-{t}.json")))
            rel = s["rel_rms_by_source_type"]
            note = "; ".join(f"{k} x{v['tensors']}: {v['rel_rms']:.4f}" +
                             (f" ({v['bit_exact']} bit-exact)" if v["bit_exact"] else "") for k, v in rel.items())
            out.append((s["bits_per_weight"], s["bits_per_weight"], f"GGUF {t} (llama-quantize)", r, note))
        else:
            spec = r["weights"]
            stats = 96.0 / N_EMBD[model] if "+chscale" in spec else 0.0
            out.append((r["weights_bits"] - stats, r["weights_bits"], f"kvq `{spec}`", r, ""))
    out.sort(key=lambda x: (x[1], x[3]["kld"]))
    return out


def main():
    for model in ("smollm2", "gemma3"):
        rs = rows(model)
        if not rs:
            continue
        print(f"\n**{model}** (source {SOURCE[model]}; ppl of the source {rs[0][3]['ppl_base']:.2f})\n")
        print("| weights (changed matrices only) | bpw codes | bpw stored (with stats) | KLD | top-1 | ppl |"
              " re-quantization error vs the source, by source type (rel. RMS) |")
        print("|---|---|---|---|---|---|---|")
        for b0, b1, name, r, note in rs:
            print(f"| {name} | {b0:.4f} | {b1:.4f} | {r['kld']:.4f} | {r['top1']:.3f} | {r['ppl']:.2f} | {note} |")


if __name__ == "__main__":
    main()
