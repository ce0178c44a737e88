#!/usr/bin/env python3
"""PyTorch baseline for bench/cuda_attn: one decode step of
torch.nn.functional.scaled_dot_product_attention with f16 K/V on the same
shapes (batch x context, 32 query heads over 8 KV heads, head dim 128).

Two formulations, each under every SDPA backend PyTorch accepts for it, and
the fastest is reported as PyTorch's time:
  gqa      q (B, 32, 1, 128), K/V (B, 8, ctx, 128), enable_gqa=True
  grouped  q viewed as (B, 8, 4, 128): the 4 query heads of a KV head as 4
           query rows, non-causal -- the same result, K/V read once.
Timing as cuda_attn: CUDA events around each call, warm-up, median, inputs
rotated among copies (>= 256 MB in all) so that L2 does not hold them.
Usage: torch_sdpa.py [--quick] [--json FILE] [--runs N]
"""
import argparse
import json
import math
import statistics
import sys

import torch
import torch.nn.functional as F

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # older torch
    SDPBackend = None

SHAPES = [(1, 4096), (1, 32768), (4, 4096), (4, 32768), (16, 4096), (16, 32768), (64, 4096), (64, 32768), (8, 131072), (1, 131072), (4, 131072)]


def timed(fn, runs, warm=5):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for i in range(warm + runs):
        e0.record()
        fn(i)
        e1.record()
        e1.synchronize()
        if i >= warm:
            ts.append(e0.elapsed_time(e1))
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--dim", type=int, default=128, help="head dim (default 128)")
    a = ap.parse_args()
    out = open(a.json, "w") if a.json else None
    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    if out:
        out.write(json.dumps({"bench": "torch_info", "torch": torch.__version__, "device": torch.cuda.get_device_name(0)}) + "\n")
    H, HQ, D = 8, 32, a.dim
    backends = [("default", None)]
    if SDPBackend is not None:
        backends += [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                     ("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)]
    for B, ctx in SHAPES:
        if a.quick and B * ctx > 16 * 32768:
            continue
        kv_bytes = 2 * B * H * ctx * D * 2
        copies = min(64, (256 << 20) // kv_bytes + 1)
        ks = [torch.randn(B, H, ctx, D, device=dev, dtype=torch.float16) for _ in range(copies)]
        vs = [torch.randn(B, H, ctx, D, device=dev, dtype=torch.float16) for _ in range(copies)]
        qs = [torch.randn(B, HQ, 1, D, device=dev, dtype=torch.float16) for _ in range(copies)]
        ref = None
        best = None
        results = {}
        for form in ("gqa", "grouped"):
            for bname, be in backends:
                if bname == "math" and B * ctx > 4 * 32768:
                    continue  # materialises the scores; slow and large

                def call(i, form=form):
                    c = i % copies
                    if form == "gqa":
                        return F.scaled_dot_product_attention(qs[c], ks[c], vs[c], enable_gqa=True)
                    qg = qs[c].view(B, H, HQ // H, D)
                    return F.scaled_dot_product_attention(qg, ks[c], vs[c]).view(B, HQ, 1, D)

                try:
                    if be is None:
                        o = call(0)
                        ms = timed(call, a.runs)
                    else:
                        with sdpa_kernel([be]):
                            o = call(0)
                            ms = timed(call, a.runs)
                except Exception as ex:  # backend refuses this shape
                    results[f"{form}/{bname}"] = None
                    continue
                if ref is None:
                    ref = o.float()
                else:
                    err = ((o.float() - ref).norm() / ref.norm()).item()
                    if err > 1e-2:
                        print(f"  warning: {form}/{bname} differs from the first result by {err:.2e}", file=sys.stderr)
                results[f"{form}/{bname}"] = ms
                if best is None or ms < best[0]:
                    best = (ms, f"{form}/{bname}")
        gbps = kv_bytes / (best[0] * 1e-3) / 1e9
        desc = "  ".join(f"{k}={v * 1e3:.0f}" for k, v in results.items() if v is not None)
        print(f"torch d={D:3d} B={B:3d} ctx={ctx:6d}: best {best[0] * 1e3:9.1f} us ({best[1]}, {gbps:.0f} GB/s on f16 K/V)   [{desc}]",
              flush=True)
        if out:
            out.write(json.dumps({"bench": "torch_sdpa", "batch": B, "ctx": ctx, "hq": HQ, "hkv": H, "dim": D,
                                  "us": best[0] * 1e3, "best": best[1], "bytes": kv_bytes, "gbps": gbps,
                                  "all_us": {k: (v * 1e3 if v is not None else None) for k, v in results.items()},
                                  "copies": copies, "runs": a.runs}) + "\n")
            out.flush()
        del ks, vs, qs, ref
        torch.cuda.empty_cache()
    if out:
        out.close()


if __name__ == "__main__":
    main()
