#!/bin/bash
# Coding time of calibrated weight specs, interleaved in one run: BEFORE = main 438ac0e's kvq; SHARED = this
# branch at 6586ef9 (shared inner plans); F16 = this branch with the stats rounded to f16 (version 3).
# Then kvq quantize by BEFORE and SHARED compared byte for byte (same codes and stats).
# Usage (repo root): bash bench/results/wshare-2026-12-03/run_coding_time.sh
set -u
OUT=bench/results/wshare-2026-12-03
BEFORE=${BEFORE:-/tmp/wshare_before/kvq}
SHARED=${SHARED:-/tmp/wshare_kvq_6586ef9}
F16=${F16:-/tmp/wshare_kvq_f16}
S=models/SmolLM2-135M-Instruct.Q4_1.gguf
G=models/gemma-3-270m-q4_k_m.gguf
one() { # round model spec which bin
  local line
  line=$($5 run -m $2 -p Hi -n 1 --weights $3 2>&1 | grep "coded in")
  echo "round $1 $(basename $2) $3 $4: $line | load $(cut -d' ' -f1-3 /proc/loadavg)"
}
{
for round in 1 2 3; do
  for m in $S $G; do
    for spec in tq-mse:4+chscale tq-mse:4; do
      one $round $m $spec before $BEFORE; one $round $m $spec shared $SHARED; one $round $m $spec f16 $F16
    done
  done
done
for m in $S $G; do
  one 1 $m tcq:4+chscale before $BEFORE; one 1 $m tcq:4+chscale shared $SHARED; one 1 $m tcq:4+chscale f16 $F16
done
} > $OUT/coding_time.txt 2>&1
{
for m in $S $G; do
  for spec in tq-mse:4+chscale tq-mse:4+outliers=8; do
    $BEFORE quantize -m $m -o /tmp/wshare_qb.gguf --weights $spec > /dev/null 2>&1
    $SHARED quantize -m $m -o /tmp/wshare_qa.gguf --weights $spec > /dev/null 2>&1
    if cmp -s /tmp/wshare_qb.gguf /tmp/wshare_qa.gguf; then r=identical; else r=DIFFER; fi
    echo "$(basename $m) $spec: kvq quantize before/shared $r ($(stat -c %s /tmp/wshare_qa.gguf) bytes, sha256 $(sha256sum < /tmp/wshare_qa.gguf | cut -c1-16))"
  done
done
rm -f /tmp/wshare_qb.gguf /tmp/wshare_qa.gguf
} > $OUT/quantize_identity.txt 2>&1
echo done > $OUT/coding_time.done
