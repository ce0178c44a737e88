"""The "kvq" attention implementation of transformers' attention interface.

register() adds it to transformers' AttentionInterface and
AttentionMaskInterface; a model then uses it with
``attn_implementation="kvq"`` (kvq.transformers.Cache switches the model to
it). With a kvq cache, attention is computed by the layer's store on the
compressed codes — decode and prefill alike: prefill appends the prompt's
K/V and runs kvq's tiled causal attention on the codes, so the cache is
never materialised in f16. Without one (no cache, or another Cache class),
it is plain causal SDPA, so a model switched to "kvq" keeps working.

The mask function hands over the 2-D padding mask (B, kv_length) as it is
(None when nothing is padded): padding must be on the left, and the padded
tokens of a chunk are not stored at all.
"""
from __future__ import annotations

from typing import Any, List, Optional

import torch

ATTN_IMPLEMENTATION = "kvq"


def kvq_mask(*args: Any, attention_mask: Optional[torch.Tensor] = None, **kwargs: Any) -> Optional[torch.Tensor]:
    """AttentionMaskInterface entry: the 2-D boolean padding mask as given (no device sync: it is
    only read, by chunk_skip, for chunks of more than one token)."""
    if attention_mask is None or attention_mask.ndim != 2:
        return attention_mask
    kv_length = kwargs.get("kv_length")
    if isinstance(kv_length, int) and attention_mask.shape[-1] > kv_length:
        attention_mask = attention_mask[:, -kv_length:]
    return attention_mask


def chunk_skip(mask: Optional[torch.Tensor], q_len: int) -> Optional[List[int]]:
    """Leading padded tokens of the current chunk per sequence (None: no padding).

    mask is the (B, kv_length) padding mask whose last q_len columns are the
    chunk. Only left padding can be stored: a padded token after a real one
    raises NotImplementedError. A one-token chunk (a decode step) is taken as
    real without reading the mask (generate extends the mask with ones; not
    reading it keeps the decode step free of device synchronisation).
    """
    if mask is None or q_len == 1:
        return None
    if mask.ndim != 2:
        raise NotImplementedError(f"kvq attention takes a 2-D padding mask, not {tuple(mask.shape)} "
                                  "(custom 4-D masks are not supported)")
    m = mask[:, -q_len:].to("cpu", torch.bool)
    real = m.sum(dim=1)
    skip = (q_len - real).tolist()
    for b, s in enumerate(skip):
        if s and (bool(m[b, :s].any()) or not bool(m[b, s:].all())):
            raise NotImplementedError("kvq attention supports left padding only (padding after a real token)")
    return skip if any(skip) else None


def _sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: Optional[torch.Tensor],
          scaling: Optional[float], sliding_window: Optional[int]) -> torch.Tensor:
    """Reference path without a kvq cache: causal (sliding-window) SDPA with the padding mask."""
    B, Hq, T, d = query.shape
    S, H = key.shape[-2], key.shape[1]
    if Hq != H:
        key = key.repeat_interleave(Hq // H, dim=1)
        value = value.repeat_interleave(Hq // H, dim=1)
    qpos = torch.arange(S - T, S, device=query.device)[:, None]
    kpos = torch.arange(S, device=query.device)[None, :]
    allow = kpos <= qpos
    if sliding_window:
        allow = allow & (kpos > qpos - sliding_window)
    allow = allow[None, None]
    if mask is not None:
        allow = allow & mask[:, None, None, -S:].to(torch.bool)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=allow, scale=scaling)
    return out.transpose(1, 2).contiguous()


def kvq_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          attention_mask: Optional[torch.Tensor], scaling: Optional[float] = None,
                          dropout: float = 0.0, **kwargs: Any) -> tuple:
    """AttentionInterface entry: (B, T, Hq, d) output and no weights."""
    if kwargs.get("softcap") is not None:
        raise NotImplementedError("kvq attention: attention logit soft-capping is not supported")
    if dropout and module.training:
        raise NotImplementedError("kvq attention is inference-only (dropout > 0 in training mode)")
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    layer = getattr(key, "_kvq_layer", None)
    if layer is None:
        return _sdpa(query, key, value, attention_mask, scaling, kwargs.get("sliding_window")), None
    k, v = layer.take_pending()
    T = query.shape[-2]
    skip = chunk_skip(attention_mask, T)
    if skip is not None:
        layer._owner._padded = True
    layer.store.append(k, v, skip)
    return layer.store.attend(query, float(scaling), skip), None


def register() -> None:
    """Register "kvq" in transformers' attention and mask interfaces (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    AttentionInterface.register(ATTN_IMPLEMENTATION, kvq_attention_forward)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, kvq_mask)
