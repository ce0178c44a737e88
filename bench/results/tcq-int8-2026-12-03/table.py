import json, sys, os
O = '/tmp/tcq8-bench'
for m in ['smol', 'gemma']:
    rows = []
    for tag in ['new', 'old']:
        f = f'{O}/{tag}-{m}-1.json'
        if not os.path.exists(f): continue
        R = [json.loads(l) for l in open(f) if l.strip()]
        q4 = [r for r in R if 'Q4_K' in r['weights']][0]
        for r in R:
            if tag == 'old' and 'tcq' not in r['weights']: continue
            name = r['weights'] + (' (old binary, 58c088f)' if tag == 'old' else (' (new)' if 'tcq' in r['weights'] else ''))
            rows.append((name, r['prefill_tok_s'], r['prefill_tok_s'] / q4['prefill_tok_s'], r['gen_tok_s'], r['gen_tok_s'] / q4['gen_tok_s'], r['gen_ms_median']))
        if tag == 'old':
            rows.append(('  (old run: Q4_K file)', q4['prefill_tok_s'], 1.0, q4['gen_tok_s'], 1.0, q4['gen_ms_median']))
    print(f'\n**{m}** (ratios vs the Q4_K file of the same run)\n')
    print('| weights | prefill tok/s | × Q4_K | decode tok/s | × Q4_K | decode median ms |')
    print('|---|---|---|---|---|---|')
    for r in rows: print(f'| {r[0]} | {r[1]:.1f} | {r[2]:.2f} | {r[3]:.1f} | {r[4]:.2f} | {r[5]:.2f} |')
