#!/usr/bin/env python3
"""The table of RESULTS "At the K-types' own width": one row per *.jsonl here.

    python3 bench/results/weights-fair-2026-12-03/table.py > bench/results/weights-fair-2026-12-03/table.md

Bits per weight are over the changed matrices only (SmolLM2: the 30 ffn_down;
Gemma 3: 18 ffn_down + 18 attn_output; gemma3q6k, the third table: the 9
ffn_down that the source holds as Q6_K, layers 0 1 4 7 10 13 15 16 17): GGUF
rows from the spliced tensors' bytes (splice.py's JSON); kvq rows from
`weights_bits` (kvq_model_info coded_bits: code bytes and the stats tensor of
calibrated specs), and without the stats: +chscale stores per matrix, since
format v3 (session 12), means and scales a as f16 (2 x cols x 16 bits = 32 /
rows bits per weight; 1 / a is recomputed on load), rows = n_embd for both
ffn_down and attn_output (576 / 640). The rows run before v3 (f32 stats, 96 /
rows) are in pre-rebase/, not read here.
"""
import glob
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
N_EMBD = {"smollm2": 576, "gemma3": 640, "gemma3q6k": 640}
SOURCE = {"smollm2": "Q4_1 x30 (5.0 bpw)", "gemma3": "ffn_down Q4_K x9 + Q6_K x9, attn_output Q4_K x18",
          "gemma3q6k": "Q6_K x9 (6.5625 bpw)"}
TITLE = {"smollm2": "SmolLM2-135M, the 30 ffn_down", "gemma3": "Gemma 3 270M, the 18 ffn_down + 18 attn_output",
         "gemma3q6k": "Gemma 3, the 9 Q6_K-sourced ffn_down only"}


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
            stats = 32.0 / N_EMBD[model] if "+chscale" in spec else 0.0
            out.append((r["weights_bits"] - stats, r["weights_bits"], f"kvq `{spec}`", r, ""))
    out.sort(key=lambda x: (x[1], x[3]["kld"]))
    return out


def main():
    for model in ("smollm2", "gemma3", "gemma3q6k"):
        rs = rows(model)
        if not rs:
            continue
        print(f"\n**{TITLE[model]}** (source {SOURCE[model]}; ppl of the source {rs[0][3]['ppl_base']:.2f})\n")
        print("| weights (changed matrices only) | bpw codes | bpw stored (with stats) | KLD (± se) | top-1 | ppl |"
              " re-quantization error vs the source, by source type (rel. RMS) |")
        print("|---|---|---|---|---|---|---|")
        for b0, b1, name, r, note in rs:
            print(f"| {name} | {b0:.4f} | {b1:.4f} | {r['kld']:.4f} ± {r['kld_se']:.4f} | {r['top1']:.3f} | {r['ppl']:.2f} | {note} |")


if __name__ == "__main__":
    main()
