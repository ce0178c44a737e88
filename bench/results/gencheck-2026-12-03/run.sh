#!/bin/sh
# gencheck session (issue 13, session 11): 16 built-in prompts x 200 tokens, greedy, both models.
# Run from the repository root with the binary of this branch: sh bench/results/gencheck-2026-12-03/run.sh
D=bench/results/gencheck-2026-12-03
K=build/kvq
cat /proc/loadavg > $D/load_start.txt
# SmolLM2 (chat prompts): calib=32 (every generated token on the compressed cache; chat prompts are >= 32 tokens)
# and the default calib=128 of the earlier 4-prompt runs (the first ~90 generated tokens on f16 there)
$K gen-check --n 200 --json --per-prompt \
  --policies "tcq:2+chscale/tcq:2,sink=1,calib=32|tcq:2+chscale/tcq:2+center,sink=1,calib=32|tcq:2+chscale/tcq:2,sink=1|tcq:2+chscale/tcq:2+center,sink=1" \
  > $D/smol_gen.json 2> $D/smol_gen.err
cat /proc/loadavg > $D/load_mid.txt
# Gemma 3 270M (base model: completion prompts), every layer compressed (sliding=1, as llama.cpp) and global layers only
$K gen-check -m models/gemma-3-270m-q4_k_m.gguf --n 200 --json --per-prompt \
  --policies "tcq:2+chscale/tcq:2,sliding=1,sink=1,calib=32|tcq:2+chscale/tcq:2+center,sliding=1,sink=1,calib=32|tcq:2+chscale/tcq:2,sink=1,calib=32|tcq:2+chscale/tcq:2+center,sink=1,calib=32" \
  > $D/gemma_gen.json 2> $D/gemma_gen.err
cat /proc/loadavg > $D/load_end.txt
