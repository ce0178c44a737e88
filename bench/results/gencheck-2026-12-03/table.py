"""Markdown table of kvq gen-check --json summaries: python3 table.py FILE.json"""
import json
import sys

for path in sys.argv[1:]:
    S = [json.loads(l) for l in open(path) if '"record":"summary"' in l]
    f16 = S[0]
    print(f"{path}: {f16['model']}, {f16['n_prompts']} prompts, n = {f16['n']}, "
          f"f16 degenerate on {[p['prompt'] for p in f16['prompts'] if p['degenerate_at'] is not None]}\n")
    print("| policy | bits (all layers) | degenerate / N | also f16 | beyond f16 (prompts: at) | mean first divergence | mean coherent | identical |")
    print("|---|---|---|---|---|---|---|---|")
    for s in S:
        b = ", ".join(f"{p['prompt']}: {p['degenerate_at']}" for p in s["prompts"] if p["beyond_f16"])
        print(f"| `{s['policy']}` | {s['bits_per_value_all_layers']:.3f} | {s['degenerate']} / {s['n_prompts']} | "
              f"{s['degenerate_also_f16']} | {s['degenerate_beyond_f16']}{' (' + b + ')' if b else ''} | "
              f"{'–' if s is f16 else format(s['mean_diverge'], '.1f')} | {s['mean_coherent']:.1f} | {s['identical']} |")
    print()
