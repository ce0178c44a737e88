#!/usr/bin/env python3
"""Tables of bench/anchors/weights.sh: GGUF weight types re-quantized by llama-quantize.

  weights.py sizes GGUF...     per file: size, bits per weight over the block matrices
                               (the 2-D tensors blk.*), the types of those matrices, and
                               what token_embd / output.weight hold
  weights.py kld DIR GGUF...   the sizes beside llama-perplexity --kl-divergence of
                               DIR/MODEL/llama-w-TYPE.log (the GGUFs in the same order
                               as the rows: the source model first, then MODEL-TYPE.gguf)

Bits per weight are counted from the GGUF tensor infos (python's gguf package): the
bytes of every 2-D blk.* tensor (its n_bytes, scales and minimums included) over its
elements. 1-D tensors (norms, f32) and token_embd are left out of that column and
shown apart.
"""
import collections
import os
import re
import sys

import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from table import fmt, parse_llama_log  # noqa: E402


def gguf_stats(path):
    r = gguf.GGUFReader(path)
    blk_bytes = blk_elems = 0
    types = collections.Counter()
    other = {}
    for t in r.tensors:
        two_d = sum(1 for d in t.shape if d > 1) >= 2
        if t.name.startswith("blk.") and two_d:
            blk_bytes += int(t.n_bytes)
            blk_elems += int(t.n_elements)
            types[t.tensor_type.name] += 1
        elif t.name in ("token_embd.weight", "output.weight"):
            other[t.name.split(".")[0]] = t.tensor_type.name
    return {
        "file": os.path.basename(path),
        "mib": os.path.getsize(path) / 2**20,
        "blk_mib": blk_bytes / 2**20,
        "bpw": 8.0 * blk_bytes / blk_elems if blk_elems else float("nan"),
        "types": types,
        "token_embd": other.get("token_embd", "-"),
        "output": other.get("output", "tied (absent)"),
    }


def types_str(c):
    return ", ".join(f"{k} x{v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1]))


def sizes(paths):
    print("| file | size MiB | block matrices MiB | bits/weight (block matrices) | block matrix types | token_embd | output |")
    print("|---|---|---|---|---|---|---|")
    for p in paths:
        s = gguf_stats(p)
        print(f"| {s['file']} | {s['mib']:.2f} | {s['blk_mib']:.2f} | {s['bpw']:.3f} | {types_str(s['types'])} | "
              f"{s['token_embd']} | {s['output']} |")


def kld(d, paths):
    print("| weights (llama-quantize --pure) | bits/weight (blocks) | block matrix types | file MiB | KLD ± se | KLD p99 "
          "| top-1 | ppl ± se (source ppl) | scored |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, p in enumerate(paths):
        s = gguf_stats(p)
        name = s["file"].rsplit(".gguf", 1)[0]
        if i == 0:
            log = os.path.join(d, "llama-f16-base.log")
            r = parse_llama_log(log) if os.path.exists(log) else {}
            ppl = ppl_se = None
            if os.path.exists(log):  # the base run prints "Final estimate: PPL = 33.4010 +/- 2.29871"
                m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", open(log, errors="replace").read())
                if m:
                    ppl, ppl_se = float(m.group(1)), float(m.group(2))
            print(f"| source `{name}` | {s['bpw']:.3f} | {types_str(s['types'])} | {s['mib']:.1f} | 0 (reference) "
                  f"| - | 1 | {fmt(ppl, 2)} ± {fmt(ppl_se, 2)} | (same windows) |")
            continue
        wtype = name.rsplit("-", 1)[-1]
        log = os.path.join(d, f"llama-w-{wtype}.log")
        r = parse_llama_log(log) if os.path.exists(log) else {}
        if "kld" not in r:
            print(f"| `{wtype}` | {s['bpw']:.3f} | {types_str(s['types'])} | {s['mib']:.1f} | (no KLD: {os.path.basename(log)}) "
                  f"| - | - | - | - |")
            continue
        print(f"| `{wtype}` | {s['bpw']:.3f} | {types_str(s['types'])} | {s['mib']:.1f} | {fmt(r['kld'], 4)} ± "
              f"{fmt(r.get('kld_se'), 4)} | {fmt(r.get('kld_p99'), 3)} | {fmt(r.get('top1'), 3)} | {fmt(r.get('ppl'), 2)} ± "
              f"{fmt(r.get('ppl_se'), 2)} ({fmt(r.get('ppl_base'), 2)}) | {r.get('tokens', '-')} |")


def main():
    a = sys.argv[1:]
    if len(a) >= 2 and a[0] == "sizes":
        sizes(a[1:])
    elif len(a) >= 3 and a[0] == "kld":
        kld(a[1], a[2:])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
