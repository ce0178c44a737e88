#!/usr/bin/env python3
"""SASS instructions of the tile loop of the classic and the wide-table kernels, per (K, V) kernel (needs cuobjdump;
CUOBJDUMP=path; cuobjdump and nvdisasm also come from PyPI: nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm).

Usage: bench/sass_tileloop.py OBJ_OR_LIB... [--match SUBSTRING]
The count is the common path of one 16-token tile: from the loop's cp.async wait (`DEPBAR.LE SB0`) to the
first copy of the next tile (`LDGSTS`), less the online softmax's rescale block (the instructions that the
first forward conditional branch after the warp vote `VOTE` jumps over: taken only when a running max grows).
The next tile's copies themselves are not counted. Prints: common path, whole span, the kernel's template
arguments (mangled).
"""
import collections
import os
import re
import subprocess
import sys


def functions(obj):
    out = subprocess.run([os.environ.get("CUOBJDUMP", "cuobjdump"), "-sass", obj], capture_output=True, text=True,
                         check=True).stdout
    res, cur = {}, None
    for line in out.split("\n"):
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            cur = m.group(1)
            res[cur] = []
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and cur:
            res[cur].append((int(m.group(1), 16), m.group(2).strip()))
    return res


def tile_loop(ins):
    """(common path, whole span, opcode counts of the span) of the tile loop, or None."""
    i0 = next((i for i, (_, t) in enumerate(ins) if t.startswith("DEPBAR.LE SB0")), None)
    if i0 is None:
        return None
    i1 = next((i for i in range(i0, len(ins)) if "LDGSTS" in ins[i][1]), None)
    if i1 is None:
        return None
    body = ins[i0:i1]
    skip = 0
    iv = next((i for i, (_, t) in enumerate(body) if t.startswith("VOTE")), None)
    if iv is not None:
        for a, t in body[iv:]:
            m = re.match(r"@!?P\d BRA (0x[0-9a-f]+)", t)
            if m:
                tgt = int(m.group(1), 16)
                if tgt > a:
                    skip = sum(1 for b, _ in body if a < b < tgt)
                break
    ops = collections.Counter(t.split()[1] if t.startswith("@") else t.split()[0] for _, t in body)
    return len(body) - skip, len(body), ops


def main():
    args, match = [], None
    it = iter(sys.argv[1:])
    for a in it:
        if a == "--match":
            match = next(it)
        else:
            args.append(a)
    for obj in args:
        for name, ins in functions(obj).items():
            if ("attn_kernelI" not in name and "attn_kernel_wideI" not in name) or (match and match not in name):
                continue
            r = tile_loop(ins)
            if r:
                m = re.search(r"attn_kernel(?:_wide)?I(.*)EEvNS_10AttnParams", name)
                print(f"{r[0]:5d} {r[1]:5d} {m.group(1) if m else name}")


if __name__ == "__main__":
    main()
