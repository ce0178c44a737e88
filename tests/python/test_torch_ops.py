"""kvq.torch on the CPU (runs in CI): the CPU operators against kvq.Plan on the same numpy data,
the CUDA operators' registration (import-safe without a GPU), and CUDAStore's bookkeeping on a
CPU emulation of the CUDA kernels (tests/python/cuda_emul.py) against a float64 reference."""
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kvq  # noqa: E402
import kvq.torch as kt  # noqa: E402
from kvq.transformers._cuda_store import CUDAStore, StoreGroup, plan_seed  # noqa: E402
from kvq.transformers._store import LayerSpec  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from cuda_emul import EmuKernels, RefStore, calibrated_batch_case  # noqa: E402


# ---------------------------------------------------------------- CPU operators
@pytest.mark.parametrize("spec", ["tq-mse:4", "q8", "tq-mse:2+norot", "rvq:2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_encode_decode_match_plan(spec, dtype):
    p = kvq.Plan(spec, 128, seed=11)
    x = torch.randn(37, 128).to(dtype)
    codes = kt.encode(p, x)
    assert codes.dtype == torch.uint8 and codes.shape == (37, p.code_bytes)
    if dtype == torch.bfloat16:
        ref = p.encode(x.view(torch.int16).numpy().view(np.uint16), dtype="bf16")
    else:
        ref = p.encode(x.numpy())
    assert np.array_equal(codes.numpy(), ref)
    dec = kt.decode(p, codes)
    assert np.array_equal(dec.numpy(), p.decode(ref))
    assert kt.encode(p, x[0]).shape == (p.code_bytes,)  # 1-D in, 1-D out


def test_score_accumulate_unrotate_match_plan():
    p = kvq.Plan("tq-mse:4", 128, seed=2)
    k = torch.randn(50, 128)
    codes = kt.encode(p, k)
    q = torch.randn(3, 128)
    assert np.array_equal(kt.score(p, q, codes).numpy(), p.score(q.numpy(), codes.numpy()))
    w = torch.softmax(torch.randn(3, 50), dim=1)
    acc = kt.accumulate(p, w, codes)
    ref = p.accumulate(w.numpy(), codes.numpy())
    assert np.array_equal(acc.numpy(), ref)
    assert np.array_equal(kt.unrotate(p, acc).numpy(), p.unrotate(ref))
    # attention from the pieces = attention over the decoded rows
    att = kt.unrotate(p, kt.accumulate(p, w, codes)).double()
    ref2 = w.double() @ torch.from_numpy(p.decode(codes.numpy())).double()
    assert float((att - ref2).norm() / ref2.norm()) < 1e-4  # f32 sums in the kernels' order (2.1e-5 seen on AVX-512)


def test_ops_are_registered_and_checked():
    for name in ("encode", "decode", "score", "accumulate", "unrotate", "cuda_encode", "store_pages",
                 "store_window", "attend"):
        assert hasattr(torch.ops.kvq, name), name
    p = kvq.Plan("q8", 128)
    with pytest.raises(kvq.InvalidArgumentError):
        torch.ops.kvq.encode(torch.randn(2, 128), 12345)  # not a live plan's key
    with pytest.raises(kvq.InvalidArgumentError):
        kt.encode(p, torch.randn(4, 256)[:, ::2])  # not contiguous
    x = torch.randn(4, 128)
    x[1, 3] = float("nan")
    with pytest.raises(kvq.NonFiniteError):
        kt.encode(p, x)


def test_opcheck_cpu_ops():
    p = kvq.Plan("tq-mse:4", 128, seed=1)
    key = kt.plan_key(p)
    x = torch.randn(8, 128)
    codes = kt.encode(p, x)
    torch.library.opcheck(torch.ops.kvq.encode.default, (x, key), test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.kvq.decode.default, (codes, key), test_utils=("test_schema", "test_faketensor"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a GPU")
def test_cuda_parts_without_a_gpu():
    assert kt.cuda_available() is False
    with pytest.raises(kvq.Error):  # no libkvq-cuda (UnsupportedError), or no device
        kt.CudaPlan(kvq.Plan("tq-mse:4", 128), "cuda")


# ---------------------------------------------------------------- CUDAStore on the emulation
def _spec(layer=0, B=3, H=2, HQ=4, k="tq-mse:4", v="tq-mse:2", W=0, max_tokens=0, seed=7, S=0):
    return LayerSpec(layer, B, H, HQ, 128, k, v, W, 0, seed, max_tokens, sink_tokens=S)


def _store(spec, P=16, group=None):
    return CUDAStore(spec, "cpu", page_tokens=P, kernels=EmuKernels(), group=group)


def _ref(spec):
    kp = kvq.Plan(spec.k_spec, 128, plan_seed(spec.seed, spec.layer, 0))
    vp = kvq.Plan(spec.v_spec, 128, plan_seed(spec.seed, spec.layer, 1))
    return RefStore(spec.batch, spec.n_kv_heads, spec.n_q_heads, spec.f16_window, kp, vp, spec.sink_tokens)


def _step(store, ref, T, skip=None, dtype=torch.bfloat16, gen=None):
    B, H, HQ = store.B, store.H, store.HQ
    k = (torch.randn(B, H, T, 128, generator=gen) * 2).to(dtype)
    v = torch.randn(B, H, T, 128, generator=gen).to(dtype)
    q = torch.randn(B, HQ, T, 128, generator=gen).to(dtype)
    store.append(k, v, skip)
    ref.append(k, v, skip)
    out = store.attend(q, 128 ** -0.5, skip)
    want = ref.attend(q, 128 ** -0.5, skip)
    assert out.shape == (B, T, HQ, 128) and out.dtype == dtype
    err = np.linalg.norm(out.double().numpy() - want) / max(np.linalg.norm(want), 1e-30)
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5  # the output's own rounding
    assert err < tol, err
    return out


@pytest.mark.parametrize("W", [0, 5, 40])
def test_store_prefill_decode_padding_gqa(W):
    gen = torch.Generator().manual_seed(W)
    spec = _spec(W=W)
    st, ref = _store(spec), _ref(spec)
    out = _step(st, ref, 21, skip=[0, 4, 21], dtype=torch.float32, gen=gen)  # seq 2: all padding
    assert torch.all(out[1, :4] == 0) and torch.all(out[2] == 0)
    assert list(st.lengths()) == [21, 17, 0]
    for _ in range(3):
        _step(st, ref, 1, dtype=torch.float32, gen=gen)
    _step(st, ref, 6, dtype=torch.float32, gen=gen)  # a second chunk (continued prefill)
    _step(st, ref, 1, dtype=torch.bfloat16, gen=gen)
    assert list(st.lengths()) == [31, 27, 10]
    assert st.memory_bytes() > 0


def test_store_grows_and_preallocated_refuses():
    gen = torch.Generator().manual_seed(1)
    spec = _spec(B=2, W=3)
    st, ref = _store(spec, P=16), _ref(spec)
    cap0 = st.capacity
    _step(st, ref, cap0 + 20, dtype=torch.float32, gen=gen)  # grows the pool (pages appended)
    assert st.capacity > cap0
    _step(st, ref, 1, dtype=torch.float32, gen=gen)
    pre = _store(_spec(B=2, max_tokens=40))
    assert pre.capacity == 48
    pre.append(torch.randn(2, 2, 40, 128), torch.randn(2, 2, 40, 128))
    with pytest.raises(kvq.StateError):
        pre.append(torch.randn(2, 2, 9, 128), torch.randn(2, 2, 9, 128))


def test_store_crop_reorder_reset():
    gen = torch.Generator().manual_seed(2)
    spec = _spec(B=3, W=4)
    st, ref = _store(spec), _ref(spec)
    _step(st, ref, 30, dtype=torch.float32, gen=gen)
    st.crop(12)
    ref.crop(12)
    assert list(st.lengths()) == [12, 12, 12]
    _step(st, ref, 1, dtype=torch.float32, gen=gen)
    _step(st, ref, 3, dtype=torch.float32, gen=gen)
    st.reorder([2, 2, 0])
    ref.reorder([2, 2, 0])
    _step(st, ref, 1, dtype=torch.float32, gen=gen)
    _step(st, ref, 1, dtype=torch.float32, gen=gen)
    st.reset()
    assert list(st.lengths()) == [0, 0, 0]
    ref2 = _ref(spec)
    _step(st, ref2, 5, dtype=torch.float32, gen=gen)


def test_group_shares_positions_across_layers():
    gen = torch.Generator().manual_seed(3)
    g = StoreGroup()
    specs = [_spec(layer=i, W=6) for i in range(3)]
    stores = [_store(s, group=g) for s in specs]
    refs = [_ref(s) for s in specs]
    for T, skip in ((9, [0, 2, 5]), (1, None), (1, None), (4, None), (1, None)):
        for st, ref in zip(stores, refs):
            _step(st, ref, T, skip=skip, dtype=torch.float32, gen=gen)
    assert stores[0]._pos is stores[2]._pos
    assert all(list(s.lengths()) == [16, 14, 11] for s in stores)
    for st, ref in zip(stores, refs):
        st.reorder([1, 0, 0])
        ref.reorder([1, 0, 0])
    for st, ref in zip(stores, refs):
        _step(st, ref, 1, dtype=torch.float32, gen=gen)
    assert all(list(s.lengths()) == [15, 17, 17] for s in stores)
    for st, ref in zip(stores, refs):
        st.crop(10)
        ref.crop(10)
    for st, ref in zip(stores, refs):
        _step(st, ref, 2, dtype=torch.float32, gen=gen)


def test_group_stores_made_lazily_and_out_of_step():
    gen = torch.Generator().manual_seed(4)
    g = StoreGroup()
    specs = [_spec(layer=i, W=3) for i in range(3)]
    stores, refs = [], []
    for s in specs:  # as kvq.transformers.Cache does: each layer's store made at its first update
        stores.append(_store(s, group=g))
        refs.append(_ref(s))
        _step(stores[-1], refs[-1], 7, skip=[1, 0, 0], dtype=torch.float32, gen=gen)
    for _ in range(2):
        for st, ref in zip(stores, refs):
            _step(st, ref, 1, dtype=torch.float32, gen=gen)
    assert all(list(s.lengths()) == [8, 9, 9] for s in stores)
    stores[0].append(torch.randn(3, 2, 1, 128), torch.randn(3, 2, 1, 128))
    with pytest.raises(kvq.StateError):  # a different chunk in the same step
        stores[1].append(torch.randn(3, 2, 2, 128), torch.randn(3, 2, 2, 128))
    with pytest.raises(kvq.StateError):  # a second step before the other layers had the first
        stores[0].append(torch.randn(3, 2, 1, 128), torch.randn(3, 2, 1, 128))


def test_store_prefill_error_stores_nothing():
    spec = _spec(B=2, W=0)
    st = _store(spec)
    st.append(torch.randn(2, 2, 5, 128), torch.randn(2, 2, 5, 128))
    k = torch.randn(2, 2, 4, 128)
    k[1, 0, 2, 7] = float("inf")
    with pytest.raises(kvq.NonFiniteError):
        st.append(k, torch.randn(2, 2, 4, 128))
    assert list(st.lengths()) == [5, 5]
    assert st._pos.len.tolist() == [5, 5]


@pytest.mark.parametrize("W", [0, 6])
@pytest.mark.parametrize("k,v", [("tq-mse:4+chscale", "tq-mse:4"), ("q8+center", "tq-mse:2+chscale")])
def test_store_calibrated_matches_the_c_cache(k, v, W):
    """Calibrated policies: f16 until every sequence holds calib_tokens positions, then per-head plans fitted
    on them (the C cache's seeds and rows) and every position re-encoded; reset calibrates again."""
    rng = np.random.default_rng(W + 17)
    N = 16
    spec = LayerSpec(1, 1, 2, 4, 128, k, v, W, 0, 7, 0, N)
    st = _store(spec)
    c = kvq.Cache(n_layers=2, n_kv_heads=2, head_dim=128, k_spec=k, v_spec=v, f16_window=W, calib_tokens=N, seed=7)
    mean = rng.standard_normal((2, 2, 128)) * 2  # (K/V, head, channel)
    sg = np.exp(rng.standard_normal((2, 2, 128)) * 0.8)
    for i, T in enumerate((9, 1, 13, 1, 1, 4)):
        k_ = (rng.standard_normal((T, 2, 128)) * sg[0] + mean[0]).astype(np.float32)
        v_ = (rng.standard_normal((T, 2, 128)) * sg[1] + mean[1]).astype(np.float32)
        q = rng.standard_normal((T, 4, 128)).astype(np.float32)
        st.append(torch.from_numpy(k_).permute(1, 0, 2)[None], torch.from_numpy(v_).permute(1, 0, 2)[None])
        assert st.calibrated == (i >= 2)
        got = st.attend(torch.from_numpy(q).permute(1, 0, 2)[None], 128 ** -0.5)[0].numpy()
        c.append(1, k_, v_)
        want = c.attend(1, q)
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err < (1e-4 if i < 2 else 3e-2), (i, err)  # f16 before calibration: the same values
    st.reset()
    assert not st.calibrated and list(st.lengths()) == [0]


def test_store_calibrated_batch():
    calibrated_batch_case(lambda spec: _store(spec), "cpu", 1e-4)  # the emulation decodes the same records


def test_store_refuses_what_the_kernels_do_not_serve():
    with pytest.raises(kvq.UnsupportedError, match="head dim"):
        CUDAStore(LayerSpec(0, 1, 1, 1, 80, "tq-mse:4", "tq-mse:4", 0, 0, 1), "cpu", kernels=EmuKernels())
    with pytest.raises(kvq.UnsupportedError, match="sliding"):
        CUDAStore(LayerSpec(0, 1, 1, 1, 128, "tq-mse:4", "tq-mse:4", 0, 512, 1), "cpu", kernels=EmuKernels())
    with pytest.raises(kvq.UnsupportedError, match="outliers"):
        CUDAStore(LayerSpec(0, 1, 1, 1, 128, "tq-mse:4+outliers=8", "tq-mse:4", 0, 0, 1), "cpu",
                  kernels=EmuKernels())


@pytest.mark.parametrize("W", [0, 6])
def test_store_matches_the_c_cache(W):
    """CUDAStore (emulated kernels) and kvq.Cache (the C cache, seed = spec.seed) attend the same values:
    same plan seeds (plan_seed = cache_plan_seed), same f16 window rule (main_end)."""
    rng = np.random.default_rng(W)
    spec = _spec(layer=2, B=1, H=2, HQ=4, k="tq-mse:4", v="q8", W=W)
    st = _store(spec)
    c = kvq.Cache(n_layers=3, n_kv_heads=2, head_dim=128, k_spec="tq-mse:4", v_spec="q8", f16_window=W, seed=7)
    for T in (13, 1, 1, 4):
        k = rng.standard_normal((T, 2, 128)).astype(np.float32)
        v = rng.standard_normal((T, 2, 128)).astype(np.float32)
        q = rng.standard_normal((T, 4, 128)).astype(np.float32)
        st.append(torch.from_numpy(k).permute(1, 0, 2)[None], torch.from_numpy(v).permute(1, 0, 2)[None])
        got = st.attend(torch.from_numpy(q).permute(1, 0, 2)[None], 128 ** -0.5)[0].numpy()
        c.append(2, k, v)
        want = c.attend(2, q)
        # the C cache's tq scores round the query to 8 bits (docs/CUDA.md): agreement to ~1e-2
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err < 3e-2, err


# ---------------------------------------------------------------- the f16 sink (policy sink=S)
@pytest.mark.parametrize("S,W", [(1, 0), (4, 0), (4, 6), (20, 5)])
def test_store_sink_prefill_decode_padding_crop_reorder(S, W):
    """The first S positions in the f16 sink (never in the pages: their slots are -1), then pages from
    position S on, then the ring; lengths through S - 1, S, S + 1, S + W with padding, a second chunk,
    crop below S and a reorder."""
    gen = torch.Generator().manual_seed(S * 10 + W)
    spec = _spec(W=W, S=S)
    st, ref = _store(spec), _ref(spec)
    _step(st, ref, max(1, S - 1), skip=[0, 1, max(1, S - 1)], dtype=torch.float32, gen=gen)
    for _ in range(2 + W):  # S, S + 1, ..., S + W (+ 1)
        _step(st, ref, 1, dtype=torch.float32, gen=gen)
    _step(st, ref, 30, dtype=torch.float32, gen=gen)
    assert st.layer.calls["store_sink"] > 0
    assert st._sink.shape == (3, 2, 2, S, 128)
    st.crop(S - 1 if S > 1 else 1)
    ref.crop(S - 1 if S > 1 else 1)
    for T in (1, 1, 9, 1):
        _step(st, ref, T, dtype=torch.float32, gen=gen)
    st.reorder([2, 0, 0])
    ref.reorder([2, 0, 0])
    _step(st, ref, 1, dtype=torch.float32, gen=gen)
    _step(st, ref, 3, dtype=torch.bfloat16, gen=gen)
    calls = st.layer.calls["store_sink"]
    _step(st, ref, 1, dtype=torch.float32, gen=gen)  # every sequence past the sink: not launched
    assert st.layer.calls["store_sink"] == calls


@pytest.mark.parametrize("S,W", [(1, 0), (4, 0), (4, 6)])
@pytest.mark.parametrize("k,v", [("f16", "q8"), ("tq-mse:4", "tq-mse:2")])
def test_store_sink_matches_the_c_cache(S, W, k, v):
    """CUDAStore with sink=S (emulated kernels) and kvq.Cache with the same policy attend the same values:
    a sink-like first key (8x) draws the attention, so its value coded instead of kept f16 is visible.
    f16 keys: the C cache's scores are exact there (its q8 and tq scores round the query to 8 bits)."""
    rng = np.random.default_rng(S + W)
    st = _store(_spec(layer=1, B=1, k=k, v=v, W=W, S=S))
    c = kvq.Cache(2, 2, 128, f"{k}/{v},sink={S}" + (f",w={W}" if W else ""), seed=7)
    plain = kvq.Cache(2, 2, 128, f"{k}/{v}" + (f",w={W}" if W else ""), seed=7)
    errs, errs_plain = [], []
    for i, T in enumerate((1, 2, 1, 1, 13, 1, 4)):  # lengths 1, 3, 4, 5, 18, 19, 23
        k_ = rng.standard_normal((T, 2, 128)).astype(np.float32)
        if i == 0:
            k_ *= 8
        v_ = rng.standard_normal((T, 2, 128)).astype(np.float32)
        q = rng.standard_normal((T, 4, 128)).astype(np.float32)
        st.append(torch.from_numpy(k_).permute(1, 0, 2)[None], torch.from_numpy(v_).permute(1, 0, 2)[None])
        got = st.attend(torch.from_numpy(q).permute(1, 0, 2)[None], 128 ** -0.5)[0].numpy()
        for cache, e in ((c, errs), (plain, errs_plain)):
            cache.append(1, k_, v_)
            want = cache.attend(1, q)
            e.append(np.linalg.norm(got - want) / np.linalg.norm(want))
    tol = 1e-4 if k == "f16" else 3e-2
    assert max(errs) < tol, errs
    if k == "f16":
        assert max(errs_plain) > 10 * tol, errs_plain  # the sink matters here


def test_store_sink_calibrated_batch():
    calibrated_batch_case(lambda spec: _store(spec), "cpu", 1e-4, S=4)


def test_cache_specs_carry_the_sink():
    """kvq.transformers.Cache resolves sink=S as the C cache: global compressed layers only."""
    from kvq.transformers._cache import layer_specs
    geo = dict(n_layers=4, n_q_heads=4, n_kv_heads=2, head_dim=128, windows=[0, 512, 0, 0])
    specs = layer_specs(kvq.Policy("tq-mse:4,f16layers=-1,sink=4"), geo, 1, 0)
    assert [s.sink_tokens for s in specs] == [4, 0, 4, 0]
    specs = layer_specs(kvq.Policy("tq-mse:4,sliding=1,sink=2"), geo, 1, 0)
    assert [s.sink_tokens for s in specs] == [2, 0, 2, 2]
