"""The storage interface behind kvq.transformers.Cache: one object per decoder layer.

A LayerStore holds the compressed K/V of one decoder layer for a batch of B
sequences and computes attention on its codes. kvq.transformers.Cache makes
one per layer (CPUStore for CPU tensors: the C cache, python/kvq/cache.py;
CUDAStore for CUDA tensors: the kvq CUDA kernels through kvq.torch) and the
"kvq" attention function calls attend() on the layer's store.

Positions. Each sequence b of the batch has its own length len_b (left
padding: the first skip[b] tokens of the first chunk are not stored, so they
are never attended to). append() adds T tokens to every sequence (minus the
skipped ones); attend() then computes, for query row t of sequence b,
causal attention over positions [0, len_b - T + t] (and only the last
`sliding_window` of them on a sliding-window layer). Rows of skipped
(padding) tokens get zeros.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Optional, Sequence


@dataclass(frozen=True)
class LayerSpec:
    """What one layer stores and how: the policy resolved for this layer."""

    layer: int            # decoder layer index
    batch: int            # B sequences
    n_kv_heads: int       # H
    n_q_heads: int        # a multiple of H
    head_dim: int         # d
    k_spec: str           # method of keys ("f16" for f16 layers)
    v_spec: str           # method of values
    f16_window: int       # the W most recent positions stay f16 (0 = none)
    sliding_window: int   # local-attention window of this layer (0 = global)
    seed: int             # seed of the layer's rotations / projections
    max_tokens: int = 0   # capacity per sequence when preallocated (0 = grow on demand)
    calib_tokens: int = 0  # positions kept f16 until +center / +chscale plans calibrate (0 = the C cache's 128)
    sink_tokens: int = 0  # the first positions kept f16 for good (policy sink=; the C cache's global compressed layers)


class LayerStore(abc.ABC):
    """K/V of one layer for B sequences, with attention on the codes."""

    def __init__(self, spec: LayerSpec, device: Any) -> None:
        self.spec = spec
        self.device = device

    @abc.abstractmethod
    def append(self, key: Any, value: Any, skip: Optional[Sequence[int]] = None) -> None:
        """Store T new tokens: key and value are (B, H, T, d) tensors (after RoPE), any float dtype.

        skip[b] (host ints, default all 0): leading tokens of this chunk that
        sequence b does not store (left padding). All or nothing: on an error
        (kvq.Error subclasses: NaN/Inf, a value out of the f16 range) nothing
        is stored.
        """

    @abc.abstractmethod
    def attend(self, query: Any, scaling: float, skip: Optional[Sequence[int]] = None) -> Any:
        """Attention of the last appended T tokens: query (B, Hq, T, d) -> output (B, T, Hq, d) in query's dtype.

        skip as given to the append() of the same chunk; skipped rows are zeros.
        """

    @abc.abstractmethod
    def lengths(self) -> Sequence[int]:
        """Stored positions of each sequence (host ints, B of them)."""

    @abc.abstractmethod
    def memory_bytes(self) -> int:
        """Bytes held for this layer's K/V (codes, scales, f16 windows, rings)."""

    def crop(self, n: int) -> None:
        """Keep the first n positions of every sequence (rewinding)."""
        raise NotImplementedError(f"{type(self).__name__}.crop")

    def reorder(self, beam_idx: Any) -> None:
        """Reorder the batch (beam search): sequence b becomes old sequence beam_idx[b]."""
        raise NotImplementedError(f"{type(self).__name__}.reorder")

    def reset(self) -> None:
        """Drop every position (keep the configuration)."""
        raise NotImplementedError(f"{type(self).__name__}.reset")
