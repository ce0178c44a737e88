"""kvq.transformers.Cache: a transformers Cache whose layers store K/V compressed by kvq.

The layers hold no K/V tensors: each is a LayerStore (CPUStore on CPU,
CUDAStore on CUDA) and the "kvq" attention function (_attention.py)
computes attention on its codes. update() therefore returns the new
tokens' K/V only, marked with the layer that will store them; the
attention function stores them (it is the one that sees the padding mask)
and attends. Policies are kvq's policy strings (docs/CACHE.md).
"""
from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence, Union

import torch
from transformers.cache_utils import Cache as _HFCache
from transformers.cache_utils import CacheLayerMixin

from ..cache import Policy, PolicyLike, as_policy
from ._attention import ATTN_IMPLEMENTATION, register
from ._store import LayerSpec, LayerStore


def _text_config(config: Any) -> Any:
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def layer_geometry(config: Any) -> dict:
    """Heads, head dim, layer count and per-layer sliding windows of a transformers config."""
    c = _text_config(config)
    n_layers = int(c.num_hidden_layers)
    n_q = int(c.num_attention_heads)
    n_kv = int(getattr(c, "num_key_value_heads", None) or n_q)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // n_q
    types = getattr(c, "layer_types", None)
    sw = int(getattr(c, "sliding_window", None) or 0)
    if types is not None:
        windows = [sw if t == "sliding_attention" else 0 for t in types]
    elif sw and getattr(c, "use_sliding_window", True) and getattr(c, "model_type", "") not in ("qwen2",):
        windows = [sw] * n_layers
    else:
        windows = [0] * n_layers
    if getattr(c, "model_type", "") == "qwen2" and getattr(c, "use_sliding_window", False):
        raise NotImplementedError("kvq.transformers: qwen2 with use_sliding_window=True is not supported")
    return dict(n_layers=n_layers, n_q_heads=n_q, n_kv_heads=n_kv, head_dim=int(head_dim), windows=windows)


def layer_specs(policy: Policy, geometry: dict, batch: int, seed: int, max_tokens: int = 0) -> List[LayerSpec]:
    """The policy resolved per layer, as the C cache resolves it (f16 layers, sliding layers kept f16; the f16
    sink on global compressed layers)."""
    n = geometry["n_layers"]
    f16 = {i % n for i in policy.f16_layers if -n <= i < n}
    specs = []
    for i, w in enumerate(geometry["windows"]):
        plain = i in f16 or (w > 0 and not policy.compress_sliding)
        specs.append(LayerSpec(layer=i, batch=batch, n_kv_heads=geometry["n_kv_heads"],
                               n_q_heads=geometry["n_q_heads"], head_dim=geometry["head_dim"],
                               k_spec="f16" if plain else policy.k_spec, v_spec="f16" if plain else policy.v_spec,
                               f16_window=0 if plain else policy.f16_window, sliding_window=w, seed=seed,
                               max_tokens=max_tokens, calib_tokens=policy.calib_tokens,
                               sink_tokens=0 if plain or w > 0 else policy.sink_tokens))
    return specs


class KvqLayer(CacheLayerMixin):
    """One decoder layer of kvq.transformers.Cache (transformers' CacheLayerMixin)."""

    is_compileable = False
    is_croppable = True

    def __init__(self, owner: "Cache", layer: int, sliding_window: int) -> None:
        super().__init__()
        self._owner = owner
        self.layer = layer
        self.sliding_window = sliding_window
        self.is_sliding = sliding_window > 0
        self.store: Optional[LayerStore] = None
        self.total = 0                 # positions fed, padding included (transformers' view)
        self._pending: Optional[tuple] = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.store = self._owner._store(self.layer, key_states)
        self.device = key_states.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self._pending is not None:
            raise RuntimeError(f"kvq.transformers.Cache: layer {self.layer} got a second update before attention "
                               f"ran; the model must use attn_implementation='{ATTN_IMPLEMENTATION}'")
        self._pending = (key_states, value_states)
        k = key_states.view_as(key_states)
        k._kvq_layer = self    # how the "kvq" attention function finds this layer
        return k, value_states

    def take_pending(self) -> tuple:
        """The K/V given to the last update() (the attention function stores them)."""
        kv, self._pending = self._pending, None
        if kv is None:
            raise RuntimeError(f"kvq.transformers.Cache: layer {self.layer}: attention without an update")
        self.total += kv[0].shape[-2]
        return kv

    def get_mask_sizes(self, query_length: Any, *args: Any) -> tuple:
        if not isinstance(query_length, int):      # 5.17 passes cache_position
            query_length = int(query_length.shape[0])
        return self.total + query_length, 0

    def get_seq_length(self) -> int:
        return self.total

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        if self.store is not None:
            self.store.reset()
        self.total = 0
        self._pending = None

    def crop(self, max_length: int) -> None:
        if max_length < 0:
            max_length = self.total + max_length
        if max_length >= self.total:
            return
        if self._owner._padded:
            raise NotImplementedError("kvq.transformers.Cache.crop with left-padded sequences")
        if self.store is not None:
            self.store.crop(max_length)
        self.total = max_length

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if self.store is not None and len(beam_idx) and not torch.equal(
                beam_idx.cpu(), torch.arange(len(beam_idx))):
            self.store.reorder(beam_idx)

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.store is not None and self.total:
            raise NotImplementedError("kvq.transformers.Cache: expanding a filled cache")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise NotImplementedError("kvq.transformers.Cache: selecting sequences of a filled cache")


