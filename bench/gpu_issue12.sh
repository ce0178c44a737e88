#!/usr/bin/env bash
# Issue 12 on the GPU machine, from the repository root: libraries, tests, the serving benchmark.
#   bench/gpu_issue12.sh tests|quick|full|all [LIBDIR]
# LIBDIR: prebuilt libkvq.so.0, libkvq-engine.so.0, libkvq-cuda.so.0 and test_cuda (x86-64, glibc >= 2.34;
# default _libs); built here (sm_90, /tmp/kvq-b) when absent or not loadable. Everything goes to $OUT
# (default /tmp/kvq-out): test logs, serve_*.json, the benchmark's output.
set -u
MODE=${1:-all}
LIBS=${2:-$PWD/_libs}
OUT=${OUT:-/tmp/kvq-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' | tee "$OUT/versions.txt"
if ! KVQ_LIBRARY_DIR=$LIBS python3 -c 'import kvq.torch as kt; assert kt.cuda_available()' 2>"$OUT/libcheck.txt"; then
    echo "prebuilt libraries not usable ($(tail -1 "$OUT/libcheck.txt")): building (sm_90)"
    cmake -S . -B /tmp/kvq-b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DKVQ_BUILD_TOOLS=OFF \
        > "$OUT/cmake.log" 2>&1 && cmake --build /tmp/kvq-b -j16 --target kvq_shared kvq_engine_shared kvq_cuda_shared \
        test_cuda >> "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
    LIBS=/tmp/kvq-b
fi
export KVQ_LIBRARY_DIR=$LIBS
echo "libraries: $LIBS"
rc=0
if [ "$MODE" = tests ] || [ "$MODE" = quick ] || [ "$MODE" = all ]; then
    ( "$LIBS/test_cuda" > "$OUT/test_cuda.log" 2>&1; echo "test_cuda rc $?" >> "$OUT/test_cuda.log" ) &
    tc=$!
    python3 -m pytest -q -x -p no:cacheprovider tests/python/test_torch_cuda.py tests/python/test_torch_ops.py \
        > "$OUT/pytest_torch.log" 2>&1
    echo "pytest rc $?" >> "$OUT/pytest_torch.log"
    wait $tc
    tail -4 "$OUT/test_cuda.log"
    grep -E "graph|seq_map|FAIL" "$OUT/test_cuda.log" | head -12
    tail -4 "$OUT/pytest_torch.log"
fi
if [ "$MODE" = quick ]; then
    python3 bench/serve_h200.py --quick --json "$OUT/serve_quick.json" 2>&1 | tee "$OUT/serve_quick.log" | tail -40
fi
if [ "$MODE" = full ] || [ "$MODE" = all ]; then
    python3 bench/serve_h200.py --json "$OUT/serve_full.json" ${SERVE_ARGS:-} 2>&1 | tee "$OUT/serve_full.log" | tail -60
fi
exit $rc
