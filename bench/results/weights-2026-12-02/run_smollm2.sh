#!/usr/bin/env bash
# kvq's engine: KLD of weight formats vs the source GGUF (SmolLM2 Q4_1), f16 cache,
# ctx 2048, 2 windows of corpora/prose-heldout.txt (the windows of bench/anchors).
# GGUF types: files of bench/anchors/weights.sh (.anchors/weights/), tested with --test-model.
set -u
M=models/SmolLM2-135M-Instruct.Q4_1.gguf; A=${A:-.anchors/weights}; OUT=bench/results/weights-2026-12-02
K="nice -n 5 ./build/kvq kld -m $M -f corpora/prose-heldout.txt --ctx 2048 --chunks 2 --no-layers --json"
for t in Q4_0 Q4_K Q3_K IQ4_NL Q5_K Q6_K; do
  $K --test-model $A/smollm2-$t.gguf > $OUT/smollm2-gguf-$t.jsonl 2> $OUT/smollm2-gguf-$t.err
done
for w in tq-mse:3 tcq:3 tq-mse:4 tcq:4 tq-mse:4+chscale q4 tq-mse:5 q8; do
  $K --weights $w > $OUT/smollm2-kvq-${w//[:+]/_}.jsonl 2> $OUT/smollm2-kvq-${w//[:+]/_}.err
done
