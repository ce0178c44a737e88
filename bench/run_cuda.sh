#!/bin/sh
# Builds the CUDA backend, runs its tests and the benchmarks on the GPU machine
# (docs/RESULTS.md "CUDA (H200)" was produced by this script).
# Usage: bench/run_cuda.sh [OUTDIR] [--quick]   (logs and JSON lines go to OUTDIR, default ./cuda-results)
set -u
OUT_DIR=${1:-cuda-results}
QUICK=${2:-}
mkdir -p "$OUT_DIR"
BUILD=build-gpu
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  nvcc --version | tail -2
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
} 2>&1 | tee "$OUT_DIR/env.log"
t0=$(date +%s)
cmake -B $BUILD -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT_DIR/build.log" 2>&1 &&
  cmake --build $BUILD -j"$(nproc)" --target test_cuda cuda_attn test_layouts >>"$OUT_DIR/build.log" 2>&1 ||
  { tail -40 "$OUT_DIR/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s" | tee -a "$OUT_DIR/env.log"
./$BUILD/test_layouts | tee "$OUT_DIR/test.log"
timeout 170 ./$BUILD/test_cuda $QUICK 2>&1 | tee -a "$OUT_DIR/test.log"
timeout 200 ./$BUILD/cuda_attn $QUICK --json "$OUT_DIR/ours.jsonl" 2>&1 | tee "$OUT_DIR/bench.log"
PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_sdpa.py $QUICK --json "$OUT_DIR/torch.jsonl" 2>&1 | tee "$OUT_DIR/torch.log"
python3 bench/cuda_report.py "$OUT_DIR/ours.jsonl" "$OUT_DIR/torch.jsonl" 2>&1 | tee "$OUT_DIR/report.md"
bench/profile_cuda.sh $BUILD "$OUT_DIR" > "$OUT_DIR/profile.txt" 2>&1
