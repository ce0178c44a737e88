#!/usr/bin/env python3
"""Independent float64 reference forward pass for GGUF models (numpy + gguf).

This is the correctness oracle for kvq's C inference engine: it shares no code
with it. Weights are read with the `gguf` PyPI package (GGUFReader +
gguf.quants.dequantize) and every computation after dequantization is done in
float64 with plain numpy, following llama.cpp's conventions for each
architecture (see docs/MODELS.md, "Architecture notes"):

  llama   (SmolLM2)   RMSNorm, RoPE "normal" (adjacent pairs (2i, 2i+1); the
                      GGUF converter permutes Q/K rows so that this matches
                      the HF rotate-half formulation), GQA, SwiGLU, tied or
                      separate output matrix, optional rope_freqs factors.
  qwen2   (Qwen2.5)   as llama plus Q/K/V biases, RoPE NEOX (pairs (i, i+n/2)).
                      NOT validated: no Qwen2.5 GGUF could be installed here.
  gemma3  (Gemma 3)   embeddings scaled by sqrt(n_embd); RMSNorm weights used
                      as stored (the converter already added +1); per-head
                      QK-RMSNorm; RoPE NEOX; post-attention and post-FFN
                      RMSNorm; GeGLU with the tanh GELU; queries scaled by
                      1/sqrt(head_dim) (1/sqrt(n_embd/n_head) for the 62-layer
                      27B, as llama.cpp); sliding-window layers are those with
                      il % 6 < 5 (every 6th layer, il = 5, 11, 17, ..., is
                      global); SWA layers use rope base 10000 and scale 1,
                      global layers the metadata freq_base and 1/rope scaling
                      factor; a key at position pk is visible from query
                      position pq iff 0 <= pq - pk < sliding_window.

Tokenization is not done here: pass token ids. (--prompt does a crude greedy
longest-match over the GGUF vocab, good enough for sanity checks of common
English words, not a real tokenizer.)

Usage:
  ref_forward.py MODEL.gguf --tokens 1,2,3 [-o logits.npy | -o logits.f64] [--top 5]
  ref_forward.py MODEL.gguf --tokens-file ids.txt -o logits.npy
  ref_forward.py MODEL.gguf --prompt "The capital of France is" --top 5

Output: logits for every position, shape (n_tokens, n_vocab), float64;
`.npy` -> numpy format, anything else -> raw little-endian float64 row-major.
"""
from __future__ import annotations

import argparse
import math
import sys

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as QT
    from gguf import quants as gquants
except ImportError:  # pragma: no cover - reported to the user
    sys.stderr.write("ref_forward.py: the 'gguf' Python package is required (pip install gguf)\n")
    raise

SUPPORTED_ARCHS = ("llama", "qwen2", "gemma3")


