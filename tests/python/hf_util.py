"""Shared pieces of the transformers tests: imports that fail under CI, tiny random models per architecture."""
from __future__ import annotations

import importlib
from typing import Any

import pytest

from conftest import CI


def need_module(name: str) -> Any:
    """Imports an optional module: skip without it, fail under CI=true (where .ci/run installs it)."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        if CI:
            pytest.fail(f"{name} missing under CI=true: {e}")
        pytest.skip(f"{name} missing")


def tiny_model(arch: str, seed: int = 0) -> Any:
    """A random-weight model of each architecture kvq.transformers serves (float32, eval mode)."""
    torch = need_module("torch")
    tr = need_module("transformers")
    torch.manual_seed(seed)
    common = dict(vocab_size=384, hidden_size=128, intermediate_size=256, num_attention_heads=4,
                  max_position_embeddings=1024, attn_implementation="sdpa")
    if arch == "llama":
        m = tr.LlamaForCausalLM(tr.LlamaConfig(num_hidden_layers=3, num_key_value_heads=2, head_dim=32, **common))
    elif arch == "qwen2":
        m = tr.Qwen2ForCausalLM(tr.Qwen2Config(num_hidden_layers=3, num_key_value_heads=2, **common))
    elif arch == "gemma3":
        cfg = tr.Gemma3TextConfig(num_hidden_layers=4, num_key_value_heads=1, head_dim=64, sliding_window=24,
                                  layer_types=["sliding_attention"] * 3 + ["full_attention"], **common)
        m = tr.Gemma3ForCausalLM(cfg)
    else:
        raise ValueError(arch)
    return m.eval()
