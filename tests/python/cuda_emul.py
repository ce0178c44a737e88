"""A CPU stand-in for the kvq CUDA kernels, so that CUDAStore's bookkeeping (slots, block tables,
window rings, f16 sinks, per-row lengths of prefill rows, padding, crop/reorder) is tested without a GPU.

Same interface as kvq.transformers._cuda_store.CudaKernels, same page-pool and ring shapes, but
records are stored record-major in the pages (the kernels' field-major layout is tested by
tests/cuda/test_cuda.cu) and attention is computed in float64 on the CPU plans' decoded rows.
attend() also checks that max_main_len bounds every main_len (the kernels' grid would miss
positions otherwise).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

import kvq
from kvq._errors import error_for
from kvq.transformers._cuda_store import plan_seed
from kvq.transformers._store import LayerSpec


class EmuLayer:
    """k, v: a kvq.Plan, or a list of calibrated plans, one per KV head (kvq_cuda_plan_create_heads)."""

    def __init__(self, k: Any, v: Any, H: int, HQ: int, P: int, W: int, S: int = 0) -> None:
        self.kh = list(k) if isinstance(k, (list, tuple)) else [k] * H  # plan of each head
        self.vh = list(v) if isinstance(v, (list, tuple)) else [v] * H
        assert len(self.kh) == H and len(self.vh) == H
        self.k, self.v, self.H, self.HQ, self.P, self.W, self.S = self.kh[0], self.vh[0], H, HQ, P, W, S
        k, v = self.k, self.v
        self.d = k.dim
        self.kb, self.vb = k.code_bytes, v.code_bytes
        self.page_bytes = H * P * (self.kb + self.vb)
        self.calls = {"store_pages": 0, "store_window": 0, "store_sink": 0, "attend": 0}

    def window_bytes(self, n_seq: int) -> int:
        return n_seq * 2 * self.H * self.W * self.d * 2

    def workspace_bytes(self, n_seq: int, max_main_len: int) -> int:
        return n_seq * (3 * self.HQ * self.d + 4096) * 4


class EmuKernels:
    def make_layer(self, k: kvq.Plan, v: kvq.Plan, H: int, HQ: int, P: int, W: int, device: Any,
                   sink: int = 0) -> EmuLayer:
        return EmuLayer(k, v, H, HQ, P, W, sink)

    def new_status(self, device: Any) -> torch.Tensor:
        return torch.zeros(1, dtype=torch.int32, device=device)

    def check(self, status: torch.Tensor, call: str) -> None:
        code = int(status.item())
        if code:
            status.zero_()
            raise error_for(code, call=call)

    @staticmethod
    def _rec(L: EmuLayer, kv: int, page: int, h: int, slot: int) -> int:
        cb = L.vb if kv else L.kb
        base = page * L.page_bytes + (L.H * L.P * L.kb if kv else 0)
        return base + (h * L.P + slot) * cb

    def store_pages(self, L: EmuLayer, pages: torch.Tensor, x: torch.Tensor, dst: torch.Tensor, kv: int,
                    status: torch.Tensor) -> None:
        L.calls["store_pages"] += 1
        assert x.dtype in (torch.float16, torch.float32) and x.is_contiguous() and dst.dtype == torch.int32
        plans = L.vh if kv else L.kh
        xs = x.float().numpy().reshape(-1, L.H, L.d)
        if not np.isfinite(xs).all():
            if int(status[0]) == 0:
                status[0] = -6
            return
        codes = np.stack([plans[h].encode(np.ascontiguousarray(xs[:, h])) for h in range(L.H)], axis=1)
        pn = pages.numpy()
        cb = codes.shape[2]
        for i, s in enumerate(dst.tolist()):
            if s < 0:  # stores nothing (a sink position)
                continue
            page, slot = divmod(s, L.P)
            for h in range(L.H):
                o = self._rec(L, kv, page, h, slot)
                pn[o:o + cb] = codes[i, h]

    def store_window(self, L: EmuLayer, window: torch.Tensor, x: torch.Tensor, seq: torch.Tensor, pos: torch.Tensor,
                     kv: int, status: torch.Tensor) -> None:
        L.calls["store_window"] += 1
        assert window.shape[1:] == (2, L.H, L.W, L.d)
        if not torch.isfinite(x.float()).all():
            if int(status[0]) == 0:
                status[0] = -6
            return
        for i, (s, p) in enumerate(zip(seq.tolist(), pos.tolist())):
            window[s, kv, :, p % L.W] = x[i].to(torch.float16)

    def store_sink(self, L: EmuLayer, sink: torch.Tensor, x: torch.Tensor, seq: torch.Tensor, pos: torch.Tensor,
                   kv: int, status: torch.Tensor) -> None:
        L.calls["store_sink"] += 1
        assert L.S > 0 and sink.shape[1:] == (2, L.H, L.S, L.d)
        rows = [(i, s, p) for i, (s, p) in enumerate(zip(seq.tolist(), pos.tolist())) if s >= 0 and 0 <= p < L.S]
        if not all(torch.isfinite(x[i].float()).all() for i, _, _ in rows):
            if int(status[0]) == 0:
                status[0] = -6
            return
        for i, s, p in rows:
            sink[s, kv, :, p] = x[i].to(torch.float16)

    def attend(self, L: EmuLayer, q: torch.Tensor, pages: torch.Tensor, block_table: torch.Tensor,
               main_len: torch.Tensor, win_len: Optional[torch.Tensor], window: Optional[torch.Tensor], scale: float,
               max_main_len: int, seq_map: Optional[torch.Tensor] = None, sink_len: Optional[torch.Tensor] = None,
               sink: Optional[torch.Tensor] = None) -> torch.Tensor:
        L.calls["attend"] += 1
        assert q.dtype == torch.float32 and q.is_contiguous()
        n_seq, HQ, d = q.shape
        G = HQ // L.H
        ml = main_len.tolist()
        wl = win_len.tolist() if win_len is not None else [0] * n_seq
        sl = sink_len.tolist() if sink_len is not None else [0] * n_seq
        assert sink_len is None or (sink is not None and L.S > 0)
        assert all(0 <= a <= L.S and (m == 0 or a == L.S) for a, m in zip(sl, ml)), (sl, ml)
        assert max(ml) <= max_main_len, f"max_main_len {max_main_len} < main_len {max(ml)}"
        pn = pages.numpy()
        bt = block_table.tolist()
        rmap = seq_map.tolist() if seq_map is not None else list(range(n_seq))
        assert len(rmap) == n_seq and (seq_map is not None or len(bt) == n_seq)
        out = np.zeros((n_seq, HQ, d), dtype=np.float64)
        for s in range(n_seq):
            m, w, a = ml[s], wl[s], sl[s]
            r = rmap[s]
            if a + m + w == 0:
                continue
            for h in range(L.H):
                Ks, Vs = [], []
                if a:  # positions [0, a): the sink rows
                    Ks.append(sink[r, 0, h, :a].double().numpy())
                    Vs.append(sink[r, 1, h, :a].double().numpy())
                if m:
                    kr = np.empty((m, L.kb), np.uint8)
                    vr = np.empty((m, L.vb), np.uint8)
                    for p in range(m):
                        page, slot = bt[r][p // L.P], p % L.P
                        o = self._rec(L, 0, page, h, slot)
                        kr[p] = pn[o:o + L.kb]
                        o = self._rec(L, 1, page, h, slot)
                        vr[p] = pn[o:o + L.vb]
                    Ks.append(L.kh[h].decode(kr).astype(np.float64))
                    Vs.append(L.vh[h].decode(vr).astype(np.float64))
                if w:  # positions a + m + i, in the ring
                    ps = [(a + m + i) % L.W for i in range(w)]
                    Ks.append(window[r, 0, h, ps].double().numpy())
                    Vs.append(window[r, 1, h, ps].double().numpy())
                K, V = np.concatenate(Ks), np.concatenate(Vs)
                for g in range(G):
                    qq = q[s, h * G + g].double().numpy()
                    sc = K @ qq * scale
                    pr = np.exp(sc - sc.max())
                    out[s, h * G + g] = pr @ V / pr.sum()
        return torch.from_numpy(out.astype(np.float32))


class RefStore:
    """Float64 reference of a LayerStore's attention: the appended rows, positions before the f16
    window's frontier (the C cache's main_end) decoded from their codes, the rest as f16; the first
    S positions (the f16 sink) always f16."""

    def __init__(self, B: int, H: int, HQ: int, W: int, kplan: kvq.Plan, vplan: kvq.Plan, S: int = 0) -> None:
        self.B, self.H, self.HQ, self.W, self.S = B, H, HQ, W, S
        self.kp, self.vp = kplan, vplan
        self.rows: list = [[] for _ in range(B)]  # per sequence: (k (H, d) f32, v (H, d) f32) as stored
        self.me = [0] * B
        self.last_T = 0

    def _stored(self, x: torch.Tensor, pos: int) -> np.ndarray:
        x = x.float()
        if self.W > 0 or pos < self.S:
            x = x.half().float()
        return x.numpy()

    def append(self, key: torch.Tensor, value: torch.Tensor, skip=None) -> None:
        B, H, T, d = key.shape
        sk = list(skip) if skip is not None else [0] * B
        for b in range(B):
            for t in range(sk[b], T):
                p = len(self.rows[b])
                self.rows[b].append((self._stored(key[b, :, t].cpu(), p), self._stored(value[b, :, t].cpu(), p)))
            self.me[b] = max(self.me[b], len(self.rows[b]) - self.W) if self.W > 0 else len(self.rows[b])
        self.last_T = T

    def _decoded(self, plan: kvq.Plan, x: np.ndarray) -> np.ndarray:
        return plan.decode(plan.encode(np.ascontiguousarray(x, dtype=np.float32))).astype(np.float64)

    def attend(self, query: torch.Tensor, scale: float, skip=None) -> np.ndarray:
        B, HQ, T, d = query.shape
        G = HQ // self.H
        sk = list(skip) if skip is not None else [0] * B
        out = np.zeros((B, T, HQ, d))
        qn = query.double().cpu().numpy()
        for b in range(B):
            L = len(self.rows[b])
            if L == 0:
                continue
            K = np.stack([r[0] for r in self.rows[b]])  # (L, H, d)
            V = np.stack([r[1] for r in self.rows[b]])
            me, S = self.me[b], self.S
            for h in range(self.H):
                Kh = K[:, h].astype(np.float64)
                Vh = V[:, h].astype(np.float64)
                if me > S:  # kp / vp: one plan, or one per head (calibrated plans); [0, S): the sink, f16
                    kp = self.kp[h] if isinstance(self.kp, list) else self.kp
                    vp = self.vp[h] if isinstance(self.vp, list) else self.vp
                    Kh[S:me] = self._decoded(kp, K[S:me, h])
                    Vh[S:me] = self._decoded(vp, V[S:me, h])
                for t in range(sk[b], T):
                    n = L - T + t + 1
                    for g in range(G):
                        s = Kh[:n] @ qn[b, h * G + g, t] * scale
                        p = np.exp(s - s.max())
                        out[b, t, h * G + g] = p @ Vh[:n] / p.sum()
        return out

    def crop(self, n: int) -> None:
        for b in range(self.B):
            del self.rows[b][n:]
            self.me[b] = min(self.me[b], n)

    def reorder(self, idx) -> None:
        idx = [int(i) for i in idx]
        self.rows = [list(self.rows[i]) for i in idx]
        self.me = [self.me[i] for i in idx]


def calibrated_batch_case(store, dev, tol, S=0):
    """B = 2 with left padding and an f16 window: f16 until both sequences hold calib_tokens = 16 positions,
    then per-head plans fitted to the first 16 positions of both sequences together (the sink's, S > 0,
    included), against RefStore with those plans (shared by tests/python/test_torch_cuda.py on the real
    kernels)."""
    g = torch.Generator().manual_seed(5)
    N, H, W = 16, 2, 6
    spec = LayerSpec(3, 2, H, 4, 128, "tq-mse:4+chscale", "tq-mse:2+center", W, 0, 9, 0, N, S)
    st = store(spec)
    f16 = kvq.Plan("f16", 128)
    ref = RefStore(2, H, 4, W, f16, f16, S)
    mean = torch.randn(2, 1, H, 1, 128, generator=g) * 2
    sg = torch.exp(torch.randn(2, 1, H, 1, 128, generator=g) * 0.8)
    for i, (T, skip) in enumerate(((12, [0, 3]), (1, None), (8, None), (1, None), (5, None), (1, None))):
        k = torch.randn(2, H, T, 128, generator=g) * sg[0] + mean[0]
        v = torch.randn(2, H, T, 128, generator=g) * sg[1] + mean[1]
        q = torch.randn(2, 4, T, 128, generator=g)
        st.append(k.to(dev), v.to(dev), skip)
        ref.append(k, v, skip)
        assert st.calibrated == (i >= 2), i
        if i == 2:  # the plans CUDAStore fits: the first N positions of both sequences, per head
            plans = []
            for kv, sp in enumerate((spec.k_spec, spec.v_spec)):
                rows = np.concatenate([np.stack([r[kv] for r in ref.rows[b][:N]]) for b in range(2)])
                plans.append([kvq.Plan(sp, 128, plan_seed(spec.seed, spec.layer, kv, h),
                                       calib=np.ascontiguousarray(rows[:, h])) for h in range(H)])
            ref.kp, ref.vp = plans
        out = st.attend(q.to(dev), 128 ** -0.5, skip)
        want = ref.attend(q, 128 ** -0.5, skip)
        err = float(np.linalg.norm(out.double().cpu().numpy() - want) / np.linalg.norm(want))
        assert err < tol, (i, err)
    assert list(st.lengths()) == [28, 25]
    st.crop(0)
    assert not st.calibrated
