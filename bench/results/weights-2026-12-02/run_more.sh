#!/usr/bin/env bash
# Second round: calibrated / unrotated variants on SmolLM2, then the Gemma 3 matrix
# (same windows: ctx 2048, 2 windows of corpora/prose-heldout.txt, f16 cache; source Q4_K_M).
set -u
A=${A:-.anchors/weights}; OUT=bench/results/weights-2026-12-02
S="nice -n 5 ./build/kvq kld -m models/SmolLM2-135M-Instruct.Q4_1.gguf -f corpora/prose-heldout.txt --ctx 2048 --chunks 2 --no-layers --json"
for w in tcq:4+chscale tq-mse:4+norot tcq:3+chscale; do
  $S --weights $w > $OUT/smollm2-kvq-${w//[:+]/_}.jsonl 2> $OUT/smollm2-kvq-${w//[:+]/_}.err
done
G="nice -n 5 ./build/kvq kld -m models/gemma-3-270m-q4_k_m.gguf -f corpora/prose-heldout.txt --ctx 2048 --chunks 2 --no-layers --json"
for t in Q4_0 Q4_K Q3_K IQ4_NL Q5_K Q6_K; do
  $G --test-model $A/gemma3-$t.gguf > $OUT/gemma3-gguf-$t.jsonl 2> $OUT/gemma3-gguf-$t.err
done
for w in tcq:4 tcq:4+chscale tq-mse:4 tq-mse:5 tcq:3 q8; do
  $G --weights $w > $OUT/gemma3-kvq-${w//[:+]/_}.jsonl 2> $OUT/gemma3-kvq-${w//[:+]/_}.err
done
