#!/usr/bin/env python3
"""Issue 13, prototype: quantizers against the Gaussian rate-distortion bound.

After kvq's rotation the coordinates of a head vector are close to iid
Gaussian, and a rotation of iid Gaussian data is iid Gaussian, so the data
here is x ~ N(0, I_d) directly (d = 64, 128). Every method stores one f16
scale per vector (as tq-mse does) unless said otherwise, and the honest
bits per value count it: R = b + 16/d (block scales: + 16/B).

The figure of merit is the gap to the Gaussian distortion-rate function
(Cover & Thomas, Elements of Information Theory, Thm 10.3.2):
    D(R) = sigma^2 2^(-2R),   gap_dB = 10 log10(rel_mse / 2^(-2R)),
with rel_mse = mean |x - x^|^2 / |x|^2 (what kvq codec-bench reports).

Methods
  lm        tq-mse: x -> sqrt(d) x/|x|, Gaussian Lloyd-Max levels (Lloyd 1982,
            Max 1960), least-squares scale gamma = <y,c>/<c,c> stored in f16.
  blk-lm/B  a f16 RMS scale per block of B values, Lloyd-Max levels fitted to
            the block-normalised values (NF4-style, Dettmers et al. 2023, but
            RMS- not absmax-normalised: better for Gaussian data).
  d4 / e8   lattice vector quantizers (Conway & Sloane, Sphere Packings,
            ch. 4 and 20): the 2^(nR) points of the (shifted) lattice nearest
            the origin as a fixed-rate codebook, optimal overall scale,
            nearest codeword by exhaustive search; 3 and 4 bits as a
            two-stage residual (QuIP#, Tseng et al. 2024, sec. 4.2: E8P + a
            scaled residual codebook).
  tcq/L     bitshift trellis (QTIP, Tseng et al. 2024, sec. 3): the state is
            the last L bits of the bitstream, k = b new bits per value, the
            reconstruction is a computed pseudo-Gaussian value of the state
            (an LCG hash of the state, the sum of its four bytes: Irwin-Hall,
            ~N(0,1); QTIP's "1MAD" idea with our own constants), Viterbi
            encode over 2^L states, tail-biting (the bitstream is circular,
            exactly d*b bits; QTIP's two-pass approximation: a free pass
            fixes the wrap-around bits, a second pass is constrained to
            them). Decode: one shift, mask, multiply-add and byte sum per
            value.

Run: python3 bench/rd_prototype.py [--n 256] [--quick]   (numpy only)
"""
import argparse
import itertools
import math
import sys
import time

import numpy as np


def f16(a):
    return np.asarray(a, dtype=np.float32).astype(np.float16).astype(np.float64)


def rel_mse(x, xh):
    return float(np.mean(np.sum((x - xh) ** 2, axis=1) / np.sum(x ** 2, axis=1)))


def gap_db(mse, bits):
    return 10 * math.log10(mse / 2.0 ** (-2 * bits))


# ---- scalar Lloyd-Max -------------------------------------------------------------
def lloyd1d(samples, n, iters=80):
    """Empirical Lloyd-Max (1-D k-means) on samples, quantile start."""
    s = np.sort(samples)
    c = np.quantile(s, (np.arange(n) + 0.5) / n)
    for _ in range(iters):
        t = (c[1:] + c[:-1]) / 2
        idx = np.searchsorted(t, s)
        sums = np.bincount(idx, weights=s, minlength=n)
        cnt = np.bincount(idx, minlength=n)
        c = np.where(cnt > 0, sums / np.maximum(cnt, 1), c)
    return c


def sq_quant(y, c):
    t = (c[1:] + c[:-1]) / 2
    return c[np.searchsorted(t, y)]


def m_lm(x, b, rng):
    d = x.shape[1]
    c = lloyd1d(rng.standard_normal(1 << 18), 1 << b)
    y = x * math.sqrt(d) / np.linalg.norm(x, axis=1, keepdims=True)
    q = sq_quant(y, c)
    g = f16(np.sum(x * q, axis=1) / np.sum(q * q, axis=1))  # LS scale of x on q
    return g[:, None] * q, b + 16 / d


