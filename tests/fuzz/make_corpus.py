#!/usr/bin/env python3
"""Seed corpora of the libFuzzer targets in tests/fuzz (docs/FUZZING.md).

usage: make_corpus.py OUT_DIR [--root REPO]

Writes OUT_DIR/<target>/ for gguf, tokenizer, spec, vecfile and codec:
  gguf       small valid models (llama + byte-level BPE, qwen2 + BPE with
             biases and an output matrix, gemma3 + SentencePiece with
             sliding-window layers, QK and post norms, a tokenizer-less
             llama with rope_freqs and linear rope scaling; f32, f16, bf16,
             q8_0, q4_0, q4_1, q5_0, q4_K, q6_K weights; kvq-coded q8 and tcq:2
             matrices as kvq quantize writes them), a file with every
             metadata value type (nested arrays, GGUF v2 and v3, alignment
             64), and the first bytes of the real models in models/ if any;
  tokenizer  byte 0 = tokenizer and flags, then text: corpus lines, chat
             prompts, special tokens, invalid UTF-8;
  spec       byte 0 = head dim and calibration, then a method spec or a cache
             policy: every `...` in docs/METHODS.md and docs/CACHE.md and the
             examples of include/kvq.h;
  vecfile    valid vector files in every dtype (and inputs of the writer side);
  codec      byte 0 = spec, 1 = dim, 2 = rows/dtype/mode, then values.
Standard library only; deterministic (fixed seeds). Only the files it
writes are touched.
"""
import argparse
import os
import random
import re
import struct
import sys

# ---------------------------------------------------------------- GGUF writer
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
G_F32, G_F16, G_Q4_0, G_Q4_1, G_Q5_0, G_Q8_0, G_Q4_K, G_Q6_K, G_BF16 = 0, 1, 2, 3, 6, 8, 12, 14, 30
G_KVQ = 0x4B56  # kvq-coded matrix (docs/FORMAT.md "Coded weights in GGUF")
# record bytes of the specs the coded seeds use, per block B (kvq_plan_code_bytes of the library)
KVQ_RECORD = {("q8", 32): 34, ("q8", 64): 68, ("tcq:2", 32): 10, ("tcq:2", 64): 18}
BLOCK = {G_F32: (1, 4), G_F16: (1, 2), G_BF16: (1, 2), G_Q4_0: (32, 18), G_Q4_1: (32, 20), G_Q5_0: (32, 22),
         G_Q8_0: (32, 34), G_Q4_K: (256, 144), G_Q6_K: (256, 210)}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


SCALAR = {T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i", T_F32: "<f",
          T_BOOL: "<B", T_U64: "<Q", T_I64: "<q", T_F64: "<d"}