# --------------------------------------------------------------------------
# GGUF access
# --------------------------------------------------------------------------
class Model:
    def __init__(self, path: str):
        self.path = path
        self.reader = gguf.GGUFReader(path, "r")
        self.tensors = {t.name: t for t in self.reader.tensors}
        self.arch = self.meta("general.architecture")
        if self.arch not in SUPPORTED_ARCHS:
            raise SystemExit(f"ref_forward.py: unsupported architecture '{self.arch}' "
                             f"(supported: {', '.join(SUPPORTED_ARCHS)})")
        a = self.arch
        self.n_layer = int(self.meta(f"{a}.block_count"))
        self.n_embd = int(self.meta(f"{a}.embedding_length"))
        self.n_ff = int(self.meta(f"{a}.feed_forward_length"))
        self.n_head = self._per_layer_int(f"{a}.attention.head_count")
        self.n_head_kv = self._per_layer_int(f"{a}.attention.head_count_kv", self.n_head)
        self.head_dim_k = int(self.meta(f"{a}.attention.key_length", self.n_embd // self.n_head[0]))
        self.head_dim_v = int(self.meta(f"{a}.attention.value_length", self.head_dim_k))
        self.eps = float(self.meta(f"{a}.attention.layer_norm_rms_epsilon"))
        self.n_rot = int(self.meta(f"{a}.rope.dimension_count", self.head_dim_k))
        self.rope_base = float(self.meta(f"{a}.rope.freq_base", 10000.0))
        scaling_type = self.meta(f"{a}.rope.scaling.type", "none")
        factor = float(self.meta(f"{a}.rope.scaling.factor", 0.0) or 0.0)
        if scaling_type in ("none", "linear") or factor in (0.0, 1.0):
            self.rope_scale = 1.0 / factor if (scaling_type == "linear" and factor > 0) else 1.0
        else:
            raise SystemExit(f"ref_forward.py: rope scaling type '{scaling_type}' is not implemented")
        self.rope_neox = a in ("qwen2", "gemma3")
        self.n_swa = int(self.meta(f"{a}.attention.sliding_window", 0) or 0)
        self.final_softcap = float(self.meta(f"{a}.final_logit_softcapping", 0.0) or 0.0)
        self.attn_softcap = float(self.meta(f"{a}.attn_logit_softcapping", 0.0) or 0.0)
        out_name = "output.weight" if "output.weight" in self.tensors else "token_embd.weight"
        self.out_name = out_name
        self.n_vocab = int(self.tensors[out_name].shape[1]) if len(self.tensors[out_name].shape) > 1 else 0

    def meta(self, key, default=None):
        f = self.reader.fields.get(key)
        if f is None:
            if default is None:
                raise SystemExit(f"ref_forward.py: metadata key '{key}' missing in {self.path}")
            return default
        return f.contents()

    def _per_layer_int(self, key, default=None):
        v = self.meta(key, default)
        if isinstance(v, (list, tuple)):
            vals = [int(x) for x in v]
        else:
            vals = [int(v if not isinstance(v, (list, tuple)) else v[0])] * self.n_layer
        return vals

    def has(self, name: str) -> bool:
        return name in self.tensors

    def weight(self, name: str, rows=None) -> np.ndarray:
        """Dequantized tensor as float64; a 2-D tensor [ne0, ne1] comes back as
        an (ne1, ne0) array, i.e. one row per output feature."""
        t = self.tensors[name]
        data = t.data if rows is None else t.data[rows]
        if t.tensor_type == QT.F32:
            w = np.asarray(data, dtype=np.float32)
        elif t.tensor_type == QT.F16:
            w = np.asarray(data).view(np.float16).astype(np.float32)
        else:
            w = gquants.dequantize(np.asarray(data), t.tensor_type)
        if rows is None:
            shape = tuple(int(x) for x in reversed(t.shape))
            w = w.reshape(shape)
        return w.astype(np.float64)


# --------------------------------------------------------------------------
# Building blocks (float64)
# --------------------------------------------------------------------------
def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(ms + eps) * w


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def rope(x: np.ndarray, pos: np.ndarray, n_rot: int, base: float, scale: float,
         neox: bool, freq_factors: np.ndarray | None = None) -> np.ndarray:
    """x: (T, H, D). Rotates the first n_rot dims of each head.
    theta(p, i) = scale * p * base^(-2i/n_rot) [/ freq_factors[i]] for pair i.
    neox: pairs (i, i + n_rot/2); normal: pairs (2i, 2i+1)."""
    half = n_rot // 2
    i = np.arange(half, dtype=np.float64)
    inv = base ** (-2.0 * i / n_rot)
    if freq_factors is not None:
        inv = inv / freq_factors[:half]
    theta = scale * pos.astype(np.float64)[:, None] * inv[None, :]  # (T, half)
    c = np.cos(theta)[:, None, :]
    s = np.sin(theta)[:, None, :]
    out = x.copy()
    if neox:
        a = x[..., :half]
        b = x[..., half:n_rot]
        out[..., :half] = a * c - b * s
        out[..., half:n_rot] = a * s + b * c
    else:
        a = x[..., 0:n_rot:2]
        b = x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * c - b * s
        out[..., 1:n_rot:2] = a * s + b * c
    return out


def attention(q, k, v, scale, n_swa, softcap=0.0):
    """q: (T, Hq, D), k: (T, Hkv, D), v: (T, Hkv, Dv); causal, optional SWA.
    Returns (T, Hq*Dv)."""
    T, Hq, _ = q.shape
    Hkv = k.shape[1]
    group = Hq // Hkv
    kk = np.repeat(k, group, axis=1)  # q head h -> kv head h // group
    vv = np.repeat(v, group, axis=1)
    s = np.einsum("thd,shd->hts", q, kk) * scale  # (H, Tq, Tk)
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    pq = np.arange(T)[:, None]
    pk = np.arange(T)[None, :]
    masked = pk > pq
    if n_swa > 0:
        masked |= (pq - pk) >= n_swa
    s = np.where(masked[None], -np.inf, s)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    o = np.einsum("hts,shd->thd", p, vv)
    return o.reshape(T, -1)


# --------------------------------------------------------------------------
# Forward pass
# --------------------------------------------------------------------------
def forward(m: Model, tokens: list[int], log=None) -> np.ndarray:
    T = len(tokens)
    ids = np.asarray(tokens, dtype=np.int64)
    n_vocab_embd = int(m.tensors["token_embd.weight"].shape[1])
    if ids.min() < 0 or ids.max() >= n_vocab_embd:
        raise SystemExit(f"ref_forward.py: token id out of range [0, {n_vocab_embd})")
    pos = np.arange(T)
    x = m.weight("token_embd.weight", rows=ids)  # (T, n_embd)
    if m.arch == "gemma3":
        x = x * math.sqrt(m.n_embd)
    freq_factors = m.weight("rope_freqs.weight") if m.has("rope_freqs.weight") else None

    for il in range(m.n_layer):
        p = f"blk.{il}."
        W = lambda n: m.weight(p + n)  # noqa: E731
        nh, nkv = m.n_head[il], m.n_head_kv[il]
        h = rmsnorm(x, W("attn_norm.weight"), m.eps)
        q = h @ W("attn_q.weight").T
        k = h @ W("attn_k.weight").T
        v = h @ W("attn_v.weight").T
        for name, arr in (("q", q), ("k", k), ("v", v)):
            if m.has(p + f"attn_{name}.bias"):
                arr += W(f"attn_{name}.bias")
        q = q.reshape(T, nh, m.head_dim_k)
        k = k.reshape(T, nkv, m.head_dim_k)
        v = v.reshape(T, nkv, m.head_dim_v)

        base, scale, n_swa = m.rope_base, m.rope_scale, 0
        if m.arch == "gemma3":
            q = rmsnorm(q, W("attn_q_norm.weight"), m.eps)
            k = rmsnorm(k, W("attn_k_norm.weight"), m.eps)
            if m.n_swa > 0 and il % 6 < 5:  # llama.cpp: set_swa_pattern(6)
                base, scale, n_swa = 10000.0, 1.0, m.n_swa
        q = rope(q, pos, m.n_rot, base, scale, m.rope_neox, freq_factors)
        k = rope(k, pos, m.n_rot, base, scale, m.rope_neox, freq_factors)

        if m.arch == "gemma3":
            kq_scale = 1.0 / math.sqrt(m.n_embd / nh) if m.n_layer == 62 else 1.0 / math.sqrt(m.head_dim_k)
        else:
            kq_scale = 1.0 / math.sqrt(m.head_dim_k)
        a = attention(q, k, v, kq_scale, n_swa, m.attn_softcap)
        a = a @ W("attn_output.weight").T
        if m.has(p + "attn_output.bias"):
            a += W("attn_output.bias")
        if m.arch == "gemma3":
            a = rmsnorm(a, W("post_attention_norm.weight"), m.eps)
        x = x + a

        h = rmsnorm(x, W("ffn_norm.weight"), m.eps)
        g = h @ W("ffn_gate.weight").T
        u = h @ W("ffn_up.weight").T
        act = gelu_tanh(g) if m.arch == "gemma3" else silu(g)
        f = (act * u) @ W("ffn_down.weight").T
        if m.arch == "gemma3":
            f = rmsnorm(f, W("post_ffw_norm.weight"), m.eps)
        x = x + f
        if log:
            log(f"layer {il:2d} done  |x|max={np.abs(x).max():.3f}")

    x = rmsnorm(x, m.weight("output_norm.weight"), m.eps)
    # Output projection in row chunks (the Gemma vocabulary is 262144 rows).
    t = m.tensors[m.out_name]
    n_vocab = int(t.shape[1])
    logits = np.empty((T, n_vocab), dtype=np.float64)
    step = 16384
    for r0 in range(0, n_vocab, step):
        r1 = min(n_vocab, r0 + step)
        logits[:, r0:r1] = x @ m.weight(m.out_name, rows=slice(r0, r1)).T
    if m.final_softcap > 0:
        logits = m.final_softcap * np.tanh(logits / m.final_softcap)
    return logits


# --------------------------------------------------------------------------
# Crude vocabulary helpers (sanity checks only)
# --------------------------------------------------------------------------
def _bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class Vocab:
    def __init__(self, m: Model):
        f = m.reader.fields["tokenizer.ggml.tokens"]
        self.tokens = [bytes(f.parts[i]).decode("utf-8", errors="replace") for i in f.data]
        self.kind = m.meta("tokenizer.ggml.model", "gpt2")
        self.bos = m.reader.fields.get("tokenizer.ggml.bos_token_id")
        self.bos = int(self.bos.contents()) if self.bos is not None else None
        abos = m.reader.fields.get("tokenizer.ggml.add_bos_token")
        self.add_bos = bool(abos.contents()) if abos is not None else False
        self.index = {}
        for i, t in enumerate(self.tokens):
            self.index.setdefault(t, i)
        self.maxlen = max(len(t) for t in self.tokens)
        self.b2u = _bytes_to_unicode()
        self.u2b = {v: k for k, v in self.b2u.items()}

    def encode(self, text: str) -> list[int]:
        if self.kind == "gpt2":
            s = "".join(self.b2u[b] for b in text.encode("utf-8"))
        else:
            s = text.replace(" ", "\u2581")
        ids = [self.bos] if (self.add_bos and self.bos is not None) else []
        i = 0
        while i < len(s):
            for L in range(min(self.maxlen, len(s) - i), 0, -1):
                t = self.index.get(s[i:i + L])
                if t is not None:
                    ids.append(t)
                    i += L
                    break
            else:
                raise SystemExit(f"ref_forward.py: cannot tokenize {s[i:]!r} greedily")
        return ids

    def decode(self, i: int) -> str:
        t = self.tokens[i]
        if self.kind == "gpt2":
            try:
                return bytes(self.u2b[c] for c in t).decode("utf-8", errors="replace")
            except KeyError:
                return t
        return t.replace("\u2581", " ")


# --------------------------------------------------------------------------
def parse_tokens(s: str) -> list[int]:
    return [int(x) for x in s.replace(",", " ").split()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokens", help="comma/space separated token ids")
    src.add_argument("--tokens-file", help="file with token ids (comma/space/newline separated)")
    src.add_argument("--prompt", help="text, tokenized by a crude greedy vocab match (sanity checks only)")
    ap.add_argument("-o", "--output", help="write logits (.npy, else raw float64)")
    ap.add_argument("--top", type=int, default=0, help="print the top-K next tokens at every position")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)

    m = Model(args.model)
    vocab = None
    if args.tokens is not None:
        tokens = parse_tokens(args.tokens)
    elif args.tokens_file is not None:
        with open(args.tokens_file) as f:
            tokens = parse_tokens(f.read())
    else:
        vocab = Vocab(m)
        tokens = vocab.encode(args.prompt)
    if not tokens:
        raise SystemExit("ref_forward.py: no tokens")
    log = (lambda s: print(s, file=sys.stderr)) if args.verbose else None
    if args.verbose:
        print(f"arch={m.arch} n_layer={m.n_layer} n_embd={m.n_embd} n_head={m.n_head[0]} "
              f"n_head_kv={m.n_head_kv[0]} head_dim={m.head_dim_k} n_rot={m.n_rot} "
              f"rope_base={m.rope_base} neox={m.rope_neox} eps={m.eps} n_swa={m.n_swa} "
              f"tokens={tokens}", file=sys.stderr)
    logits = forward(m, tokens, log)

    if args.output:
        if args.output.endswith(".npy"):
            np.save(args.output, logits)
        else:
            logits.astype("<f8").tofile(args.output)
    if args.top > 0:
        vocab = vocab or Vocab(m)
        print("tokens: " + ",".join(str(t) for t in tokens))
        for t in range(len(tokens)):
            row = logits[t]
            top = np.argsort(-row)[: args.top]
            shown = "  ".join(f"{vocab.decode(int(i))!r}({int(i)}):{row[i]:.3f}" for i in top)
            print(f"pos {t:3d} after {vocab.decode(tokens[t])!r}: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
