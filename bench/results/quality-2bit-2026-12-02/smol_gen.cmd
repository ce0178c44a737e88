build/kvq gen-check --n 200 --prompts 4 --json --per-prompt --policies "tcq:3+chscale/tcq:1,sink=1|tcq:2+chscale/tcq:1,sink=1,w=64|tcq:2+chscale/tcq:2+center,sink=1"