def m_blk(x, b, B, rng):
    n, d = x.shape
    tr = rng.standard_normal(((1 << 18) // B, B))
    tr = tr / np.sqrt(np.mean(tr ** 2, axis=1, keepdims=True))
    c = lloyd1d(tr.ravel(), 1 << b)
    xb = x.reshape(n, d // B, B)
    s = np.sqrt(np.mean(xb ** 2, axis=2, keepdims=True))
    q = sq_quant(xb / s, c)
    g = f16(np.sum(xb * q, axis=2, keepdims=True) / np.sum(q * q, axis=2, keepdims=True))
    return (g * q).reshape(n, d), b + 16 / B


# ---- lattices ------------------------------------------------------------------------
def lattice_codebook(name, nbits, shift):
    """The 2^nbits points of (D4 or E8) + shift*1 nearest the origin. D4 =
    integer vectors of even sum; E8 = D8 u (D8 + 1/2) (Conway & Sloane ch. 4,
    sec. 7-8). E8 is enumerated as pairs of 4-dim halves to stay small."""
    dim = 4 if name == "d4" else 8
    need = 1 << nbits
    r = 3
    half = np.array(list(itertools.product(range(-r, r + 1), repeat=4)), dtype=np.float64)
    pts = []
    cosets = [0.0] if name == "d4" else [0.0, 0.5]
    for co in cosets:
        h = half + co
        par = np.round(h.sum(1) - 4 * co).astype(np.int64) % 2  # parity of the integer part
        hs = h + shift
        nh = (hs ** 2).sum(1)
        if dim == 4:
            sel = par == 0
            pts.append(hs[sel])
            continue
        keep = nh <= 12.5
        hs, nh, par = hs[keep], nh[keep], par[keep]
        i, j = np.nonzero((nh[:, None] + nh[None, :] <= 12.5) & ((par[:, None] + par[None, :]) % 2 == 0))
        pts.append(np.concatenate([hs[i], hs[j]], axis=1))
    P = np.concatenate(pts)
    order = np.argsort((P ** 2).sum(1), kind="stable")
    assert len(P) >= need, (name, nbits, len(P))
    return P[order[:need]]


def nearest(v, C, chunk=4096):
    """Index of the nearest row of C for each row of v (exhaustive)."""
    Ch = 0.5 * (C ** 2).sum(1)
    out = np.empty(len(v), dtype=np.int64)
    Cf = C.astype(np.float32)
    for i in range(0, len(v), chunk):
        s = v[i:i + chunk].astype(np.float32) @ Cf.T - Ch.astype(np.float32)
        out[i:i + chunk] = np.argmax(s, axis=1)
    return out


def vq_stage(v, C, alpha):
    return alpha * C[nearest(v / alpha, C)]


def fit_alpha(train, C, a):
    """Codebook scale by alternating optimisation (Lloyd's scale step):
    nearest codewords at scale a, then a = <v, c> / <c, c>."""
    for _ in range(6):
        q = C[nearest(train / a, C)]
        a = float(np.sum(train * q) / np.sum(q * q))
    return a


def m_lattice(x, b, name, rng, cache):
    """b bits/value: one stage of 2 bits/value (b = 2), + residual stage(s)."""
    n, d = x.shape
    dim = 4 if name == "d4" else 8
    y = x * math.sqrt(d) / np.linalg.norm(x, axis=1, keepdims=True)
    v = y.reshape(-1, dim)
    tr = rng.standard_normal((2048, dim))
    stages = {2: [2], 3: [2, 1], 4: [2, 2]}[b]
    xh = np.zeros_like(v)
    res, res_tr = v.copy(), tr.copy()
    for sb in stages:
        key = (name, sb * dim)
        if key not in cache:
            shift = 0.25 if name == "e8" else 0.5 / 4  # break the shell ties (QuIP#'s E8P shifts by 1/4)
            cache[key] = lattice_codebook(name, sb * dim, shift)
        C = cache[key]
        sd = np.sqrt(np.mean(res_tr ** 2))
        a = fit_alpha(res_tr, C, sd * math.sqrt(dim) / np.sqrt(np.mean((C ** 2).sum(1))))
        q = vq_stage(res, C, a)
        xh += q
        res = res - q
        res_tr = res_tr - vq_stage(res_tr, C, a)
    q = xh.reshape(n, d)
    g = f16(np.sum(x * q, axis=1) / np.sum(q * q, axis=1))
    return g[:, None] * q, b + 16 / d


# ---- bitshift trellis ------------------------------------------------------------------
def tcq_code(L):
    """Computed code of every L-bit state: an LCG step of the state, then the
    sum of its 4 bytes (Irwin-Hall of 4 near-uniform bytes), standardised."""
    s = np.arange(1 << L, dtype=np.uint64)
    h = (s * np.uint64(1664525) + np.uint64(1013904223)) & np.uint64(0xFFFFFFFF)
    h = h ^ (h >> np.uint64(15))
    h = (h * np.uint64(0x2C1B3C6D)) & np.uint64(0xFFFFFFFF)
    by = [(h >> np.uint64(8 * i)) & np.uint64(255) for i in range(4)]
    t = sum(b.astype(np.float64) for b in by)
    return (t - 510.0) / math.sqrt(4 * (256 ** 2 - 1) / 12.0)


def viterbi(X, f, L, k, start_c=None):
    """Bitshift-trellis Viterbi over rows of X (B x T). State s_t =
    ((s_{t-1} << k) | u_t) mod 2^L; cost(s_t) = min over the 2^k predecessors
    (s_t >> k) | (j << (L-k)) + (x_t - f[s_t])^2. start_c: per row, the
    required top L-k bits of s_0 and low L-k bits of s_{T-1} (tail-biting).
    Returns the state sequences (B x T)."""
    Bn, T = X.shape
    S, R = 1 << L, 1 << (L - k)
    f32 = f.astype(np.float32)
    cost = (X[:, 0:1].astype(np.float32) - f32[None, :]) ** 2
    if start_c is not None:
        ok = (np.arange(S)[None, :] >> k) == start_c[:, None]
        cost = np.where(ok, cost, np.float32(np.inf))
    back = np.empty((T, Bn, R), dtype=np.uint8)
    for t in range(1, T):
        c3 = cost.reshape(Bn, 1 << k, R)
        j = np.argmin(c3, axis=1)
        m = np.take_along_axis(c3, j[:, None, :], axis=1)[:, 0, :]
        back[t] = j
        cost = np.repeat(m, 1 << k, axis=1) + (X[:, t:t + 1].astype(np.float32) - f32[None, :]) ** 2
    if start_c is not None:
        ok = (np.arange(S)[None, :] & (R - 1)) == start_c[:, None]
        cost = np.where(ok, cost, np.float32(np.inf))
    s = np.argmin(cost, axis=1)
    states = np.empty((Bn, T), dtype=np.int64)
    states[:, T - 1] = s
    for t in range(T - 1, 0, -1):
        r = s >> k
        s = r | (back[t][np.arange(Bn), r].astype(np.int64) << (L - k))
        states[:, t - 1] = s
    return states


def tcq_decode_bits(u, L, k, f):
    """Decode from the stored k-bit symbols u (B x T) alone: the circular
    bitstream, state_t = the L bits ending with symbol t."""
    Bn, T = u.shape
    need = -(-L // k)
    st = np.zeros((Bn, T), dtype=np.int64)
    for i in range(need):  # symbol t-i contributes bits i*k.. of state t
        st |= np.roll(u, i, axis=1).astype(np.int64) << (i * k)
    st &= (1 << L) - 1
    return f[st]


def m_tcq(x, b, L, f, bs=64):
    n, d = x.shape
    k = b
    y = x * math.sqrt(d) / np.linalg.norm(x, axis=1, keepdims=True)
    xh = np.empty_like(y)
    for i in range(0, n, bs):
        Y = y[i:i + bs]
        s1 = viterbi(Y, f, L, k)
        c = s1[:, -1] & ((1 << (L - k)) - 1)
        s2 = viterbi(Y, f, L, k, start_c=c)
        u = s2 & ((1 << k) - 1)
        q = tcq_decode_bits(u, L, k, f)
        assert np.array_equal(q, f[s2]), "tail-biting decode mismatch"
        xh[i:i + bs] = q
    g = f16(np.sum(x * xh, axis=1) / np.sum(xh * xh, axis=1))
    return g[:, None] * xh, b + 16 / d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=256, help="vectors per dim")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--bits", default="2,3,4")
    ap.add_argument("--tcq-L", default="12,16")
    ap.add_argument("--skip", default="", help="comma list of method families to skip")
    a = ap.parse_args()
    rng = np.random.default_rng(13)
    cache = {}
    skip = set(a.skip.split(",")) if a.skip else set()
    print(f"{'method':<14} {'d':>4} {'b':>2} {'bits/val':>8} {'rel_mse':>9} {'D(R)':>9} {'gap_dB':>7} {'enc_s':>7}")
    for d in map(int, a.dims.split(",")):
        x = rng.standard_normal((a.n, d))
        for b in map(int, a.bits.split(",")):
            rows = []
            if "lm" not in skip:
                rows.append(("lm", lambda: m_lm(x, b, rng)))
            if "blk" not in skip:
                for B in (16, 32, 64):
                    if B <= d:
                        rows.append((f"blk-lm/{B}", lambda B=B: m_blk(x, b, B, rng)))
            if "lat" not in skip:
                rows.append(("d4-rvq", lambda: m_lattice(x, b, "d4", rng, cache)))
                rows.append(("e8-rvq", lambda: m_lattice(x, b, "e8", rng, cache)))
            if "tcq" not in skip:
                for L in map(int, a.tcq_L.split(",")):
                    f = tcq_code(L)
                    rows.append((f"tcq/L{L}", lambda L=L, f=f: m_tcq(x, b, L, f)))
            for name, fn in rows:
                t0 = time.time()
                xh, bits = fn()
                el = time.time() - t0
                m = rel_mse(x, xh)
                print(f"{name:<14} {d:>4} {b:>2} {bits:>8.4f} {m:>9.5f} {2.0 ** (-2 * bits):>9.5f} {gap_db(m, bits):>7.2f} {el:>7.1f}")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
