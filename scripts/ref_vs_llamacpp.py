#!/usr/bin/env python3
"""Cross-check scripts/ref_forward.py against llama.cpp (developer tool, not CI).

llama.cpp's CPU matmuls quantize the activations to 8 bits when the weights
are quantized, which moves the logits by a few 1e-2 (relative to the largest
logit) and would hide any subtle convention error. So this tool first writes
a copy of the model with every tensor dequantized to F32 (the same values the
reference uses: dequantization is exact), runs llama.cpp on it with an F32 KV
cache, and compares all-position logits with the float64 reference:

    max_v |llama.cpp - ref| / max_v |ref|   per position

Optionally the copy's sliding window is patched (--window N) to exercise
Gemma 3's sliding-window layers on a short prompt.

Needs `pip install llama-cpp-python` (builds llama.cpp from source: ~15 min
on 2 cores) and ~4 bytes per parameter of temporary disk space.

usage: ref_vs_llamacpp.py MODEL.gguf --tokens 1,2,3 [--window N] [--tmpdir DIR]
"""
import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_forward as rf  # noqa: E402
import gguf  # noqa: E402


def write_f32_copy(src: str, dst: str) -> None:
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, r.fields["general.architecture"].contents())
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            w.add_key_value(k, f.contents(), t, sub_type=f.types[-1])
        else:
            w.add_key_value(k, f.contents(), t)
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, a.reshape(tuple(int(x) for x in reversed(t.shape))))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def patch_window(path: str, arch: str, window: int) -> None:
    r = gguf.GGUFReader(path, "r+")
    f = r.fields[f"{arch}.attention.sliding_window"]
    f.parts[f.data[0]][0] = window
    r.data.flush()


def main() -> int:
    ap = argparse.ArgumentParser(description="compare the float64 reference with llama.cpp on F32 weights")
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True, help="comma separated token ids")
    ap.add_argument("--window", type=int, default=0, help="patch the sliding window to N tokens")
    ap.add_argument("--tmpdir", default=None)
    args = ap.parse_args()
    try:
        from llama_cpp import Llama
    except ImportError:
        sys.stderr.write("ref_vs_llamacpp.py: needs llama-cpp-python (pip install llama-cpp-python)\n")
        return 2
    tokens = rf.parse_tokens(args.tokens)
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
        f32 = os.path.join(tmp, "model-f32.gguf")
        write_f32_copy(args.model, f32)
        m = rf.Model(f32)
        if args.window:
            patch_window(f32, m.arch, args.window)
            m = rf.Model(f32)
        llm = Llama(model_path=f32, logits_all=True, n_ctx=max(64, len(tokens)), n_batch=max(64, len(tokens)),
                    n_threads=2, verbose=False, type_k=0, type_v=0, flash_attn=False)  # 0 = GGML_TYPE_F32
        llm.eval(tokens)
        lc = np.array(llm.scores[: len(tokens)], dtype=np.float64)
        del llm
        ref = rf.forward(m, tokens)
    worst = 0.0
    for t in range(len(tokens)):
        rel = float(np.abs(lc[t] - ref[t]).max() / np.abs(ref[t]).max())
        worst = max(worst, rel)
        same = int(np.argmax(lc[t])) == int(np.argmax(ref[t]))
        print(f"pos {t:3d}: rel err {rel:.2e}  argmax {'same' if same else 'DIFFERENT'}")
    print(f"worst {worst:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
