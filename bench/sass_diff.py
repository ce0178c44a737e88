#!/usr/bin/env python3
"""SASS of two builds of the CUDA library side by side (needs cuobjdump, on the GPU machine).

Usage: bench/sass_diff.py A/libkvq_cuda.a B/libkvq_cuda.a [SUBSTRING ...]
For every kernel whose mangled name contains one of the substrings (default: all), the SASS
instruction count of each build and the opcodes whose counts differ.
"""
import collections
import re
import subprocess
import sys


def kernels(lib):
    out = subprocess.run(["cuobjdump", "-sass", lib], capture_output=True, text=True, check=True).stdout
    res, cur = {}, None
    for line in out.split("\n"):
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            cur = m.group(1)
            res[cur] = collections.Counter()
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m and cur:
            res[cur][m.group(1)] += 1
    return res


def main():
    a, b = kernels(sys.argv[1]), kernels(sys.argv[2])
    subs = sys.argv[3:]
    for k in sorted(set(a) | set(b)):
        if subs and not any(s in k for s in subs):
            continue
        ca, cb = a.get(k, collections.Counter()), b.get(k, collections.Counter())
        d = {op: (ca[op], cb[op]) for op in set(ca) | set(cb) if ca[op] != cb[op]}
        ds = " ".join(f"{op}:{x}->{y}" for op, (x, y) in sorted(d.items()))
        print(f"{k[:70]:70s} {sum(ca.values()):5d} {sum(cb.values()):5d} {'same opcodes' if not d else ds}")


if __name__ == "__main__":
    main()
