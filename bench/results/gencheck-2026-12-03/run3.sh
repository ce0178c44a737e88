#!/bin/sh
# SmolLM2 on 16 chat prompts of 136-151 tokens (bench/gencheck/long-chat.json): with the default calib=128 the
# +chscale/+center plans are built inside the prompt, so every generated token sees the cache as kld measures it.
D=bench/results/gencheck-2026-12-03
K=build/kvq
cat /proc/loadavg > $D/load3_start.txt
$K gen-check --n 200 --json --per-prompt --prompts-file bench/gencheck/long-chat.json \
  --policies "tcq:2+chscale/tcq:2,sink=1|tcq:2+chscale/tcq:2+center,sink=1|tcq:2+chscale/tcq:2,sink=1,calib=32|tcq:4+chscale/tcq:2,sink=1" \
  > $D/smol_gen_long.json 2> $D/smol_gen_long.err
cat /proc/loadavg > $D/load3_end.txt
