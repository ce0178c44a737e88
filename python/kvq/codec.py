"""kvq.Plan: one codec method for one head dimension (kvq_plan_* of include/kvq.h)."""
from __future__ import annotations

import ctypes
from typing import Optional, Union

import numpy as np

from . import _lib
from ._errors import InvalidArgumentError, check
from ._util import Handle, as_f32, check_array, check_int, check_out

_lib_core = _lib.core

DTypeLike = Union[str, np.dtype, type, None]

_ISA = {0: "scalar", 1: "avx2", 2: "avx512", 99: "best"}


def _dtype_code(x: np.ndarray, dtype: DTypeLike) -> int:
    """kvq_dtype of an input array: float32 -> F32, float16 -> F16; bfloat16 as
    uint16 bit patterns with dtype="bf16" (or an ml_dtypes bfloat16 array)."""
    if dtype is not None:
        name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
        name = name.lower()
        if name in ("bf16", "bfloat16"):
            if x.dtype not in (np.dtype(np.uint16),) and x.dtype.name != "bfloat16":
                raise TypeError(f"dtype='bf16' needs the bf16 bit patterns as a uint16 array, got {x.dtype}")
            return 2
        if name in ("f16", "float16"):
            if x.dtype != np.float16:
                raise TypeError(f"dtype='f16' needs a float16 array, got {x.dtype}")
            return 1
        if name in ("f32", "float32"):
            if x.dtype != np.float32:
                raise TypeError(f"dtype='f32' needs a float32 array, got {x.dtype}")
            return 0
        raise TypeError(f"unknown input dtype {dtype!r} (f32, f16, bf16)")
    if x.dtype == np.float32:
        return 0
    if x.dtype == np.float16:
        return 1
    if x.dtype.name == "bfloat16" and x.dtype.itemsize == 2:
        return 2
    if x.dtype == np.uint16:
        raise TypeError("a uint16 array is taken as bfloat16 bit patterns only with dtype='bf16'")
    raise TypeError(f"x has dtype {x.dtype}: kvq encodes float32, float16 or bf16 (uint16 with dtype='bf16'); "
                    "convert explicitly with x.astype(np.float32) (a copy)")


