"""Loading kvq's GGUF models into transformers (SmolLM2, Gemma 3, any llama/qwen2/gemma3 GGUF).

transformers' own GGUF loader (``from_pretrained(dir, gguf_file=...)``,
needs the ``gguf`` and ``accelerate`` packages) dequantizes the weights to
float32 and converts the GGUF tokenizer; that takes 30 s (SmolLM2-135M) to
110 s (Gemma 3 270M, 262K-token vocabulary) on a 2-core machine, so the
result is kept once as a plain transformers checkpoint (safetensors,
config, tokenizer) next to the GGUF file, in ``<dir>/hf/<stem>/``
(``$KVQ_HF_CACHE/<stem>/`` when set), and later loads read that (seconds).
The checkpoint is the GGUF loader's output unchanged; it is rebuilt when the
GGUF file is newer.
"""
from __future__ import annotations

import os
from typing import Any, Optional, Tuple

import torch


def checkpoint_dir(gguf_path: str) -> str:
    """Where the converted checkpoint of a GGUF file is kept."""
    stem = os.path.splitext(os.path.basename(gguf_path))[0]
    root = os.environ.get("KVQ_HF_CACHE") or os.path.join(os.path.dirname(os.path.abspath(gguf_path)), "hf")
    return os.path.join(root, stem)


def _fresh(ckpt: str, gguf_path: str) -> bool:
    done = os.path.join(ckpt, "kvq-converted")
    return os.path.isfile(done) and os.path.getmtime(done) >= os.path.getmtime(gguf_path)


def load_gguf(gguf_path: str, dtype: torch.dtype = torch.float32, device: Optional[Any] = None,
              attn_implementation: str = "sdpa") -> Tuple[Any, Any]:
    """(model, tokenizer) of a GGUF file, in eval mode, through transformers' GGUF loader (cached as above)."""
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not os.path.isfile(gguf_path):
        raise FileNotFoundError(f"{gguf_path}: no such model (scripts/fetch-models.sh installs the models)")
    ckpt = checkpoint_dir(gguf_path)
    if not _fresh(ckpt, gguf_path):
        d, f = os.path.split(os.path.abspath(gguf_path))
        tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
        model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
        os.makedirs(ckpt, exist_ok=True)
        save_model(model, os.path.join(ckpt, "model.safetensors"))
        model.config.save_pretrained(ckpt)
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.save_pretrained(ckpt)
        tok.save_pretrained(ckpt)
        open(os.path.join(ckpt, "kvq-converted"), "w").write(os.path.basename(gguf_path) + "\n")
        del model
    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype, attn_implementation=attn_implementation)
    if device is not None:
        model = model.to(device)
    return model.eval(), tok
