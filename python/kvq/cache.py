"""kvq.Cache (compressed KV cache with fused attention), kvq.Policy and kvq.KVCacheBuilder."""
from __future__ import annotations

import ctypes
import math
import threading
from typing import Dict, List, NamedTuple, Optional, Sequence, Union

import numpy as np

from . import _lib
from ._errors import BitsRangeError, ClosedError, InvalidArgumentError, UnknownMethodError, check
from ._util import Handle, as_f32, check_int, check_out

_c = _lib.core
_F32 = np.dtype(np.float32)


# ---------------------------------------------------------------- policies
class Policy:
    """A cache policy: how keys and values are stored (include/kvq.h, docs/CACHE.md).

    Parsed by the library's kvq_policy_parse, the parser behind the CLI's
    policy arguments: ``"tq-mse:4"``, ``"q8/tq-mse:4,w=128"``,
    ``"k=tq-prod:3,v=q8,f16layers=0;-1,sliding=1,calib=64"``. Every method
    spec is checked at parse time (UnknownMethodError, BitsRangeError,
    NoDecodeError for a key-only value method, InvalidArgumentError for a
    malformed field; ``.detail`` holds the parser's reason).
    """

    __slots__ = ("_s",)

    def __init__(self, policy: Union[str, "Policy"] = "f16") -> None:
        if isinstance(policy, Policy):
            self._s = _lib.PolicyStruct.from_buffer_copy(policy._s)
            return
        if not isinstance(policy, str):
            raise TypeError(f"policy must be a str or kvq.Policy, not {type(policy).__name__}")
        s = _lib.PolicyStruct()
        raw = policy.encode("utf-8", "replace")
        if b"\0" in raw:
            raise InvalidArgumentError(status=-2, call="kvq_policy_parse", argument=policy,
                                       detail="NUL byte in the policy")
        err = ctypes.create_string_buffer(256)
        check(_c.kvq_policy_parse(ctypes.byref(s), raw, err, 256), "kvq_policy_parse", argument=policy,
              detail=err.value.decode("utf-8", "replace"))
        self._s = s

    @classmethod
    def from_fields(cls, k_spec: str = "f16", v_spec: str = "f16", f16_window: int = 0,
                    f16_layers: Sequence[int] = (), compress_sliding: bool = False,
                    calib_tokens: int = 0, sink_tokens: int = 0) -> "Policy":
        """The policy of these fields, written as a policy string and parsed by kvq_policy_parse."""
        for name, spec in (("k_spec", k_spec), ("v_spec", v_spec)):
            if not isinstance(spec, str):
                raise TypeError(f"{name} must be a str, not {type(spec).__name__}")
        parts = [f"k={k_spec}", f"v={v_spec}"]
        if f16_window:
            parts.append(f"w={check_int(f16_window, 'f16_window', 0, 2**30)}")
        layers = [check_int(v, "f16_layers[]", -(2**31), 2**31 - 1) for v in f16_layers]
        if layers:
            parts.append("f16layers=" + ";".join(map(str, layers)))
        if compress_sliding:
            parts.append("sliding=1")
        if calib_tokens:
            parts.append(f"calib={check_int(calib_tokens, 'calib_tokens', 1, 2**20)}")
        if sink_tokens:
            parts.append(f"sink={check_int(sink_tokens, 'sink_tokens', 0, 1024)}")
        return cls(",".join(parts))

    @property
    def name(self) -> str:
        """Canonical policy string (kvq_policy_name): the shortest form."""
        buf = ctypes.create_string_buffer(_lib.KVQ_POLICY_NAME_MAX)
        check(_c.kvq_policy_name(ctypes.byref(self._s), buf, len(buf)), "kvq_policy_name")
        return buf.value.decode()

    @property
    def k_spec(self) -> str:
        return self._s.k_spec.decode()

    @property
    def v_spec(self) -> str:
        return self._s.v_spec.decode()

    @property
    def f16_window(self) -> int:
        return self._s.f16_window

    @property
    def f16_layers(self) -> List[int]:
        return list(self._s.f16_layers[: self._s.n_f16_layers])

    @property
    def compress_sliding(self) -> bool:
        return bool(self._s.compress_sliding)

    @property
    def calib_tokens(self) -> int:
        return self._s.calib_tokens

    @property
    def sink_tokens(self) -> int:
        """The first positions kept f16 for good (attention sinks; 0 = none)."""
        return self._s.sink_tokens

    def replace(self, **fields) -> "Policy":
        """A copy with some fields changed (k_spec, v_spec, f16_window, f16_layers,
        compress_sliding, calib_tokens, sink_tokens), parsed again."""
        cur = dict(k_spec=self.k_spec, v_spec=self.v_spec, f16_window=self.f16_window,
                   f16_layers=self.f16_layers, compress_sliding=self.compress_sliding,
                   calib_tokens=self.calib_tokens, sink_tokens=self.sink_tokens)
        bad = set(fields) - set(cur)
        if bad:
            raise TypeError(f"unknown policy fields {sorted(bad)}")
        cur.update({k: v for k, v in fields.items() if v is not None})
        return Policy.from_fields(**cur)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"kvq.Policy({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Policy) and self.name == other.name

    def __hash__(self) -> int:
        return hash(self.name)


