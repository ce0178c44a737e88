#!/usr/bin/env python3
"""The forced-chunk sweep (cuda_attn --chunks) of sweep.log: per policy and shape, the rule's time (the line
without chunk=), the best forced chunking, and the rule's excess over it."""
import re, sys, os
d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(__file__)
rows, order = {}, []
for line in open(os.path.join(d, 'sweep.log')):
    m = re.match(r'(\S+)\s+d=\s*\d+ B=\s*(\d+) ctx=\s*(\d+):\s+([\d.]+) us', line)
    if not m: continue
    ch = re.search(r'chunk=(\d+)', line)
    k = (m[1], int(m[2]), int(m[3]))
    if k not in rows: rows[k] = {}; order.append(k)
    rows[k][ch[1] if ch else 'rule'] = float(m[4])
ex = []
print('| policy | shape | rule us | best us @ tiles/chunk | rule / best |')
print('|---|---|---|---|---|')
for k in order:
    r = rows[k]; best = min((v, c) for c, v in r.items() if c != 'rule')
    ex.append(r['rule'] / best[0])
    print(f"| {k[0]} | {k[1]} × {k[2] // 1024}K | {r['rule']:.1f} | {best[0]:.1f} @ {best[1]} | {r['rule'] / best[0]:.3f} |")
print(f'\nmean rule/best {sum(ex) / len(ex):.3f}, worst {max(ex):.3f} over {len(ex)} cells')
