#!/usr/bin/env python3
"""The engine on small synthetic GGUF models, against the independent float64
reference (scripts/ref_forward.py).

Covers what the real models do not: the qwen2 architecture (biases, NEOX rope,
no real model installable here), a separate output matrix, every supported
weight type (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K:
K-quants as random valid blocks since gguf-py cannot quantize them), Gemma 3
sliding-window layers with a window of 4 over 20 tokens, and forward chunks
(--batch) smaller than the prompt. Engine run: f32 activations, f32 cache;
tolerance 1e-4 of the row's largest logit. The fast path (int8 activations)
is checked loosely (argmax agreement in most rows).

Run as: python3 tests/test_engine_synth.py --kvq build/kvq [--root REPO]
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_common as rc  # noqa: E402

NAME = "test_engine_synth"
TOL = 1e-4


def kquant_blocks(rng, rows, cols, qtype, np, T):
    """Random valid K-quant blocks (rows x cols/256 blocks) as uint8 (rows, bytes)."""
    nb = cols // 256
    f16 = lambda v: np.array(v, dtype=np.float16).view(np.uint8)  # noqa: E731
    out = []
    for _ in range(rows * nb):
        if qtype == T.Q4_K:
            b = np.concatenate([f16([0.004, 0.002]), rng.integers(0, 256, 12 + 128, dtype=np.uint8)])
        elif qtype == T.Q5_K:
            b = np.concatenate([f16([0.002, 0.001]), rng.integers(0, 256, 12 + 32 + 128, dtype=np.uint8)])
        else:  # Q6_K: ql, qh, scales (int8), d
            sc = rng.integers(-40, 40, 16).astype(np.int8).view(np.uint8)
            b = np.concatenate([rng.integers(0, 256, 128 + 64, dtype=np.uint8), sc, f16([0.0008])])
        out.append(b)
    return np.stack(out).reshape(rows, -1)


def add_weight(w, rng, name, rows, cols, qtype, np, gguf, scale=0.06):
    T = gguf.GGMLQuantizationType
    if qtype in (T.Q4_K, T.Q5_K, T.Q6_K):
        w.add_tensor(name, kquant_blocks(rng, rows, cols, qtype, np, T), raw_dtype=qtype)
        return
    x = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
    if qtype == T.F32:
        w.add_tensor(name, x)
    elif qtype == T.F16:
        w.add_tensor(name, x.astype(np.float16))
    else:
        w.add_tensor(name, gguf.quants.quantize(x, qtype), raw_dtype=qtype)


def add_vec(w, rng, name, n, np, base=1.0, spread=0.1):
    w.add_tensor(name, (base + spread * rng.standard_normal(n)).astype(np.float32))


def build(path, arch, seed, np, gguf):
    T = gguf.GGMLQuantizationType
    rng = np.random.default_rng(seed)
    E, H, HKV, HD, F, V = 256, 4, 2, 64, 512, 320
    L = 7 if arch == "gemma3" else 2
    w = gguf.GGUFWriter(path, arch)
    w.add_uint32(f"{arch}.block_count", L)
    w.add_uint32(f"{arch}.embedding_length", E)
    w.add_uint32(f"{arch}.feed_forward_length", F)
    w.add_uint32(f"{arch}.attention.head_count", H)
    w.add_uint32(f"{arch}.attention.head_count_kv", HKV)
    w.add_uint32(f"{arch}.context_length", 4096)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)
    if arch == "gemma3":
        w.add_uint32(f"{arch}.attention.key_length", HD)
        w.add_uint32(f"{arch}.attention.value_length", HD)
        w.add_uint32(f"{arch}.attention.sliding_window", 4)
        w.add_float32(f"{arch}.rope.freq_base", 1e6)
    else:
        w.add_float32(f"{arch}.rope.freq_base", 10000.0 if arch == "llama" else 1e6)
    # weight types rotate over the layers so that every type is used
    types = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K, T.F16, T.F32, T.BF16]
    k = seed % len(types)

    def nxt():
        nonlocal k
        t = types[k % len(types)]
        k += 1
        return t

    add_weight(w, rng, "token_embd.weight", V, E, nxt(), np, gguf, scale=1.0 if arch != "gemma3" else 0.1)
    add_vec(w, rng, "output_norm.weight", E, np)
    if arch == "llama":
        add_weight(w, rng, "output.weight", V, E, nxt(), np, gguf)
    for i in range(L):
        p = f"blk.{i}."
        add_vec(w, rng, p + "attn_norm.weight", E, np)
        add_vec(w, rng, p + "ffn_norm.weight", E, np)
        add_weight(w, rng, p + "attn_q.weight", H * HD, E, nxt(), np, gguf)
        add_weight(w, rng, p + "attn_k.weight", HKV * HD, E, nxt(), np, gguf)
        add_weight(w, rng, p + "attn_v.weight", HKV * HD, E, nxt(), np, gguf)
        add_weight(w, rng, p + "attn_output.weight", E, H * HD, nxt(), np, gguf)
        add_weight(w, rng, p + "ffn_gate.weight", F, E, nxt(), np, gguf)
        add_weight(w, rng, p + "ffn_up.weight", F, E, nxt(), np, gguf)
        add_weight(w, rng, p + "ffn_down.weight", E, F, nxt(), np, gguf)
        if arch == "qwen2":
            add_vec(w, rng, p + "attn_q.bias", H * HD, np, 0.0, 0.5)
            add_vec(w, rng, p + "attn_k.bias", HKV * HD, np, 0.0, 0.5)
            add_vec(w, rng, p + "attn_v.bias", HKV * HD, np, 0.0, 0.5)
        if arch == "gemma3":
            add_vec(w, rng, p + "attn_q_norm.weight", HD, np)
            add_vec(w, rng, p + "attn_k_norm.weight", HD, np)
            add_vec(w, rng, p + "post_attention_norm.weight", E, np, 0.5)
            add_vec(w, rng, p + "post_ffw_norm.weight", E, np, 0.5)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return V


def run_engine(kvq, model, tokens, out, extra):
    cmd = [kvq, "logits", "-m", model, "--tokens", ",".join(map(str, tokens)), "--cache-k", "f32",
           "--cache-v", "f32", "-o", out] + extra
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    return cmd, p


def main() -> int:
    args = rc.parse_args(NAME)
    if not args.kvq or not os.path.isfile(args.kvq):
        rc.log(NAME, f"FAIL: kvq binary not found: {args.kvq}")
        return 1
    rf = rc.import_reference(NAME, args.root)
    import gguf
    import numpy as np

    failures = 0
    with tempfile.TemporaryDirectory(prefix="kvq_synth_") as tmp:
        for arch, seed in (("llama", 1), ("qwen2", 2), ("gemma3", 3), ("llama", 6), ("qwen2", 9)):
            path = os.path.join(tmp, f"{arch}-{seed}.gguf")
            V = build(path, arch, seed, np, gguf)
            tokens = [int(t) for t in np.random.default_rng(seed + 100).integers(0, V, 20)]
            ref = rf.forward(rf.Model(path), tokens)
            for label, extra, tol in (("f32 acts", ["--acts", "f32"], TOL),
                                      ("f32 acts, batch 7", ["--acts", "f32", "--batch", "7"], TOL),
                                      ("q8 acts", ["--acts", "q8"], None)):
                out = os.path.join(tmp, "out.f32")
                cmd, p = run_engine(args.kvq, path, tokens, out, extra)
                if p.returncode != 0:
                    rc.log(NAME, f"FAIL {arch}/{seed} {label}: `{' '.join(cmd)}` exited {p.returncode}\n{p.stderr}")
                    failures += 1
                    continue
                eng = np.fromfile(out, dtype="<f4").reshape(len(tokens), V).astype(np.float64)
                rel = max(float(np.abs(eng[t] - ref[t]).max() / np.abs(ref[t]).max()) for t in range(len(tokens)))
                agree = float(np.mean(eng.argmax(1) == ref.argmax(1)))
                ok = (rel <= tol) if tol is not None else (agree >= 0.8 and rel < 0.2)
                rc.log(NAME, f"{'ok  ' if ok else 'FAIL'} {arch:6s} seed {seed} {label:18s}: worst rel err "
                       f"{rel:.2e}, argmax agreement {agree:.2f}")
                failures += 0 if ok else 1
    if failures:
        rc.log(NAME, f"{failures} failure(s)")
        return 1
    rc.log(NAME, "synthetic models match the float64 reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
