"""CUDAStore: a LayerStore on the kvq CUDA kernels (kvq.torch; docs/CUDA.md, "PyTorch").

Per layer: a kvq_cuda_layer (K and V plans, heads, page size P, f16 window W), a page pool (one
torch uint8 device tensor, so torch.cuda.max_memory_allocated counts it; page 0 is a scratch page
that padding tokens are written to), a block table (B, max_pages) int32, device lengths, and with
W > 0 the f16 window rings ((B + 1) sequences, the last a scratch ring).

Storage. Every appended token is encoded into its page slot at once (from its f16 value when
the layer has an f16 window, as the C cache encodes a token leaving its window; from f32 or
f16 otherwise), and with W > 0 also written to the ring. Positions [0, main_end) are attended on
the codes and [main_end, len) on the ring, main_end = max(main_end, len - W) after each append
(min(main_end, n) after crop(n)): the C cache's rule, so the CPU and CUDA stores attend the same
values.

The f16 sink (LayerSpec.sink_tokens = S, policy sink=S; the C cache's global compressed layers): a
(B, 2, H, S, d) f16 tensor. A token at position p < S is written there (kvq_cuda_store_sink, from
the same input as the pages) and nowhere else; p >= S goes to page position p - S, so the pages hold
no sink position (the C cache allocates from the page holding position S on). A row attending n
positions reads min(n, S) from the sink, then the pages up to max(main_end, that), then the ring
(kvq_cuda_batch.sink_len, main_len, win_len): every position once. Calibration fits the plans on
the first calib_tokens positions, the sink's included (as the C cache does); the sink is not re-encoded.

Attention. A decode step (T = 1) is one kvq_cuda_attend of B sequences. A chunk of T > 1 tokens
(prefill) runs B x T rows of the batch (kvq_cuda_batch.seq_map: row (b, t) reads sequence b's
pages, ring and sink), row t of sequence b with main_len = min(n, main_end) and n = len_b - T + t + 1 positions: causal, on the stored
codes, without materialising the cache in f16 (in slices of rows whose workspace stays under
256 MB). Padding rows (skip) get n = 0, i.e. zeros.

Calibrated policies (+center, +chscale; docs/CUDA.md "Calibrated plans"). As the C cache keeps
the first calib_tokens positions f16 and then fits one plan per KV head on them, the store starts on
an f16 layer (f16 pages: the same values as the cache's f16 tail) and, at the end of the first append
after which every sequence holds calib_tokens positions, copies the first calib_tokens positions of
each head to the host (the only device-to-host copy, once per layer), fits the per-head plans there
(kvq.Plan with those rows, seed plan_seed(seed, layer, kv, head) = the C cache's), and re-encodes
every stored position from its f16 value into pages of the calibrated layer (kvq_cuda_plan_create_heads).
With B > 1 each head's plan is fitted to the first calib_tokens positions of all B sequences together
(the CPU store has one cache, so one fit, per sequence); with B = 1 the plans and records are the C
cache's, except that with W = 0 the positions of the calibrating chunk beyond calib_tokens are coded
from f16 here and from f32 there. reset() and crop(0) return to the f16 layer (the C cache
calibrates again once nothing is left). Until then the f16 pool has the group's capacity (with
max_tokens preallocated: an f16 cache's memory per layer until that layer calibrates).

No host synchronisation in a decode step, and every index is computed on the device from the
device lengths: a decode step can be captured in a CUDA graph when the store is preallocated
(LayerSpec.max_tokens > 0; under capture the grid is sized for the capacity). Kernel errors
(NaN/Inf, values beyond f16 with a window) are checked at once after a prefill (synchronising;
on an error nothing becomes visible) and by check() for decode steps. The host copy of the
lengths (lengths()) advances with each append() call; after CUDA-graph replays call
sync_lengths().
"""
from __future__ import annotations

import math
import re
import warnings
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .. import _errors
from .._errors import InvalidArgumentError, StateError, UnsupportedError
from ..codec import Plan
from ._store import LayerSpec, LayerStore

_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15


def _mix64(z: int) -> int:
    """kvq_mix64 of src/common/rng.h: one splitmix64 step from state z."""
    z = (z + _GAMMA) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def plan_seed(seed: int, layer: int, kv: int, head: int = -1) -> int:
    """The C cache's per-(layer, K/V, head) plan seed (cache_plan_seed, src/cache/cache.c); head -1:
    one plan for all heads. CUDAStore uses plan_seed(spec.seed, spec.layer, kv), the plans of a
    kvq_cache created with seed = spec.seed, so both stores encode the same bytes."""
    tag = ((layer & 0xFFFFFFFF) << 32) | ((kv & 1) << 31) | ((head + 1) & 0xFFFFFFFF)
    return _mix64((seed ^ _mix64(tag ^ 0x4B5643414348)) & _MASK64)


