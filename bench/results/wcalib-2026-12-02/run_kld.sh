#!/usr/bin/env bash
# KLD of the saved tcq:4+chscale files (kvq quantize, plans from their stats tensors) vs the source,
# the windows of bench/results/weights-2026-12-02 (ctx 2048, 2 windows of corpora/prose-heldout.txt, f16 cache).
# The same spec coded at load time is that directory's smollm2/gemma3-kvq-tcq_4_chscale.jsonl.
# Files: /tmp/wcalib-q/*.gguf from
#   build/kvq quantize -m models/SmolLM2-135M-Instruct.Q4_1.gguf -o /tmp/wcalib-q/smollm2-tcq4chscale.gguf --weights tcq:4+chscale
#   build/kvq quantize -m models/gemma-3-270m-q4_k_m.gguf -o /tmp/wcalib-q/gemma3-tcq4chscale.gguf --weights tcq:4+chscale
set -u
OUT=bench/results/wcalib-2026-12-02
for x in "SmolLM2-135M-Instruct.Q4_1 smollm2" "gemma-3-270m-q4_k_m gemma3"; do
  set -- $x
  build/kvq kld -m models/$1.gguf -f corpora/prose-heldout.txt --ctx 2048 --chunks 2 --no-layers --json \
    --test-model /tmp/wcalib-q/$2-tcq4chscale.gguf > $OUT/$2-saved-tcq_4_chscale.jsonl 2> $OUT/$2-saved-tcq_4_chscale.err
done
