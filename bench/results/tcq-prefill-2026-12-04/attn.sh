#!/bin/sh
# tcq vs tq-mse decode-step attention (issue 13 item 3), the new and the old binary interleaved per policy,
# as bench/results/tcq512-2026-12-02/run.sh: d = 64 (9 / 3 heads) and 128 (32 / 8), ctx 4096 and 32768.
#   NEW=build/kvq OLD=/tmp/old/build/kvq sh bench/results/tcq-prefill-2026-12-04/attn.sh > attn.jsonl
for shape in "64 9 3" "128 32 8"; do
  set -- $shape
  for b in 2 3 4; do
    for m in tq-mse tcq; do
      for v in new old; do
        if [ $v = new ]; then K=$NEW; else K=$OLD; fi
        $K attn-bench --cache-k $m:$b --cache-v $m:$b --dim $1 --q-heads $2 --kv-heads $3 \
          --ctx 4096,32768 --threads 2 --rounds 5 --json | sed "s/^{/{\"bin\":\"$v\",/"
      done
    done
  done
done
