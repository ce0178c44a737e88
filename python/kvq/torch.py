"""kvq.torch: kvq's kernels as PyTorch operators (``torch.library`` custom ops, namespace ``kvq``).

CUDA tensors (libkvq-cuda, include/kvq_cuda.h; loaded on the first CUDA call):

- ``torch.ops.kvq.cuda_encode(x, plan, status)``: rows (n, d) f16/f32 -> records (n, code_bytes) uint8,
  the bytes of the CPU codec's scalar reference;
- ``torch.ops.kvq.store_pages(pages, x, dst, layer, kv, status)``: tokens (ntok, H, d) into paged records;
- ``torch.ops.kvq.store_window(window, x, seq, pos, layer, kv, status)``: tokens into the f16 window rings;
- ``torch.ops.kvq.store_sink(sink, x, seq, pos, layer, kv, status)``: tokens at positions below the layer's
  sink S into the f16 sinks (policy ``sink=S``: the first S positions stay f16 for good);
- ``torch.ops.kvq.attend(q, pages, block_table, main_len, win_len, window, layer, scale, max_main_len,
  seq_map, sink_len, sink)``: one decode step, the paged split-K attention on the codes with the exact
  merge of the chunks (seq_map: rows sharing a stored sequence, e.g. causal prefill rows; sink_len: the
  first positions of each row in the sink, the pages then holding positions S..).

They run on ``torch.cuda.current_stream()``, take their workspace from PyTorch's caching allocator,
never synchronise or copy to the host, and can be captured in a CUDA graph (``torch.cuda.graph``):
lengths and block tables are read on the device, so a graph captured with ``max_main_len`` = the
capacity serves every later length. Errors the kernels find (NaN/Inf input, a scale out of f16
range) go to a device ``status`` tensor (int32, one element, zero before); :func:`check_status`
synchronises and raises the :class:`kvq.Error` subclass, off the hot path.

CPU tensors (libkvq through :class:`kvq.Plan`, zero-copy numpy views of the tensors):
``torch.ops.kvq.encode``, ``decode``, ``score``, ``accumulate``, ``unrotate``; errors raise at once.

The ``plan`` and ``layer`` arguments are the integer keys of live :class:`CudaPlan`, :class:`CudaLayer`
or :class:`kvq.Plan` objects (their ``key`` property; :func:`plan_key` for a kvq.Plan); the
objects must outlive every call, and every CUDA graph, that uses them. The functions of this
module (:func:`encode`, :func:`attend`, ...) take the objects and call the operators.

Importing this module needs torch but no GPU and no libkvq-cuda. Tested with torch 2.15 (CPU
operators; CUDA operators registered) and torch 2.11 + CUDA 13.0 on an H200 (docs/CUDA.md).
"""
import ctypes
import threading
import weakref
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from . import _lib
from ._errors import InvalidArgumentError, UnsupportedError, check, error_for
from .codec import Plan

__all__ = [
    "CudaPlan", "CudaLayer", "cuda_available", "check_status", "new_status", "plan_key",
    "encode", "decode", "score", "accumulate", "unrotate", "store_pages", "store_window", "store_sink", "attend",
    "SERVED_ATTENTION",
]

#: What the CUDA attention kernels serve (docs/CUDA.md "What is served").
SERVED_ATTENTION = ("head dims 32, 64, 96, 128, 256, f16 or f32 scales; K in f16, q8, tq-mse:1..8, rvq:1..4, "
                    "tq-prod, qjl, tcq:1..4; V in f16, q8, tq-mse:1..8, rvq:1..4, tcq:1..4 (options +norot, +scale=norm, +cb=gauss); "
                    "the tensor-core kernels at 128 for K tq-mse/rvq:1/2/4, tq-prod:2/3/5, qjl (m = d), f16, q8, "
                    "tq-mse:3 and tcq:2/3/4 (K and V; also at 64 and 256, with f16, q8, tq-mse:2/4), "
                    "the generic kernel for the rest; each also with +center / +chscale (calibrated plans); f16 window "
                    "rings and f16 sinks (policy sink=S)")

_DTYPE_CODE = {torch.float32: 0, torch.float16: 1}


