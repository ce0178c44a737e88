#!/bin/sh
# usage: run.sh BIN TAG
B=$1; T=$2; O=/tmp/tcq8-kld
for M in SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf; do
  $B kld -m models/$M -f corpora/prose-heldout.txt --ctx 2048 --chunks 2 --json --policies "tcq:3/tcq:3 tcq:4+chscale/tcq:2,sink=1" > $O/$T-cache-$M.json 2>$O/$T-cache-$M.err
  for W in tcq:4 tcq:4+chscale; do
    $B kld -m models/$M -f corpora/prose-heldout.txt --ctx 2048 --chunks 2 --json --weights $W > $O/$T-w-$W-$M.json 2>$O/$T-w-$W-$M.err
  done
done
echo done > $O/$T.done
