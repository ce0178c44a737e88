"""Handles of C objects and the array checks done before every C call (private)."""
from __future__ import annotations

import threading
from typing import Callable, Optional, Tuple

import numpy as np

from . import _errors


class Handle:
    """Owns one C object pointer.

    ``acquire()`` / ``release()`` bracket every C call (the pointer is
    returned only while the object is open); ``close()`` marks it closed and
    frees it as soon as no call is in flight, so closing an object another
    thread is using, or a model that sessions still use, never frees memory
    under a running C function.
    """

    __slots__ = ("_ptr", "_free", "_what", "_users", "_closed", "_lock", "_deps")

    def __init__(self, ptr: int, free: Optional[Callable[[int], None]], what: str, deps: Tuple["Handle", ...] = ()):
        self._ptr = ptr
        self._free = free
        self._what = what
        self._users = 0
        self._closed = False
        self._lock = threading.Lock()
        self._deps = deps  # handles this object uses for its whole life (a session's model)
        for d in deps:
            d.acquire()

    def acquire(self) -> int:
        with self._lock:
            if self._closed:
                raise _errors.ClosedError(f"{self._what} is closed")
            self._users += 1
            return self._ptr

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._closed and self._users == 0
        if last:
            self._destroy()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            last = self._users == 0
        if last:
            self._destroy()

    @property
    def closed(self) -> bool:
        return self._closed

    def _destroy(self) -> None:
        ptr, self._ptr = self._ptr, None
        if ptr and self._free is not None:
            self._free(ptr)
        deps, self._deps = self._deps, ()
        for d in deps:
            d.release()


_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16", np.dtype(np.uint16): "uint16"}


def as_f32(x: object, name: str, ndim: Tuple[int, ...], last: Optional[int] = None) -> np.ndarray:
    """x itself if it is a C-contiguous float32 ndarray of one of the given ranks
    (and last dim `last`); else TypeError/ValueError. Never copies."""
    return check_array(x, name, np.float32, ndim, last)


def check_array(x: object, name: str, dtype, ndim: Tuple[int, ...], last: Optional[int] = None) -> np.ndarray:
    dtype = np.dtype(dtype)
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray of {dtype.name}, not {type(x).__name__} "
                        f"(use np.ascontiguousarray({name}, dtype=np.{dtype.name}): that copy is yours to make)")
    if x.dtype != dtype:
        raise TypeError(f"{name} has dtype {x.dtype}, kvq needs {dtype.name} here "
                        f"(convert explicitly: {name}.astype(np.{dtype.name}) copies)")
    if x.ndim not in ndim:
        raise ValueError(f"{name} must have {' or '.join(map(str, ndim))} dimensions, has shape {x.shape}")
    if last is not None and x.shape[-1] != last:
        raise ValueError(f"{name} has shape {x.shape}: its last dimension must be {last}")
    if not x.flags.c_contiguous:
        raise ValueError(f"{name} is not C-contiguous (strides {x.strides}); "
                         f"np.ascontiguousarray({name}) makes the copy kvq refuses to make silently")
    return x


def check_out(out: Optional[np.ndarray], shape: Tuple[int, ...], name: str = "out") -> np.ndarray:
    """A fresh float32 array of the shape, or `out` once checked (written in place)."""
    if out is None:
        return np.empty(shape, dtype=np.float32)
    check_array(out, name, np.float32, (len(shape),))
    if out.shape != tuple(shape):
        raise ValueError(f"{name} has shape {out.shape}, expected {tuple(shape)}")
    if not out.flags.writeable:
        raise ValueError(f"{name} is read-only")
    return out


def check_int(value: object, name: str, lo: int, hi: int) -> int:
    """value as an int in [lo, hi]; TypeError for non-integers (bool included), InvalidArgumentError outside."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    v = int(value)
    if v < lo or v > hi:
        raise _errors.InvalidArgumentError(f"{name} = {v} is out of range [{lo}, {hi}]", status=-2, argument=v)
    return v