def gvalue(t, v):
    if t == T_STR:
        return gstr(v)
    if t == T_ARR:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        return out + b"".join(gvalue(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


def f16_bits(x):
    return struct.unpack("<H", struct.pack("<e", x))[0]


def quant_rows(rng, rows, cols, gtype, scale=0.05):
    """Valid blocks of random weights of a ggml type (bytes)."""
    out = bytearray()
    if gtype == G_F32:
        for _ in range(rows * cols):
            out += struct.pack("<f", rng.gauss(0, scale))
    elif gtype == G_F16:
        for _ in range(rows * cols):
            out += struct.pack("<e", rng.gauss(0, scale))
    elif gtype == G_BF16:
        for _ in range(rows * cols):
            out += struct.pack("<I", struct.unpack("<I", struct.pack("<f", rng.gauss(0, scale)))[0])[2:]
    elif isinstance(gtype, tuple):  # (G_KVQ, spec): block-major codec records, B = the default block
        block = max(b for b in (256, 128, 64, 32) if cols % b == 0)
        rec = KVQ_RECORD[(gtype[1], block)]
        for _ in range(rows * cols // block):
            out += struct.pack("<e", scale) + bytes(rng.randrange(256) for _ in range(rec - 2))
    else:
        block, nbytes = BLOCK[gtype]
        assert cols % block == 0
        for _ in range(rows * cols // block):
            if gtype == G_Q8_0:
                b = struct.pack("<e", scale / 40) + bytes(rng.randrange(256) for _ in range(32))
            elif gtype == G_Q4_0:
                b = struct.pack("<e", scale / 6) + bytes(rng.randrange(256) for _ in range(16))
            elif gtype == G_Q4_1:
                b = struct.pack("<ee", scale / 6, -scale) + bytes(rng.randrange(256) for _ in range(16))
            elif gtype == G_Q5_0:
                b = struct.pack("<e", scale / 12) + bytes(rng.randrange(256) for _ in range(4 + 16))
            elif gtype == G_Q4_K:
                b = struct.pack("<ee", scale / 60, scale / 120) + bytes(rng.randrange(256) for _ in range(12 + 128))
            elif gtype == G_Q6_K:
                b = bytes(rng.randrange(256) for _ in range(128 + 64)) + bytes(
                    rng.randrange(-40, 40) & 255 for _ in range(16)) + struct.pack("<e", scale / 1000)
            assert len(b) == nbytes, (gtype, len(b))
            out += b
    return bytes(out)


def gguf_file(kvs, tensors, version=3, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, dims, gtype, data bytes)]."""
    head = struct.pack("<IIQQ", 0x46554747, version, len(tensors), len(kvs))
    for k, t, v in kvs:
        head += gstr(k) + struct.pack("<I", t) + gvalue(t, v)
    offs, off = [], 0
    for name, dims, gt, data in tensors:
        off = (off + alignment - 1) // alignment * alignment
        offs.append(off)
        off += len(data)
    for (name, dims, gt, data), o in zip(tensors, offs):
        head += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", gt[0] if isinstance(gt, tuple) else gt, o)
    head += b"\0" * ((-len(head)) % alignment)
    body = bytearray()
    for (name, dims, gt, data), o in zip(tensors, offs):
        body += b"\0" * (o - len(body))
        body += data
    return head + bytes(body)


def byte_chars():
    """GPT-2 byte-level characters of the 256 bytes."""
    keep = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE]
    out, k = [], 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + k))
            k += 1
    return out


def bpe_tokenizer(pre, full_bytes=True):
    chars = byte_chars()
    toks = list(chars) if full_bytes else [chars[b] for b in range(0x20, 0x7F)]
    words = ["th", "the", "\u0120t", "\u0120the", "in", "ing", "\u0120a", "er", "he", "\u0120\u0120"]
    merges = ["t h", "th e", "\u0120 t", "\u0120t he", "i n", "in g", "\u0120 a", "e r", "h e", "\u0120 \u0120"]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    toks = toks + words + specials
    types = [1] * (len(toks) - len(specials)) + [3] * len(specials)
    eos = len(toks) - 1
    kv = [("tokenizer.ggml.model", T_STR, "gpt2"), ("tokenizer.ggml.pre", T_STR, pre),
          ("tokenizer.ggml.tokens", T_ARR, (T_STR, toks)), ("tokenizer.ggml.token_type", T_ARR, (T_I32, types)),
          ("tokenizer.ggml.merges", T_ARR, (T_STR, merges)), ("tokenizer.ggml.bos_token_id", T_U32, len(toks) - 3),
          ("tokenizer.ggml.eos_token_id", T_U32, eos), ("tokenizer.ggml.add_bos_token", T_BOOL, 0),
          ("tokenizer.chat_template", T_STR, "{% for m in messages %}<|im_start|>{{ m }}{% endfor %}")]
    return kv, len(toks)


def spm_tokenizer():
    toks = ["<pad>", "<eos>", "<bos>", "<unk>"] + ["<0x%02X>" % b for b in range(256)]
    types = [3, 3, 3, 2] + [6] * 256
    pieces = ["\u2581", "a", "b", "c", "ab", "\u2581a", "\u2581the", "the", "\u2581\u2581", "<start_of_turn>",
              "<end_of_turn>", "\u00e9", "hello", "\u2581hello"]
    ptypes = [1] * 9 + [3, 3] + [1] * 3
    toks += pieces
    types += ptypes
    scores = [0.0] * 260 + [-1.0 - 0.5 * i for i in range(len(pieces))]
    kv = [("tokenizer.ggml.model", T_STR, "llama"), ("tokenizer.ggml.pre", T_STR, "default"),
          ("tokenizer.ggml.tokens", T_ARR, (T_STR, toks)), ("tokenizer.ggml.scores", T_ARR, (T_F32, scores)),
          ("tokenizer.ggml.token_type", T_ARR, (T_I32, types)), ("tokenizer.ggml.bos_token_id", T_U32, 2),
          ("tokenizer.ggml.eos_token_id", T_U32, 1), ("tokenizer.ggml.unknown_token_id", T_U32, 3),
          ("tokenizer.ggml.padding_token_id", T_U32, 0), ("tokenizer.ggml.add_bos_token", T_BOOL, 1),
          ("tokenizer.ggml.add_eos_token", T_BOOL, 0), ("tokenizer.ggml.add_space_prefix", T_BOOL, 0)]
    return kv, len(toks)


def vec(rng, n, base=1.0, spread=0.1):
    return b"".join(struct.pack("<f", base + spread * rng.gauss(0, 1)) for _ in range(n))


def model(arch, seed, E, n_head, n_kv, F, n_layers, mtype, tok=None, head_dim=None, extra_kv=(), biases=False,
          output=None, gemma=False, rope_freqs=0, version=3, alignment=32, types=None):
    rng = random.Random(seed)
    ty = lambda name: (types or {}).get(name, mtype)  # noqa: E731
    hd = head_dim or E // n_head
    tok_kv, V = tok if tok else ([], 48)
    kv = [("general.architecture", T_STR, arch), ("general.name", T_STR, "fuzz seed %s" % arch),
          ("%s.block_count" % arch, T_U32, n_layers), ("%s.embedding_length" % arch, T_U32, E),
          ("%s.feed_forward_length" % arch, T_U32, F), ("%s.attention.head_count" % arch, T_U32, n_head),
          ("%s.attention.head_count_kv" % arch, T_U32, n_kv), ("%s.context_length" % arch, T_U32, 256),
          ("%s.attention.layer_norm_rms_epsilon" % arch, T_F32, 1e-6), ("%s.rope.freq_base" % arch, T_F32, 10000.0)]
    if head_dim:
        kv += [("%s.attention.key_length" % arch, T_U32, hd), ("%s.attention.value_length" % arch, T_U32, hd)]
    kv += list(extra_kv) + tok_kv
    Q, KV = n_head * hd, n_kv * hd
    t = [("token_embd.weight", [E, V], ty("token_embd"), quant_rows(rng, V, E, ty("token_embd"))),
         ("output_norm.weight", [E], G_F32, vec(rng, E))]
    if output is not None:
        t.append(("output.weight", [E, V], output, quant_rows(rng, V, E, output)))
    if rope_freqs:
        t.append(("rope_freqs.weight", [rope_freqs], G_F32, vec(rng, rope_freqs, 1.0, 0.5)))  # n_rot / 2 values
    for l in range(n_layers):
        b = "blk.%d." % l
        t += [(b + "attn_norm.weight", [E], G_F32, vec(rng, E)),
              (b + "attn_q.weight", [E, Q], ty("attn_q"), quant_rows(rng, Q, E, ty("attn_q"))),
              (b + "attn_k.weight", [E, KV], ty("attn_k"), quant_rows(rng, KV, E, ty("attn_k"))),
              (b + "attn_v.weight", [E, KV], ty("attn_v"), quant_rows(rng, KV, E, ty("attn_v"))),
              (b + "attn_output.weight", [Q, E], ty("attn_output"), quant_rows(rng, E, Q, ty("attn_output"))),
              (b + "ffn_norm.weight", [E], G_F32, vec(rng, E)),
              (b + "ffn_gate.weight", [E, F], ty("ffn_gate"), quant_rows(rng, F, E, ty("ffn_gate"))),
              (b + "ffn_up.weight", [E, F], ty("ffn_up"), quant_rows(rng, F, E, ty("ffn_up"))),
              (b + "ffn_down.weight", [F, E], ty("ffn_down"), quant_rows(rng, E, F, ty("ffn_down")))]
        if biases:
            t += [(b + "attn_q.bias", [Q], G_F32, vec(rng, Q, 0, 0.02)), (b + "attn_k.bias", [KV], G_F32, vec(rng, KV, 0, 0.02)),
                  (b + "attn_v.bias", [KV], G_F32, vec(rng, KV, 0, 0.02))]
        if gemma:
            t += [(b + "attn_q_norm.weight", [hd], G_F32, vec(rng, hd)), (b + "attn_k_norm.weight", [hd], G_F32, vec(rng, hd)),
                  (b + "post_attention_norm.weight", [E], G_F32, vec(rng, E)),
                  (b + "post_ffw_norm.weight", [E], G_F32, vec(rng, E))]
    return gguf_file(kv, t, version, alignment)


def every_type_file(version, alignment):
    kv = [("general.architecture", T_STR, "llama"), ("t.u8", T_U8, 200), ("t.i8", T_I8, -5), ("t.u16", T_U16, 60000),
          ("t.i16", T_I16, -30000), ("t.u32", T_U32, 4000000000), ("t.i32", T_I32, -2000000000), ("t.f32", T_F32, 1.5),
          ("t.bool", T_BOOL, 1), ("t.u64", T_U64, 1 << 40), ("t.i64", T_I64, -(1 << 40)), ("t.f64", T_F64, -2.25),
          ("t.empty", T_STR, ""), ("t.arr_u32", T_ARR, (T_U32, [7, 8, 9])), ("t.arr_f32", T_ARR, (T_F32, [0.25, -4.0])),
          ("t.arr_str", T_ARR, (T_STR, ["a", "", "hello"])),
          ("t.arr_nested", T_ARR, (T_ARR, [(T_I8, [1, 2]), (T_STR, ["x"])])),
          ("t.arr_bool", T_ARR, (T_BOOL, [1, 0, 0, 1])), ("t.arr_empty", T_ARR, (T_I64, []))]
    if alignment != 32:
        kv.append(("general.alignment", T_U32, alignment))
    rng = random.Random(5)
    t = [("w.f32", [3, 2], G_F32, quant_rows(rng, 2, 3, G_F32)), ("w.q8", [64, 2], G_Q8_0, quant_rows(rng, 2, 64, G_Q8_0)),
         ("w.unknown", [16], 999, b"\xee" * 16), ("w.f16", [5], G_F16, quant_rows(rng, 1, 5, G_F16))]
    return gguf_file(kv, t, version, alignment)


def gguf_seeds(root):
    seeds = {}
    seeds["llama_bpe_q8_0"] = model("llama", 1, 32, 1, 1, 32, 1, G_Q8_0, bpe_tokenizer("smollm"))
    seeds["llama_bpe_gpt2_f16"] = model("llama", 2, 32, 1, 1, 64, 2, G_F16, bpe_tokenizer("gpt2", False), version=2)
    seeds["qwen2_bpe_q4_0"] = model("qwen2", 3, 64, 2, 1, 64, 1, G_Q4_0, bpe_tokenizer("qwen2", False), head_dim=32,
                                    biases=True, output=G_F16)
    seeds["qwen2_q5_0_bf16"] = model("qwen2", 4, 64, 2, 2, 32, 1, G_Q5_0, None, head_dim=32, biases=True,
                                     output=G_BF16, alignment=64,
                                     extra_kv=[("qwen2.vocab_size", T_U32, 48), ("general.alignment", T_U32, 64)])
    sw = [("gemma3.attention.sliding_window", T_U32, 4),
          ("gemma3.attention.sliding_window_pattern", T_ARR, (T_BOOL, [1, 0])),
          ("gemma3.final_logit_softcapping", T_F32, 30.0)]
    seeds["gemma3_spm_q8_0"] = model("gemma3", 5, 64, 2, 1, 64, 2, G_Q8_0, spm_tokenizer(), head_dim=32,
                                     extra_kv=sw, gemma=True)
    sw2 = [("gemma3.attention.sliding_window", T_U32, 8), ("gemma3.attention.sliding_window_pattern", T_U32, 3)]
    seeds["gemma3_q4_1_pattern"] = model("gemma3", 6, 64, 2, 2, 64, 3, G_Q4_1, spm_tokenizer(), head_dim=32,
                                         extra_kv=sw2, gemma=True)
    seeds["llama_q4_K_q6_K"] = model("llama", 7, 256, 2, 1, 32, 1, G_Q4_K, None, head_dim=32, output=G_Q6_K,
                                     types={"attn_output": G_Q8_0, "ffn_down": G_Q8_0})
    rs = [("llama.rope.scaling.type", T_STR, "linear"), ("llama.rope.scaling.factor", T_F32, 2.0),
          ("llama.rope.dimension_count", T_U32, 16)]
    # kvq quantize's output: coded matrices, f32 norms, a kept token_embd (not tq-mse: each of its plans
    # solves a Lloyd-Max codebook, ~10 ms under ASan, which would slow the fuzzer 50x)
    for spec in ("q8", "tcq:2"):
        kw = [("kvq.weights.version", T_U32, 1), ("kvq.weights.spec", T_STR, spec), ("kvq.weights.seed", T_U64, 0)]
        seeds["llama_kvq_" + spec.replace(":", "")] = model("llama", 9, 32, 1, 1, 64, 2, (G_KVQ, spec), None, extra_kv=kw,
                                                           types={"token_embd": G_Q8_0})
    seeds["llama_f32_rope_freqs"] = model("llama", 8, 32, 1, 1, 32, 2, G_F32, None, extra_kv=rs, rope_freqs=8)
    for v in (2, 3):
        for al in (32, 64):
            seeds["every_type_v%d_a%d" % (v, al)] = every_type_file(v, al)
    seeds["empty_v3"] = gguf_file([], [], 3)
    for name in ("SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"):
        path = os.path.join(root, "models", name)
        if os.path.exists(path):
            with open(path, "rb") as f:
                head = f.read(65536)
            for n in (256, 4096, 65536):
                seeds["real_%s_%d" % (name.split("-")[0].lower(), n)] = head[:n]
    return seeds


# ---------------------------------------------------------------- other targets
def tokenizer_seeds(root):
    texts = ["Hello, world!", "The capital of France is Paris.", "  leading spaces\tand\ttabs\n\nnew lines",
             "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n", "<start_of_turn>user\nHi<end_of_turn>\n",
             "<|endoftext|><bos><eos><unk><pad>", "caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \U0001F600 \u2581x",
             "don't it's we'll I'M 12345 3.14159", "def f(x):\n    return x ** 2  # square\n",
             "system prompt\0user message", "\xff\xfe\xc0\x80 broken \xed\xa0\x80 utf-8"]
    for corpus in ("prose.txt", "code.txt"):
        path = os.path.join(root, "corpora", corpus)
        if os.path.exists(path):
            with open(path, "rb") as f:
                data = f.read(20000)
            for i in range(8):
                texts.append(data[i * 2000:i * 2000 + 300])
    seeds = {}
    for i, t in enumerate(texts):
        b = t.encode("utf-8", "surrogatepass") if isinstance(t, str) else t
        if isinstance(t, str) and "\xff" in t:
            b = t.encode("latin-1")
        for sel in range(0, 256, 37):
            seeds["text%02d_%03d" % (i, sel)] = bytes([(sel + i) % 256]) + b
    return seeds


def spec_strings(root):
    out = set(["f16", "q8/tq-mse:4", "k=tq-prod:3,v=q8", "tq-mse:3,w=128", "q4,f16layers=0;-1", "tq-mse:4,sliding=1",
               "tq-mse:4+outliers=8,calib=64", "tq-mse:4+chscale/tq-mse:4,sink=1", "q8,w=16,sink=300", "k=q8+chscale,v=tq-mse:4,w=32,f16layers=0;1;-1,sliding=1,calib=16",
               "qjl", "tq-prod:2+m=64", "polar:5+scale32", "rvq:3+norot+cb=gauss", "tq-mse:8+scale=norm"])
    for doc in ("docs/METHODS.md", "docs/CACHE.md", "include/kvq.h"):
        path = os.path.join(root, doc)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for m in re.findall(r"`([^`\n]{1,79})`", text):
            out.add(m)
        for m in re.findall(r"\b((?:tq-mse|tq-prod|qjl|polar|rvq|q8|q4|f16|f32|bf16)[:+\w=/,;.-]*)", text):
            out.add(m)
    return sorted(s for s in out if s.isascii())


def spec_seeds(root):
    seeds = {}
    for i, s in enumerate(spec_strings(root)):
        seeds["s%03d" % i] = bytes([(i * 37) % 256]) + s.encode()
    return seeds


def fnv1a(h, data):
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def vecfile(dim, count, dtype, layers, heads, kind, rng):
    vals = [rng.gauss(0, 1) for _ in range(dim * count)]
    if dtype == 0:
        payload = b"".join(struct.pack("<f", v) for v in vals)
    elif dtype == 1:
        payload = b"".join(struct.pack("<e", v) for v in vals)
    else:
        payload = b"".join(struct.pack("<f", v)[2:] for v in vals)
    hdr = bytearray(b"KVQVEC01" + struct.pack("<IIQIIII", dim, dtype, count, layers, heads, kind, 0) + b"\0" * 24)
    assert len(hdr) == 64
    h = fnv1a(fnv1a(0xcbf29ce484222325, hdr), payload)
    hdr[40:48] = struct.pack("<Q", h)
    return bytes(hdr) + payload


def vecfile_seeds():
    rng = random.Random(11)
    seeds = {}
    for dt in range(3):
        for dim, count, kind in ((8, 3, 1), (64, 2, 2), (1, 0, 0), (32, 1, 3)):
            seeds["vec_dt%d_d%d_n%d" % (dt, dim, count)] = b"\0" + vecfile(dim, count, dt, 30, 3, kind, rng)
    seeds["vec_fixup"] = b"\x03" + vecfile(16, 2, 1, 1, 1, 1, rng)
    for i in range(6):  # writer side: dim, dtype, count, layers, heads, kind, flags, values
        w = struct.pack("<IBBIIIB", [8, 64, 65536, 65537, 0, 3][i], i % 4, 1 + i, 2, 3, [0, 1, 2, 3, 4, 99][i], 1)
        seeds["write%d" % i] = b"\x04" + w + b"".join(struct.pack("<f", rng.gauss(0, 1)) for _ in range(16))
    return seeds


N_CODEC_SPECS = 40  # SPECS in fuzz_codec.c


def codec_seeds():
    rng = random.Random(13)
    seeds = {}
    for s in range(N_CODEC_SPECS):
        for dim_i in (0, 1, 4):
            dim = [32, 64, 128, 256, 40, 96, 48, 512][dim_i]
            mode = rng.randrange(4) | (rng.randrange(3) << 2) | 0x10  # raw f32 values
            vals = b"".join(struct.pack("<f", rng.gauss(0, 2)) for _ in range(dim * ((mode & 3) + 1)))
            seeds["c%02d_d%d_raw" % (s, dim)] = bytes([s, dim_i, mode]) + vals
        hostile = bytes(rng.randrange(256) for _ in range(64 * 2))
        seeds["c%02d_hostile" % s] = bytes([s, 1, 1]) + hostile
    return seeds


def write(out, target, seeds):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    return len(seeds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    a = ap.parse_args()
    root = os.environ.get("KVQ_ROOT") or a.root
    counts = {
        "gguf": write(a.out, "gguf", gguf_seeds(root)),
        "tokenizer": write(a.out, "tokenizer", tokenizer_seeds(root)),
        "spec": write(a.out, "spec", spec_seeds(root)),
        "vecfile": write(a.out, "vecfile", vecfile_seeds()),
        "codec": write(a.out, "codec", codec_seeds()),
    }
    print("make_corpus.py: " + ", ".join("%s %d" % kv for kv in counts.items()) + " seeds in " + a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
