"""CPUStore: the LayerStore of CPU tensors, on kvq's C cache (kvq_cache, python/kvq/cache.py).

Each sequence of the batch has one kvq.Cache for the whole model (all layers,
the model's sliding windows, the policy's f16 layers / window / calibration),
exactly the cache kvq's own engine uses, so the rotations and codes are the
engine's for the same policy and seed. A CPUStore is one layer's view of
those caches. Tensors cross into C without copies where they are float32
and contiguous (numpy views of the torch storage); attend() writes straight
into the output tensor. Every C call releases the GIL.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

import numpy as np
import torch

from .. import cache as _cache
from ._store import LayerSpec, LayerStore


class CPUCaches:
    """The B kvq.Cache objects (one per sequence) shared by the layers' stores."""

    def __init__(self, *, batch: int, n_layers: int, n_kv_heads: int, head_dim: int, policy: _cache.Policy,
                 sliding_window: Sequence[int], seed: int, threads: int) -> None:
        self.caches: List[_cache.Cache] = [
            _cache.Cache(n_layers, n_kv_heads, head_dim, policy, sliding_window=list(sliding_window), seed=seed,
                         threads=threads)
            for _ in range(batch)]

    def memory_bytes(self) -> int:
        return sum(c.memory_bytes() for c in self.caches)

    def close(self) -> None:
        for c in self.caches:
            c.close()


def _rows(t: Any) -> np.ndarray:
    """(B, H, T, d) tensor -> (B, T, H, d) float32 numpy array (a view when already laid out so)."""
    t = t.detach()
    if t.dtype != torch.float32:
        t = t.float()
    return t.transpose(1, 2).contiguous().numpy()


class CPUStore(LayerStore):
    """One layer of CPUCaches."""

    def __init__(self, spec: LayerSpec, device: Any, caches: CPUCaches) -> None:
        super().__init__(spec, device)
        self._caches = caches

    def append(self, key: Any, value: Any, skip: Optional[Sequence[int]] = None) -> None:
        k, v = _rows(key), _rows(value)
        layer = self.spec.layer
        for b, c in enumerate(self._caches.caches):
            s = skip[b] if skip else 0
            if s < k.shape[1]:
                c.append(layer, k[b, s:], v[b, s:])

    def attend(self, query: Any, scaling: float, skip: Optional[Sequence[int]] = None) -> Any:
        q = _rows(query)                      # (B, T, Hq, d)
        B, T = q.shape[0], q.shape[1]
        out = torch.empty(q.shape, dtype=torch.float32)
        o = out.numpy()
        layer = self.spec.layer
        for b, c in enumerate(self._caches.caches):
            s = skip[b] if skip else 0
            if s:
                o[b, :s] = 0.0
            if s < T:
                c.attend(layer, q[b, s:], scale=scaling, out=o[b, s:])
        return out if query.dtype == torch.float32 else out.to(query.dtype)

    def lengths(self) -> Sequence[int]:
        return [c.length(self.spec.layer) for c in self._caches.caches]

    def memory_bytes(self) -> int:
        # the C cache accounts per model; a layer's share is not separable for
        # windows and spare pages, so the whole goes to layer 0 (Cache.memory_bytes sums layers)
        return self._caches.memory_bytes() if self.spec.layer == 0 else 0

    def crop(self, n: int) -> None:
        if self.spec.layer == 0:
            for c in self._caches.caches:
                c.truncate(min(n, len(c)))

    def reset(self) -> None:
        if self.spec.layer == 0:
            for c in self._caches.caches:
                c.clear()
