"""The RESULTS table of the wshare runs: KLD vs the source of each weight spec with its all-in bits per weight
(codes + stored stats over the block matrices: the JSON's weights_bits), beside the 2026-12-02 rows.
Usage (repo root): python3 bench/results/wshare-2026-12-03/table.py"""
import glob
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.join(HERE, "..", "weights-2026-12-02")
rows = []
for path in sorted(glob.glob(os.path.join(REF, "*-kvq-tcq_4*.jsonl"))) + sorted(glob.glob(os.path.join(HERE, "*.jsonl"))):
    for line in open(path):
        r = json.loads(line)
        if r.get("record") != "summary":
            continue
        name = os.path.basename(path)
        calibrated = "chscale" in r["weights"] or "center" in r["weights"]
        stats = "-" if not calibrated else ("f16 (v3)" if "f16stats" in name else "f32 (v2)")
        src = "2026-12-02" if path.startswith(REF) else "this run"
        rows.append((r["model"].split("-")[0], r["weights"], stats, r["weights_bits"], r["kld"], r["kld_se"], r["top1"],
                     r["ppl"], src))
print("| model | weights | stats stored | bits/weight all-in | KLD (± se) | top-1 | ppl | run |")
print("|---|---|---|---|---|---|---|---|")
# the 2026-12-02 JSON counts codes only; with its f32 stats (bench/results/wcalib-2026-12-02: kvq run's
# "bits per weight", the same matrices) the calibrated rows are:
ALL_IN_V2 = {"SmolLM2": 4.3385, "gemma": 4.2110}
for m, w, st, b, k, se, t, p, src in rows:
    note = ""
    if src == "2026-12-02" and st != "-":
        b, note = ALL_IN_V2[m], " (codes 4.2031 / 4.1029 + f32 stats)"
    print(f"| {m} | `{w}` | {st} | {b:.4f}{note} | {k:.4f} ± {se:.4f} | {t:.3f} | {p:.2f} | {src} |")