#: Head dims of the kvq CUDA attention (docs/CUDA.md "What is served"): 128, 64 and 256 on the tensor-core
#: kernels (64 and 256: f16, q8, tq-mse:2/3/4, tcq:2/3/4) and the generic kernel, the others on the generic kernel.
HEAD_DIMS = (32, 64, 96, 128, 256)
SERVED = ("head dims 32, 64, 96, 128, 256; K in f16, q8, tq-mse:1..8, rvq:1..4, tq-prod, qjl, tcq:1..4; V in "
          "f16, q8, tq-mse:1..8, rvq:1..4, tcq:1..4 (f16 or f32 scales; +norot, +scale=norm, +cb=gauss, +center, +chscale: "
          "calibrated per KV head on the first calib_tokens positions); f16 windows and sinks (w=, sink=); no "
          "+outliers, polar, q4, bf16, f32; global attention (no sliding window)")

_OPTS = r"(\+norot|\+scale=norm|\+cb=gauss|\+center|\+chscale)*$"
_FAST_K = re.compile(r"^(f16|q8|tq-mse:[12345]|rvq:[124]|tq-prod:[235]|qjl|tcq:[234])" + _OPTS)  # tq-mse:5: keys only
_FAST_V = re.compile(r"^(f16|q8|tq-mse:[1234]|rvq:[124]|tcq:[234])" + _OPTS)


_FAST_64_256 = re.compile(r"^(f16|q8|tq-mse:[234]|tcq:[234])" + _OPTS)

#: The C cache's calibration length when the policy gives none (CACHE_DEFAULT_CALIB, src/cache).
DEFAULT_CALIB_TOKENS = 128


def on_fast_kernels(k_spec: str, v_spec: str, head_dim: int) -> bool:
    """Whether the pair runs on the tensor-core kernels (d = 128: the formats above, tq-mse:5 for K only; d = 64
    and 256: f16, q8, tq-mse:2/3/4, tcq:2/3/4 for K and V; f16 scales; docs/CUDA.md) rather than the generic f32
    kernel, which is correct but ~20-50x slower (16 x 32K: 3.8-9.5 ms against 0.17 ms)."""
    if head_dim in (64, 256):
        return bool(_FAST_64_256.match(k_spec)) and bool(_FAST_64_256.match(v_spec))
    return head_dim == 128 and bool(_FAST_K.match(k_spec)) and bool(_FAST_V.match(v_spec))


