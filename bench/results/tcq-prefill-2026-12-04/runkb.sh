#!/bin/sh
# kernel microbench (kb.c): tcq score / accumulate, ticks per weight and query, one call with all nq queries;
# the old library (9cf2ad2) and the new one, alternately
for args in "tcq:4 256 192" "tcq:3 128 72" "tcq:4 256 192 acc" "tcq:3 128 256 acc"; do
  for b in old new; do ./kb_$b $args | sed "s/^{/{\"lib\":\"$b\",/"; done
done
