#!/bin/sh
# the cache's tcq policies at ctx 4096 (SmolLM2), new vs old binary, one after the other; ratios vs f16 of each run
#   NEW=build/kvq OLD=/tmp/old/build/kvq sh bench/results/tcq-prefill-2026-12-04/cache.sh
set -e
R=bench/results/tcq-prefill-2026-12-04
P="f16 tq-mse:5+chscale/tcq:3,sink=1 tcq:4+chscale/tcq:2,sink=1 tcq:4+chscale/tcq:4,sink=1 tq-mse:4"
for b in new old; do
    if [ $b = new ]; then K=$NEW; else K=$OLD; fi
    $K bench --ctx 4096 --prefill 512 --gen 32 --rounds 3 --json --policies "$P" > $R/cache_$b.json
done
python3 - "$R" <<'PY'
import json, sys
for b in ("new", "old"):
    for l in open(f"{sys.argv[1]}/cache_{b}.json"):
        if l.startswith("{"):
            r = json.loads(l)
            print(f"| {b} | `{r['policy']}` | {r['bits_per_value']:.2f} | {r['prefill_tok_s']:.1f} | {r['prefill_speedup']:.2f} | {r['gen_tok_s']:.1f} | {r['gen_speedup']:.2f} |")
PY
