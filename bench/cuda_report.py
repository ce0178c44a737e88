#!/usr/bin/env python3
"""Joins bench/cuda_attn --json and bench/torch_sdpa.py --json into the
markdown tables of docs/RESULTS.md and checks the targets of issue 6:
tq-mse:4/4 >= 3x faster than PyTorch f16 SDPA at 16 x 32K, >= 70% of the
measured copy bandwidth on our own bytes, encode >= 1e9 vectors/s at d=128.
Usage: cuda_report.py OURS.jsonl TORCH.jsonl
"""
import json
import sys


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def main():
    ours, torch_rows = load(sys.argv[1]), load(sys.argv[2])
    dev = next((r for r in ours if r["bench"] == "device"), {})
    copy = next((r for r in ours if r["bench"] == "copy"), {})
    tinfo = next((r for r in torch_rows if r["bench"] == "torch_info"), {})
    torch = {(r["batch"], r["ctx"]): r for r in torch_rows if r["bench"] == "torch_sdpa"}
    print(f"Device {dev.get('name')} ({dev.get('sms')} SMs), CUDA driver API {dev.get('driver')}, runtime {dev.get('runtime')}; "
          f"PyTorch {tinfo.get('torch')}. Device-to-device copy: {copy.get('gbps', 0):.0f} GB/s (read + write).\n")
    print("| batch x ctx | policy | kvq us | PyTorch f16 SDPA us (best backend) | speedup | kvq GB/s | % of copy |")
    print("|---|---|---|---|---|---|---|")
    checks = []
    for r in ours:
        if r["bench"] != "attn":
            continue
        t = torch.get((r["batch"], r["ctx"]))
        tus = t["us"] if t else float("nan")
        sp = tus / r["us"] if t else float("nan")
        frac = r["gbps"] / r["copy_gbps"]
        shape = f"{r['batch']} x {r['ctx'] // 1024}K"
        best = t["best"] if t else "-"
        print(f"| {shape} | {r['policy']} | {r['us']:.1f} | {tus:.1f} ({best}) | {sp:.2f}x | {r['gbps']:.0f} | {100 * frac:.0f}% |")
        if r["policy"] == "tq-mse:4/4" and r["batch"] == 16 and r["ctx"] == 32768:
            checks.append(("tq-mse:4/4 at 16 x 32K >= 3x PyTorch f16 SDPA", sp >= 3, f"{sp:.2f}x"))
            checks.append(("tq-mse:4/4 at 16 x 32K >= 70% of copy bandwidth", frac >= 0.7, f"{100 * frac:.0f}%"))
    print()
    print("| encode | input | G vectors/s |")
    print("|---|---|---|")
    for r in ours:
        if r["bench"] == "encode":
            print(f"| {r['spec']} d={r['dim']} | {r['input']} | {r['vec_per_s'] / 1e9:.2f} |")
            if r["spec"] == "tq-mse:4" and r["input"] == "f32":
                checks.append(("encode tq-mse:4 d=128 >= 1e9 vectors/s (f32 input)", r["vec_per_s"] >= 1e9,
                               f"{r['vec_per_s'] / 1e9:.2f}e9"))
    print()
    for name, ok, val in checks:
        print(f"- target: {name}: {'MET' if ok else 'NOT MET'} ({val})")


if __name__ == "__main__":
    main()
