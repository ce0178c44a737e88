"""kvq.torch's CUDA operators and CUDAStore on a GPU (skipped without CUDA or without libkvq-cuda).

- encode: the device records equal the CPU codec's scalar reference byte for byte;
- attend: against float64 attention over the decoded cache, within the kernels' f16 tensor-core error;
- a decode step of CUDAStore captured in a CUDA graph and replayed equals eager steps;
- CUDAStore against a float64 reference for prefill (causal rows) + decode, with padding (skip), GQA,
  f16 windows, bf16 and f32 inputs; UnsupportedError for what the kernels do not serve.
Run on the H200 with torch 2.11 (docs/RESULTS.md, "H200 serving")."""
import os
import sys
import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kvq  # noqa: E402
import kvq.torch as kt  # noqa: E402

if not kt.cuda_available():
    pytest.skip("no CUDA device or no libkvq-cuda (pip install . -Ccmake.define.KVQ_CUDA=ON)",
                allow_module_level=True)

from kvq.transformers._cuda_store import CudaKernels, CUDAStore, StoreGroup, plan_seed  # noqa: E402
from kvq.transformers._store import LayerSpec  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from cuda_emul import RefStore, calibrated_batch_case  # noqa: E402

DEV = torch.device("cuda")


def _rel(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


@pytest.mark.parametrize("spec", ["f16", "q8", "tq-mse:1", "tq-mse:2", "tq-mse:4", "tq-mse:4+norot", "rvq:2",
                                  "tq-prod:3", "qjl", "tq-mse:3", "tq-mse:8"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [128, 96])
def test_encode_bytes_equal_cpu_scalar_reference(spec, dtype, d):
    p = kvq.Plan(spec, d, seed=5)
    ref_plan = p.clone("scalar")
    x = (torch.randn(1001, d) * torch.exp(torch.randn(1001, 1))).to(dtype)
    st = kt.new_status(DEV)
    got = kt.encode(p, x.to(DEV), status=st)
    kt.check_status(st)
    xc = x.float() if dtype == torch.bfloat16 else x  # the CUDA path converts bf16 to f32 first
    want = ref_plan.encode(xc.numpy())
    assert got.dtype == torch.uint8 and got.device.type == "cuda"
    diff = int((got.cpu().numpy() != want).any(axis=1).sum())
    assert diff == 0, f"{diff} of 1001 records differ"


def test_encode_errors_go_to_status():
    p = kvq.Plan("tq-mse:4", 128)
    x = torch.randn(64, 128, device=DEV)
    x[5, 1] = float("nan")
    st = kt.new_status(DEV)
    kt.encode(p, x, status=st)  # asynchronous: no error yet
    with pytest.raises(kvq.NonFiniteError):
        kt.check_status(st)
    kt.check_status(st)  # zeroed by the first check
    with pytest.raises(kvq.NonFiniteError):
        kt.encode(p, x)  # without a status word: checked at once


def _layer_case(kspec, vspec, H, HQ, P, W, lens, wins, seed, d=128, S=0, sinks=None):
    """Pages and rings filled through the operators; float64 reference on the decoded rows. With S > 0,
    sequence s has sinks[s] rows in the f16 sink before its lens[s] page positions (every row passed to
    store_sink: those from S on store nothing)."""
    g = torch.Generator().manual_seed(seed)
    kp, vp = kvq.Plan(kspec, d, seed=seed), kvq.Plan(vspec, d, seed=seed)
    layer = kt.CudaLayer(kt.CudaPlan(kp), kt.CudaPlan(vp), H, HQ, P, W, S)
    sinks = sinks or [0] * len(lens)
    n = len(lens)
    maxp = max(1, max(-(-l // P) for l in lens))
    perm = torch.randperm(n * maxp, generator=g)
    bt = perm.view(n, maxp).to(torch.int32)
    pages = torch.full((n * maxp * layer.page_bytes,), 0x5a, dtype=torch.uint8, device=DEV)
    ring = torch.zeros((n, 2, H, max(W, 1), d), dtype=torch.float16, device=DEV)
    sink = torch.full((n, 2, H, max(S, 1), d), float("nan"), dtype=torch.float16, device=DEV)
    st = kt.new_status(DEV)
    K, V = [], []
    for s, (L, w) in enumerate(zip(lens, wins)):
        a = sinks[s]
        k = torch.randn(a + L + w, H, d, generator=g) * torch.exp(torch.randn(a + L + w, 1, 1, generator=g) * 0.5)
        v = torch.randn(a + L + w, H, d, generator=g)
        K.append(k)
        V.append(v)
        if L:
            pos = torch.arange(L)
            dst = (bt[s, pos // P] * P + pos % P).to(torch.int32).to(DEV)
            kt.store_pages(layer, pages, k[a:a + L].contiguous().to(DEV), dst, 0, st)
            kt.store_pages(layer, pages, v[a:a + L].contiguous().to(DEV), dst, 1, st)
        if w:
            seq = torch.full((w,), s, dtype=torch.int32, device=DEV)
            pos = torch.arange(a + L, a + L + w, dtype=torch.int32, device=DEV)
            kt.store_window(layer, ring, k[a + L:].contiguous().to(DEV), seq, pos, 0, st)
            kt.store_window(layer, ring, v[a + L:].contiguous().to(DEV), seq, pos, 1, st)
        if S and a + L + w:
            seq = torch.full((a + L + w,), s, dtype=torch.int32, device=DEV)
            pos = torch.arange(a + L + w, dtype=torch.int32, device=DEV)
            kt.store_sink(layer, sink, k.contiguous().to(DEV), seq, pos, 0, st)
            kt.store_sink(layer, sink, v.contiguous().to(DEV), seq, pos, 1, st)
    kt.check_status(st)
    q = torch.randn(n, HQ, d, generator=g)
    scale = d ** -0.5
    out = kt.attend(layer, q.to(DEV), pages, bt.to(DEV), torch.tensor(lens, dtype=torch.int32, device=DEV), scale,
                    max(lens), torch.tensor(wins, dtype=torch.int32, device=DEV) if W else None, ring if W else None,
                    sink_len=torch.tensor(sinks, dtype=torch.int32, device=DEV) if S else None,
                    sink=sink if S else None)
    ks, vs = kp.clone("scalar"), vp.clone("scalar")
    ref = np.zeros((n, HQ, d))
    G = HQ // H
    for s, (L, w) in enumerate(zip(lens, wins)):
        a = sinks[s]

        def rows(plan, X):  # the sink's rows f16, the pages' decoded, the window's f16
            main = plan.decode(plan.encode(X[a:a + L].contiguous().numpy())) if L else np.zeros((0, d))
            return np.concatenate([X[:a].half().double().numpy(), main,
                                   X[a + L:].half().double().numpy()]).astype(np.float64)
        for h in range(H):
            kd, vd = rows(ks, K[s][:, h]), rows(vs, V[s][:, h])
            if a + L + w == 0:
                continue
            for gq in range(G):
                sc = kd @ q[s, h * G + gq].double().numpy() * scale
                pr = np.exp(sc - sc.max())
                ref[s, h * G + gq] = pr @ vd / pr.sum()
    return out.cpu().numpy(), ref


@pytest.mark.parametrize("kspec,vspec,W", [("tq-mse:4", "tq-mse:4", 0), ("tq-mse:2", "tq-mse:2", 16), ("q8", "q8", 0),
                                           ("f16", "tq-mse:4", 8), ("tq-mse:1", "tq-mse:1", 0),
                                           ("rvq:2", "q8", 32)])
def test_attend_vs_float64_on_decoded_cache(kspec, vspec, W):
    lens = [1, 300, 0, 2049, 17]
    wins = [min(W, 5), W, min(W, 3), W, 0] if W else [0] * 5
    out, ref = _layer_case(kspec, vspec, 4, 16, 64, W, lens, wins, seed=zlib.crc32(f"{kspec}{vspec}{W}".encode()) % 1000)
    assert np.isfinite(out).all()
    assert _rel(out, ref) < 1.5e-3  # f16 tensor-core inputs, f32 accumulation (docs/CUDA.md: <= 6e-4 typical)
    if not W:
        assert np.all(out[2] == 0)  # a sequence without positions


@pytest.mark.parametrize("kspec,vspec,W,d", [("tq-mse:4", "tq-mse:4", 0, 64), ("tq-mse:3", "tq-mse:3", 16, 96),
                                             ("q8", "tq-mse:2", 8, 256), ("tq-mse:3", "tq-mse:2", 8, 256),
                                             ("tq-mse:3", "tq-mse:3", 0, 128), ("rvq:3", "tq-mse:4+scale32", 0, 64)])
def test_attend_other_head_dims_vs_float64(kspec, vspec, W, d):
    """Head dims 64 and 256 (f16, q8, tq-mse:2/3/4: the tensor-core kernel, f16 inputs; tq-mse:3 also at
    128), 96 (dense rotation) and rvq:3 / f32-scale records (the generic kernel, f32)."""
    lens = [1, 300, 0, 2049, 17]
    wins = [min(W, 5), W, min(W, 3), W, 0] if W else [0] * 5
    out, ref = _layer_case(kspec, vspec, 2, 8, 64, W, lens, wins,
                           seed=zlib.crc32(f"{kspec}{vspec}{W}{d}".encode()) % 1000, d=d)
    assert np.isfinite(out).all()
    assert _rel(out, ref) < 1e-3
    if not W:
        assert np.all(out[2] == 0)


@pytest.mark.parametrize("kspec,vspec,W,d,S", [("tq-mse:4", "tq-mse:4", 0, 128, 1), ("tq-mse:2", "tq-mse:2", 16, 128, 4),
                                               ("q8", "tq-mse:4", 8, 64, 4), ("tq-mse:4", "tq-mse:2", 0, 256, 1),
                                               ("tq-mse:3", "tq-mse:3", 8, 96, 4), ("tq-mse:5", "tcq:3", 0, 128, 1),
                                               ("tq-mse:4", "q8", 8, 128, 20), ("tq-mse:5", "tq-mse:4", 8, 128, 2)])
def test_attend_sink_vs_float64(kspec, vspec, W, d, S):
    """The f16 sink (kvq::store_sink, attend's sink_len): rows read by the window pass (tensor-core window
    kernel at d = 64 / 128 / 256, the generic one at 96), with and without a ring; sequences shorter than S
    (a sink alone), of S, S + 1 (one page position), S + W, long; S = 20: a tile with sink and ring rows."""
    tot = [1, S - 1, S, S + 1, S + W, 0, 2100]
    sinks = [min(n, S) for n in tot]
    lens = [max(0, n - S - W) if n > S else 0 for n in tot]
    wins = [n - a - m for n, a, m in zip(tot, sinks, lens)]
    out, ref = _layer_case(kspec, vspec, 2, 8, 64, W, lens, wins, seed=zlib.crc32(f"{kspec}{vspec}{W}{d}{S}".encode()) % 1000,
                           d=d, S=S, sinks=sinks)
    assert np.isfinite(out).all()  # the sinks' unwritten rows are NaN: never read
    assert _rel(out, ref) < 1.5e-3
    assert np.all(out[5] == 0)  # a sequence without positions


def _spec(layer=0, B=3, H=2, HQ=8, k="tq-mse:4", v="tq-mse:4", W=0, max_tokens=0, seed=3, d=128, S=0):
    return LayerSpec(layer, B, H, HQ, d, k, v, W, 0, seed, max_tokens, sink_tokens=S)


def _ref_for(spec):
    d = spec.head_dim
    kp = kvq.Plan(spec.k_spec, d, plan_seed(spec.seed, spec.layer, 0)).clone("scalar")
    vp = kvq.Plan(spec.v_spec, d, plan_seed(spec.seed, spec.layer, 1)).clone("scalar")
    return RefStore(spec.batch, spec.n_kv_heads, spec.n_q_heads, spec.f16_window, kp, vp, spec.sink_tokens)


def _check_step(st, ref, T, skip, dtype, g, tol):
    B, H, HQ, d = st.B, st.H, st.HQ, st.d
    k = (torch.randn(B, H, T, d, generator=g) * 3).to(dtype)
    v = torch.randn(B, H, T, d, generator=g).to(dtype)
    q = torch.randn(B, HQ, T, d, generator=g).to(dtype)
    st.append(k.to(DEV), v.to(DEV), skip)
    ref.append(k, v, skip)
    out = st.attend(q.to(DEV), d ** -0.5, skip)
    assert out.dtype == dtype and out.shape == (B, T, HQ, d)
    want = ref.attend(q, d ** -0.5, skip)
    err = _rel(out.double().cpu().numpy(), want)
    assert err < tol, (T, skip, err)
    return err


@pytest.mark.parametrize("k,v,W,d,S", [("tq-mse:4", "tq-mse:4", 0, 128, 0), ("tq-mse:4", "tq-mse:4", 24, 128, 0),
                                       ("q8", "q8", 0, 128, 0), ("tq-mse:2", "tq-mse:2", 8, 128, 0), ("f16", "f16", 0, 128, 0),
                                       ("tq-mse:3", "tq-mse:3", 0, 128, 0), ("tq-mse:4", "tq-mse:3", 8, 64, 0),
                                       ("tq-mse:3", "tq-mse:2", 0, 96, 0), ("tq-mse:4", "tq-mse:4", 16, 256, 0),
                                       ("tq-mse:4", "tq-mse:4", 0, 128, 1), ("tq-mse:2", "tq-mse:2", 8, 128, 4),
                                       ("tq-mse:4", "tq-mse:3", 8, 64, 4), ("tq-mse:5", "tcq:3", 0, 128, 1)])
def test_cuda_store_prefill_decode_padding_gqa(k, v, W, d, S):
    """S > 0: the f16 sink (the first S positions; sequence 2, all padding at first, grows through 1..S)."""
    g = torch.Generator().manual_seed(11)
    spec = _spec(k=k, v=v, W=W, d=d, S=S)
    st, ref = CUDAStore(spec, DEV, page_tokens=32), _ref_for(spec)
    _check_step(st, ref, 77, [0, 9, 77], torch.float32, g, 2e-3)  # left padding, a sequence of padding only
    for _ in range(4):
        _check_step(st, ref, 1, None, torch.float32, g, 2e-3)
    _check_step(st, ref, 40, None, torch.float32, g, 2e-3)  # a second prefill chunk
    _check_step(st, ref, 1, None, torch.bfloat16, g, 1.5e-2)  # bf16 in and out (the output's own rounding)
    assert list(st.lengths()) == [122, 113, 45]
    st.check()


def test_cuda_store_group_grow_crop_reorder():
    g = torch.Generator().manual_seed(12)
    grp = StoreGroup()
    specs = [_spec(layer=i, B=2, W=6) for i in range(2)]
    sts = [CUDAStore(s, DEV, page_tokens=16, group=grp) for s in specs]
    refs = [_ref_for(s) for s in specs]
    for T in (300, 1, 1):  # 300 > the initial capacity: the pools grow
        for st, ref in zip(sts, refs):
            _check_step(st, ref, T, None, torch.float32, g, 2e-3)
    for st, ref in zip(sts, refs):
        st.crop(100)
        ref.crop(100)
        st.reorder([1, 1])
        ref.reorder([1, 1])
    for T in (1, 5, 1):
        for st, ref in zip(sts, refs):
            _check_step(st, ref, T, None, torch.float32, g, 2e-3)


@pytest.mark.parametrize("S", [0, 4])
def test_cuda_store_graph_replay_equals_eager(S):
    g = torch.Generator().manual_seed(13)
    B, H, HQ, cap = 4, 2, 8, 512
    spec = _spec(B=B, H=H, HQ=HQ, W=16, max_tokens=cap, S=S)
    a, b = CUDAStore(spec, DEV, page_tokens=64), CUDAStore(spec, DEV, page_tokens=64)
    k0, v0 = torch.randn(B, H, 200, 128, generator=g).to(DEV), torch.randn(B, H, 200, 128, generator=g).to(DEV)
    for s in (a, b):
        s.append(k0, v0, [0, 3, 50, 0])
    sk, sv, sq = (torch.zeros(B, H, 1, 128, device=DEV, dtype=torch.bfloat16) for _ in range(3))
    sq = torch.zeros(B, HQ, 1, 128, device=DEV, dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up (module loading, allocator) outside the capture
        a.append(sk, sv)
        a.attend(sq, 128 ** -0.5)
        b.append(sk, sv)
        b.attend(sq, 128 ** -0.5)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        a.append(sk, sv)
        out = a.attend(sq, 128 ** -0.5)
    # capturing does not execute: a's device lengths are still those before the capture, its host copy
    # counted the captured step: reload it
    a.sync_lengths()
    errs = []
    for i in range(6):
        sk.copy_(torch.randn(B, H, 1, 128, generator=g).to(DEV))
        sv.copy_(torch.randn(B, H, 1, 128, generator=g).to(DEV))
        sq.copy_(torch.randn(B, HQ, 1, 128, generator=g).to(DEV))
        graph.replay()
        b.append(sk, sv)
        want = b.attend(sq, 128 ** -0.5)
        errs.append(_rel(out.float().cpu().numpy(), want.float().cpu().numpy()))
    assert a.sync_lengths() == b.sync_lengths()
    assert max(errs) < 1e-2, errs  # bf16 outputs of two groupings of the split-K sums (usually equal)
    a.check()


def test_cuda_store_custom_ops_path():
    g = torch.Generator().manual_seed(14)
    spec = _spec(B=2, W=4)
    st, ref = CUDAStore(spec, DEV, kernels=CudaKernels(use_ops=True)), _ref_for(spec)
    _check_step(st, ref, 9, [2, 0], torch.float32, g, 2e-3)
    _check_step(st, ref, 1, None, torch.float32, g, 2e-3)


@pytest.mark.parametrize("S", [0, 4])
def test_cuda_store_calibrated_batch(S):
    """+center / +chscale on the kernels: f16 until both sequences hold calib_tokens, then per-head plans
    fitted on their first positions (kvq_cuda_plan_create_heads), against RefStore with those plans."""
    calibrated_batch_case(lambda spec: CUDAStore(spec, DEV, page_tokens=32), DEV, 2e-3, S)


@pytest.mark.parametrize("k,v,W,d,S", [("tq-mse:4+chscale", "tq-mse:4", 0, 128, 0),
                                       ("tq-mse:4+chscale", "tq-mse:4", 16, 128, 0),
                                       ("q8+chscale", "tq-mse:2+chscale", 8, 64, 0),
                                       ("tq-mse:4+chscale", "tq-mse:4+chscale", 0, 256, 0),
                                       ("tq-mse:3+chscale", "tq-mse:3+center", 8, 128, 0),
                                       # the README's policy (with a window: a tcq record coded from f32 (the C
                                       # cache, W = 0) and from f16 (here) can take another trellis path)
                                       ("tq-mse:5+chscale", "tcq:3", 8, 128, 1),
                                       ("tq-mse:5+chscale", "tcq:3", 16, 64, 1),
                                       ("tq-mse:4+chscale", "tq-mse:4", 8, 128, 4),
                                       ("q8+chscale", "tq-mse:2+chscale", 0, 64, 4)])
def test_cuda_store_calibrated_matches_the_c_cache(k, v, W, d, S):
    """B = 1: the C cache's per-head plans (same rows, same seeds; with sink=S the sink's rows are among
    them) and records; its tq scores round the query to 8 bits, hence the tolerance."""
    rng = np.random.default_rng(W + d + S)
    N, H, HQ = 24, 2, 8
    st = CUDAStore(LayerSpec(0, 1, H, HQ, d, k, v, W, 0, 5, 0, N, S), DEV, page_tokens=32)
    c = kvq.Cache(1, H, d, f"{k}/{v},sink={S}" if S else None, k_spec=k, v_spec=v, f16_window=W, calib_tokens=N,
                  seed=5)
    mean = rng.standard_normal((2, H, d)) * 2
    sg = np.exp(rng.standard_normal((2, H, d)) * 0.8)
    for i, T in enumerate((10, 1, 40, 1, 1, 300, 1)):
        k_ = (rng.standard_normal((T, H, d)) * sg[0] + mean[0]).astype(np.float32)
        v_ = (rng.standard_normal((T, H, d)) * sg[1] + mean[1]).astype(np.float32)
        q = rng.standard_normal((T, HQ, d)).astype(np.float32)
        st.append(torch.from_numpy(k_).permute(1, 0, 2)[None].to(DEV),
                  torch.from_numpy(v_).permute(1, 0, 2)[None].to(DEV))
        assert st.calibrated == (i >= 2)
        got = st.attend(torch.from_numpy(q).permute(1, 0, 2)[None].to(DEV), d ** -0.5)[0].cpu().numpy()
        c.append(0, k_, v_)
        want = c.attend(0, q)
        err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
        assert err < (2e-3 if i < 2 else 3e-2), (i, err)
    st.check()


@pytest.mark.parametrize("k,v,match", [("polar", "tq-mse:4", "polar"), ("q4", "q4", "q4"),
                                       ("tq-mse:4+outliers=8", "tq-mse:4", "outliers")])
def test_cuda_store_unsupported(k, v, match):
    with pytest.raises(kvq.UnsupportedError, match=match):
        CUDAStore(_spec(k=k, v=v), DEV)
    with pytest.raises(kvq.UnsupportedError, match="head dim"):
        CUDAStore(LayerSpec(0, 1, 1, 1, 80, "tq-mse:4", "tq-mse:4", 0, 0, 1), DEV)