class Plan:
    """A codec plan: everything precomputed for one (method spec, head dim, seed).

    ``spec`` is a kvq method spec exactly as the C library takes it
    (docs/METHODS.md): ``f32 f16 bf16 q8 q4 tq-mse:B tq-prod:B qjl polar[:B]
    rvq:B`` with options ``+outliers=K +m=M +norot +scale=norm +scale32
    +cb=gauss +center +chscale``. Methods that learn from data (``+outliers``,
    ``+center``, ``+chscale``) need ``calib``, float32 rows (n, dim).

    Arrays go to C without copies: inputs must be C-contiguous and of the
    documented dtype (TypeError/ValueError otherwise, before any C call).
    Rows are the last axis; a 1-D input is one row and gives a 1-D result.
    A plan is immutable and may be used from any number of threads at once
    (every kernel runs with the GIL released).

    Example::

        p = kvq.Plan("tq-mse:4", 128, seed=1)
        codes = p.encode(x)          # (n, p.code_bytes) uint8
        xr = p.decode(codes)         # (n, 128) float32
        s = p.score(q, codes)        # (nq, n) estimated <q, k>
    """

    def __init__(self, spec: str, dim: int, seed: int = 0, calib: Optional[np.ndarray] = None) -> None:
        if not isinstance(spec, str):
            raise TypeError(f"spec must be a str, not {type(spec).__name__}")
        dim = check_int(dim, "dim", -(2**31), _lib.INT_MAX)
        seed = check_int(seed, "seed", 0, 2**64 - 1)
        cptr, ncal = None, 0
        if calib is not None:
            calib = as_f32(calib, "calib", (2,), last=dim)
            cptr, ncal = calib.ctypes.data, calib.shape[0]
        out = ctypes.c_void_p()
        try:
            bspec = spec.encode()
        except UnicodeEncodeError:
            bspec = spec.encode("utf-8", "replace")
        if b"\0" in bspec:
            from ._errors import UnknownMethodError
            raise UnknownMethodError(status=-5, call="kvq_plan_create", argument=spec)
        check(_lib_core.kvq_plan_create(ctypes.byref(out), bspec, dim, seed, cptr, ncal), "kvq_plan_create",
              argument=spec if dim >= 1 else dim)
        self._h = Handle(out.value, _lib_core.kvq_plan_free, f"kvq.Plan({spec!r}, {dim})")
        p = out.value
        self._spec = _lib_core.kvq_plan_spec(p).decode()
        self._dim = _lib_core.kvq_plan_dim(p)
        self._code_bytes = _lib_core.kvq_plan_code_bytes(p)
        self._bits = _lib_core.kvq_plan_bits_per_value(p)
        self._can_decode = bool(_lib_core.kvq_plan_can_decode(p))
        self._qf = _lib_core.kvq_plan_query_floats(p)
        self._isa = _ISA.get(_lib_core.kvq_plan_isa(p), "?")
        self._seed = seed

    # ------------------------------------------------------------ properties
    @property
    def spec(self) -> str:
        """Canonical spec string of the plan (kvq_plan_spec)."""
        return self._spec

    @property
    def dim(self) -> int:
        """Values per vector."""
        return self._dim

    @property
    def code_bytes(self) -> int:
        """Every byte stored per vector: codes, scales, norms."""
        return self._code_bytes

    @property
    def bits_per_value(self) -> float:
        """code_bytes * 8 / dim (the honest figure: scales included)."""
        return self._bits

    @property
    def can_decode(self) -> bool:
        """False for key-only methods (qjl, tq-prod), which only score."""
        return self._can_decode

    @property
    def query_floats(self) -> int:
        """Floats of one prepared query (prepare())."""
        return self._qf

    @property
    def isa(self) -> str:
        """Kernel ISA the plan dispatches to ("scalar", "avx2", "avx512")."""
        return self._isa

    @property
    def closed(self) -> bool:
        return self._h.closed

    @staticmethod
    def needs_calibration(spec: str) -> bool:
        """True if the method needs calibration rows (kvq_spec_needs_calibration)."""
        v = ctypes.c_int()
        check(_lib_core.kvq_spec_needs_calibration(spec.encode(), ctypes.byref(v)), "kvq_spec_needs_calibration",
              argument=spec)
        return bool(v.value)

    def clone(self, isa: str = "scalar") -> "Plan":
        """A copy of the plan on the kernels of another ISA ("scalar": the portable
        C reference; "avx2", "avx512"), same codes and scores up to float rounding.
        UnsupportedError if this CPU lacks the ISA (kvq_plan_clone_isa)."""
        codes = {v: k for k, v in _ISA.items()}
        if isa not in codes or isa == "best":
            raise InvalidArgumentError(f"isa must be one of scalar, avx2, avx512, not {isa!r}", status=-2,
                                       argument=isa)
        out = ctypes.c_void_p()
        p = self._h.acquire()
        try:
            check(_lib_core.kvq_plan_clone_isa(ctypes.byref(out), p, codes[isa]), "kvq_plan_clone_isa", argument=isa)
        finally:
            self._h.release()
        twin = Plan.__new__(Plan)
        twin.__dict__.update({k: v for k, v in self.__dict__.items() if k != "_h"})
        twin._h = Handle(out.value, _lib_core.kvq_plan_free, f"kvq.Plan({self._spec!r}, {self._dim}, {isa})")
        twin._isa = _ISA.get(_lib_core.kvq_plan_isa(out.value), "?")
        return twin

    def close(self) -> None:
        """Frees the plan (also done when it is garbage-collected)."""
        self._h.close()

    def __enter__(self) -> "Plan":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        h = getattr(self, "_h", None)
        if h is not None:
            try:
                h.close()
            except Exception:
                pass

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        return f"<kvq.Plan {self._spec!r} dim={self._dim} {self._bits:.3f} bits/value{state}>"

    # ------------------------------------------------------------ helpers
    def _rows(self, x: np.ndarray, name: str) -> np.ndarray:
        return as_f32(x, name, (1, 2), last=self._dim)

    def _codes(self, codes: object) -> np.ndarray:
        return check_array(codes, "codes", np.uint8, (1, 2), last=self._code_bytes)

    # ------------------------------------------------------------ codec
    def encode(self, x: np.ndarray, dtype: DTypeLike = None, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Encodes rows x (n, dim) or (dim,) into codes (n, code_bytes) uint8.

        x: float32, float16, or bfloat16 bit patterns as uint16 with
        ``dtype="bf16"`` (an ``ml_dtypes.bfloat16`` array is taken as is).
        NonFiniteError for NaN/Inf, RangeError if a scale does not fit f16
        (use ``+scale32``).
        """
        if not isinstance(x, np.ndarray):
            raise TypeError(f"x must be a numpy.ndarray, not {type(x).__name__}")
        code = _dtype_code(x, dtype)
        if x.ndim not in (1, 2) or x.shape[-1] != self._dim:
            raise ValueError(f"x has shape {x.shape}, expected (n, {self._dim}) or ({self._dim},)")
        if not x.flags.c_contiguous:
            raise ValueError("x is not C-contiguous; np.ascontiguousarray(x) makes the copy kvq refuses to make")
        n = 1 if x.ndim == 1 else x.shape[0]
        shape = (self._code_bytes,) if x.ndim == 1 else (n, self._code_bytes)
        if out is None:
            codes = np.empty(shape, dtype=np.uint8)
        else:
            codes = check_array(out, "out", np.uint8, (len(shape),))
            if codes.shape != shape or not codes.flags.writeable:
                raise ValueError(f"out must be a writeable uint8 array of shape {shape}")
        if n == 0:
            return codes
        p = self._h.acquire()
        try:
            check(_lib_core.kvq_encode(p, x.ctypes.data, code, n, codes.ctypes.data), "kvq_encode")
        finally:
            self._h.release()
        return codes

    def decode(self, codes: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Decodes codes (n, code_bytes) uint8 into rows (n, dim) float32.
        NoDecodeError for key-only methods."""
        codes = self._codes(codes)
        n = 1 if codes.ndim == 1 else codes.shape[0]
        res = check_out(out, (self._dim,) if codes.ndim == 1 else (n, self._dim))
        if not self._can_decode:
            from ._errors import NoDecodeError
            raise NoDecodeError(status=-10, call="kvq_decode", argument=self._spec)
        if n == 0:
            return res
        p = self._h.acquire()
        try:
            check(_lib_core.kvq_decode(p, codes.ctypes.data, n, res.ctypes.data), "kvq_decode")
        finally:
            self._h.release()
        return res

    def prepare(self, q: np.ndarray) -> np.ndarray:
        """Prepared queries (nq, query_floats) float32 for score(..., prepared=True):
        the rotated query, its QJL projection, 8-bit copies (opaque rows)."""
        q = self._rows(q, "q")
        q2 = q.reshape(1, -1) if q.ndim == 1 else q
        res = np.empty((q2.shape[0], self._qf), dtype=np.float32)
        p = self._h.acquire()
        try:
            base, ob = q2.ctypes.data, res.ctypes.data
            rs, os_ = q2.strides[0] if q2.shape[0] else 0, res.strides[0] if q2.shape[0] else 0
            for j in range(q2.shape[0]):
                check(_lib_core.kvq_query_prepare(p, base + j * rs, ob + j * os_), "kvq_query_prepare")
        finally:
            self._h.release()
        return res[0] if q.ndim == 1 else res

    def score(self, q: np.ndarray, codes: np.ndarray, *, prepared: bool = False,
              out: Optional[np.ndarray] = None) -> np.ndarray:
        """Estimated inner products <q_j, k_i> from the codes, (nq, n) float32
        (the codes are never decoded). q: raw queries (nq, dim), or rows of
        prepare() with ``prepared=True``. 1-D q gives a 1-D result (n,)."""
        if prepared:
            qp = as_f32(q, "q", (1, 2), last=self._qf)
        else:
            qp = self.prepare(q)
        codes = self._codes(codes)
        nq = 1 if qp.ndim == 1 else qp.shape[0]
        n = 1 if codes.ndim == 1 else codes.shape[0]
        res = check_out(out, (n,) if qp.ndim == 1 else (nq, n))
        if nq == 0 or n == 0:
            return res
        p = self._h.acquire()
        try:
            check(_lib_core.kvq_score(p, qp.ctypes.data, nq, codes.ctypes.data, n, res.ctypes.data), "kvq_score")
        finally:
            self._h.release()
        return res

    def accumulate(self, p: np.ndarray, codes: np.ndarray, acc: Optional[np.ndarray] = None) -> np.ndarray:
        """acc[j] += sum_i p[j, i] * v_i in the plan's rotated domain, for weight
        rows p (nq, n) float32 and codes (n, code_bytes); acc (nq, dim) float32 is
        updated in place (a new zero array if None). Finish each row with
        unrotate()."""
        codes = self._codes(codes)
        n = 1 if codes.ndim == 1 else codes.shape[0]
        p = as_f32(p, "p", (1, 2), last=n)
        nq = 1 if p.ndim == 1 else p.shape[0]
        shape = (self._dim,) if p.ndim == 1 else (nq, self._dim)
        if acc is None:
            acc = np.zeros(shape, dtype=np.float32)
        else:
            acc = check_out(acc, shape, "acc")
        if nq == 0 or n == 0:
            return acc
        if not self._can_decode:
            from ._errors import NoDecodeError
            raise NoDecodeError(status=-10, call="kvq_accumulate", argument=self._spec)
        h = self._h.acquire()
        try:
            check(_lib_core.kvq_accumulate(h, p.ctypes.data, nq, codes.ctypes.data, n, acc.ctypes.data),
                  "kvq_accumulate")
        finally:
            self._h.release()
        return acc

    def unrotate(self, acc: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Maps rows of the rotated domain back (out = R^T acc), (nq, dim) float32."""
        acc = self._rows(acc, "acc")
        a2 = acc.reshape(1, -1) if acc.ndim == 1 else acc
        res = check_out(out, acc.shape)
        r2 = res.reshape(1, -1) if res.ndim == 1 else res
        h = self._h.acquire()
        try:
            rb = self._dim * 4
            for j in range(a2.shape[0]):
                check(_lib_core.kvq_unrotate(h, a2.ctypes.data + j * rb, r2.ctypes.data + j * rb), "kvq_unrotate")
        finally:
            self._h.release()
        return res