# ---------------------------------------------------------------- object registry
class _Registry:
    """Live objects by integer key (their C pointer), so that operators take plain ints."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objs: Dict[int, "weakref.ReferenceType"] = {}

    def add(self, key: int, obj: object) -> None:
        with self._lock:
            self._objs[key] = weakref.ref(obj)

    def drop(self, key: int) -> None:
        with self._lock:
            self._objs.pop(key, None)

    def get(self, key: int, cls: type, what: str) -> object:
        with self._lock:
            ref = self._objs.get(key)
        obj = ref() if ref is not None else None
        if obj is None or not isinstance(obj, cls):
            raise InvalidArgumentError(f"{what}: {key:#x} is not the key of a live {cls.__name__}", status=-2,
                                       argument=key)
        return obj


_REG = _Registry()


def plan_key(plan: Plan) -> int:
    """The operator key of a CPU plan (registered on first use; valid while the plan is open)."""
    ptr = plan._h.acquire()
    try:
        _REG.add(ptr, plan)
        return ptr
    finally:
        plan._h.release()


def cuda_available() -> bool:
    """True if torch sees a CUDA device and libkvq-cuda is loadable and sees one too."""
    if not torch.cuda.is_available():
        return False
    try:
        lib = _lib.cuda()
    except OSError:
        return False
    return lib.kvq_cuda_device_count() > 0


def _cuda_lib() -> ctypes.CDLL:
    try:
        return _lib.cuda()
    except OSError as e:
        raise UnsupportedError(str(e), status=-15) from None


# ---------------------------------------------------------------- device objects
class CudaPlan:
    """A device copy of a :class:`kvq.Plan`'s tables (kvq_cuda_plan_create), on the current CUDA device.

    ``plan`` may also be a sequence of calibrated plans (``+center`` / ``+chscale``), one per KV head, of
    one spec, dim and seed (kvq_cuda_plan_create_heads): one device plan with each head's mean and channel
    scales. UnsupportedError for methods the CUDA encoder does not serve (f32, bf16, q4, polar, +outliers)
    or dims it does not serve (rotated methods: multiples of 32 up to 512). The CPU plan (the first of
    them) is kept (``plan``; all of them: ``plans``).
    """

    def __init__(self, plan: Union[Plan, Sequence[Plan]], device: Union[torch.device, str, int, None] = None) -> None:
        plans = [plan] if isinstance(plan, Plan) else list(plan)
        if not plans or not all(isinstance(p, Plan) for p in plans):
            raise TypeError("plan must be a kvq.Plan or a non-empty sequence of them")
        lib = _cuda_lib()
        if not torch.cuda.is_available():
            raise UnsupportedError("kvq.torch.CudaPlan: torch sees no CUDA device", status=-15)
        dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        if dev.type != "cuda":
            raise InvalidArgumentError(f"CudaPlan needs a CUDA device, not {dev}", status=-2, argument=str(dev))
        out = ctypes.c_void_p()
        with torch.cuda.device(dev):
            held: List[Plan] = []
            ptrs: List[int] = []
            try:
                for p in plans:
                    ptrs.append(p._h.acquire())
                    held.append(p)
                if isinstance(plan, Plan):
                    check(lib.kvq_cuda_plan_create(ctypes.byref(out), ptrs[0]), "kvq_cuda_plan_create",
                          argument=plans[0].spec)
                else:
                    arr = (ctypes.c_void_p * len(ptrs))(*ptrs)
                    check(lib.kvq_cuda_plan_create_heads(ctypes.byref(out), arr, len(ptrs)),
                          "kvq_cuda_plan_create_heads", argument=plans[0].spec)
            finally:
                for p in held:
                    p._h.release()
        self.plan = plans[0]
        self.plans = plans
        self.device = dev
        self._ptr: Optional[int] = out.value
        self.code_bytes = int(lib.kvq_cuda_plan_code_bytes(out.value))
        _REG.add(out.value, self)

    @property
    def key(self) -> int:
        """Operator key (the C pointer); InvalidArgumentError once closed."""
        if self._ptr is None:
            raise InvalidArgumentError("CudaPlan is closed", status=-2)
        return self._ptr

    @property
    def spec(self) -> str:
        return self.plan.spec

    @property
    def dim(self) -> int:
        return self.plan.dim

    def close(self) -> None:
        """Frees the device tables (layers made from the plan must be closed first)."""
        ptr, self._ptr = self._ptr, None
        if ptr:
            _REG.drop(ptr)
            _lib.cuda().kvq_cuda_plan_free(ptr)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"<kvq.torch.CudaPlan {self.spec!r} dim={self.dim} on {self.device}>"


class CudaLayer:
    """One attention layer's policy on the device (kvq_cuda_layer_create): K and V plans, heads,
    page size P (a multiple of 16), f16 window slots W, f16 sink rows S (0..1024).

    Page pools, block tables, window rings and sinks are tensors the caller owns (see docs/CUDA.md
    for their layouts): ``page_bytes`` per page (all heads, K and V), ``window_bytes(n_seq)`` for the
    rings, ``sink_bytes(n_seq)`` for the sinks ((n_seq, 2, H, S, d) f16; with a sink, position p >= S
    is stored at page position p - S). UnsupportedError (naming what is served) for a pair the
    kernels do not serve.
    """

    def __init__(self, k: CudaPlan, v: CudaPlan, n_kv_heads: int, n_q_heads: int, page_tokens: int,
                 window: int = 0, sink: int = 0) -> None:
        lib = _cuda_lib()
        cfg = _lib.CudaLayerConfig(k.key, v.key, n_kv_heads, n_q_heads, page_tokens, window, sink)
        out = ctypes.c_void_p()
        with torch.cuda.device(k.device):
            rc = lib.kvq_cuda_layer_create(ctypes.byref(out), ctypes.byref(cfg))
        if rc == -15 or rc == -3:
            raise UnsupportedError(f"kvq CUDA attention does not serve K {k.spec!r} / V {v.spec!r} at head dim "
                                   f"{k.dim}; it serves {SERVED_ATTENTION}", status=-15,
                                   argument=f"{k.spec}/{v.spec}")
        check(rc, "kvq_cuda_layer_create", argument=f"{k.spec}/{v.spec}")
        self.k, self.v = k, v  # the plans must outlive the layer
        self.device = k.device
        self.n_kv_heads, self.n_q_heads = n_kv_heads, n_q_heads
        self.page_tokens, self.window, self.sink = page_tokens, window, sink
        self.head_dim = k.dim
        self._ptr: Optional[int] = out.value
        self.page_bytes = int(lib.kvq_cuda_layer_page_bytes(out.value))
        _REG.add(out.value, self)

    @property
    def key(self) -> int:
        if self._ptr is None:
            raise InvalidArgumentError("CudaLayer is closed", status=-2)
        return self._ptr

    def window_bytes(self, n_seq: int) -> int:
        """Bytes of the f16 window rings of n_seq sequences (0 without a window)."""
        return int(_lib.cuda().kvq_cuda_layer_window_bytes(self.key, n_seq))

    def sink_bytes(self, n_seq: int) -> int:
        """Bytes of the f16 sinks of n_seq sequences (0 without a sink)."""
        return int(_lib.cuda().kvq_cuda_layer_sink_bytes(self.key, n_seq))

    def workspace_bytes(self, n_seq: int, max_main_len: int) -> int:
        """Workspace of an attend() of at most n_seq sequences and max_main_len (a bound)."""
        return int(_lib.cuda().kvq_cuda_attend_workspace_bytes(self.key, n_seq, max_main_len))

    def close(self) -> None:
        ptr, self._ptr = self._ptr, None
        if ptr:
            _REG.drop(ptr)
            _lib.cuda().kvq_cuda_layer_free(ptr)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (f"<kvq.torch.CudaLayer K {self.k.spec!r} V {self.v.spec!r} H={self.n_kv_heads} "
                f"HQ={self.n_q_heads} P={self.page_tokens} W={self.window} S={self.sink}>")


def new_status(device: Union[torch.device, str, int, None] = None) -> torch.Tensor:
    """A zeroed device status word (int32, one element) for the CUDA operators."""
    return torch.zeros(1, dtype=torch.int32, device=device if device is not None else "cuda")


def check_status(status: torch.Tensor, call: str = "kvq CUDA kernel") -> None:
    """Synchronises with status's stream, raises the kvq.Error subclass of a nonzero code and
    zeroes it. Call it off the hot path (after a prefill, every N decode steps, at the end)."""
    code = int(status.item())
    if code:
        status.zero_()
        raise error_for(code, call=call)


# ---------------------------------------------------------------- argument checks (cheap)
def _cuda_tensor(t: torch.Tensor, name: str, dtypes: Tuple[torch.dtype, ...], ndim: int) -> None:
    if t.device.type != "cuda":
        raise InvalidArgumentError(f"{name} must be a CUDA tensor, is on {t.device}", status=-2)
    if t.dtype not in dtypes:
        raise InvalidArgumentError(f"{name} has dtype {t.dtype}, expected {' or '.join(map(str, dtypes))}",
                                   status=-2)
    if t.dim() != ndim:
        raise InvalidArgumentError(f"{name} must have {ndim} dimensions, has shape {tuple(t.shape)}", status=-2)
    if not t.is_contiguous():
        raise InvalidArgumentError(f"{name} must be contiguous", status=-2)


def _stream(t: torch.Tensor) -> int:
    if t.device.index is not None and t.device.index != torch.cuda.current_device():
        raise InvalidArgumentError(f"tensor on {t.device} while the current device is cuda:"
                                   f"{torch.cuda.current_device()}: call under torch.cuda.device()", status=-2)
    return torch.cuda.current_stream().cuda_stream


def _ptr_or_none(t: Optional[torch.Tensor]) -> Optional[int]:
    return None if t is None else t.data_ptr()


# ---------------------------------------------------------------- CUDA operators (implementations)
def _cuda_encode_impl(x: torch.Tensor, plan: int, status: torch.Tensor) -> torch.Tensor:
    p = _REG.get(plan, CudaPlan, "kvq::cuda_encode plan")
    _cuda_tensor(x, "x", (torch.float32, torch.float16), 2)
    if x.shape[1] != p.dim:
        raise InvalidArgumentError(f"x has shape {tuple(x.shape)}, expected (n, {p.dim})", status=-2)
    out = torch.empty((x.shape[0], p.code_bytes), dtype=torch.uint8, device=x.device)
    if x.shape[0]:
        check(_lib.cuda().kvq_cuda_encode(p.key, x.data_ptr(), _DTYPE_CODE[x.dtype], x.shape[0], out.data_ptr(),
                                          status.data_ptr(), _stream(x)), "kvq_cuda_encode")
    return out


def _store_pages_impl(pages: torch.Tensor, x: torch.Tensor, dst: torch.Tensor, layer: int, kv: int,
                      status: torch.Tensor) -> None:
    L = _REG.get(layer, CudaLayer, "kvq::store_pages layer")
    _cuda_tensor(x, "x", (torch.float32, torch.float16), 3)
    _cuda_tensor(dst, "dst", (torch.int32,), 1)
    if x.shape[1] != L.n_kv_heads or x.shape[2] != L.head_dim or dst.shape[0] != x.shape[0]:
        raise InvalidArgumentError(f"store_pages: x {tuple(x.shape)} and dst {tuple(dst.shape)} do not match "
                                   f"(ntok, {L.n_kv_heads}, {L.head_dim}) and (ntok,)", status=-2)
    if x.shape[0]:
        check(_lib.cuda().kvq_cuda_store_pages(L.key, kv, pages.data_ptr(), x.data_ptr(), _DTYPE_CODE[x.dtype],
                                               x.shape[0], dst.data_ptr(), status.data_ptr(), _stream(x)),
              "kvq_cuda_store_pages")


def _store_f16(what: str, buf: torch.Tensor, x: torch.Tensor, seq: torch.Tensor, pos: torch.Tensor, layer: int,
               kv: int, status: torch.Tensor) -> None:
    """kvq::store_window (the rings) and kvq::store_sink (the sinks): tokens as f16 rows."""
    L = _REG.get(layer, CudaLayer, f"kvq::{what} layer")
    _cuda_tensor(x, "x", (torch.float32, torch.float16), 3)
    _cuda_tensor(seq, "seq", (torch.int32,), 1)
    _cuda_tensor(pos, "pos", (torch.int32,), 1)
    if x.shape[1] != L.n_kv_heads or x.shape[2] != L.head_dim or seq.shape[0] != x.shape[0] \
            or pos.shape[0] != x.shape[0]:
        raise InvalidArgumentError(f"{what}: x (ntok, H, d), seq (ntok,) and pos (ntok,) do not match",
                                   status=-2)
    if x.shape[0]:
        fn = f"kvq_cuda_{what}"
        check(getattr(_lib.cuda(), fn)(L.key, kv, buf.data_ptr(), x.data_ptr(), _DTYPE_CODE[x.dtype], x.shape[0],
                                       seq.data_ptr(), pos.data_ptr(), status.data_ptr(), _stream(x)), fn)


def _store_window_impl(window: torch.Tensor, x: torch.Tensor, seq: torch.Tensor, pos: torch.Tensor, layer: int,
                       kv: int, status: torch.Tensor) -> None:
    _store_f16("store_window", window, x, seq, pos, layer, kv, status)


def _store_sink_impl(sink: torch.Tensor, x: torch.Tensor, seq: torch.Tensor, pos: torch.Tensor, layer: int,
                     kv: int, status: torch.Tensor) -> None:
    _store_f16("store_sink", sink, x, seq, pos, layer, kv, status)


def _attend_impl(q: torch.Tensor, pages: torch.Tensor, block_table: torch.Tensor, main_len: torch.Tensor,
                 win_len: Optional[torch.Tensor], window: Optional[torch.Tensor], layer: int, scale: float,
                 max_main_len: int, seq_map: Optional[torch.Tensor] = None, sink_len: Optional[torch.Tensor] = None,
                 sink: Optional[torch.Tensor] = None) -> torch.Tensor:
    L = _REG.get(layer, CudaLayer, "kvq::attend layer")
    _cuda_tensor(q, "q", (torch.float32,), 3)
    _cuda_tensor(block_table, "block_table", (torch.int32,), 2)
    _cuda_tensor(main_len, "main_len", (torch.int32,), 1)
    n_seq = q.shape[0]
    if seq_map is not None:
        _cuda_tensor(seq_map, "seq_map", (torch.int32,), 1)
    if q.shape[1] != L.n_q_heads or q.shape[2] != L.head_dim or main_len.shape[0] != n_seq \
            or (seq_map is None and block_table.shape[0] != n_seq) or (seq_map is not None and seq_map.shape[0] != n_seq):
        raise InvalidArgumentError(f"attend: q {tuple(q.shape)}, block_table {tuple(block_table.shape)}, main_len "
                                   f"{tuple(main_len.shape)} do not match (n_seq, {L.n_q_heads}, {L.head_dim})",
                                   status=-2)
    if win_len is not None:
        _cuda_tensor(win_len, "win_len", (torch.int32,), 1)
        if window is None:
            raise InvalidArgumentError("attend: win_len given without window", status=-2)
    if sink_len is not None:
        _cuda_tensor(sink_len, "sink_len", (torch.int32,), 1)
        if sink is None or sink_len.shape[0] != n_seq:
            raise InvalidArgumentError("attend: sink_len needs sink and n_seq entries", status=-2)
    out = torch.empty_like(q)
    if n_seq == 0:
        return out
    lib = _lib.cuda()
    wsb = int(lib.kvq_cuda_attend_workspace_bytes(L.key, n_seq, max_main_len))
    ws = torch.empty(wsb, dtype=torch.uint8, device=q.device)
    b = _lib.CudaBatch(n_seq, pages.data_ptr(), block_table.data_ptr(), block_table.shape[1], main_len.data_ptr(),
                       _ptr_or_none(win_len), _ptr_or_none(window), max_main_len, _ptr_or_none(seq_map),
                       _ptr_or_none(sink_len), _ptr_or_none(sink))
    check(lib.kvq_cuda_attend_ws(L.key, ctypes.byref(b), q.data_ptr(), scale, out.data_ptr(), ws.data_ptr(), wsb,
                                 _stream(q)), "kvq_cuda_attend_ws")
    return out


# ---------------------------------------------------------------- CPU operators (implementations)
def _np_rows(x: torch.Tensor, name: str) -> Tuple[np.ndarray, Optional[str]]:
    """A zero-copy numpy view of a CPU tensor for kvq.Plan (bf16 as its uint16 bit patterns)."""
    if x.device.type != "cpu":
        raise InvalidArgumentError(f"{name} must be a CPU tensor here, is on {x.device}", status=-2)
    if not x.is_contiguous():
        raise InvalidArgumentError(f"{name} must be contiguous (x.contiguous() makes the copy)", status=-2)
    x = x.detach()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(np.uint16), "bf16"
    if x.dtype in (torch.float32, torch.float16, torch.uint8):
        return x.numpy(), None
    raise InvalidArgumentError(f"{name} has dtype {x.dtype}: kvq takes float32, float16, bfloat16", status=-2)


def _encode_impl(x: torch.Tensor, plan: int) -> torch.Tensor:
    p = _REG.get(plan, Plan, "kvq::encode plan")
    xn, dt = _np_rows(x, "x")
    out = torch.empty((x.shape[0], p.code_bytes), dtype=torch.uint8)
    p.encode(xn, dtype=dt, out=out.numpy())
    return out


def _decode_impl(codes: torch.Tensor, plan: int) -> torch.Tensor:
    p = _REG.get(plan, Plan, "kvq::decode plan")
    cn, _ = _np_rows(codes, "codes")
    out = torch.empty((codes.shape[0], p.dim), dtype=torch.float32)
    p.decode(cn, out=out.numpy())
    return out


def _score_impl(q: torch.Tensor, codes: torch.Tensor, plan: int) -> torch.Tensor:
    p = _REG.get(plan, Plan, "kvq::score plan")
    qn, _ = _np_rows(q, "q")
    cn, _ = _np_rows(codes, "codes")
    out = torch.empty((q.shape[0], codes.shape[0]), dtype=torch.float32)
    p.score(qn, cn, out=out.numpy())
    return out


def _accumulate_impl(p: torch.Tensor, codes: torch.Tensor, acc: torch.Tensor, plan: int) -> None:
    pl = _REG.get(plan, Plan, "kvq::accumulate plan")
    pn, _ = _np_rows(p, "p")
    cn, _ = _np_rows(codes, "codes")
    an, _ = _np_rows(acc, "acc")
    pl.accumulate(pn, cn, acc=an)


def _unrotate_impl(acc: torch.Tensor, plan: int) -> torch.Tensor:
    pl = _REG.get(plan, Plan, "kvq::unrotate plan")
    an, _ = _np_rows(acc, "acc")
    out = torch.empty_like(acc, dtype=torch.float32)
    pl.unrotate(an, out=out.numpy())
    return out


# ---------------------------------------------------------------- registration
def _define() -> Dict[str, object]:
    lib_ops: Dict[str, object] = {}
    cl = torch.library.custom_op

    op = cl("kvq::cuda_encode", _cuda_encode_impl, mutates_args=("status",), device_types="cuda")

    @op.register_fake
    def _(x, plan, status):
        p = _REG.get(plan, CudaPlan, "kvq::cuda_encode plan")
        return x.new_empty((x.shape[0], p.code_bytes), dtype=torch.uint8)
    lib_ops["cuda_encode"] = op

    lib_ops["store_pages"] = cl("kvq::store_pages", _store_pages_impl, mutates_args=("pages", "status"),
                                device_types="cuda")
    lib_ops["store_pages"].register_fake(lambda pages, x, dst, layer, kv, status: None)
    lib_ops["store_window"] = cl("kvq::store_window", _store_window_impl, mutates_args=("window", "status"),
                                 device_types="cuda")
    lib_ops["store_window"].register_fake(lambda window, x, seq, pos, layer, kv, status: None)
    lib_ops["store_sink"] = cl("kvq::store_sink", _store_sink_impl, mutates_args=("sink", "status"),
                               device_types="cuda")
    lib_ops["store_sink"].register_fake(lambda sink, x, seq, pos, layer, kv, status: None)
    op = cl("kvq::attend", _attend_impl, mutates_args=(), device_types="cuda")
    op.register_fake(lambda q, pages, block_table, main_len, win_len, window, layer, scale, max_main_len,
                     seq_map=None, sink_len=None, sink=None: torch.empty_like(q))
    lib_ops["attend"] = op

    op = cl("kvq::encode", _encode_impl, mutates_args=(), device_types="cpu")

    @op.register_fake
    def _(x, plan):
        p = _REG.get(plan, Plan, "kvq::encode plan")
        return x.new_empty((x.shape[0], p.code_bytes), dtype=torch.uint8)
    lib_ops["encode"] = op

    op = cl("kvq::decode", _decode_impl, mutates_args=(), device_types="cpu")

    @op.register_fake
    def _(codes, plan):
        p = _REG.get(plan, Plan, "kvq::decode plan")
        return codes.new_empty((codes.shape[0], p.dim), dtype=torch.float32)
    lib_ops["decode"] = op

    op = cl("kvq::score", _score_impl, mutates_args=(), device_types="cpu")
    op.register_fake(lambda q, codes, plan: q.new_empty((q.shape[0], codes.shape[0]), dtype=torch.float32))
    lib_ops["score"] = op
    op = cl("kvq::accumulate", _accumulate_impl, mutates_args=("acc",), device_types="cpu")
    op.register_fake(lambda p, codes, acc, plan: None)
    lib_ops["accumulate"] = op
    op = cl("kvq::unrotate", _unrotate_impl, mutates_args=(), device_types="cpu")
    op.register_fake(lambda acc, plan: torch.empty_like(acc, dtype=torch.float32))
    lib_ops["unrotate"] = op
    return lib_ops


OPS = _define()


# ---------------------------------------------------------------- convenience functions
def _cuda_twin(plan: Union[Plan, CudaPlan], device: torch.device) -> CudaPlan:
    if isinstance(plan, CudaPlan):
        return plan
    with _TWIN_LOCK:
        twin = _TWINS.get(plan)
        if twin is None or twin.device != device:
            twin = CudaPlan(plan, device)
            _TWINS[plan] = twin
    return twin


_TWINS: "weakref.WeakKeyDictionary[Plan, CudaPlan]" = weakref.WeakKeyDictionary()
_TWIN_LOCK = threading.Lock()


def _rows2d(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(1, -1) if x.dim() == 1 else x


def encode(plan: Union[Plan, CudaPlan], x: torch.Tensor, status: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Records (n, code_bytes) uint8 of rows x (n, d) or (d,), on x's device.

    x must be contiguous (no silent copies). CPU: float32/float16/bfloat16 through kvq.Plan.encode
    (errors raise). CUDA: the device encoder
    (bfloat16 converted to float32 first; errors go to ``status``, or are checked at once, with a
    synchronisation, when status is None). Same bytes on both (the CPU plan's scalar reference)."""
    x2 = _rows2d(x)
    if x.device.type == "cuda":
        cp = _cuda_twin(plan, x.device)
        if x2.dtype not in _DTYPE_CODE:
            x2 = x2.to(torch.float32)
        st = status if status is not None else new_status(x.device)
        out = torch.ops.kvq.cuda_encode(x2, cp.key, st)
        if status is None:
            check_status(st, "kvq_cuda_encode")
    else:
        cpu = plan.plan if isinstance(plan, CudaPlan) else plan
        out = torch.ops.kvq.encode(x2, plan_key(cpu))
    return out[0] if x.dim() == 1 else out