class Cache(_HFCache):
    """A transformers Cache that keeps every layer's K/V compressed by kvq.

    ``model.generate(ids, **cache_kwargs(kvq.transformers.Cache(model, policy="tq-mse:4+chscale/tq-mse:4")))``
    (``cache_kwargs``: ``cache=`` from transformers 5.24, ``past_key_values=`` before)

    Args:
        model: a transformers model (or its config): layers, heads, head dim
            and sliding-window layers come from its config. The model's
            attention is switched to ``attn_implementation="kvq"`` (the
            cache can only be read by kvq's attention; "kvq" falls back to
            SDPA for any other cache, so the model keeps working).
        policy: a kvq policy string or kvq.Policy: asymmetric K/V methods,
            f16 window (``w=``), f16 layers, sliding-window layers kept f16
            unless ``sliding=1`` (then they are compressed rings).
        seed: seed of the rotations and projections (kvq's engine uses 0).
        threads: CPU threads of the attention kernels (default torch's).
        max_tokens: positions per sequence to preallocate (CUDA; 0 = grow).
    """

    def __init__(self, model: Any, policy: PolicyLike = "f16", *, seed: int = 0, threads: Optional[int] = None,
                 max_tokens: int = 0) -> None:
        config = getattr(model, "config", model)
        self.policy: Policy = as_policy(policy)
        self.geometry = layer_geometry(config)
        self.seed = int(seed)
        self.threads = int(threads or torch.get_num_threads())
        self.max_tokens = int(max_tokens)
        self._padded = False
        self._cpu: Any = None
        self._group: Any = None        # CUDA: one StoreGroup per batch (each step's index kernels once for all layers)
        self._specs: Optional[List[LayerSpec]] = None
        if hasattr(model, "set_attn_implementation") and getattr(config, "_attn_implementation", None) != \
                ATTN_IMPLEMENTATION:
            register()
            model.set_attn_implementation(ATTN_IMPLEMENTATION)
        layers = [KvqLayer(self, i, w) for i, w in enumerate(self.geometry["windows"])]
        super().__init__(layers=layers)

    # ---------------------------------------------------------------- stores
    def _store(self, layer: int, key_states: torch.Tensor) -> LayerStore:
        batch = int(key_states.shape[0])
        if self._specs is None or self._specs[0].batch != batch:
            self._specs = layer_specs(self.policy, self.geometry, batch, self.seed, self.max_tokens)
        spec = self._specs[layer]
        dev = key_states.device
        if dev.type == "cpu":
            from ._cpu_store import CPUCaches, CPUStore
            if self._cpu is None:
                g = self.geometry
                self._cpu = CPUCaches(batch=batch, n_layers=g["n_layers"], n_kv_heads=g["n_kv_heads"],
                                      head_dim=g["head_dim"], policy=self.policy, sliding_window=g["windows"],
                                      seed=self.seed, threads=self.threads)
            return CPUStore(spec, dev, self._cpu)
        if dev.type == "cuda":
            from ._cuda_store import CUDAStore, StoreGroup
            if self._group is None:
                self._group = StoreGroup()
            return CUDAStore(spec, dev, group=self._group)
        raise NotImplementedError(f"kvq.transformers.Cache: no kvq kernels for {dev.type} tensors")

    def check(self) -> None:
        """Raise the kvq.Error of any kernel error so far (CUDA: decode errors are found on the device;
        this synchronises). CPU stores report errors at once, so this is a no-op for them."""
        for l in self.layers:
            if l.store is not None and hasattr(l.store, "check"):
                l.store.check()

    def sync_lengths(self) -> None:
        """After CUDA-graph replays (which advance only the device lengths): reload the host lengths."""
        for l in self.layers:
            if l.store is not None and hasattr(l.store, "sync_lengths"):
                l.store.sync_lengths()

    # ---------------------------------------------------------------- reporting
    def memory_bytes(self) -> int:
        """Bytes held for K/V by every layer (codes, scales, f16 windows, rings)."""
        return sum(l.store.memory_bytes() for l in self.layers if l.store is not None)

    def sequence_lengths(self) -> List[int]:
        """Positions stored per sequence (padding excluded), layer 0."""
        s = self.layers[0].store
        return list(s.lengths()) if s is not None else []

    def __repr__(self) -> str:
        return f"kvq.transformers.Cache(policy={self.policy.name!r}, layers={len(self.layers)})"
