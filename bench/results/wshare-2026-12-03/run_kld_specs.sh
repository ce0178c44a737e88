#!/bin/bash
# KLD vs the source GGUF of spec options at <= 4.25 bpw with the stats (f16 cache, ctx 2048, 2 windows of
# corpora/prose-heldout.txt: the windows of the weights table). KVQ = the branch's kvq at 6586ef9.
set -u
OUT=bench/results/wshare-2026-12-03
KVQ=${KVQ:-/tmp/wshare_kvq_6586ef9}
S=models/SmolLM2-135M-Instruct.Q4_1.gguf
G=models/gemma-3-270m-q4_k_m.gguf
run() { # model tag spec
  local m=$1 tag=$2 w=$3 f=$OUT/$2-${3//[:+@]/_}
  nice -n 5 $KVQ kld -m $m -f corpora/prose-heldout.txt --ctx 2048 --chunks 2 --no-layers --json --weights $w \
    > $f.jsonl 2> $f.err
  echo "$tag $w done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $OUT/kld_progress.txt
}
run $S smollm2 tcq:4+center
run $S smollm2 tcq:4+chscale@192
# also queued, dropped for time on the loaded box (load 11-13): gemma3 tcq:4+center, smollm2 tcq:4@192
echo done > $OUT/kld_specs.done
