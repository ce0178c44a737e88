#!/bin/bash
# KLD of calibrated specs with the stats rounded to f16 (this branch's version-3 coding; KVQ = its kvq), the
# windows of the weights table. Batch 1 ran at load ~12, batch 2 once the box was quieter (load ~3).
# Usage (repo root): bash bench/results/wshare-2026-12-03/run_kld_f16.sh [1|2]
set -u
OUT=bench/results/wshare-2026-12-03
KVQ=${KVQ:-/tmp/wshare_kvq_f16}
run() { # model tag spec
  local m=$1 tag=$2 w=$3 f=$OUT/$2-f16stats-${3//[:+@]/_}
  nice -n 5 $KVQ kld -m $m -f corpora/prose-heldout.txt --ctx 2048 --chunks 2 --no-layers --json --weights $w \
    > $f.jsonl 2> $f.err
  echo "f16 $tag $w done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $OUT/kld_progress.txt
}
if [ "${1:-1}" = 1 ]; then
  run models/SmolLM2-135M-Instruct.Q4_1.gguf smollm2 tcq:4+chscale
  run models/gemma-3-270m-q4_k_m.gguf gemma3 tcq:4+chscale
else # blocks of 192 on SmolLM2 (a dense rotation; 192 divides 576 and 1536), with and without +chscale
  run models/SmolLM2-135M-Instruct.Q4_1.gguf smollm2 tcq:4+chscale@192
  run models/SmolLM2-135M-Instruct.Q4_1.gguf smollm2 tcq:4@192
fi