PolicyLike = Union[str, Policy, None]


def as_policy(policy: PolicyLike) -> Policy:
    if policy is None:
        return Policy("f16")
    return policy if isinstance(policy, Policy) else Policy(policy)


# ---------------------------------------------------------------- memory plan
class MemoryPlan(NamedTuple):
    """kvq_cache_memory_plan's figures, in bytes."""
    at: int    #: memory_bytes() once all tokens were appended
    peak: int  #: the most memory_bytes() reported after any of the appends


class _Pools:
    """Thread pools of one cache, one per thread count (created on first use)."""

    def __init__(self) -> None:
        self._pools: Dict[int, int] = {}

    def get(self, threads: int) -> Optional[int]:
        if threads <= 1:
            return None
        p = self._pools.get(threads)
        if p is None:
            out = ctypes.c_void_p()
            check(_c.kvq_pool_create(ctypes.byref(out), threads), "kvq_pool_create", argument=threads)
            p = self._pools[threads] = out.value
        return p

    def free(self) -> None:
        pools, self._pools = self._pools, {}
        for p in pools.values():
            _c.kvq_pool_free(p)


# ---------------------------------------------------------------- cache
class Cache:
    """A compressed KV cache for a whole model (kvq_cache of include/kvq.h).

    Per layer, all KV heads; keys are appended after RoPE. ``attend`` runs
    attention directly on the stored codes with the fused kernels
    (``kvq_cache_attend``: scores from the codes, online softmax, values
    accumulated in the rotated domain; nothing is decoded to a buffer).

    Args:
        n_layers, n_kv_heads, head_dim: geometry (head_dim 32..512, multiple of 8).
        policy: a policy string or kvq.Policy (default "f16"); the keyword
            fields below, when given, replace the policy's.
        k_spec, v_spec: key / value methods (kvq method specs).
        f16_window: the W most recent tokens stay f16.
        f16_layers: layers kept entirely in f16 (negative: from the end).
        sliding_window: per-layer local-attention windows (0 = global).
        compress_sliding: compress sliding-window layers too.
        calib_tokens: tokens kept f16 until +outliers/+center/+chscale plans calibrate.
        seed: seed of the rotations and projections.
        threads: default thread count of attend() (a kvq_pool per count, reused).
        reference_kernels: scalar reference kernels everywhere (tests).

    A cache is used by one caller at a time: calls on the same cache from
    several threads are serialized by a lock (different caches run in
    parallel: every C call releases the GIL).
    """

    def __init__(self, n_layers: int = 1, n_kv_heads: int = 1, head_dim: int = 128, policy: PolicyLike = None, *,
                 k_spec: Optional[str] = None, v_spec: Optional[str] = None, f16_window: Optional[int] = None,
                 f16_layers: Optional[Sequence[int]] = None, sliding_window: Optional[Sequence[int]] = None,
                 compress_sliding: Optional[bool] = None, calib_tokens: Optional[int] = None, seed: int = 0,
                 threads: int = 1, reference_kernels: bool = False) -> None:
        self._h = None
        pol = as_policy(policy)
        over = dict(k_spec=k_spec, v_spec=v_spec, f16_window=f16_window, f16_layers=f16_layers,
                    compress_sliding=compress_sliding, calib_tokens=calib_tokens)
        if any(v is not None for v in over.values()):
            pol = pol.replace(**over)
        self._policy = pol
        self._n_layers = check_int(n_layers, "n_layers", -(2**31), _lib.INT_MAX)
        self._n_kv_heads = check_int(n_kv_heads, "n_kv_heads", -(2**31), _lib.INT_MAX)
        self._head_dim = check_int(head_dim, "head_dim", -(2**31), _lib.INT_MAX)
        self._threads = check_int(threads, "threads", 1, 1024)
        cfg = _lib.CacheConfig()
        cfg.n_layers, cfg.n_kv_heads, cfg.head_dim = self._n_layers, self._n_kv_heads, self._head_dim
        _c.kvq_policy_to_cache_config(ctypes.byref(pol._s), ctypes.byref(cfg))
        self._sw = None
        if sliding_window is not None:
            sw = [check_int(w, "sliding_window[]", -(2**31), _lib.INT_MAX) for w in sliding_window]
            if len(sw) != self._n_layers:
                raise InvalidArgumentError(f"sliding_window has {len(sw)} entries for {self._n_layers} layers",
                                           status=-2, argument=list(sw))
            self._sw = (ctypes.c_int * max(1, len(sw)))(*sw)
            cfg.sliding_window = ctypes.cast(self._sw, ctypes.POINTER(ctypes.c_int))
        cfg.seed = check_int(seed, "seed", 0, 2**64 - 1)
        cfg.reference_kernels = 1 if reference_kernels else 0
        self._cfg = cfg  # points into pol._s and self._sw, which live as long as self
        out = ctypes.c_void_p()
        check(_c.kvq_cache_create(ctypes.byref(out), ctypes.byref(cfg)), "kvq_cache_create", argument=pol.name)
        self._pools = _Pools()
        self._lock = threading.Lock()
        self._f16_twin: Optional[Cache] = None
        self._h = Handle(out.value, self._free, "kvq.Cache")
        self._seed = cfg.seed
        self._reference = bool(reference_kernels)
        self._scale = 1.0 / math.sqrt(self._head_dim)

    @classmethod
    def _borrowed(cls, ptr: int, owner: Handle, lock: threading.Lock, n_layers: int, n_kv_heads: int,
                  head_dim: int, policy: Policy, sliding_window: Optional[Sequence[int]], threads: int) -> "Cache":
        """A view of a cache owned by another object (a Session's): never freed here."""
        self = cls.__new__(cls)
        self._policy = policy
        self._n_layers, self._n_kv_heads, self._head_dim = n_layers, n_kv_heads, head_dim
        self._threads = threads
        self._sw = (ctypes.c_int * max(1, n_layers))(*(sliding_window or [0] * n_layers))
        self._pools = _Pools()
        self._lock = lock  # the session's: the session and this view never use the cache at once
        self._f16_twin = None
        self._seed = 0
        self._reference = False
        self._scale = 1.0 / math.sqrt(head_dim)
        pools = self._pools
        self._h = Handle(ptr, lambda _p: pools.free(), "kvq.Cache (session's)", deps=(owner,))
        return self

    def _free(self, ptr: int) -> None:
        self._pools.free()
        _c.kvq_cache_free(ptr)

    # ------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Frees the cache (also done when it is garbage-collected)."""
        if self._h is not None:
            with self._lock:
                self._h.close()
        if self._f16_twin is not None:
            self._f16_twin.close()

    @property
    def closed(self) -> bool:
        return self._h.closed

    def __enter__(self) -> "Cache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def _enter(self) -> int:
        """Takes the cache's lock (one caller at a time) and returns the pointer;
        ClosedError if closed. close() takes the same lock, so no call is in
        flight when the cache is freed."""
        self._lock.acquire()
        ptr = self._h._ptr
        if ptr is None or self._h._closed:
            self._lock.release()
            raise ClosedError("kvq.Cache is closed")
        return ptr

    def _leave(self) -> None:
        self._lock.release()

    # ------------------------------------------------------------ properties
    @property
    def policy(self) -> Policy:
        """The cache's policy (its canonical name is str(cache.policy))."""
        return self._policy

    @property
    def n_layers(self) -> int:
        return self._n_layers

    @property
    def n_kv_heads(self) -> int:
        return self._n_kv_heads

    @property
    def head_dim(self) -> int:
        return self._head_dim

    @property
    def sliding_window(self) -> List[int]:
        """Per-layer sliding windows (0: global)."""
        return list(self._sw[: self._n_layers]) if self._sw is not None else [0] * self._n_layers

    def __repr__(self) -> str:
        if self.closed:
            return "<kvq.Cache closed>"
        return (f"<kvq.Cache {self._policy.name!r} layers={self._n_layers} kv_heads={self._n_kv_heads} "
                f"head_dim={self._head_dim} tokens={len(self)} bytes={self.memory_bytes()}>")

    # ------------------------------------------------------------ data
    def _layer(self, layer: int) -> int:
        return check_int(layer, "layer", -self._n_layers, self._n_layers - 1) % self._n_layers

    def append(self, layer: int, k: np.ndarray, v: np.ndarray) -> None:
        """Appends tokens to one layer: k and v float32 (tokens, n_kv_heads, head_dim),
        or (n_kv_heads, head_dim) for one token. All or nothing: NonFiniteError,
        RangeError (a value kept f16 exceeds 65504), OutOfMemoryError leave the
        cache unchanged."""
        layer = self._layer(layer)
        shape = (self._n_kv_heads, self._head_dim)
        k = as_f32(k, "k", (2, 3))
        v = as_f32(v, "v", (2, 3))
        if k.shape[-2:] != shape or v.shape != k.shape:
            raise ValueError(f"k {k.shape} and v {v.shape} must both be (tokens, {shape[0]}, {shape[1]}) "
                             f"or ({shape[0]}, {shape[1]})")
        ntok = 1 if k.ndim == 2 else k.shape[0]
        if ntok == 0:
            return
        p = self._enter()
        try:
            check(_c.kvq_cache_append(p, layer, k.ctypes.data, v.ctypes.data, ntok), "kvq_cache_append")
        finally:
            self._leave()

    def attend(self, layer: int, q: np.ndarray, pos0: Optional[int] = None, scale: Optional[float] = None,
               threads: Optional[int] = None, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Causal attention of query tokens on one layer, computed from the codes.

        q: float32 (tokens, n_q_heads, head_dim) or (n_q_heads, head_dim);
        n_q_heads a multiple of n_kv_heads (grouped-query attention). The
        queries sit at positions pos0 .. pos0+tokens-1 (default: the last
        ``tokens`` positions of the layer); token t sees positions <= pos0+t
        (and only the layer's window on sliding-window layers). scale
        multiplies q.k (default 1/sqrt(head_dim)). Returns out (a new array,
        or the given float32 array of q's shape, written in place). threads:
        pool size (default: the cache's); results do not depend on it. The
        kernel runs with the GIL released.
        """
        # fast path: the common, valid call costs a few attribute checks (the
        # full checks below give the precise errors)
        if type(layer) is not int or not 0 <= layer < self._n_layers:
            layer = self._layer(layer)
        if not (type(q) is np.ndarray and q.dtype is _F32 and q.flags.c_contiguous and q.ndim in (2, 3)
                and q.shape[-1] == self._head_dim):
            q = as_f32(q, "q", (2, 3), last=self._head_dim)
        shape = q.shape
        nq = shape[0] if len(shape) == 3 else 1
        hq = shape[-2]
        if hq <= 0 or hq % self._n_kv_heads:
            raise InvalidArgumentError(f"q has {hq} heads, not a positive multiple of n_kv_heads = "
                                       f"{self._n_kv_heads}", status=-2, argument=shape)
        if out is None:
            res = np.empty(shape, dtype=np.float32)
        elif type(out) is np.ndarray and out.dtype is _F32 and out.shape == shape and out.flags.c_contiguous \
                and out.flags.writeable:
            res = out
        else:
            res = check_out(out, shape)
        if scale is None:
            scale = self._scale
        else:
            scale = float(scale)
            if not math.isfinite(scale):
                raise InvalidArgumentError(f"scale = {scale} is not finite", status=-2, argument=scale)
        if threads is None:
            t = self._threads
        else:
            t = check_int(threads, "threads", 1, 1024)
        pool = self._pools.get(t) if t > 1 else None
        if pos0 is not None and (type(pos0) is not int or pos0 < 0):
            pos0 = check_int(pos0, "pos0", 0, _lib.SIZE_MAX)
        p = self._enter()
        try:
            if pos0 is None:
                n = _c.kvq_cache_len(p, layer)
                if nq > n:
                    raise InvalidArgumentError(f"{nq} query tokens but layer {layer} holds {n} positions",
                                               status=-2, argument=nq)
                start = n - nq
            else:
                start = pos0
            if nq == 0:
                return res
            rc = _c.kvq_cache_attend(p, layer, q.ctypes.data, nq, hq, start, scale, res.ctypes.data, pool)
            if rc:
                n = _c.kvq_cache_len(p, layer)
                check(rc, "kvq_cache_attend", argument=f"layer {layer}, pos0 {start}, {nq} tokens, len {n}")
        finally:
            self._leave()
        return res

    def length(self, layer: int = 0) -> int:
        """Positions held by a layer (0..length-1 are addressable)."""
        layer = self._layer(layer)
        p = self._enter()
        try:
            return _c.kvq_cache_len(p, layer)
        finally:
            self._leave()

    def __len__(self) -> int:
        """Tokens every layer holds (the smallest layer length)."""
        p = self._enter()
        try:
            return min(_c.kvq_cache_len(p, l) for l in range(self._n_layers))
        finally:
            self._leave()

    def truncate(self, pos: int) -> None:
        """Drops every position >= pos in all layers. StateError (nothing changes)
        if a sliding-window layer already dropped positions a query at pos needs."""
        pos = check_int(pos, "pos", 0, _lib.SIZE_MAX)
        p = self._enter()
        try:
            check(_c.kvq_cache_truncate(p, pos), "kvq_cache_truncate", argument=pos)
        finally:
            self._leave()

    def clear(self) -> None:
        """Drops everything (the configuration stays)."""
        p = self._enter()
        try:
            _c.kvq_cache_clear(p)
        finally:
            self._leave()

    # ------------------------------------------------------------ memory
    def memory_bytes(self) -> int:
        """Exact bytes held for K/V data: codes, scales, f16 windows, rings."""
        p = self._enter()
        try:
            return _c.kvq_cache_memory_bytes(p)
        finally:
            self._leave()

    def bytes_per_token(self) -> int:
        """Bytes one token costs across all layers once compressed (K+V)."""
        p = self._enter()
        try:
            return _c.kvq_cache_bytes_per_token(p)
        finally:
            self._leave()

    def memory_plan(self, n_tokens: int, batch: int = 0) -> MemoryPlan:
        """What memory_bytes() will report once n_tokens were appended to every layer
        of an empty cache of this configuration in batches of `batch` (0 = one
        batch): MemoryPlan(at, peak). Exact; the cache's contents are not used."""
        n_tokens = check_int(n_tokens, "n_tokens", 0, _lib.SIZE_MAX)
        batch = check_int(batch, "batch", 0, _lib.SIZE_MAX)
        at, peak = ctypes.c_size_t(), ctypes.c_size_t()
        p = self._enter()
        try:
            check(_c.kvq_cache_memory_plan(p, n_tokens, batch, ctypes.byref(at), ctypes.byref(peak)),
                  "kvq_cache_memory_plan", argument=n_tokens)
        finally:
            self._leave()
        return MemoryPlan(at.value, peak.value)

    def max_tokens(self, budget_bytes: Union[int, float], batch: int = 0) -> int:
        """The largest number of tokens whose planned peak memory fits in budget_bytes
        (``cache.max_tokens(4 * 2**30)``: how many tokens fit in 4 GiB). Doubling then
        bisection over memory_plan(); peak memory grows with the token count."""
        if isinstance(budget_bytes, float):
            if not math.isfinite(budget_bytes):
                raise InvalidArgumentError("budget_bytes is not finite", status=-2, argument=budget_bytes)
            budget_bytes = int(budget_bytes)
        budget = check_int(budget_bytes, "budget_bytes", 0, 2**128)

        def fits(n: int) -> bool:
            try:
                return self.memory_plan(n, batch).peak <= budget
            except OverflowError:
                return False

        if not fits(1):
            return 0
        lo, hi = 1, 2
        while fits(hi):
            lo, hi = hi, hi * 2
            if hi > _lib.SIZE_MAX:
                hi = _lib.SIZE_MAX
                if fits(hi):
                    return hi
                break
        while hi - lo > 1:  # fits(lo), not fits(hi)
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def _twin(self) -> "Cache":
        if self._f16_twin is None:
            self._f16_twin = Cache(self._n_layers, self._n_kv_heads, self._head_dim, "f16",
                                   sliding_window=self.sliding_window if self._sw is not None else None)
        return self._f16_twin

    def f16_bytes(self, n_tokens: Optional[int] = None) -> int:
        """Bytes an f16 cache of the same geometry (layers, heads, dim, sliding
        windows) would hold for n_tokens (default: len(self)): the figure to
        compare memory_bytes() with."""
        if n_tokens is None:
            n_tokens = len(self)
        return self._twin().memory_plan(n_tokens).at

    def f16_bytes_per_token(self) -> int:
        """bytes_per_token() of the f16 twin: n_layers * n_kv_heads * head_dim * 4."""
        return self._twin().bytes_per_token()


# ---------------------------------------------------------------- builder
# Method names of the library kvq descends from -> kvq specs (B = the inlier bit width).
_METHODS = {
    "turboquant": "tq-mse:{b}", "turboquant_mse": "tq-mse:{b}", "tq_mse": "tq-mse:{b}",
    "turboquant_prod": "tq-prod:{b}", "tq_prod": "tq-prod:{b}",
    "qjl": "qjl",
    "polarquant": "polar:{b}", "polar": "polar:{b}",
    "rvq": "rvq:{b}",
    "int8": "q8", "int4": "q4",
    "fp16": "f16", "float16": "f16", "f16": "f16", "bf16": "bf16", "bfloat16": "bf16", "fp32": "f32",
    "float32": "f32", "f32": "f32",
}
_KEY_ONLY = {"turboquant_prod", "tq_prod", "qjl"}


def method_spec(method: str, bits: Optional[int] = None) -> str:
    """The kvq spec of a method name: a builder name (turboquant, turboquant_mse,
    turboquant_prod, qjl, polarquant, rvq, int8, int4, fp16) with its bit width,
    or a kvq spec, returned as is (checked when the cache is built)."""
    if not isinstance(method, str):
        raise TypeError(f"method must be a str, not {type(method).__name__}")
    key = method.strip().lower().replace("-", "_")
    if key in _METHODS:
        tmpl = _METHODS[key]
        if "{b}" in tmpl:
            if bits is None:
                bits = 4
            bits = check_int(bits, "bits", -(2**31), 2**31 - 1)
            if bits < 1 or bits > 8:
                raise BitsRangeError(status=-4, call="KVCacheBuilder", argument=f"{method} at {bits} bits")
            return tmpl.format(b=bits)
        return tmpl
    if not method or any(c in method for c in ",/ "):
        raise UnknownMethodError(status=-5, call="KVCacheBuilder", argument=method)
    return method  # a kvq spec ("tq-mse:4+chscale")


class KVCacheBuilder:
    """Builds a kvq.Cache step by step, with the vocabulary of the TurboQuant
    library kvq descends from and kvq's own options::

        cache = (kvq.KVCacheBuilder().with_method("turboquant_prod").with_head_dim(128)
                 .with_bit_width(inlier=4).with_seed(42).build())

    Method names: turboquant / turboquant_mse -> tq-mse:B, turboquant_prod ->
    tq-prod:B (keys; values then use tq-mse:B: tq-prod cannot reconstruct),
    qjl (keys; values tq-mse:B), polarquant -> polar:B, rvq -> rvq:B, int8 ->
    q8, int4 -> q4, fp16 -> f16; any kvq spec is accepted as is
    ("tq-mse:4+chscale"). B is with_bit_width's inlier width (default 4).
    Each with_* returns the builder.
    """

    def __init__(self) -> None:
        self._layers, self._heads, self._dim = 1, 1, 128
        self._method: Optional[str] = None
        self._kmethod: Optional[str] = None
        self._vmethod: Optional[str] = None
        self._kbits: Optional[int] = None
        self._vbits: Optional[int] = None
        self._bits: Optional[int] = None
        self._outliers = 0
        self._policy: Optional[Policy] = None
        self._fields: Dict[str, object] = {}
        self._sliding: Optional[List[int]] = None
        self._seed = 0
        self._threads = 1
        self._reference = False

    def with_method(self, method: str) -> "KVCacheBuilder":
        """Method of keys and values (a key-only method gives values tq-mse:B)."""
        self._method = method
        self._kmethod = self._vmethod = None
        self._kbits = self._vbits = None
        return self

    def with_key_method(self, method: str, bits: Optional[int] = None) -> "KVCacheBuilder":
        """Method of keys (asymmetric K/V), with its own bit width if given."""
        self._kmethod, self._kbits = method, bits
        return self

    def with_value_method(self, method: str, bits: Optional[int] = None) -> "KVCacheBuilder":
        """Method of values, with its own bit width if given."""
        self._vmethod, self._vbits = method, bits
        return self

    def with_bit_width(self, inlier: int = 4, outlier: Optional[int] = None) -> "KVCacheBuilder":
        """Bits per value of the methods with a width. kvq keeps outlier channels
        (with_outliers) as int8, so outlier must be None or 8."""
        self._bits = inlier
        if outlier not in (None, 8):
            raise BitsRangeError(status=-4, call="with_bit_width", argument=outlier,
                                 detail="kvq stores outlier channels as int8 (outlier=8)")
        return self

    def with_outliers(self, channels: int) -> "KVCacheBuilder":
        """Keep the `channels` highest-variance channels as int8 (+outliers=K, calibrated
        on the first calib tokens)."""
        self._outliers = check_int(channels, "channels", 0, 512)
        return self

    def with_head_dim(self, dim: int) -> "KVCacheBuilder":
        self._dim = dim
        return self

    def with_layers(self, n: int) -> "KVCacheBuilder":
        self._layers = n
        return self

    def with_kv_heads(self, n: int) -> "KVCacheBuilder":
        self._heads = n
        return self

    def with_seed(self, seed: int) -> "KVCacheBuilder":
        self._seed = seed
        return self

    def with_f16_window(self, w: int) -> "KVCacheBuilder":
        """The w most recent tokens stay f16."""
        self._fields["f16_window"] = w
        return self

    def with_f16_layers(self, layers: Sequence[int]) -> "KVCacheBuilder":
        """Layers kept entirely in f16 (negative: from the end)."""
        self._fields["f16_layers"] = list(layers)
        return self

    def with_sliding_window(self, windows: Sequence[int]) -> "KVCacheBuilder":
        """Per-layer local-attention windows (0: global), one entry per layer."""
        self._sliding = list(windows)
        return self

    def with_compress_sliding(self, on: bool = True) -> "KVCacheBuilder":
        """Compress sliding-window layers too (default: they stay f16)."""
        self._fields["compress_sliding"] = bool(on)
        return self

    def with_calib_tokens(self, n: int) -> "KVCacheBuilder":
        self._fields["calib_tokens"] = n
        return self

    def with_sink_tokens(self, n: int = 1) -> "KVCacheBuilder":
        """Keep the first n positions in f16 for good (attention sinks; policy sink=n)."""
        self._fields["sink_tokens"] = n
        return self

    def with_policy(self, policy: Union[str, Policy]) -> "KVCacheBuilder":
        """A whole policy string ("q8/tq-mse:4,w=128"), parsed now; later with_* calls
        override its fields."""
        self._policy = as_policy(policy)
        self._method = self._kmethod = self._vmethod = None
        self._fields = {}
        return self

    def with_threads(self, n: int) -> "KVCacheBuilder":
        """Default thread count of attend()."""
        self._threads = n
        return self

    def with_reference_kernels(self, on: bool = True) -> "KVCacheBuilder":
        self._reference = bool(on)
        return self

    def policy(self) -> Policy:
        """The policy build() would use."""
        pol = self._policy or Policy("f16")
        fields = dict(self._fields)
        km = self._kmethod if self._kmethod is not None else self._method
        if km is not None:
            fields["k_spec"] = self._spec(km, self._kbits)
        vm = self._vmethod
        if vm is None and self._method is not None:
            key = self._method.strip().lower().replace("-", "_")
            vm = "turboquant_mse" if key in _KEY_ONLY else self._method
        if vm is not None:
            fields["v_spec"] = self._spec(vm, self._vbits)
        return pol.replace(**fields) if fields else pol

    def _spec(self, method: str, bits: Optional[int]) -> str:
        s = method_spec(method, bits if bits is not None else self._bits)
        if self._outliers and "+outliers" not in s and s not in ("f16", "f32", "bf16"):
            s += f"+outliers={self._outliers}"
        return s

    def build(self) -> Cache:
        """The kvq.Cache (kvq_cache_create)."""
        return Cache(self._layers, self._heads, self._dim, self.policy(), sliding_window=self._sliding,
                     seed=self._seed, threads=self._threads, reference_kernels=self._reference)
