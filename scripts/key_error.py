#!/usr/bin/env python3
"""How a key (or value) codec's error meets real queries.

Reads the vector files of `kvq dump-kv --queries -o OUT` (OUT.q.vec, OUT.k.vec,
OUT.v.vec; docs/FORMAT.md) and, per layer and KV head, compares the exact
causal attention output with the output when only the keys (--target k) or
only the values (--target v) pass through a model of a codec. Prints the mean
relative L2 error of the attention output per layer and transform.

The codec model is tq-mse at --bits: a Haar-random rotation, the Gaussian
Lloyd-Max codebook applied to the rotated vector scaled to unit variance, and
the least-squares scale; kvq's tq-mse uses randomized Hadamard rounds and the
exact sphere-coordinate codebook (docs/METHODS.md), which this model matches
to a few percent at d >= 64. Transforms, from the first --calib tokens:
  plain     the vector as it is
  center    minus the per-channel mean (kvq's +center)
  chscale   centred, then channel c scaled by (sigma_c / rms sigma)^-1/2
            (kvq's +chscale; the inverse scale applied after decoding)
  q4        no transform, kvq's q4 instead of tq-mse (asymmetric 4-bit per
            block of 32 with f16 scale and min; --bits is ignored)

  python3 scripts/key_error.py OUT --layers 5,11,17 --bits 4 [--target k]
"""
import argparse
import struct
import sys

import numpy as np


def read_vec(path):
    with open(path, "rb") as f:
        hdr = f.read(64)
        if hdr[:8] != b"KVQVEC01":
            sys.exit(f"{path}: not a KVQVEC01 file")
        dim, dtype, count, layers, heads, kind = struct.unpack_from("<IIQIII", hdr, 8)
        dt = {0: np.float32, 1: np.float16}.get(dtype)
        if dt is None:
            sys.exit(f"{path}: dtype {dtype} not supported here")
        x = np.fromfile(f, dtype=dt, count=count * dim).astype(np.float64)
    if not layers or not heads:
        sys.exit(f"{path}: no layer/head metadata (write it with kvq dump-kv)")
    return x.reshape(layers, -1, heads, dim)  # (layer, token, head, dim)


def lloyd_max_gauss(bits, iters=200):
    """Centroids and thresholds of the b-bit Lloyd-Max quantizer of N(0, 1)."""
    xs = np.linspace(-8, 8, 40001)
    pdf = np.exp(-xs * xs / 2)
    c = np.linspace(-2, 2, 2 ** bits)
    for _ in range(iters):
        cell = np.searchsorted((c[1:] + c[:-1]) / 2, xs)
        c = np.bincount(cell, xs * pdf, len(c)) / np.bincount(cell, pdf, len(c))
    return c, (c[1:] + c[:-1]) / 2


def tq_mse(x, rot, cb):
    """Rows of x through the tq-mse model: rotate, quantize, LS scale, unrotate."""
    c, t = cb
    y = x @ rot.T
    d = x.shape[1]
    n = np.linalg.norm(y, axis=1, keepdims=True)
    n[n == 0] = 1
    cv = c[np.searchsorted(t, y * np.sqrt(d) / n)]
    g = (y * cv).sum(1, keepdims=True) / (cv * cv).sum(1, keepdims=True)
    return (g * cv) @ rot


def q4(x):
    b = x.reshape(x.shape[0], -1, 32)
    mn, mx = b.min(-1, keepdims=True), b.max(-1, keepdims=True)
    s = (mx - mn) / 15
    s[s == 0] = 1
    return (mn + s * np.clip(np.round((b - mn) / s), 0, 15)).reshape(x.shape)


def attention(q, k, v):
    """Causal attention of q (T, G, d) over k, v (T, d), scale 1/sqrt(d)."""
    T, d = k.shape
    s = np.einsum("tgd,sd->tgs", q, k) / np.sqrt(d)
    s += np.where(np.arange(T)[None, :] > np.arange(T)[:, None], -np.inf, 0.0)[:, None, :]
    s -= s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    return np.einsum("tgs,sd->tgd", p, v)


def transforms(x, calib, rot, cb):
    m = x[:calib].mean(0)
    sg = x[:calib].std(0)
    rms = np.sqrt((sg * sg).mean())
    a = np.sqrt(rms / np.maximum(sg, rms / 100)) if rms > 0 else np.ones_like(sg)
    return {
        "plain": tq_mse(x, rot, cb),
        "center": tq_mse(x - m, rot, cb) + m,
        "chscale": tq_mse((x - m) * a, rot, cb) / a + m,
        "q4": q4(x),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("prefix", help="OUT of kvq dump-kv --queries -o OUT")
    ap.add_argument("--layers", default="", help="comma-separated dumped-layer indices (default all)")
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--target", choices=["k", "v"], default="k")
    ap.add_argument("--calib", type=int, default=128, help="calibration tokens (default 128, as the cache)")
    ap.add_argument("--tokens", type=int, default=1024, help="first tokens used (default 1024)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    Q, K, V = (read_vec(f"{a.prefix}.{x}.vec") for x in "qkv")
    L, _, hkv, d = K.shape
    G = Q.shape[2] // hkv
    layers = [int(x) for x in a.layers.split(",")] if a.layers else range(L)
    rot, _ = np.linalg.qr(np.random.default_rng(a.seed).standard_normal((d, d)))
    cb = lloyd_max_gauss(a.bits)
    names = None
    total = {}
    for l in layers:
        err = {}
        for h in range(hkv):
            T = min(a.tokens, K.shape[1])
            q, k, v = Q[l, :T, h * G:(h + 1) * G], K[l, :T, h], V[l, :T, h]
            ref = attention(q, k, v)
            for name, xq in transforms(k if a.target == "k" else v, a.calib, rot, cb).items():
                out = attention(q, xq, v) if a.target == "k" else attention(q, k, xq)
                err.setdefault(name, []).append(np.linalg.norm(out - ref) / np.linalg.norm(ref))
        if names is None:
            names = list(err)
            print(f"attention-output error, {'keys' if a.target == 'k' else 'values'} through tq-mse:{a.bits} "
                  f"(q4: 5 bits), d = {d}, {hkv} KV heads x {G} queries")
            print("layer " + " ".join(f"{n:>9}" for n in names))
        print(f"{l:5d} " + " ".join(f"{np.mean(err[n]):9.4f}" for n in names), flush=True)
        for n in names:
            total.setdefault(n, []).extend(err[n])
    print(" mean " + " ".join(f"{np.mean(total[n]):9.4f}" for n in names))


if __name__ == "__main__":
    main()
