"""kvq — KV-cache compression for LLM inference, from Python.

A thin ctypes binding of libkvq (include/kvq.h) and libkvq-engine
(include/kvq_engine.h); docs/PYTHON.md is the guide.

- :class:`Plan` — one codec method (``"tq-mse:4"``, ``"q8"``, ...) for one head dim:
  encode/decode/score on numpy arrays.
- :class:`Cache`, :class:`KVCacheBuilder`, :class:`Policy` — the compressed KV cache
  with fused attention on the codes, its memory figures and planner.
- :class:`Model`, :class:`Session`, :class:`Sampler` — the GGUF engine:
  tokenizer, logits, streaming generation (``Model().generate(...)``).
- :class:`Error` and one subclass per status code (``UnknownMethodError``,
  ``BitsRangeError``, ``NonFiniteError``, ...).

Arrays are passed to C without copies (C-contiguous float32, or the codec's
f16/bf16 inputs); anything else is a TypeError/ValueError before any C call.
Every C call releases the GIL.
"""
from __future__ import annotations

from . import _lib
from ._errors import (BitsRangeError, ChecksumError, ClosedError, Error, FileIOError, FormatError,
                      InvalidArgumentError, NeedsCalibrationError, NoDecodeError, NonFiniteError, NullPointerError,
                      OutOfMemoryError, RangeError, SizeOverflowError, StateError, TruncatedError, UnknownMethodError,
                      UnknownStatusError, UnsupportedDimError, UnsupportedError)
from .cache import Cache, KVCacheBuilder, MemoryPlan, Policy, method_spec
from .codec import Plan
from .engine import (DEFAULT_GENERATE_CACHE, DEFAULT_MODEL, Generation, Model, ModelInfo, Sampler, Session,
                     default_model_path)


def version_number() -> int:
    """kvq_version_number() of the loaded library (major * 10000 + minor * 100 + patch)."""
    return int(_lib.core.kvq_version_number())


def _version_string(n: int) -> str:
    return f"{n // 10000}.{n // 100 % 100}.{n % 100}"


#: The library's version (kvq_version_number), which pyproject.toml reads from CMakeLists.txt's project(VERSION).
__version__ = _version_string(version_number())


def cpu_isa() -> str:
    """The best kernel ISA of this CPU ("scalar", "avx2", "avx512")."""
    return _lib.core.kvq_isa_name(_lib.core.kvq_cpu_isa()).decode()


def strerror(status: int) -> str:
    """kvq_strerror: the library's name of a status code."""
    return _lib.strerror(status)


DIM_MIN = _lib.KVQ_DIM_MIN
DIM_MAX = _lib.KVQ_DIM_MAX

__all__ = [
    "Plan", "Cache", "KVCacheBuilder", "Policy", "MemoryPlan", "method_spec",
    "Model", "ModelInfo", "Session", "Sampler", "Generation", "default_model_path", "DEFAULT_MODEL",
    "DEFAULT_GENERATE_CACHE",
    "Error", "NullPointerError", "InvalidArgumentError", "UnsupportedDimError", "BitsRangeError",
    "UnknownMethodError", "NonFiniteError", "RangeError", "SizeOverflowError", "OutOfMemoryError", "NoDecodeError",
    "NeedsCalibrationError", "FileIOError", "FormatError", "TruncatedError", "UnsupportedError", "StateError",
    "ChecksumError", "ClosedError", "UnknownStatusError",
    "version_number", "cpu_isa", "strerror", "DIM_MIN", "DIM_MAX", "__version__",
]
