#!/bin/sh
# A/B of attention kernel variants on the GPU machine (docs/RESULTS.md "CUDA (H200)"):
# each variant is a build directory with its -D flags; the default build runs test_cuda;
# then cuda_attn --no-encode for the given policy over all shapes, variants interleaved.
# Usage: bench/ab_cuda.sh OUTDIR POLICY REPS NAME=FLAGS ...   (FLAGS: -DX=1,-DY=0 or "-")
# AB_BUILD_ONLY=1: only the builds; AB_TEST=0: no test_cuda.
set -u
OUT_DIR=$1; POL=$2; REPS=$3; shift 3
mkdir -p "$OUT_DIR"
J=$(( $(nproc) / ($# + 1) + 1 ))
cmake -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT_DIR/build.log" 2>&1
cmake --build build-gpu -j"$J" --target test_cuda cuda_attn test_layouts >>"$OUT_DIR/build.log" 2>&1 &
for v in "$@"; do
  n=${v%%=*}; f=${v#*=}; [ "$f" = "-" ] && f=""
  f=$(echo "$f" | tr ',' ' ')
  ( cmake -B "build-ab-$n" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "-DCMAKE_CUDA_FLAGS=$f" >"$OUT_DIR/build-$n.log" 2>&1 &&
    cmake --build "build-ab-$n" -j"$J" --target cuda_attn >>"$OUT_DIR/build-$n.log" 2>&1 || echo "BUILD FAILED $n" ) &
done
wait
tail -3 "$OUT_DIR/build.log"
[ "${AB_BUILD_ONLY:-0}" = 1 ] && exit 0
[ "${AB_TEST:-1}" = 1 ] && ./build-gpu/test_layouts >"$OUT_DIR/test.log" 2>&1
[ "${AB_TEST:-1}" = 1 ] && timeout 170 ./build-gpu/test_cuda 2>&1 | tee -a "$OUT_DIR/test.log" | grep -E "attn|fail|FAIL|checks" | tail -40
for r in $(seq "$REPS"); do
  for v in "$@"; do
    n=${v%%=*}
    ./build-ab-$n/cuda_attn --no-encode --policy "$POL" --runs 50 2>&1 | grep -E "^ *$POL|B=" | sed "s/^/$n /" | tee -a "$OUT_DIR/ab.log"
  done
done