def _cpu_plan(plan: Union[Plan, CudaPlan], what: str, t: torch.Tensor) -> Plan:
    if t.device.type != "cpu":
        raise UnsupportedError(f"kvq.torch.{what}: no CUDA kernel (the CUDA kernels serve encode, store_pages, "
                               "store_window and attend); move the tensors to the CPU", status=-15)
    return plan.plan if isinstance(plan, CudaPlan) else plan


def decode(plan: Union[Plan, CudaPlan], codes: torch.Tensor) -> torch.Tensor:
    """Rows (n, d) float32 of records (n, code_bytes) (CPU tensors)."""
    p = _cpu_plan(plan, "decode", codes)
    out = torch.ops.kvq.decode(_rows2d(codes), plan_key(p))
    return out[0] if codes.dim() == 1 else out


def score(plan: Union[Plan, CudaPlan], q: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """Estimated inner products (nq, n) float32 of raw queries (nq, d) with records (CPU tensors)."""
    p = _cpu_plan(plan, "score", q)
    return torch.ops.kvq.score(_rows2d(q).to(torch.float32), _rows2d(codes), plan_key(p))


def accumulate(plan: Union[Plan, CudaPlan], p: torch.Tensor, codes: torch.Tensor,
               acc: Optional[torch.Tensor] = None) -> torch.Tensor:
    """acc (nq, d) float32 += p (nq, n) x V in the plan's rotated domain (CPU tensors); returns acc.
    Finish with :func:`unrotate`."""
    pl = _cpu_plan(plan, "accumulate", p)
    p2 = _rows2d(p).to(torch.float32)
    if acc is None:
        acc = torch.zeros((p2.shape[0], pl.dim), dtype=torch.float32)
    torch.ops.kvq.accumulate(p2, _rows2d(codes), acc, plan_key(pl))
    return acc


def unrotate(plan: Union[Plan, CudaPlan], acc: torch.Tensor) -> torch.Tensor:
    """Rows of the rotated domain mapped back (R^T acc), (nq, d) float32 (CPU tensors)."""
    pl = _cpu_plan(plan, "unrotate", acc)
    return torch.ops.kvq.unrotate(_rows2d(acc), plan_key(pl))


def store_pages(layer: CudaLayer, pages: torch.Tensor, x: torch.Tensor, dst: torch.Tensor, kv: int,
                status: torch.Tensor) -> None:
    """Encodes tokens x (ntok, H, d) f16/f32 of K (kv=0) or V (kv=1) into pages: token i to slot
    dst[i] = page * P + slot (int32, device). Asynchronous; errors to status."""
    torch.ops.kvq.store_pages(pages, x, dst, layer.key, kv, status)


def store_window(layer: CudaLayer, window: torch.Tensor, x: torch.Tensor, seq: torch.Tensor, pos: torch.Tensor,
                 kv: int, status: torch.Tensor) -> None:
    """Writes tokens x (ntok, H, d) as f16 into the window rings (token i: sequence seq[i], position pos[i])."""
    torch.ops.kvq.store_window(window, x, seq, pos, layer.key, kv, status)


def store_sink(layer: CudaLayer, sink: torch.Tensor, x: torch.Tensor, seq: torch.Tensor, pos: torch.Tensor,
               kv: int, status: torch.Tensor) -> None:
    """Writes the tokens of x (ntok, H, d) at positions pos[i] < S as f16 into the sinks (sequence seq[i]);
    the others store nothing."""
    torch.ops.kvq.store_sink(sink, x, seq, pos, layer.key, kv, status)


def attend(layer: CudaLayer, q: torch.Tensor, pages: torch.Tensor, block_table: torch.Tensor,
           main_len: torch.Tensor, scale: float, max_main_len: int, win_len: Optional[torch.Tensor] = None,
           window: Optional[torch.Tensor] = None, seq_map: Optional[torch.Tensor] = None,
           sink_len: Optional[torch.Tensor] = None, sink: Optional[torch.Tensor] = None) -> torch.Tensor:
    """One decode step: out (n_seq, HQ, d) float32 = softmax(scale q.K) V over a row's positions: the first
    sink_len (n_seq,) int32 in the sinks (None: 0), the next main_len in pages (page positions [0, main_len),
    block_table (rows, max_pages) int32), the next win_len in the window rings.
    max_main_len (host) bounds every main_len and sizes the grid (use the capacity under a CUDA graph).
    seq_map (n_seq,) int32: the block-table row, ring and sink of each query row (None: row s is sequence s),
    e.g. the causal rows of a prefill, main_len = t + 1, sharing their sequence's pages."""
    return torch.ops.kvq.attend(q, pages, block_table, main_len, win_len, window, layer.key, float(scale),
                                int(max_main_len), seq_map, sink_len, sink)
