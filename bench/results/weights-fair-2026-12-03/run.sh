#!/usr/bin/env bash
# Issue 16, session 11: kvq's weight codecs against Q4_K / Q3_K (and Q5_K, Q6_K,
# IQ4_NL, Q4_0) on the matrices where the K-types really apply: those whose rows
# (ne[0], the input dimension) are a multiple of 256.
#   SmolLM2-135M (n_embd 576):  ffn_down (1536 wide)                  30 matrices
#   Gemma 3 270M (n_embd 640):  ffn_down (2048), attn_output (1024)   36 matrices
# Every other tensor is the source's, in every row.
# GGUF rows: llama-quantize --pure files (bench/anchors/weights.sh quantize), of
# which only those matrices are taken (bench/anchors/splice.py) into a copy of the
# source; run by kvq's engine with --test-model.
# kvq rows: --weights SPEC with --keep naming every other tensor, so only the
# same matrices are coded.
# All rows: kvq kld vs the source, f16 cache, ctx 2048, 2 windows of
# corpora/prose-heldout.txt (the windows of the cache matrix), 2046 positions.
#   bash bench/results/weights-fair-2026-12-03/run.sh [smollm2|gemma3] [gguf|kvq]
set -eu
cd "$(dirname "$0")/../../.."
OUT=bench/results/weights-fair-2026-12-03
A=.anchors/weights; F=.anchors/fair
TYPES=${TYPES:-"Q4_K Q3_K Q5_K Q6_K IQ4_NL Q4_0"}
SPECS=${SPECS:-"tcq:4+chscale tcq:3+chscale tcq:4 tcq:3 tq-mse:4"}
mkdir -p "$F"
for model in ${1:-smollm2 gemma3}; do
  case $model in gemma3-q6k|floor) continue ;; esac
  case $model in
    smollm2) M=models/SmolLM2-135M-Instruct.Q4_1.gguf; SEL=ffn_down
             KEEP=token_embd,output,attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up ;;
    gemma3)  M=models/gemma-3-270m-q4_k_m.gguf; SEL=ffn_down,attn_output
             KEEP=token_embd,output,attn_q,attn_k,attn_v,ffn_gate,ffn_up ;;
  esac
  K="nice -n 5 ./build/kvq kld -m $M -f corpora/prose-heldout.txt --ctx 2048 --chunks 2 --no-layers --json"
  if [ "${2:-gguf}" = gguf ]; then
    for t in $TYPES; do
      r=$OUT/$model-gguf-$t
      [ -s $r.jsonl ] && continue
      [ -s $F/$model-$t.gguf ] || python3 bench/anchors/splice.py $M $A/$model-$t.gguf $F/$model-$t.gguf \
          --tensors $SEL > $OUT/$model-splice-$t.json
      $K --test-model $F/$model-$t.gguf > $r.jsonl 2> $r.err
    done
  fi
  if [ "${2:-kvq}" = kvq ]; then
    for w in $SPECS; do
      r=$OUT/$model-kvq-${w//[:+]/_}
      [ -s $r.jsonl ] && continue
      $K --weights $w --keep $KEEP > $r.jsonl 2> $r.err
    done
  fi
done
# Gemma 3, what the Q4_K row really changes: 27 of its 36 spliced matrices are the
# source's own Q4_K, copied bit for bit (splice JSON); only the 9 ffn_down that the
# source holds as Q6_K (layers 0 1 4 7 10 13 15 16 17) move. The fair rows (session
# 12): those 9 alone, from a near-lossless source, GGUF and kvq alike:
#   bash bench/results/weights-fair-2026-12-03/run.sh gemma3-q6k [gguf|kvq]   (both if omitted)
# GGUF: splice.py --tensors blk.N.ffn_down.weight for the 9 layers (a full name
# matches only itself), donors the --pure files in .anchors/weights/gemma3-T.gguf.
# kvq: --keep names every other tensor, the 27 Q4_K matrices included.
# Outputs gemma3q6k-{gguf,kvq,splice}-*.
if [ "${1:-}" = gemma3-q6k ]; then
  M=models/gemma-3-270m-q4_k_m.gguf
  Q6=""; for l in 0 1 4 7 10 13 15 16 17; do Q6=$Q6${Q6:+,}blk.$l.ffn_down.weight; done
  KEEP=token_embd,output,attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up
  for l in 2 3 5 6 8 9 11 12 14; do KEEP=$KEEP,blk.$l.ffn_down; done
  K="nice -n 5 ./build/kvq kld -m $M -f corpora/prose-heldout.txt --ctx 2048 --chunks 2 --no-layers --json"
  if [ "${2:-gguf}" = gguf ]; then
    for t in ${TYPES6:-Q4_K Q3_K IQ4_NL Q4_0 Q5_K}; do
      r=$OUT/gemma3q6k-gguf-$t
      [ -s $r.jsonl ] && continue
      [ -s $F/gemma3q6k-$t.gguf ] || python3 bench/anchors/splice.py $M $A/gemma3-$t.gguf $F/gemma3q6k-$t.gguf \
          --tensors $Q6 > $OUT/gemma3q6k-splice-$t.json
      $K --test-model $F/gemma3q6k-$t.gguf > $r.jsonl 2> $r.err
    done
  fi
  if [ "${2:-kvq}" = kvq ]; then
    for w in ${SPECS6:-tcq:4 tcq:4+chscale tcq:3 tcq:3+chscale tq-mse:4}; do
      r=$OUT/gemma3q6k-kvq-${w//[:+]/_}
      [ -s $r.jsonl ] && continue
      $K --weights $w --keep $KEEP > $r.jsonl 2> $r.err
    done
  fi
fi
# The SmolLM2 floor (Q4_K, Q5_K, Q6_K all ~0.0077): the same spliced files with
# float activations in every quantized-weight product (--acts f32, source and
# test alike), to see whether the int8 activation rounding sets it:
#   bash bench/results/weights-fair-2026-12-03/run.sh floor        -> floor-smollm2-gguf-T.jsonl
if [ "${1:-}" = floor ]; then
  M=models/SmolLM2-135M-Instruct.Q4_1.gguf
  K="nice -n 5 ./build/kvq kld -m $M -f corpora/prose-heldout.txt --ctx 2048 --chunks 2 --no-layers --json --acts f32"
  for t in ${TYPESF:-Q4_K Q6_K}; do
    r=$OUT/floor-smollm2-gguf-$t
    [ -s $r.jsonl ] && continue
    $K --test-model $F/smollm2-$t.gguf > $r.jsonl 2> $r.err
  done
  # and the fair rows' verdicts under float activations: floor-gemma3q6k-{gguf,kvq}-*
  M=models/gemma-3-270m-q4_k_m.gguf
  KEEP=token_embd,output,attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up
  for l in 2 3 5 6 8 9 11 12 14; do KEEP=$KEEP,blk.$l.ffn_down; done
  K="nice -n 5 ./build/kvq kld -m $M -f corpora/prose-heldout.txt --ctx 2048 --chunks 2 --no-layers --json --acts f32"
  for t in Q4_K Q3_K; do
    r=$OUT/floor-gemma3q6k-gguf-$t
    [ -s $r.jsonl ] || $K --test-model $F/gemma3q6k-$t.gguf > $r.jsonl 2> $r.err
  done
  for w in tcq:4+chscale tcq:3+chscale tcq:4; do
    r=$OUT/floor-gemma3q6k-kvq-${w//[:+]/_}
    [ -s $r.jsonl ] || $K --weights $w --keep $KEEP > $r.jsonl 2> $r.err
  done
fi
