#!/bin/sh
# tcq vs tq-mse decode-step attention, interleaved, one run (issue 13 item 3).
# usage: bench/results/tcq512-2026-12-02/run.sh OUT.jsonl   (from the repo root, after the build)
out=${1:?out file}
: > "$out"
for shape in "64 9 3" "128 32 8"; do
  set -- $shape
  for b in 2 3 4; do
    for m in tq-mse tcq; do
      build/kvq attn-bench --cache-k $m:$b --cache-v $m:$b --dim $1 --q-heads $2 --kv-heads $3 \
        --ctx 4096,32768 --threads 2 --rounds 5 --json >> "$out"
    done
  done
done
