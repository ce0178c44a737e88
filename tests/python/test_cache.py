"""kvq.Cache / KVCacheBuilder / Policy: attend against a float64 numpy attention on
the decoded K/V (causal, GQA, sliding windows, f16 window), memory figures, planner."""
from __future__ import annotations

import numpy as np
import pytest

import kvq
from conftest import gauss

M64 = (1 << 64) - 1


def _mix64(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def plan_seed(seed: int, layer: int, kv: int, head: int = -1) -> int:
    """The seed of a layer's K (kv=0) or V (kv=1) plan, as src/cache/cache.c derives it."""
    tag = ((layer & 0xFFFFFFFF) << 32) | ((kv & 1) << 31) | ((head + 1) & 0xFFFFFFFF)
    return _mix64(seed ^ _mix64(tag ^ 0x4B5643414348))


def stored(x: np.ndarray, spec: str, d: int, seed: int, layer: int, kv: int, window: int = 0) -> np.ndarray:
    """What the cache holds for rows x (tokens, heads, d), decoded, in float64: the
    last `window` tokens as f16, the others decoded from their codes (encoded from
    their f16 values when a window is on, as the cache does)."""
    n = x.shape[0]
    out = x.astype(np.float16).astype(np.float64)
    if spec == "f16":
        return out
    old = n - window if window else n
    p = kvq.Plan(spec, d, seed=plan_seed(seed, layer, kv))
    if not p.can_decode:  # key-only (tq-prod, qjl): scores are unbiased estimates of <q, k>
        return x.astype(np.float64)
    if old > 0:
        src = x[:old].reshape(-1, d)
        codes = p.encode(src.astype(np.float16)) if window else p.encode(np.ascontiguousarray(src))
        out[:old] = p.decode(codes).reshape(old, x.shape[1], d)
    return out


def ref_attention(q, k, v, pos0, scale, window=0):
    """float64 causal GQA attention: q (nq, Hq, d), k/v (n, Hkv, d)."""
    nq, hq, d = q.shape
    hkv = k.shape[1]
    g = hq // hkv
    out = np.zeros((nq, hq, d))
    for t in range(nq):
        p = pos0 + t
        lo = max(0, p - window + 1) if window else 0
        for h in range(hq):
            s = scale * (k[lo:p + 1, h // g] @ q[t, h].astype(np.float64))
            w = np.exp(s - s.max())
            out[t, h] = (w / w.sum()) @ v[lo:p + 1, h // g]
    return out


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("kspec,vspec,tol,qs", [("f16", "f16", 1e-4, 2.0), ("tq-mse:4", "tq-mse:4", 3e-2, 2.0),
                                                ("q8", "tq-mse:3", 3e-2, 2.0), ("polar", "rvq:2", 5e-2, 2.0),
                                                # key-only keys: unbiased score estimates, their variance
                                                # shows in a peaky softmax; a flatter one
                                                ("tq-prod:4", "q4", 0.15, 0.5)])
def test_decode_attend_gqa(rng, kspec, vspec, tol, qs):
    layers, hkv, hq, d, n = 2, 2, 6, 128, 700
    seed = 11
    cache = kvq.Cache(layers, hkv, d, f"{kspec}/{vspec}", seed=seed)
    ks = [gauss(rng, n, hkv, d) for _ in range(layers)]
    vs = [gauss(rng, n, hkv, d) for _ in range(layers)]
    for l in range(layers):
        cache.append(l, ks[l][:300], vs[l][:300])  # in two batches
        cache.append(l, ks[l][300:], vs[l][300:])
    assert len(cache) == n and cache.length(1) == n
    for l in range(layers):
        K = stored(ks[l], kspec, d, seed, l, 0)
        V = stored(vs[l], vspec, d, seed, l, 1)
        q = qs * gauss(rng, 1, hq, d)  # qs = 2: peaky softmax, the output follows a few values
        out = cache.attend(l, q, threads=2)
        ref = ref_attention(q, K, V, n - 1, 1 / np.sqrt(d))
        assert out.shape == q.shape and out.dtype == np.float32
        print(f"{kspec}/{vspec} layer {l}: relative error {rel(out, ref):.2e}")
        assert rel(out, ref) < tol, (kspec, vspec, l, rel(out, ref))
        # the same with the query as (heads, dim), a given pos0 and one thread
        out1 = cache.attend(l, q[0], pos0=n - 1, threads=1)
        assert np.array_equal(out1, out[0])  # results do not depend on the pool size


def test_prefill_causal_windows(rng):
    """Causal prefill over all positions; layer 1 is a sliding-window layer (kept f16),
    with an f16 window of 32 tokens on the compressed layer."""
    layers, hkv, hq, d, n, win = 2, 1, 2, 64, 200, 24
    seed = 5
    cache = (kvq.KVCacheBuilder().with_layers(layers).with_kv_heads(hkv).with_head_dim(d)
             .with_method("tq-mse:4").with_f16_window(32).with_sliding_window([0, win]).with_seed(seed).build())
    assert str(cache.policy) == "tq-mse:4,w=32" and cache.sliding_window == [0, win]
    k = [gauss(rng, n, hkv, d) for _ in range(layers)]
    v = [gauss(rng, n, hkv, d) for _ in range(layers)]
    q = [gauss(rng, n, hq, d) for _ in range(layers)]
    cache.append(0, k[0], v[0])
    for t in range(0, n, 10):  # the sliding layer drops old pages as tokens come
        cache.append(1, k[1][t:t + 10], v[1][t:t + 10])
    scale = 0.2
    # layer 0: compressed, f16 window of the last 32 tokens
    K = stored(k[0], "tq-mse:4", d, seed, 0, 0, window=32)
    V = stored(v[0], "tq-mse:4", d, seed, 0, 1, window=32)
    out = cache.attend(0, q[0], pos0=0, scale=scale)
    assert rel(out, ref_attention(q[0], K, V, 0, scale)) < 2e-2
    # layer 1: sliding window, f16; a query at the last position sees the last `win` positions
    K1, V1 = stored(k[1], "f16", d, seed, 1, 0), stored(v[1], "f16", d, seed, 1, 1)
    out = cache.attend(1, q[1][-3:], scale=scale)
    assert rel(out, ref_attention(q[1][-3:], K1, V1, n - 3, scale, window=win)) < 1e-4
    # older positions of the sliding layer are gone
    with pytest.raises(kvq.StateError):
        cache.attend(1, q[1][:1], pos0=0)


def test_one_token_at_a_time_equals_batch(rng):
    d, n = 128, 64
    a = kvq.Cache(1, 2, d, "tq-mse:4,w=16", seed=3)
    b = kvq.Cache(1, 2, d, "tq-mse:4,w=16", seed=3)
    k, v, q = gauss(rng, n, 2, d), gauss(rng, n, 2, d), gauss(rng, 1, 4, d)
    a.append(0, k, v)
    for t in range(n):
        b.append(0, k[t], v[t])  # (heads, dim): one token
    assert np.array_equal(a.attend(0, q), b.attend(0, q))
    assert a.memory_bytes() == b.memory_bytes()


def test_truncate_clear_len(rng):
    d = 64
    c = kvq.Cache(3, 1, d, "q8")
    k = gauss(rng, 40, 1, d)
    for l in range(3):
        c.append(l, k, k)
    assert len(c) == 40
    c.append(0, k[:5], k[:5])
    assert len(c) == 40 and c.length(0) == 45 and c.length(-1) == 40
    c.truncate(10)
    assert [c.length(l) for l in range(3)] == [10, 10, 10]
    q = gauss(rng, 1, 1, d)
    o10 = c.attend(0, q)
    c.append(0, k[10:20], k[10:20])
    c.truncate(10)
    assert np.array_equal(c.attend(0, q), o10)
    c.clear()
    assert len(c) == 0 and c.memory_bytes() == 0


def test_memory_figures_and_planner():
    d, h, layers = 128, 8, 1
    c = kvq.Cache(layers, h, d, "tq-mse:4")
    f16 = kvq.Cache(layers, h, d, "f16")
    # docs/CACHE.md's example: 1 layer, 8 heads, d = 128, 32768 tokens
    assert f16.memory_plan(32768).at == 134217728
    assert c.memory_plan(32768) == kvq.MemoryPlan(34603008, 34603008)
    assert c.f16_bytes(32768) == 134217728
    assert c.bytes_per_token() == h * 2 * 66 and c.f16_bytes_per_token() == h * 2 * 256
    # max_tokens: the largest n whose plan fits
    for budget in (10**6, 34603008, 2**30):
        n = c.max_tokens(budget)
        assert c.memory_plan(n).peak <= budget < c.memory_plan(n + 1).peak
    assert c.max_tokens(0) == 0
    # pages of 256 positions: a budget of 5 pages
    assert c.max_tokens(5 * 256 * h * 132) == 5 * 256
    # sliding window layers: bounded memory, the planner's peak
    s = kvq.Cache(2, 1, 64, "q8", sliding_window=[0, 128], compress_sliding=True)
    mp = s.memory_plan(10000, batch=64)
    assert mp.peak >= mp.at > 0
    assert s.max_tokens(mp.peak, batch=64) >= 10000


def test_builder_vocabulary():
    B = kvq.KVCacheBuilder
    assert str(B().with_method("turboquant").policy()) == "tq-mse:4"
    assert str(B().with_method("turboquant_mse").with_bit_width(inlier=3).policy()) == "tq-mse:3"
    assert str(B().with_method("turboquant_prod").with_bit_width(inlier=4).policy()) == "tq-prod:4/tq-mse:4"
    assert str(B().with_method("qjl").policy()) == "qjl/tq-mse:4"
    assert str(B().with_method("polarquant").policy()) == "polar:4"
    assert str(B().with_method("rvq").with_bit_width(2).policy()) == "rvq:2"
    assert str(B().with_method("int8").policy()) == "q8"
    assert str(B().with_method("int4").policy()) == "q4"
    assert str(B().with_method("tq-mse:4+chscale").policy()) == "tq-mse:4+chscale"
    p = (B().with_key_method("int8").with_value_method("turboquant", bits=3).with_f16_window(128)
         .with_f16_layers([0, -1]).with_compress_sliding().with_calib_tokens(64).policy())
    assert str(p) == "q8/tq-mse:3,w=128,f16layers=0;-1,sliding=1,calib=64"
    assert str(B().with_policy("q8/tq-mse:4,w=128").with_key_method("q4").policy()) == "q4/tq-mse:4,w=128"
    assert str(B().with_method("turboquant").with_outliers(8).policy()) == "tq-mse:4+outliers=8"
    c = (B().with_method("turboquant_prod").with_head_dim(128).with_bit_width(inlier=4).with_seed(42)
         .with_layers(2).with_kv_heads(4).build())
    assert (c.n_layers, c.n_kv_heads, c.head_dim) == (2, 4, 128)
    with pytest.raises(kvq.BitsRangeError):
        B().with_method("turboquant").with_bit_width(9).policy()
    with pytest.raises(kvq.BitsRangeError):
        B().with_method("turboquant_prod").with_bit_width(1).build()
    with pytest.raises(kvq.UnknownMethodError):
        B().with_method("zipquant").build()


def test_policy_parse_and_name():
    p = kvq.Policy("k=q8,v=q8,w=64")
    assert p.name == "q8,w=64" and p.k_spec == "q8" and p.f16_window == 64
    assert kvq.Policy("tq-mse:4/tq-mse:4") == kvq.Policy("tq-mse:4")
    p = kvq.Policy("q4,f16layers=0;-1,sliding=1,calib=32")
    assert p.f16_layers == [0, -1] and p.compress_sliding and p.calib_tokens == 32
    assert p.replace(f16_window=8).name == "q4,w=8,f16layers=0;-1,sliding=1,calib=32"
    c = kvq.Cache(4, 1, 64, "q4,f16layers=-1")
    assert c.bytes_per_token() == 3 * 2 * kvq.Plan("q4", 64).code_bytes + 2 * 128  # three q4 layers, the last f16
    assert repr(kvq.Policy("f16")) == "kvq.Policy('f16')"


def test_sink_tokens(rng):
    p = kvq.Policy("tq-mse:4+chscale/tq-mse:4,sink=1")
    assert p.sink_tokens == 1 and p.name == "tq-mse:4+chscale/tq-mse:4,sink=1"
    assert p.replace(sink_tokens=4).name == "tq-mse:4+chscale/tq-mse:4,sink=4"
    assert str(kvq.KVCacheBuilder().with_method("turboquant").with_sink_tokens(2).policy()) == "tq-mse:4,sink=2"
    with pytest.raises(kvq.InvalidArgumentError, match="sink"):
        kvq.Policy("q8,sink=2000")
    d, h = 64, 2
    k = rng.standard_normal((300, h, d)).astype(np.float32)
    k[0] *= 8  # a sink-like first key
    v = rng.standard_normal((300, h, d)).astype(np.float32)
    q = rng.standard_normal((1, 2 * h, d)).astype(np.float32)
    exact, plain, sink = (kvq.Cache(1, h, d, s) for s in ("f32", "tq-mse:3", "tq-mse:3,sink=1"))
    for c in (exact, plain, sink):
        c.append(0, k, v)
    # the sink costs its f16 records: 2 heads x (K + V) x 2d bytes
    assert sink.memory_bytes() == plain.memory_bytes() + h * 2 * 2 * d == sink.memory_plan(300).at
    ref = exact.attend(0, q, pos0=299)
    err = {n: np.linalg.norm(c.attend(0, q, pos0=299) - ref) for n, c in (("plain", plain), ("sink", sink))}
    assert err["sink"] < err["plain"]
