#!/bin/sh
# A/B of attention kernel builds on the GPU machine (docs/RESULTS.md "CUDA (H200)"):
# the default build (build-gpu) runs test_layouts and test_cuda; then cuda_attn --no-encode
# for each policy over all shapes, the variants interleaved, REPS times.
# Usage: bench/ab_cuda.sh OUTDIR POLICIES REPS NAME=SPEC ...
#   POLICIES: one or more cuda_attn policies, comma-separated ("tq-mse:4/4,q8")
#   SPEC: "-" (the default build itself), -DX=1,-DY=0 (this tree with those CUDA flags),
#         or @DIR (another source tree, e.g. a checkout of the baseline commit)
# AB_BUILD_ONLY=1: only the builds; AB_TEST=0: no tests; AB_ARGS: more cuda_attn arguments (--quick).
set -u
OUT_DIR=$1; POLS=$2; REPS=$3; shift 3
mkdir -p "$OUT_DIR"
NB=1; for v in "$@"; do [ "${v#*=}" = "-" ] || NB=$((NB + 1)); done
J=$(( $(nproc) / NB + 1 ))
cmake -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT_DIR/build.log" 2>&1
cmake --build build-gpu -j"$J" --target test_cuda cuda_attn test_layouts >>"$OUT_DIR/build.log" 2>&1 &
for v in "$@"; do
  n=${v%%=*}; f=${v#*=}; src=.
  [ "$f" = "-" ] && continue
  case $f in @*) src=${f#@}; f="" ;; esac
  f=$(echo "$f" | tr ',' ' ')
  ( cmake -S "$src" -B "build-ab-$n" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "-DCMAKE_CUDA_FLAGS=$f" >"$OUT_DIR/build-$n.log" 2>&1 &&
    cmake --build "build-ab-$n" -j"$J" --target cuda_attn >>"$OUT_DIR/build-$n.log" 2>&1 || echo "BUILD FAILED $n" ) &
done
wait
tail -3 "$OUT_DIR/build.log"
[ "${AB_BUILD_ONLY:-0}" = 1 ] && exit 0
[ "${AB_TEST:-1}" = 1 ] && ./build-gpu/test_layouts >"$OUT_DIR/test.log" 2>&1
[ "${AB_TEST:-1}" = 1 ] && timeout 170 ./build-gpu/test_cuda 2>&1 | tee -a "$OUT_DIR/test.log" | grep -E "attn|fail|FAIL|checks" | tail -40
for r in $(seq "$REPS"); do
  for pol in $(echo "$POLS" | tr ',' ' '); do
    for v in "$@"; do
      n=${v%%=*}; b=build-ab-$n
      [ "${v#*=}" = "-" ] && b=build-gpu
      # shellcheck disable=SC2086
      ./$b/cuda_attn --no-encode --policy "$pol" --runs 50 ${AB_ARGS:-} 2>&1 | grep -E "B=" | sed "s/^/$n /" | tee -a "$OUT_DIR/ab.log"
    done
  done
done
