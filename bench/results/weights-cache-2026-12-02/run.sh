#!/usr/bin/env bash
# Weights and cache together (issue 16 item 3): KLD / top-1 / ppl of every
# (weights, cache policy) pair vs the source GGUF with an f16 cache, ctx 2048,
# 2 windows of corpora/prose-heldout.txt (the windows of the other tables).
# One kld call per (model, weights) with the cache policies batched.
set -u
OUT=bench/results/weights-cache-2026-12-02
P="f16 q8 tq-mse:5+chscale/tcq:3,sink=1 tcq:4+chscale/tcq:2,sink=1"
for model in smollm2:models/SmolLM2-135M-Instruct.Q4_1.gguf gemma3:models/gemma-3-270m-q4_k_m.gguf; do
  name=${model%%:*}; M=${model#*:}
  K="nice -n 5 ${KVQ:-./build/kvq} kld -m $M -f corpora/prose-heldout.txt --ctx 2048 --chunks 2 --no-layers --json"
  $K --policies "$P" > $OUT/$name-source.jsonl 2> $OUT/$name-source.err
  for w in tq-mse:4 tcq:4+chscale; do
    $K --weights $w --policies "$P" > $OUT/$name-${w//[:+]/_}.jsonl 2> $OUT/$name-${w//[:+]/_}.err
  done
done
# cache bytes at 2K (checked against the kld runs' kv_bytes at ctx 2048), 8K, 32K
for model in smollm2:models/SmolLM2-135M-Instruct.Q4_1.gguf gemma3:models/gemma-3-270m-q4_k_m.gguf; do
  name=${model%%:*}; M=${model#*:}
  ${KVQ:-./build/kvq} memplan -m $M --mem 16GiB --points 2K,8K,32K --policies "$P" --json > $OUT/$name-memplan.jsonl
done
# the table: python3 $OUT/table.py
