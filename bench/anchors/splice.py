#!/usr/bin/env python3
"""A GGUF equal to SOURCE except that the named tensors come from DONOR.

    python3 bench/anchors/splice.py SOURCE DONOR OUT --tensors ffn_down[,attn_output]

Issue 16, session 11: llama-quantize --pure falls back on every matrix whose
row length is not a multiple of 256, so its "Q4_K" file is Q4_K only on
ffn_down (and Gemma 3's attn_output). Taking just those tensors from it, and
everything else from the source, gives a file whose difference from the
source is exactly the matrices that hold the K-type.

--tensors: comma-separated name parts, matched as kvq's --keep matches them
(src/engine/model_weights.c `kept`): a part starts at the name's start or
after a '.', and ends at the end, a '.' or a '_' ("ffn_down" selects
blk.N.ffn_down.weight; "output" selects output.weight, not attn_output).

The metadata (every key/value of SOURCE, in order, with its type), the tensor
order, names and shapes are SOURCE's; a selected tensor's type and bytes are
DONOR's (its shape must equal SOURCE's). The file is written through OUT.tmp
and read back: every tensor's bytes are checked against where they came from
and every key against SOURCE. Prints one JSON line: the selected tensors,
their types in SOURCE and DONOR, their weights and bytes, and per source type
the relative RMS difference of the donor's dequantized weights from the source's.
"""
import argparse
import json
import os
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize


def selected(name, parts):
    for p in parts:
        i = 0
        while True:
            i = name.find(p, i)
            if i < 0:
                break
            after = name[i + len(p):i + len(p) + 1]
            if (i == 0 or name[i - 1] == ".") and after in ("", ".", "_"):
                return True
            i += 1
    return False


def field_value(f):
    """(value, type, sub_type) of a reader field, as GGUFWriter.add_key_value takes them."""
    main = f.types[0]
    if main == GGUFValueType.ARRAY:
        sub = f.types[-1]
        if sub == GGUFValueType.STRING:
            return [bytes(f.parts[i]) for i in f.data], main, sub  # bytes: no re-encoding
        return [f.parts[i].tolist()[0] for i in f.data], main, sub
    if main == GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]), main, None
    return f.parts[f.data[0]].tolist()[0], main, None


def kv_fields(r):
    # GGUF.* are the header's own counts; the writer writes those itself
    return [f for f in r.fields.values() if not f.name.startswith("GGUF.")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source")
    ap.add_argument("donor")
    ap.add_argument("out")
    ap.add_argument("--tensors", required=True, help="comma-separated name parts (ffn_down,attn_output)")
    a = ap.parse_args()
    parts = [p for p in a.tensors.split(",") if p]
    if not parts:
        sys.exit("splice: --tensors names nothing")
    src, don = GGUFReader(a.source), GGUFReader(a.donor)
    dt = {t.name: t for t in don.tensors}
    arch = src.fields["general.architecture"]
    arch = bytes(arch.parts[arch.data[0]]).decode()
    align = src.fields.get("general.alignment")

    tmp = a.out + ".tmp"
    w = GGUFWriter(tmp, arch)
    if align is not None:
        w.data_alignment = int(align.parts[align.data[0]][0])
    for f in kv_fields(src):
        if f.name == "general.architecture":
            continue  # the writer's constructor wrote it
        v, t, s = field_value(f)
        w.add_key_value(f.name, v, t, sub_type=s)
    picked, origin = [], {}
    for t in src.tensors:
        take = t
        if selected(t.name, parts):
            d = dt.get(t.name)
            if d is None:
                sys.exit(f"splice: {t.name} is not in {a.donor}")
            if list(d.shape) != list(t.shape):
                sys.exit(f"splice: {t.name}: shape {list(d.shape)} in the donor, {list(t.shape)} in the source")
            take = d
            picked.append((t, d))
        origin[t.name] = take
        w.add_tensor(t.name, take.data, raw_dtype=take.tensor_type)
    if not picked:
        sys.exit(f"splice: no tensor of {a.source} matches {a.tensors}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # read back: same keys and values as the source, each tensor's bytes and type from where it came
    o = GGUFReader(tmp)
    want = {f.name: field_value(f) for f in kv_fields(src)}
    got = {f.name: field_value(f) for f in kv_fields(o)}
    if want != got:
        diff = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
        sys.exit(f"splice: metadata differs from the source after writing: {diff[:5]}")
    if [t.name for t in o.tensors] != [t.name for t in src.tensors]:
        sys.exit("splice: tensor list differs from the source after writing")
    for t in o.tensors:
        s = origin[t.name]
        if t.tensor_type != s.tensor_type or list(t.shape) != list(s.shape) or \
                not np.array_equal(np.asarray(t.data).view(np.uint8), np.asarray(s.data).view(np.uint8)):
            sys.exit(f"splice: {t.name} differs from its origin after writing")
    os.replace(tmp, a.out)

    # how far the donor's matrices are from the source's, per source type: the
    # relative RMS error |W_donor - W_src| / |W_src| of the dequantized weights
    # (0 where the donor is a bit-exact copy; small where it re-used the source's grid)
    err = {}
    for t, d in picked:
        ws = dequantize(np.asarray(t.data), t.tensor_type).astype(np.float64)
        wd = dequantize(np.asarray(d.data), d.tensor_type).astype(np.float64)
        e = err.setdefault(t.tensor_type.name, {"n": 0, "sq_err": 0.0, "sq_src": 0.0, "exact": 0})
        e["n"] += 1
        e["sq_err"] += float(np.sum((wd - ws) ** 2))
        e["sq_src"] += float(np.sum(ws ** 2))
        e["exact"] += int(np.array_equal(ws, wd))
    rel = {k: {"tensors": v["n"], "bit_exact": v["exact"], "rel_rms": (v["sq_err"] / v["sq_src"]) ** 0.5}
           for k, v in sorted(err.items())}

    n_w = sum(int(t.n_elements) for t, _ in picked)
    n_b = sum(int(d.n_bytes) for _, d in picked)
    print(json.dumps({
        "out": a.out, "source": a.source, "donor": a.donor, "tensors": a.tensors,
        "n_tensors": len(picked), "weights": n_w, "bytes": n_b, "bits_per_weight": 8.0 * n_b / n_w,
        "source_bytes": sum(int(t.n_bytes) for t, _ in picked),
        "source_types": sorted({t.tensor_type.name for t, _ in picked}),
        "donor_types": sorted({d.tensor_type.name for _, d in picked}),
        "rel_rms_by_source_type": rel,
    }))


if __name__ == "__main__":
    main()
