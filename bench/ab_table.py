#!/usr/bin/env python3
"""Table of an A/B log of bench/ab_cuda.sh (lines "NAME POLICY B= b ctx= c: t us ...").

Usage: bench/ab_table.py ab.log [BASE NEW]   (default: the first two variant names seen)
Prints, per policy and shape, every repetition of each variant (us) and NEW/BASE of the medians.
"""
import re
import statistics
import sys

LINE = re.compile(r"^(\S+)\s+(\S+)\s+B=\s*(\d+)\s+ctx=\s*(\d+):\s+([\d.]+) us")


def main():
    rows, names = {}, []
    for line in open(sys.argv[1]):
        m = LINE.match(line)
        if not m:
            continue
        name, pol, b, ctx, us = m.group(1), m.group(2), int(m.group(3)), int(m.group(4)), float(m.group(5))
        if name not in names:
            names.append(name)
        rows.setdefault((pol, b, ctx), {}).setdefault(name, []).append(us)
    base, new = (sys.argv[2], sys.argv[3]) if len(sys.argv) > 3 else (names[0], names[1])
    print(f"| policy | batch x ctx | {base} us | {new} us | {new}/{base} (medians) |")
    print("|---|---|---|---|---|")
    pols = []
    for k in rows:
        if k[0] not in pols:
            pols.append(k[0])
    for pol in pols:
        for key in sorted(k for k in rows if k[0] == pol):
            v = rows[key]
            a, n = v.get(base, []), v.get(new, [])
            ratio = f"{statistics.median(n) / statistics.median(a):.3f}" if a and n else "-"
            fa = ", ".join(f"{x:.1f}" for x in a)
            fn = ", ".join(f"{x:.1f}" for x in n)
            print(f"| {pol} | {key[1]} x {key[2] // 1024}K | {fa} | {fn} | {ratio} |")


if __name__ == "__main__":
    main()
