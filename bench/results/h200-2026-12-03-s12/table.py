#!/usr/bin/env python3
"""Issue 17 table of the session-12 H200 run: kvq (cuda_attn --no-encode) per policy and shape beside
PyTorch's best f16 SDPA of the same call (x SDPA), % of copy bandwidth, and base (438ac0e) vs new.
    python3 bench/results/h200-2026-12-03-s12/table.py bench/results/h200-2026-12-03-s12"""
import re, sys, os
d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(__file__)
pat = re.compile(r'^(base|new) (\S+)\s+d=128 B=\s*(\d+) ctx=\s*(\d+):\s+([\d.]+) us .*?([\d.]+)% of copy')
t = {}
for f in ('ab.log', 'rest.log'):
    for line in open(os.path.join(d, f)):
        m = pat.match(line)
        if m:
            v, pol, b, c, us, cp = m.groups()
            t[(v, pol, int(b), int(c))] = (float(us), float(cp))
sdpa = {}
for line in open(os.path.join(d, 'torch_sdpa.txt')):
    m = re.match(r'torch d=128 B=\s*(\d+) ctx=\s*(\d+): best\s+([\d.]+) us', line)
    if m: sdpa[(int(m[1]), int(m[2]))] = float(m[3])
shapes = sorted(sdpa, key=lambda s: (s[1], s[0]))
pols = ['tq-mse:4/4', 'tq-mse:2/2', 'tq-mse:4/2', 'tq-mse:3/3', 'q8', 'rvq:2/2', 'tq-prod:3/tq-mse:2', 'f16']
print('| shape | SDPA us | ' + ' | '.join(pols) + ' |')
print('|---|---|' + '---|' * len(pols))
for s in shapes:
    cells = []
    for p in pols:
        r = t.get(('new', p) + s)
        cells.append('–' if not r else f'{r[0]:.1f} us {sdpa[s] / r[0]:.2f}× {r[1]:.0f}%')
    print(f'| {s[0]} × {s[1] // 1024}K | {sdpa[s]:.1f} | ' + ' | '.join(cells) + ' |')
print('\nbase (438ac0e) -> new, us:\n')
print('| shape | ' + ' | '.join(pols[:2] + ['q8']) + ' |')
print('|---|---|---|---|')
for s in shapes:
    cells = []
    for p in ('tq-mse:4/4', 'tq-mse:2/2', 'q8'):
        a, b = t.get(('base', p) + s), t.get(('new', p) + s)
        cells.append(f'{a[0]:.1f} → {b[0]:.1f} ({a[0] / b[0]:.2f}×)' if a and b else '–')
    print(f'| {s[0]} × {s[1] // 1024}K | ' + ' | '.join(cells) + ' |')
