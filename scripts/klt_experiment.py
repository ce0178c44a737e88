#!/usr/bin/env python3
"""Would a calibrated transform beat tq-mse's random rotation? (RESULTS.md,
"SmolLM2 at 3.25 bits: a bound, not a bug").

Reads `kvq dump-kv --queries -o OUT` (OUT.q.vec, OUT.k.vec, OUT.v.vec) and,
per layer and KV head, compares the causal attention output (real queries)
when only the keys, or only the values, pass through
  rotB+0.25   the tq-mse model of scripts/key_error.py at B bits (+ its scale)
  kltR[s]     a KLT (PCA) of the first --calib tokens: the vector minus the
              calibration mean, in the eigenbasis, each component divided by
              its calibration std, Lloyd-Max (Gaussian) with greedy
              reverse-water-filling bit allocation of R*d bits in total
              (at least --bmin per component); s: plus a per-vector scale
              (16 bits taken from the budget) with a least-squares refit.
Errors are measured on the query positions after the calibration tokens.
--sink keeps token 0 exact in every variant.

  kvq dump-kv -m models/SmolLM2-135M-Instruct.Q4_1.gguf -f corpora/prose-heldout.txt \\
      -o /tmp/smolkv --max-tokens 1024 --queries
  python3 scripts/klt_experiment.py /tmp/smolkv --layers 0,5,10,15,20,25
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from key_error import attention, lloyd_max_gauss, read_vec, tq_mse  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("prefix")
    ap.add_argument("--layers", default="0,5,10,15,20,25")
    ap.add_argument("--calib", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--bmin", type=int, default=0)
    ap.add_argument("--sink", action="store_true")
    a = ap.parse_args()
    Q, K, V = (read_vec(f"{a.prefix}.{x}.vec") for x in "qkv")
    _, _, H, d = K.shape
    G = Q.shape[2] // H
    cbs = {b: lloyd_max_gauss(b) for b in range(1, 9)}
    xs = np.random.default_rng(0).standard_normal(200000)
    dist = [1.0] + [np.mean((xs - c[np.searchsorted(t, xs)]) ** 2) for c, t in (cbs[b] for b in range(1, 9))]

    def alloc(lam, total):
        b = np.full(len(lam), a.bmin)
        for _ in range(total - a.bmin * len(lam)):
            gain = [lam[i] * (dist[b[i]] - dist[b[i] + 1]) if b[i] < 8 else -1 for i in range(len(lam))]
            b[int(np.argmax(gain))] += 1
        return b

    def klt(x, R, pvscale):
        xc = x[1:a.calib]
        mu = xc.mean(0)
        lam, U = np.linalg.eigh((xc - mu).T @ (xc - mu) / len(xc))
        lam, U = lam[::-1], U[:, ::-1]
        sig = np.sqrt(np.maximum(lam, 1e-12))
        b = alloc(lam, int(round(R * d)) - (16 if pvscale else 0))
        y = (x - mu) @ U / sig
        m = b > 0
        s = np.ones((len(x), 1))
        if pvscale:
            s = np.sqrt((y[:, m] ** 2).mean(1, keepdims=True))
            s[s == 0] = 1
            y = y / s
        yq = np.zeros_like(y)
        for i in np.nonzero(m)[0]:
            c, t = cbs[b[i]]
            yq[:, i] = c[np.searchsorted(t, y[:, i])]
        if pvscale:
            g = (y[:, m] * yq[:, m]).sum(1, keepdims=True) / np.maximum((yq[:, m] ** 2).sum(1, keepdims=True), 1e-30)
            yq = yq * g * s
        return (yq * sig) @ U.T + mu

    rot, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((d, d)))
    res = {}
    for l in (int(x) for x in a.layers.split(",")):
        for h in range(H):
            T = min(a.tokens, K.shape[1])
            q, k, v = Q[l, :T, h * G:(h + 1) * G], K[l, :T, h], V[l, :T, h]
            ref = attention(q, k, v)

            def err(kq, vq):
                if a.sink:
                    kq, vq = kq.copy(), vq.copy()
                    kq[0], vq[0] = k[0], v[0]
                o = attention(q, kq, vq)
                return np.linalg.norm(o[a.calib:] - ref[a.calib:]) / np.linalg.norm(ref[a.calib:])

            for tgt, x in (("k", k), ("v", v)):
                variants = {f"rot{b}+0.25": tq_mse(x, rot, cbs[b]) for b in (3, 4)}
                for R in (2.25, 3.25, 4.25):
                    for pv in (0, 1):
                        variants[f"klt{R}{'s' if pv else ''}"] = klt(x, R, pv)
                for name, xq in variants.items():
                    res.setdefault((tgt, name), []).append(err(xq, v) if tgt == "k" else err(k, xq))
        print(f"layer {l} done", file=sys.stderr, flush=True)
    print("mean attention-output error (relative L2), positions >= calib")
    for (tgt, name), e in sorted(res.items()):
        print(f"{'keys' if tgt == 'k' else 'values':6s} {name:10s} {np.mean(e):.4f}")


if __name__ == "__main__":
    main()
