"""kvq inside transformers: a compressed KV cache and attention on its codes (docs/TRANSFORMERS.md).

    import kvq.transformers
    cache = kvq.transformers.Cache(model, policy="tq-mse:4+chscale/tq-mse:4")
    out = model.generate(ids, past_key_values=cache, max_new_tokens=64)

Importing this module registers ``attn_implementation="kvq"`` with
transformers (AttentionInterface and AttentionMaskInterface). Needs torch
and transformers (not dependencies of the kvq package itself).
"""
from __future__ import annotations

from ._attention import ATTN_IMPLEMENTATION, chunk_skip, kvq_attention_forward, kvq_mask, register
from ._cache import Cache, KvqLayer, layer_geometry, layer_specs
from ._store import LayerSpec, LayerStore

register()

__all__ = ["ATTN_IMPLEMENTATION", "Cache", "KvqLayer", "LayerSpec", "LayerStore", "chunk_skip",
           "kvq_attention_forward", "kvq_mask", "layer_geometry", "layer_specs", "register"]
