#!/bin/sh
# tcq weights' prefill and decode beside GGUF types, new binary (main after the many-query kernels) and
# old (9cf2ad2), one after the other per model; ratios vs the Q4_K file of the same run.
#   NEW=build/kvq OLD=/tmp/old/build/kvq A=.anchors/weights sh bench/results/tcq-prefill-2026-12-04/run.sh
set -e
R=bench/results/tcq-prefill-2026-12-04
A=${A:-.anchors/weights}
for m in smollm2 gemma3; do
    if [ $m = smollm2 ]; then M=models/SmolLM2-135M-Instruct.Q4_1.gguf G="--gen 32 --prefill 256"
    else M=models/gemma-3-270m-q4_k_m.gguf G="--gen 16 --prefill 128"; fi
    $NEW bench -m $M --ctx 512 $G --rounds 3 --json \
        --models "$A/$m-Q4_K.gguf $A/$m-IQ4_NL.gguf $A/$m-Q3_K.gguf tcq:4 tcq:4+chscale tcq:3" > $R/${m}_new.json
    $OLD bench -m $M --ctx 512 $G --rounds 3 --json --models "$A/$m-Q4_K.gguf tcq:4 tcq:3" > $R/${m}_old.json
done
