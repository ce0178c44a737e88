"""kvq inside transformers: a compressed KV cache and attention on its codes (docs/TRANSFORMERS.md).

    import kvq.transformers
    cache = kvq.transformers.Cache(model, policy="tq-mse:4+chscale/tq-mse:4")
    out = model.generate(ids, **kvq.transformers.cache_kwargs(cache), max_new_tokens=64)

``cache_kwargs`` names the cache argument the installed transformers
expects (``cache`` from 5.24, ``past_key_values`` before; 5.24 still takes the
old name with a FutureWarning).

Importing this module registers ``attn_implementation="kvq"`` with
transformers (AttentionInterface and AttentionMaskInterface). Needs torch
and transformers (not dependencies of the kvq package itself).
"""
from __future__ import annotations

from ._attention import ATTN_IMPLEMENTATION, chunk_skip, kvq_attention_forward, kvq_mask, register
from ._cache import Cache, KvqLayer, layer_geometry, layer_specs
from ._cache_kwarg import cache_kwargs
from ._store import LayerSpec, LayerStore

register()

__all__ = ["ATTN_IMPLEMENTATION", "Cache", "KvqLayer", "LayerSpec", "LayerStore", "chunk_skip",
           "cache_kwargs", "kvq_attention_forward", "kvq_mask", "layer_geometry", "layer_specs", "register"]
