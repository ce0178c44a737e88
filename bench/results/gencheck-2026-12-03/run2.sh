#!/bin/sh
# Controls for SmolLM2 (after run.sh): a 2.25-bit policy without calibration (compressed from token 0, no
# +chscale), and +chscale calibrated on 64 tokens; then the KLD cost of calib=32 vs the default 128
# (ctx 2048 windows: every scored position on the compressed cache either way).
D=bench/results/gencheck-2026-12-03
K=build/kvq
cat /proc/loadavg > $D/load2_start.txt
$K gen-check --n 200 --json --per-prompt --policies "tcq:2/tcq:2,sink=1|tcq:2+chscale/tcq:2,sink=1,calib=64" \
  > $D/smol_gen_ctrl.json 2> $D/smol_gen_ctrl.err
cat /proc/loadavg > $D/load2_mid.txt
$K kld -f corpora/prose-heldout.txt --ctx 2048 --chunks 2 --no-layers --json \
  --policies "tcq:2+chscale/tcq:2,sink=1|tcq:2+chscale/tcq:2,sink=1,calib=32|tcq:2/tcq:2,sink=1" \
  > $D/smol_kld_calib.json 2> $D/smol_kld_calib.err
cat /proc/loadavg > $D/load2_end.txt
