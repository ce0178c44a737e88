build/kvq gen-check --n 200 --prompts 4 --json --per-prompt --policies "tcq:2+chscale/tcq:2,sink=1"