class CudaKernels:
    """The kernels a CUDAStore calls: kvq.torch's CUDA operators (the default backend).

    Calls go straight to the implementations (fewer Python layers per decode step), or through
    torch.ops.kvq (use_ops=True, and always while torch.compile traces)."""

    def __init__(self, use_ops: bool = False) -> None:
        from .. import torch as kt  # imported here: libkvq-cuda loads on first use, not on import
        self._kt = kt
        self.use_ops = use_ops

    def make_layer(self, k: Any, v: Any, n_kv_heads: int, n_q_heads: int, page_tokens: int, window: int,
                   device: torch.device, sink: int = 0) -> Any:
        """k, v: a kvq.Plan, or a list of calibrated plans, one per KV head; sink: f16 sink rows S."""
        kt = self._kt
        try:
            kc, vc = kt.CudaPlan(k, device), kt.CudaPlan(v, device)
        except UnsupportedError as e:
            ks, vs = (p[0].spec if isinstance(p, list) else p.spec for p in (k, v))
            raise UnsupportedError(f"kvq CUDA does not serve K {ks!r} / V {vs!r}: {e}; it serves {SERVED}",
                                   status=-15, argument=f"{ks}/{vs}") from None
        return kt.CudaLayer(kc, vc, n_kv_heads, n_q_heads, page_tokens, window, sink)

    def new_status(self, device: torch.device) -> torch.Tensor:
        return self._kt.new_status(device)

    def check(self, status: torch.Tensor, call: str) -> None:
        self._kt.check_status(status, call)

    def _ops(self) -> bool:
        return self.use_ops or torch.compiler.is_compiling()

    def store_pages(self, layer: Any, pages: torch.Tensor, x: torch.Tensor, dst: torch.Tensor, kv: int,
                    status: torch.Tensor) -> None:
        if self._ops():
            torch.ops.kvq.store_pages(pages, x, dst, layer.key, kv, status)
        else:
            self._kt._store_pages_impl(pages, x, dst, layer.key, kv, status)

    def store_window(self, layer: Any, window: torch.Tensor, x: torch.Tensor, seq: torch.Tensor, pos: torch.Tensor,
                     kv: int, status: torch.Tensor) -> None:
        if self._ops():
            torch.ops.kvq.store_window(window, x, seq, pos, layer.key, kv, status)
        else:
            self._kt._store_window_impl(window, x, seq, pos, layer.key, kv, status)

    def store_sink(self, layer: Any, sink: torch.Tensor, x: torch.Tensor, seq: torch.Tensor, pos: torch.Tensor,
                   kv: int, status: torch.Tensor) -> None:
        if self._ops():
            torch.ops.kvq.store_sink(sink, x, seq, pos, layer.key, kv, status)
        else:
            self._kt._store_sink_impl(sink, x, seq, pos, layer.key, kv, status)

    def attend(self, layer: Any, q: torch.Tensor, pages: torch.Tensor, block_table: torch.Tensor,
               main_len: torch.Tensor, win_len: Optional[torch.Tensor], window: Optional[torch.Tensor], scale: float,
               max_main_len: int, seq_map: Optional[torch.Tensor] = None, sink_len: Optional[torch.Tensor] = None,
               sink: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self._ops():
            return torch.ops.kvq.attend(q, pages, block_table, main_len, win_len, window, layer.key, scale,
                                        max_main_len, seq_map, sink_len, sink)
        return self._kt._attend_impl(q, pages, block_table, main_len, win_len, window, layer.key, scale,
                                     max_main_len, seq_map, sink_len, sink)


def _contiguous_as(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x in dtype, contiguous, in one pass (x itself when it already is)."""
    if x.dtype == dtype and x.is_contiguous():
        return x
    return torch.empty(x.shape, dtype=dtype, device=x.device).copy_(x)


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


class _Step:
    """The device indices of one appended chunk, shared by the layers of a group."""

    __slots__ = ("T", "skip", "version", "consumed", "dst", "wseq", "wpos", "sseq", "ml", "wl", "sl", "max_len",
                 "to_sink")

    def __init__(self, T: int, skip: Optional[List[int]], version: int = 0) -> None:
        self.T, self.skip, self.version = T, skip, version
        self.consumed = 0  # layers that stored this chunk
        self.dst = self.wseq = self.wpos = self.sseq = self.ml = self.wl = self.sl = None
        self.max_len = 0
        self.to_sink = False  # some token of the chunk may go to the sink (sseq, wpos: its sequences, positions)


class _Positions:
    """Lengths, f16-window frontier (main_end) and block table of B sequences: the state that every
    layer of a model has in common, kept once per StoreGroup (one per store without a group).

    With an f16 sink of S rows, position p < S lives in the sink and p >= S at page position p - S (the
    block table maps page positions); nothing of the first S positions goes to the pages."""

    def __init__(self, B: int, P: int, W: int, max_tokens: int, device: torch.device, S: int = 0) -> None:
        self.B, self.P, self.W, self.S, self.device = B, P, W, S, device
        self.fixed = max_tokens > 0
        self.cap_pages = max(1, -(-(max_tokens if self.fixed else 256) // P))
        self.bt = (1 + torch.arange(B * self.cap_pages, dtype=torch.int32, device=device)).view(B, self.cap_pages)
        self.len = torch.zeros(B, dtype=torch.int32, device=device)
        self.main_end = torch.zeros(B, dtype=torch.int32, device=device)
        self.len_host: List[int] = [0] * B
        self.seq_idx = torch.arange(B, dtype=torch.int32, device=device)
        self.version = 0      # steps started
        self.floor = 0        # a fresh start (crop, reorder, reset, rollback): every layer is in step
        self.members = 0      # stores of the group
        self.current: Optional[_Step] = None
        self.reorders = 0     # reorders applied
        self.undo: Optional[Tuple[torch.Tensor, torch.Tensor, List[int]]] = None

    @property
    def capacity(self) -> int:
        """Positions per sequence: the pages' and the sink's."""
        return self.cap_pages * self.P + self.S

    def grow(self, need: int, layer: int) -> None:
        if need <= self.capacity:
            return
        if self.fixed:
            raise StateError(f"CUDAStore layer {layer}: {need} positions exceed the preallocated max_tokens "
                             f"(capacity {self.capacity})", status=-16, argument=need)
        if _capturing():
            raise StateError(f"CUDAStore layer {layer}: the pool must grow to {need} positions under CUDA-graph "
                             "capture; preallocate with LayerSpec.max_tokens", status=-16)
        old = self.cap_pages
        new = max(2 * old, -(-(need - self.S) // self.P))
        add = torch.arange(self.B * (new - old), dtype=torch.int32, device=self.device).view(self.B, new - old)
        self.bt = torch.cat([self.bt, add + 1 + self.B * old], dim=1).contiguous()
        self.cap_pages = new

    def advance(self, T: int, sk: Optional[List[int]], layer: int) -> _Step:
        """Starts a step: the slots and per-row lengths of a chunk of T tokens, lengths advanced."""
        B, P, W, dev = self.B, self.P, self.W, self.device
        nvalid = [T - s for s in sk] if sk is not None else None
        new_host = [l + (nvalid[b] if nvalid is not None else T) for b, l in enumerate(self.len_host)]
        self.grow(max(new_host), layer)
        step = _Step(T, sk)
        old = self.len.clone()  # self.len is updated in place below (a CUDA graph keeps its address)
        step.to_sink = self.S > 0 and (_capturing() or min(self.len_host) < self.S)
        if T == 1 and sk is None:  # a decode step: fewest kernels
            step.dst = self._slots(old)
            new = old + 1
            step.wseq, step.wpos = self.seq_idx, old
            step.sseq = self.seq_idx
            me = torch.maximum(self.main_end, new - W) if W > 0 else new
            step.ml, step.wl, step.sl = self._split(new, me)
        else:
            t = torch.arange(T, dtype=torch.int32, device=dev)
            if sk is None:
                valid = None
                pos = old.unsqueeze(1) + t
                new = old + T
            else:
                skd = torch.tensor(sk, dtype=torch.int32, device=dev)
                valid = t.unsqueeze(0) >= skd.unsqueeze(1)
                pos = (old.unsqueeze(1) + t - skd.unsqueeze(1)).clamp_min(0)
                new = old + (T - skd)
            dst = self._slots(pos)
            if valid is not None:
                dst = torch.where(valid, dst, 0)  # padding: the scratch page 0
            step.dst = dst.reshape(B * T)
            step.wpos = pos.reshape(B * T)
            seqs = self.seq_idx.unsqueeze(1).expand(B, T)
            # contiguous: with B = 1 the reshape of the expanded rows is a stride-0 view (store_sink refuses it)
            step.sseq = (seqs if valid is None else torch.where(valid, seqs, -1)).reshape(B * T).contiguous()
            n = new.unsqueeze(1) - T + t + 1  # positions row t of sequence b attends to
            if valid is not None:
                n = torch.where(valid, n, 0)
            if W > 0:
                keep = pos >= (new - W).unsqueeze(1)  # what stays in the window: no two writes to one slot
                if self.S:
                    keep &= pos >= self.S  # the sink's positions are not read from the ring
                if valid is not None:
                    keep &= valid
                step.wseq = torch.where(keep, self.seq_idx.unsqueeze(1), B).reshape(B * T)
                me = torch.maximum(self.main_end, new - W)
                step.ml, step.wl, step.sl = self._split(n, torch.minimum(n, me.unsqueeze(1)))
            else:
                me = new
                step.ml, step.wl, step.sl = self._split(n, n)
        self.undo = (self.len.clone(), self.main_end.clone(), list(self.len_host)) if T > 1 else None
        self.len.copy_(new)
        self.main_end.copy_(me)
        self.len_host = new_host
        step.max_len = max(new_host)
        self.version += 1
        step.version = self.version
        self.current = step
        return step

    def _slots(self, pos: torch.Tensor) -> torch.Tensor:
        """Page slots (page * P + slot) of positions pos (int32, any shape); -1 (nothing stored) below S."""
        S, P = self.S, self.P
        q = (pos - S).clamp_min(0) if S else pos  # page position
        page = torch.gather(self.bt, 1, torch.div(q, P, rounding_mode="floor").long().view(self.B, -1)).view(q.shape)
        dst = page * P + q % P
        return torch.where(pos >= S, dst, -1) if S else dst

    def _split(self, n: torch.Tensor, me: torch.Tensor) -> Tuple[torch.Tensor, Optional[torch.Tensor],
                                                                  Optional[torch.Tensor]]:
        """(main_len, win_len, sink_len) of rows attending n positions whose first me are past the f16
        window (the C cache's main_end): the first min(n, S) in the sink, the pages up to max(me, that),
        the rest in the ring (None without a window / a sink)."""
        if self.S:
            sl = torch.clamp(n, max=self.S)
            ws = torch.maximum(me, sl)
            ml = ws - sl
        else:
            sl, ws, ml = None, me, me
        wl = (n - ws).contiguous() if self.W > 0 else None
        return ml.contiguous(), wl, None if sl is None else sl.contiguous()

    def restart(self) -> None:
        """After crop/reorder/reset: the next append starts a step for every layer."""
        self.current = None
        self.floor = self.version

    def rollback(self) -> None:
        """Undoes the lengths of the current prefill step (a kernel error)."""
        if self.undo is not None:
            self.len.copy_(self.undo[0])
            self.main_end.copy_(self.undo[1])
            self.len_host = self.undo[2]
        self.undo = None
        self.version += 1
        self.restart()


class StoreGroup:
    """Shares the position state of the CUDAStores of one model (same batch, page size, f16 window and
    capacity): lengths, block tables and each step's device indices are kept and computed once for
    all layers instead of once per layer. The stores of a group must all receive the same chunks in
    turn (each step every layer appends and attends once), as kvq.transformers.Cache does; crop,
    reorder and reset are applied to all of them."""

    def __init__(self) -> None:
        self._states: dict = {}

    def positions(self, B: int, P: int, W: int, max_tokens: int, device: torch.device, S: int = 0) -> _Positions:
        key = (B, P, W, max_tokens, str(device), S)
        st = self._states.get(key)
        if st is None:
            st = self._states[key] = _Positions(B, P, W, max_tokens, device, S)
        return st


class CUDAStore(LayerStore):
    """K/V of one decoder layer for B sequences on the kvq CUDA kernels (module docstring).

    device: a CUDA device. page_tokens: P, a multiple of 16 (256: the page size of the benchmarks
    in docs/RESULTS.md). group: a StoreGroup shared by the layers of one model (optional; saves
    the per-layer index kernels of each step). kernels: the backend (CudaKernels(); tests
    substitute a CPU emulation). UnsupportedError, naming what is served, for methods, head dims
    or layers the kernels do not serve.
    """

    PREFILL_WS_BYTES = 256 << 20  #: workspace bound of one slice of prefill rows

    def __init__(self, spec: LayerSpec, device: Any, *, page_tokens: int = 256, group: Optional[StoreGroup] = None,
                 kernels: Optional[Any] = None) -> None:
        super().__init__(spec, torch.device(device))
        if spec.head_dim not in HEAD_DIMS:
            raise UnsupportedError(f"CUDAStore (layer {spec.layer}): head dim {spec.head_dim} is not served by "
                                   f"the kvq CUDA attention kernels; they serve {SERVED}", status=-15,
                                   argument=spec.head_dim)
        if spec.sliding_window > 0 and not (0 < spec.max_tokens <= spec.sliding_window):
            raise UnsupportedError(f"CUDAStore (layer {spec.layer}): sliding-window attention "
                                   f"({spec.sliding_window}) is not served by the kvq CUDA kernels; they serve "
                                   f"{SERVED}", status=-15, argument=spec.sliding_window)
        if spec.batch <= 0 or spec.n_kv_heads <= 0 or spec.n_q_heads % spec.n_kv_heads or spec.f16_window < 0 \
                or page_tokens <= 0 or page_tokens % 16 or spec.max_tokens < 0 or not 0 <= spec.sink_tokens <= 1024:
            raise InvalidArgumentError(f"CUDAStore: invalid layer spec {spec} / page_tokens {page_tokens}",
                                       status=-2)
        calib = [False, False]
        for kv, (what, s) in enumerate((("K", spec.k_spec), ("V", spec.v_spec))):
            if Plan.needs_calibration(s):
                if "+outliers" in s:
                    raise UnsupportedError(f"CUDAStore (layer {spec.layer}): {what} method {s!r}: +outliers "
                                           "(calibrated int8 outlier channels) is not served by the kvq CUDA "
                                           f"kernels; they serve {SERVED}", status=-15, argument=s)
                calib[kv] = True
        if not on_fast_kernels(spec.k_spec, spec.v_spec, spec.head_dim):
            warnings.warn(f"kvq CUDA: K {spec.k_spec!r} / V {spec.v_spec!r} at head dim {spec.head_dim} run on the "
                          "generic attention kernel, correct but about 20x slower than f16 SDPA (docs/CUDA.md); "
                          "the fast kernels serve d = 128 with tq-mse:1/2/3/4 (and tq-mse:5 keys), rvq:1/2/4, q8, "
                          "tq-prod:2/3/5, qjl, tcq:2/3/4 and d = 64 and 256 with f16, q8, tq-mse:2/3/4, tcq:2/3/4",
                          RuntimeWarning, stacklevel=3)
        self.kernels = kernels if kernels is not None else CudaKernels()
        B, H, d = spec.batch, spec.n_kv_heads, spec.head_dim
        self.B, self.H, self.HQ, self.d, self.P, self.W = B, H, spec.n_q_heads, d, page_tokens, spec.f16_window
        self.S = spec.sink_tokens
        self._calib = calib
        self.calib_tokens = (spec.calib_tokens or DEFAULT_CALIB_TOKENS) if any(calib) else 0
        self.calibrated = not any(calib)
        if self.calibrated:
            self._kplan = Plan(spec.k_spec, d, plan_seed(spec.seed, spec.layer, 0))
            self._vplan = Plan(spec.v_spec, d, plan_seed(spec.seed, spec.layer, 1))
            self.layer = self.kernels.make_layer(self._kplan, self._vplan, H, self.HQ, page_tokens, self.W,
                                                 self.device, self.S)
        else:
            self._f16_layer()
        self.page_bytes = int(self.layer.page_bytes)
        dev = self.device
        g = group if group is not None else StoreGroup()
        self._pos = g.positions(B, page_tokens, self.W, spec.max_tokens, dev, self.S)
        # a store made while its group is in a step (kvq.transformers.Cache makes them lazily, layer
        # by layer, in the first forward) takes part in that step
        cur = self._pos.current
        self._ver = cur.version - 1 if cur is not None else self._pos.version
        self._pos.members += 1
        self._reorders = self._pos.reorders
        self._cap_pages = self._pos.cap_pages
        self._pool = torch.empty((1 + B * self._cap_pages) * self.page_bytes, dtype=torch.uint8, device=dev)
        self._ring: Optional[torch.Tensor] = None
        if self.W > 0:
            self._ring = torch.zeros((B + 1, 2, H, self.W, d), dtype=torch.float16, device=dev)
        self._sink: Optional[torch.Tensor] = None  # the f16 sinks: (B, 2, H, S, d), unrotated like the ring
        if self.S > 0:
            self._sink = torch.zeros((B, 2, H, self.S, d), dtype=torch.float16, device=dev)
        self._status = self.kernels.new_status(dev)
        self._step: Optional[_Step] = None

    # ------------------------------------------------------------ calibration
    def _f16_layer(self) -> None:
        """The layer before calibration: f16 records (the C cache's f16 tail before its plans exist)."""
        f16 = Plan("f16", self.d, 0)
        self._kplan = self._vplan = f16
        self.layer = self.kernels.make_layer(f16, f16, self.H, self.HQ, self.P, self.W, self.device, self.S)
        self.calibrated = False

    def _f16_rows(self, b: int, n: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Sequence b's first n positions from the f16 sink and pages: K and V, (n, H, d) f16 each."""
        H, P, d = self.H, self.P, self.d
        ns = min(n, self.S)
        m = n - ns  # page positions
        pages = self._pool.view(torch.float16).view(-1, 2, H, P, d)  # f16 records: page = K (H, P, d), V
        np_ = -(-m // P)
        sel = pages[self._pos.bt[b, :np_].long()]                      # (np, 2, H, P, d)
        rows = sel.permute(1, 0, 3, 2, 4).reshape(2, np_ * P, H, d)[:, :m]
        if ns:
            rows = torch.cat([self._sink[b, :, :, :ns].permute(0, 2, 1, 3), rows], dim=1)
        return rows[0], rows[1]

    def _calibrate(self) -> None:
        """Fits the per-head plans on the first calib_tokens positions (host side: one device-to-host copy
        of B x calib_tokens x H x d f16 values per K/V) and re-encodes every stored position from its f16
        value into the calibrated layer's pages. Synchronises; on an error (kvq.Error: a value beyond float
        once centred and scaled, no memory) the store stays on f16 and calibrates at the next append."""
        B, H, d, N, P = self.B, self.H, self.d, self.calib_tokens, self.P
        spec, ps = self.spec, self._pos
        lens = list(ps.len_host)
        rows = [self._f16_rows(b, lens[b]) for b in range(B)]
        plans: List[Any] = []
        for kv, sp in enumerate((spec.k_spec, spec.v_spec)):
            if not self._calib[kv]:
                plans.append(Plan(sp, d, plan_seed(spec.seed, spec.layer, kv)))
                continue
            cal = torch.cat([rows[b][kv][:N] for b in range(B)]).float().cpu().numpy()  # (B * N, H, d)
            plans.append([Plan(sp, d, plan_seed(spec.seed, spec.layer, kv, h), calib=np.ascontiguousarray(cal[:, h]))
                          for h in range(H)])
        layer = self.kernels.make_layer(plans[0], plans[1], H, self.HQ, P, self.W, self.device, self.S)
        page_bytes = int(layer.page_bytes)
        pool = torch.empty((1 + B * self._cap_pages) * page_bytes, dtype=torch.uint8, device=self.device)
        st = self.kernels.new_status(self.device)
        for b in range(B):
            ns = min(lens[b], self.S)
            n = lens[b] - ns  # page positions (the sink stays as it is)
            if n == 0:
                continue
            p = torch.arange(n, dtype=torch.int32, device=self.device)
            dst = (ps.bt[b, (p // P).long()] * P + p % P).to(torch.int32)
            for kv in (0, 1):
                self.kernels.store_pages(layer, pool, rows[b][kv][ns:].contiguous(), dst, kv, st)
        self.kernels.check(st, f"CUDAStore layer {spec.layer} calibration")
        self._kplan = plans[0][0] if isinstance(plans[0], list) else plans[0]
        self._vplan = plans[1][0] if isinstance(plans[1], list) else plans[1]
        self._plans = plans
        self.layer, self.page_bytes, self._pool = layer, page_bytes, pool
        self.calibrated = True

    def _uncalibrate(self) -> None:
        """Back to the f16 layer (nothing is stored): the next calib_tokens positions calibrate again."""
        if self.calibrated and any(self._calib):
            self._f16_layer()
            self.page_bytes = int(self.layer.page_bytes)
            self._pool = torch.empty((1 + self.B * self._cap_pages) * self.page_bytes, dtype=torch.uint8,
                                     device=self.device)

    # ------------------------------------------------------------ bookkeeping
    @property
    def capacity(self) -> int:
        """Positions per sequence the pool holds (max_tokens rounded up to whole pages when preallocated)."""
        return self._pos.capacity

    def lengths(self) -> Sequence[int]:
        return list(self._pos.len_host)

    def sync_lengths(self) -> List[int]:
        """Reloads the host lengths from the device (synchronises): after CUDA-graph replays of
        decode steps, which advance only the device lengths."""
        self._pos.len_host = [int(v) for v in self._pos.len.tolist()]
        return list(self._pos.len_host)

    def memory_bytes(self) -> int:
        n = self._pool.numel()
        for f16 in (self._ring, self._sink):
            if f16 is not None:
                n += f16.numel() * 2
        return n

    def check(self) -> None:
        """Synchronises and raises the kvq.Error of a kernel error since the last check (decode steps
        are not checked otherwise)."""
        self.kernels.check(self._status, f"CUDAStore layer {self.spec.layer}")

    def _sync_pool(self) -> None:
        """Grows this layer's pool to the group's block table (copying the pages)."""
        cap = self._pos.cap_pages
        if cap == self._cap_pages:
            return
        n_old = (1 + self.B * self._cap_pages) * self.page_bytes
        pool = torch.empty((1 + self.B * cap) * self.page_bytes, dtype=torch.uint8, device=self.device)
        pool[:n_old].copy_(self._pool)
        self._pool = pool
        self._cap_pages = cap

    # ------------------------------------------------------------ append
    def _kernel_input(self, x: torch.Tensor) -> torch.Tensor:
        """(B, H, T, d) -> (B * T, H, d) contiguous in the kernels' dtype (one conversion)."""
        if self.W > 0:
            dt = torch.float16  # encoded from the f16 value, as the C cache does with a window
        else:
            dt = x.dtype if x.dtype in (torch.float16, torch.float32) else torch.float32
        B, H, T, d = x.shape
        return _contiguous_as(x.transpose(1, 2), dt).view(B * T, H, d)

    def append(self, key: Any, value: Any, skip: Optional[Sequence[int]] = None) -> None:
        B, H, d = self.B, self.H, self.d
        T = key.shape[2] if key.dim() == 4 else -1
        if tuple(key.shape) != (B, H, T, d) or tuple(value.shape) != (B, H, T, d):
            raise InvalidArgumentError(f"CUDAStore.append: key {tuple(key.shape)} / value {tuple(value.shape)}, "
                                       f"expected ({B}, {H}, T, {d})", status=-2)
        if key.device.type != self.device.type:
            raise InvalidArgumentError(f"CUDAStore.append: tensors on {key.device}, store on {self.device}",
                                       status=-2)
        sk = self._skip(skip, T)
        if T == 0:
            self._step = _Step(0, None)
            return
        ps = self._pos
        if self._ver < ps.floor:
            self._ver = ps.floor
        cur = ps.current
        if cur is not None and cur.version == self._ver + 1:  # a later layer of the group's current step
            if cur.T != T or cur.skip != sk:
                raise StateError(f"CUDAStore layer {self.spec.layer}: the layers of a StoreGroup must append the "
                                 f"same chunks in turn (this one: {T} tokens, skip {sk}; the group's step: {cur.T}, "
                                 f"skip {cur.skip})", status=-16)
            step = cur
        elif cur is None or (cur.version == self._ver and cur.consumed >= ps.members):  # a new step
            step = ps.advance(T, sk, self.spec.layer)
        else:
            raise StateError(f"CUDAStore layer {self.spec.layer}: out of step with its StoreGroup (every layer "
                             "appends once per step, in turn)", status=-16)
        self._ver = step.version
        step.consumed += 1
        self._sync_pool()
        kx, vx = self._kernel_input(key), self._kernel_input(value)
        st = self._status
        self.kernels.store_pages(self.layer, self._pool, kx, step.dst, 0, st)
        self.kernels.store_pages(self.layer, self._pool, vx, step.dst, 1, st)
        if self.W > 0:
            self.kernels.store_window(self.layer, self._ring, kx, step.wseq, step.wpos, 0, st)
            self.kernels.store_window(self.layer, self._ring, vx, step.wseq, step.wpos, 1, st)
        if step.to_sink:  # positions below S (the kernel stores nothing for the others)
            self.kernels.store_sink(self.layer, self._sink, kx, step.sseq, step.wpos, 0, st)
            self.kernels.store_sink(self.layer, self._sink, vx, step.sseq, step.wpos, 1, st)
        self._step = step
        due = not self.calibrated and min(ps.len_host) >= self.calib_tokens
        if due and _capturing():
            raise StateError(f"CUDAStore layer {self.spec.layer}: the plans calibrate on this step (every sequence "
                             f"reaches calib_tokens = {self.calib_tokens}), which synchronises: not under CUDA-graph "
                             "capture; run the prefill eagerly", status=-16)
        if (T > 1 or due) and not _capturing():
            # a prefill is checked at once (synchronising): on an error no position of the chunk
            # becomes visible, in any layer of the group
            try:
                self.kernels.check(st, f"CUDAStore layer {self.spec.layer} append")
            except _errors.Error:
                ps.rollback()
                self._step = None
                raise
        if due:  # the chunk is stored (f16); an error here leaves the store on f16, to calibrate next time
            self._calibrate()

    def _skip(self, skip: Optional[Sequence[int]], T: int) -> Optional[List[int]]:
        if skip is None:
            return None
        sk = [int(s) for s in skip]
        if len(sk) != self.B or any(s < 0 or s > T for s in sk):
            raise InvalidArgumentError(f"CUDAStore: skip {list(skip)} must be {self.B} ints in [0, {T}]", status=-2)
        return sk if any(sk) else None

    # ------------------------------------------------------------ attend
    def attend(self, query: Any, scaling: float, skip: Optional[Sequence[int]] = None) -> Any:
        B, HQ, d = self.B, self.HQ, self.d
        T = query.shape[2] if query.dim() == 4 else -1
        if tuple(query.shape) != (B, HQ, T, d):
            raise InvalidArgumentError(f"CUDAStore.attend: query {tuple(query.shape)}, expected ({B}, {HQ}, T, {d})",
                                       status=-2)
        step = self._step
        if step is None or step.T != T:
            raise StateError(f"CUDAStore.attend: {T} query tokens, but the last append() stored "
                             f"{None if step is None else step.T}", status=-16)
        if T == 0:
            return query.new_zeros((B, 0, HQ, d))
        q = _contiguous_as(query.transpose(1, 2), torch.float32)  # (B, T, HQ, d)
        scale = float(scaling)
        ring = self._ring
        if T == 1:
            mm = self.capacity if _capturing() else step.max_len
            ml = step.ml.view(B)
            wl = None if step.wl is None else step.wl.view(B)
            sl = None if step.sl is None else step.sl.view(B)
            out = self.kernels.attend(self.layer, q.view(B, HQ, d), self._pool, self._pos.bt, ml, wl, ring, scale, mm,
                                      None, sl, self._sink)
            return out.view(B, 1, HQ, d).to(query.dtype)
        # prefill: B x T virtual sequences, in slices of rows whose workspace stays bounded
        per_row = max(1, int(self.layer.workspace_bytes(1, step.max_len)))
        tc = max(1, min(T, self.PREFILL_WS_BYTES // (per_row * B)))
        out = torch.empty((B, T, HQ, d), dtype=query.dtype, device=query.device)
        bt = self._pos.bt
        seq_map = None
        for t0 in range(0, T, tc):
            t1 = min(T, t0 + tc)
            n = t1 - t0
            if seq_map is None or seq_map.numel() != B * n:
                seq_map = self._pos.seq_idx.repeat_interleave(n)  # row (b, t) reads sequence b's pages, ring, sink
            qv = q[:, t0:t1].reshape(B * n, HQ, d)
            mlv = step.ml[:, t0:t1].reshape(B * n)
            wlv, slv = (None if x is None else x[:, t0:t1].reshape(B * n).contiguous() for x in (step.wl, step.sl))
            mm = max(0, step.max_len - T + t1)
            o = self.kernels.attend(self.layer, qv.contiguous(), self._pool, bt, mlv.contiguous(), wlv, ring, scale, mm,
                                    seq_map, slv, self._sink)
            out[:, t0:t1] = o.view(B, n, HQ, d)
        return out

    # ------------------------------------------------------------ rewinding, beams
    def crop(self, n: int) -> None:
        if n < 0:
            raise InvalidArgumentError(f"CUDAStore.crop({n})", status=-2)
        ps = self._pos
        ps.len.clamp_(max=n)
        ps.main_end.clamp_(max=n)
        ps.len_host = [min(l, n) for l in ps.len_host]
        ps.restart()
        self._step = None
        if n == 0:
            self._uncalibrate()

    def reorder(self, beam_idx: Any) -> None:
        idx = torch.as_tensor(beam_idx, device=self.device).long()
        if tuple(idx.shape) != (self.B,):
            raise InvalidArgumentError(f"CUDAStore.reorder: beam_idx of shape {tuple(idx.shape)}, expected "
                                       f"({self.B},)", status=-2)
        ps = self._pos
        self._sync_pool()
        pages = self._pool.view(-1, self.page_bytes)
        bt = ps.bt
        pages[bt.reshape(-1).long()] = pages[bt[idx].reshape(-1).long()]  # a copy: beams may repeat
        if self._ring is not None:
            self._ring[: self.B] = self._ring[idx]
        if self._sink is not None:
            self._sink.copy_(self._sink[idx])
        if self._reorders == ps.reorders:  # the first layer of the group to reorder: the positions too
            ps.len.copy_(ps.len[idx])
            ps.main_end.copy_(ps.main_end[idx])
            ps.len_host = [ps.len_host[i] for i in idx.tolist()]
            ps.restart()
            ps.reorders += 1
        self._reorders = ps.reorders
        self._step = None

    def reset(self) -> None:
        ps = self._pos
        ps.len.zero_()
        ps.main_end.zero_()
        ps.len_host = [0] * self.B
        ps.restart()
        self._step = None
        self._uncalibrate()
