#!/usr/bin/env bash
# Issue 17 on the GPU machine (docs/RESULTS.md "CUDA (H200)"): from a folder holding this tree (new/)
# and the baseline tree (base/, e.g. `git archive` of the commit before), both built for sm_90 in /tmp.
#   bench/gpu_issue17.sh test|ab|gen|all     (run from new/; everything goes to $OUT)
# test:  test_layouts, test_cuda (full), the PyTorch tests on libkvq-cuda (tests/python/test_torch_cuda.py,
#        test_torch_ops.py);
# ab:    base vs new, interleaved, cuda_attn --no-encode at d = 128 (tq-mse:4/4, tq-mse:2/2, q8, f16; every
#        shape; REPS times, default 2);
# gen:   the generic kernel: cuda_attn --dim 64 / 96 / 256 and tq-mse:3/3 at d = 128, with
#        bench/torch_sdpa.py at the same head dims in the same run.
# d256:  test (test_cuda, the PyTorch tests), then, if test_cuda passed, cuda_attn at d = 256 (16 x 32K;
#        32/8 and 4/1 query/KV heads; f16, q8, tq-mse:4/4, 2/2, 4/2) on the tensor-core kernel and
#        --generic, d = 64 / 128 tq-mse:4/4 beside them, and bench/torch_sdpa.py --dim 256.
#        PRE=DIR: binaries and shared libraries built elsewhere for sm_90 (else built in /tmp/b).
# w2:    the 2-bit byte table (tq-mse:2/2): base and new built in parallel, test_cuda (full), then base
#        vs new interleaved for tq-mse:2/2 (every shape, REPS times), tq-mse:4/4 new, bench/torch_sdpa.py
#        (all shapes incl. 1 x 128K, 4 x 128K), Nsight Compute of the tq-mse:2/2 kernel at 16 x 32K
#        (base, new) and of tq-mse:4/4 (new); details in $OUT/extra.tgz.
# probe: split-K at small batch (session 11): new built alone; Nsight Compute of the tq-mse:2/2, tq-mse:4/4
#        and q8 main kernels at 16 x 32K (bench/profile_cuda.sh: sections, executed instructions, cycles;
#        raw text ncu_*.txt), the kernel durations (prep, main, merge) under ncu at 1 x 32K, 1 x 128K,
#        4 x 128K, 16 x 32K (kdur.log), the chunk sweep (cuda_attn --chunks) at those shapes (sweep.log),
#        bench/torch_sdpa.py (in extra.tgz, its "torch" lines in the output).
# sk:    base and new built in parallel, test_cuda (full) on new, base vs new interleaved (tq-mse:4/4,
#        tq-mse:2/2, q8; every shape; REPS times, default 2), bench/torch_sdpa.py, the ncu profiles and
#        kernel durations of probe on new (BASE_NCU=1: the profiles on base too), the chunk sweep on new
#        (SWEEP=0: none); raw ncu text, build logs in extra.tgz.
# table: (session 12) base (cuda_attn) and new (test_cuda, cuda_attn, the shared libraries) built in parallel, test_cuda
#        (full) on new, base vs new interleaved (tq-mse:4/4, tq-mse:2/2, q8; every shape; REPS times, default 1),
#        new alone for the issue's other rows (tq-mse:4/2, tq-mse:3/3, rvq:2/2, tq-prod:3/tq-mse:2, f16),
#        bench/torch_sdpa.py (every shape) in the same call.
# prof:  (after table, same machine) ncu profiles and kernel durations of probe on /tmp/b, the chunk sweep (SWEEP=1),
#        the PyTorch tests.
# final: (session 13) new alone: test_cuda --quick and --sink, the PyTorch tests on libkvq-cuda, cuda_attn for
#        every policy of the issue's table (every shape), bench/torch_sdpa.py in the same call.
# quick: (session 13) base (cuda_attn) and new (test_cuda, cuda_attn) built in parallel, test_cuda --quick on new,
#        base vs new interleaved (tq-mse:4/4, tq-mse:2/2, q8; every shape; REPS times, default 1), the ncu
#        profiles on new (and of tq-mse:2/2 on base), the kernel durations at the small shapes on new and base.
# full:  (session 14) new alone: cuda_attn for the tcq policies and the README's pair (with and without the
#        f16 sink) at 1 x 32K and 16 x 32K, then test_cuda in full (no --quick) in what is left of LIMIT
#        seconds (default 585) since the start.
# tq5:   (session 14) new alone: test_cuda --tq5 (no --quick), tq-mse:5 keys beside tq-mse:4/4 and on the
#        generic kernel (cuda_attn, 1 x 32K, 16 x 32K, 1 x 128K), the SASS size of the main kernels (tq-mse:5
#        and tq-mse:4 K with tq-mse:4 V), the PyTorch tests.
# tcq:   (session 14) new alone: test_cuda --tcq (the host checks, the tcq encode cases, the tcq attention cases on
#        the generic and the classic kernel), then cuda_attn for the tcq rows of the issue's table at every shape
#        (tcq:3/tcq:3, tcq:2/tcq:2, tcq:4/tcq:4, tq-mse:4/tcq:3, q8/tcq:3 on the classic kernel; the README's
#        tq-mse:5+chscale/tcq:3,sink=1, whose tq-mse:5 keys keep it on the generic kernel), tcq:3/tcq:3 and
#        tq-mse:4/tcq:3 on the generic kernel (--generic: the kernel they ran on before) at 16 x 32K, and
#        tq-mse:4/4 beside them.
# s14:   (session 14, after the tcq and tq-mse:5 merges) new alone: cuda_attn for the tcq rows, the README's
#        pair with its sink, tq-mse:5/tq-mse:4 and tq-mse:4/4 with and without the sink (the window pass before
#        the main pass) at 1 x 32K, 16 x 32K, 1 x 128K; then test_cuda --quick beside the PyTorch tests, in
#        what is left of LIMIT seconds (default 585).
# s15:   (session 15, the wide kernels for tq-mse:2/2 and 4/2) base (cuda_attn) and new (test_cuda, cuda_attn) built
#        in parallel; base vs new interleaved for POLS_AB (default tq-mse:2/2 and tq-mse:4/4; every shape, REPS rounds,
#        default 2), POLS_NEW on new (tq-mse:4/2 q8), bench/torch_sdpa.py, Nsight Compute of the new main kernels
#        of POLS_PROF (tq-mse:2/2 tq-mse:4/4) at 16 x 32K, then test_cuda --quick in what is left of LIMIT seconds
#        (default 560).
# py:    (session 15) the shared libraries built alone, then the PyTorch tests on libkvq-cuda (LIMIT seconds).
set -u
MODE=${1:-all}
OUT=${OUT:-/tmp/kvq-out}
mkdir -p "$OUT"
NEW=$PWD BASE=${BASE:-$PWD/../base}
export PYTHONUNBUFFERED=1
LOGS=$OUT
case $MODE in probe|sk) LOGS=/tmp/x; mkdir -p $LOGS ;; esac
build() { # src dir, build dir, targets...
    local s=$1 b=$2; shift 2
    [ -f "$b/CMakeCache.txt" ] || cmake -S "$s" -B "$b" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DKVQ_BUILD_TOOLS=OFF > "$LOGS/cmake-$(basename "$b").log" 2>&1
    cmake --build "$b" -j"${J:-16}" --target "$@" >> "$LOGS/cmake-$(basename "$b").log" 2>&1 ||
        { tail -30 "$LOGS/cmake-$(basename "$b").log"; return 1; }
}
# ncu of the main kernels at 16 x 32K (build dir, tag), raw text to $OUT/ncu_<pol><tag>.txt
profiles() {
    for pol in tq-mse:2/2 tq-mse:4/4 q8; do
        local n; n=$(echo "$pol" | tr -d ':/-' | sed 's/tqmse/tq/')$2
        mkdir -p /tmp/x/$n && timeout 120 bash bench/profile_cuda.sh "$1" /tmp/x/$n "$pol" > /tmp/x/$n/sum.txt 2>&1
        cp /tmp/x/$n/ncu.txt "${PROF_OUT:-$OUT}/ncu_$n.txt"
        echo "== $n"; grep -E "Duration|DRAM Throughput|Issue Slots Busy|Executed Ipc A|Registers Per|Achieved Occ|No Eligible|L1/TEX Hit|Memory Throughput|inst_executed|inst_issued|cycles_elapsed|dram__bytes|wavefronts|bank_conflicts|ERROR" /tmp/x/$n/ncu.txt | head -20
    done
}
# the chunk sweep (cuda_attn --chunks) at the small shapes, 16 x 32K, 16 x 4K and 64 x 4K, into $OUT/sweep.log
sweep() {
    CH=16,32,48,64,96,128,160,192,256,320,384,512
    for sh in "1 32768" "1 131072" "4 131072" "4 32768" "16 32768" "16 4096" "64 4096"; do
        for pol in tq-mse:4/4 tq-mse:2/2 q8; do
            "$1/cuda_attn" --no-encode --policy "$pol" --shape $sh --runs 30 --chunks $CH 2>&1 | grep -E "B=" >> "$OUT/sweep.log"
        done
    done
}
# kernel durations under ncu (prep, main, window, merge; 2 steps after warm-up) at the small shapes
kdur() { # KDUR_SHAPES: "B:CTX ..." (default 1:32768 1:131072 4:131072 16:32768)
    for bc in ${KDUR_SHAPES:-1:32768 1:131072 4:131072 16:32768}; do
        local sh="${bc%%:*} ${bc##*:}"
        for pol in tq-mse:4/4 tq-mse:2/2 q8; do
            echo "== $pol $sh"
            timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum,launch__grid_size \
                -k 'regex:prep_kernel|attn_kernel|merge_q_kernel' -s 15 -c 6 "$1/cuda_attn" --no-encode \
                --policy "$pol" --shape $sh --runs 3 2>&1 | grep -E "^  [a-z_]+.*\(|gpu__time_duration|launch__grid_size|ERROR"
        done
    done
}
# test_cuda (full) on /tmp/b, then base (/tmp/bb) vs new interleaved for tq-mse:4/4, tq-mse:2/2, q8 ($1 times)
test_and_ab() {
    timeout "${TC_TIMEOUT:-240}" /tmp/b/test_cuda > "$OUT/test_cuda.log" 2>&1; echo "test_cuda rc $?" >> "$OUT/test_cuda.log"
    grep -E "FAIL|checks|rc |chunk" "$OUT/test_cuda.log" | head -30
    echo "tests: $(( $(date +%s) - t0 )) s"
    ab_rounds "$1"
}
# base (/tmp/bb) vs new (/tmp/b) interleaved for tq-mse:4/4, tq-mse:2/2, q8 ($1 rounds) into $OUT/ab.log
ab_rounds() {
    for r in $(seq "$1"); do
        for pol in tq-mse:4/4 tq-mse:2/2 q8; do
            for v in base new; do
                b=/tmp/b; [ $v = base ] && b=/tmp/bb
                $b/cuda_attn --no-encode --policy "$pol" --runs 50 2>&1 | grep -E "B=" | sed "s/^/$v /" >> "$OUT/ab.log"
            done
        done
    done
}
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; nvcc --version | tail -1
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
  git -C "$NEW" log -1 --format=%h 2>/dev/null; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
if [ "$MODE" = test ] || [ "$MODE" = all ]; then
    t0=$(date +%s)
    build "$NEW" /tmp/b test_cuda cuda_attn test_layouts kvq_shared kvq_engine_shared kvq_cuda_shared || exit 1
    echo "build: $(( $(date +%s) - t0 )) s"
    /tmp/b/test_layouts > "$OUT/test_layouts.log" 2>&1; echo "test_layouts rc $?"
    ( timeout 400 /tmp/b/test_cuda > "$OUT/test_cuda.log" 2>&1; echo "test_cuda rc $?" >> "$OUT/test_cuda.log" ) &
    tc=$!
    KVQ_LIBRARY_DIR=/tmp/b PYTHONPATH=$NEW/python timeout 400 python3 -m pytest -q -x -p no:cacheprovider \
        tests/python/test_torch_cuda.py tests/python/test_torch_ops.py > "$OUT/pytest_torch.log" 2>&1
    echo "pytest rc $?" >> "$OUT/pytest_torch.log"
    wait $tc
    grep -E "encode:|FAIL|checks|rc " "$OUT/test_cuda.log" | head -40
    grep -E "d=( 32| 64| 96|256)|d=128.*(tq-mse:3|rvq:3|tq-mse:6|scale32|qjl:64|tq-prod:4)" "$OUT/test_cuda.log" | head -60
    tail -5 "$OUT/pytest_torch.log"
fi
if [ "$MODE" = ab ] || [ "$MODE" = all ]; then
    ( build "$BASE" /tmp/bb cuda_attn ) & ( build "$NEW" /tmp/b cuda_attn ) & wait
    for r in $(seq "${REPS:-2}"); do
        for pol in tq-mse:4/4 tq-mse:2/2 q8 f16; do
            for v in base new; do
                b=/tmp/b; [ $v = base ] && b=/tmp/bb
                $b/cuda_attn --no-encode --policy "$pol" --runs 50 2>&1 | grep -E "B=" | sed "s/^/$v /" | tee -a "$OUT/ab.log"
            done
        done
    done
fi
if [ "$MODE" = gen ] || [ "$MODE" = all ]; then
    build "$NEW" /tmp/b cuda_attn || exit 1
    for d in 64 96 256; do
        for pol in tq-mse:4/4 tq-mse:3/3 tq-mse:2/2 q8; do
            for sh in "1 32768" "16 4096" "16 32768"; do
                /tmp/b/cuda_attn --no-encode --dim $d --policy "$pol" --shape $sh --runs 30 2>&1 | grep -E "B=" | tee -a "$OUT/gen.log"
            done
        done
        timeout 120 python3 bench/torch_sdpa.py --quick --dim $d --runs 30 2>&1 | tee -a "$OUT/torch_dims.log" | grep -E "torch d="
    done
    for sh in "1 32768" "16 4096" "16 32768"; do
        /tmp/b/cuda_attn --no-encode --policy tq-mse:3/3 --shape $sh --runs 30 2>&1 | grep -E "B=" | tee -a "$OUT/gen.log"
    done
    timeout 120 python3 bench/torch_sdpa.py --quick --runs 30 2>&1 | tee -a "$OUT/torch_dims.log" | tail -12
fi
if [ "$MODE" = d256 ]; then
    B=${PRE:-/tmp/b}
    t0=$(date +%s)
    # carried binaries that do not load here (or none): build them
    if [ -z "${PRE:-}" ] || ! "$B/cuda_attn" --no-encode --shape 1 1 > /dev/null 2>&1; then
        B=/tmp/b
        build "$NEW" /tmp/b test_cuda cuda_attn kvq_shared kvq_engine_shared kvq_cuda_shared || exit 1
    fi
    echo "binaries: $B, $(( $(date +%s) - t0 )) s"
    ( timeout 280 "$B/test_cuda" > "$OUT/test_cuda.log" 2>&1; echo "test_cuda rc $?" >> "$OUT/test_cuda.log" ) &
    tc=$!
    LD_LIBRARY_PATH=$B KVQ_LIBRARY_DIR=$B PYTHONPATH=$NEW/python timeout 200 python3 -m pytest -q -x -p no:cacheprovider \
        tests/python/test_torch_cuda.py tests/python/test_torch_ops.py > "$OUT/pytest_torch.log" 2>&1
    echo "pytest rc $?" >> "$OUT/pytest_torch.log"
    wait $tc
    echo "tests: $(( $(date +%s) - t0 )) s"
    grep -E "FAIL|checks|rc " "$OUT/test_cuda.log" | head -30
    grep -E "d=256" "$OUT/test_cuda.log" | head -40
    tail -3 "$OUT/pytest_torch.log"
    grep -q "test_cuda rc 0" "$OUT/test_cuda.log" || exit 1
    for hv in "32 8" "4 1"; do
        for pol in f16 q8 tq-mse:4/4 tq-mse:2/2 tq-mse:4/2; do
            for g in "" --generic; do
                "$B/cuda_attn" --no-encode --dim 256 --heads $hv $g --policy "$pol" --shape 16 32768 --runs 30 2>&1 |
                    grep -E "B=" | tee -a "$OUT/d256.log"
            done
        done
    done
    for d in 64 128; do
        "$B/cuda_attn" --no-encode --dim $d --policy tq-mse:4/4 --shape 16 32768 --runs 50 2>&1 | grep -E "B=" | tee -a "$OUT/d256.log"
    done
    timeout 100 python3 bench/torch_sdpa.py --quick --dim 256 --runs 30 2>&1 | tee "$OUT/torch_sdpa_d256.txt" | grep -E "torch d="
    echo "all: $(( $(date +%s) - t0 )) s"
fi
if [ "$MODE" = w2 ]; then
    t0=$(date +%s)
    ( J=8 build "$BASE" /tmp/bb cuda_attn ) & ( J=8 build "$NEW" /tmp/b test_cuda cuda_attn ) & wait
    [ -x /tmp/b/test_cuda ] && [ -x /tmp/bb/cuda_attn ] || { echo "build failed"; exit 1; }
    echo "build: $(( $(date +%s) - t0 )) s"
    timeout "${TC_TIMEOUT:-240}" /tmp/b/test_cuda > "$OUT/test_cuda.log" 2>&1; echo "test_cuda rc $?" >> "$OUT/test_cuda.log"
    grep -E "FAIL|checks|rc |tq-mse:2 *\| *tq-mse:2|gauss" "$OUT/test_cuda.log" | head -30
    echo "tests: $(( $(date +%s) - t0 )) s"
    mkdir -p /tmp/x
    for r in $(seq "${REPS:-2}"); do
        for v in base new; do
            b=/tmp/b; [ $v = base ] && b=/tmp/bb
            $b/cuda_attn --no-encode --policy tq-mse:2/2 --runs 50 2>&1 | grep -E "B=" | sed "s/^/$v /" >> "$OUT/ab.log"
        done
    done
    /tmp/b/cuda_attn --no-encode --policy tq-mse:4/4 --runs 50 2>&1 | grep -E "B=|copy" | sed "s/^/new /" >> "$OUT/ab.log"
    echo "bench: $(( $(date +%s) - t0 )) s"
    timeout 150 python3 bench/torch_sdpa.py --runs 30 > "$OUT/torch_sdpa.txt" 2>&1
    echo "sdpa: $(( $(date +%s) - t0 )) s"
    for v in new base; do
        b=/tmp/b; [ $v = base ] && b=/tmp/bb
        mkdir -p /tmp/x/$v-2 && timeout 90 bash bench/profile_cuda.sh $b /tmp/x/$v-2 tq-mse:2/2 > /tmp/x/$v-2/sum.txt 2>&1
    done
    mkdir -p /tmp/x/new-4 && timeout 90 bash bench/profile_cuda.sh /tmp/b /tmp/x/new-4 tq-mse:4/4 > /tmp/x/new-4/sum.txt 2>&1
    for d in new-2 base-2 new-4; do echo "== $d"; grep -E "attn_kernel|Duration|DRAM Throughput|Issue Slots Busy|Executed Ipc A|Registers Per|Achieved Occ|Eligible Warps|No Eligible|L1/TEX Hit|Memory Throughput" /tmp/x/$d/ncu.txt | head -16; done > "$OUT/ncu_summary.txt"
    cp /tmp/x/new-2/ncu.txt /tmp/x/ncu_new2.txt; tar -czf "$OUT/extra.tgz" -C /tmp/x . 2>/dev/null
    echo "all: $(( $(date +%s) - t0 )) s"
    grep -E "B=(1|16) .*ctx=(32768|131072)|B=4 .*ctx=131072" "$OUT/ab.log" | head -24
    grep -E "torch" "$OUT/torch_sdpa.txt" | tail -12
    cat "$OUT/ncu_summary.txt"
fi
if [ "$MODE" = probe ]; then
    t0=$(date +%s)
    build "$NEW" /tmp/b cuda_attn || exit 1
    echo "build: $(( $(date +%s) - t0 )) s"; ncu --version | tail -1
    profiles /tmp/b "" 2>&1 | tee "$OUT/ncu_summary.txt"
    echo "ncu: $(( $(date +%s) - t0 )) s"
    kdur /tmp/b > "$OUT/kdur.log" 2>&1
    echo "kdur: $(( $(date +%s) - t0 )) s"
    sweep /tmp/b
    echo "sweep: $(( $(date +%s) - t0 )) s"
    timeout 150 python3 bench/torch_sdpa.py --runs 30 > /tmp/x/torch_sdpa.txt 2>&1; grep -E "^torch" /tmp/x/torch_sdpa.txt
    echo "sdpa: $(( $(date +%s) - t0 )) s"
    for f in /tmp/b/CMakeFiles/kvq_cuda.dir/src/cuda/attn_k_tq2.cu.o /tmp/b/CMakeFiles/kvq_cuda.dir/src/cuda/attn_k_tq4.cu.o \
             /tmp/b/CMakeFiles/kvq_cuda.dir/src/cuda/attn_k_q8.cu.o; do cuobjdump -sass "$f" > /tmp/x/$(basename "$f").sass 2>&1; done
    tar -czf "$OUT/extra.tgz" -C /tmp/x . 2>/dev/null
    grep -E "B=  1 ctx=131072|B=  4 ctx=131072" "$OUT/sweep.log" | head -60
    cat "$OUT/ncu_summary.txt" | head -60
fi
if [ "$MODE" = sk ]; then
    t0=$(date +%s)
    ( J=8 build "$BASE" /tmp/bb cuda_attn ) & ( J=8 build "$NEW" /tmp/b test_cuda cuda_attn ) & wait
    [ -x /tmp/b/test_cuda ] && [ -x /tmp/bb/cuda_attn ] && [ -x /tmp/b/cuda_attn ] || { echo "build failed"; exit 1; }
    echo "build: $(( $(date +%s) - t0 )) s"
    test_and_ab "${REPS:-2}"
    echo "bench: $(( $(date +%s) - t0 )) s"
    timeout 150 python3 bench/torch_sdpa.py --runs 30 > "$OUT/torch_sdpa.txt" 2>&1
    echo "sdpa: $(( $(date +%s) - t0 )) s"
    export PROF_OUT=/tmp/x  # raw ncu text in extra.tgz (at most 8 files come back)
    { profiles /tmp/b ""; [ "${BASE_NCU:-0}" = 1 ] && profiles /tmp/bb _base; } > "$OUT/ncu_summary.txt" 2>&1
    kdur /tmp/b > "$OUT/kdur.log" 2>&1
    echo "ncu: $(( $(date +%s) - t0 )) s"
    [ "${SWEEP:-1}" = 1 ] && sweep /tmp/b
    echo "sweep: $(( $(date +%s) - t0 )) s"
    tar -czf "$OUT/extra.tgz" -C /tmp/x . 2>/dev/null
    grep -E "ctx=(32768|131072)" "$OUT/ab.log" | grep -E "B=  1|B=  4|B= 16" | head -40
    grep -E "^torch" "$OUT/torch_sdpa.txt" | tail -12
    head -40 "$OUT/ncu_summary.txt"
fi
if [ "$MODE" = table ]; then
    t0=$(date +%s)
    ( J=6 build "$BASE" /tmp/bb cuda_attn ) & ( J=10 build "$NEW" /tmp/b test_cuda cuda_attn kvq_shared kvq_engine_shared kvq_cuda_shared ) & wait
    [ -x /tmp/b/test_cuda ] && [ -x /tmp/bb/cuda_attn ] && [ -x /tmp/b/cuda_attn ] || { echo "build failed"; exit 1; }
    echo "build: $(( $(date +%s) - t0 )) s"
    test_and_ab "${REPS:-1}"
    for pol in tq-mse:4/2 tq-mse:3/3 rvq:2/2 tq-prod:3/tq-mse:2 f16; do
        /tmp/b/cuda_attn --no-encode --policy "$pol" --runs 30 2>&1 | grep -E "B=|copy" | sed "s/^/new /" >> "$OUT/rest.log"
    done
    echo "bench: $(( $(date +%s) - t0 )) s"
    timeout 150 python3 bench/torch_sdpa.py --runs 30 > "$OUT/torch_sdpa.txt" 2>&1
    echo "sdpa: $(( $(date +%s) - t0 )) s"
fi
if [ "$MODE" = prof ]; then
    t0=$(date +%s)
    [ -x /tmp/b/cuda_attn ] || build "$NEW" /tmp/b cuda_attn kvq_shared kvq_engine_shared kvq_cuda_shared || exit 1
    mkdir -p /tmp/x; export PROF_OUT=/tmp/x
    profiles /tmp/b "" > "$OUT/ncu_summary.txt" 2>&1
    kdur /tmp/b > "$OUT/kdur.log" 2>&1
    echo "ncu: $(( $(date +%s) - t0 )) s"
    [ "${SWEEP:-0}" = 1 ] && sweep /tmp/b && echo "sweep: $(( $(date +%s) - t0 )) s"
    LD_LIBRARY_PATH=/tmp/b KVQ_LIBRARY_DIR=/tmp/b PYTHONPATH=$NEW/python timeout 200 python3 -m pytest -q -x -p no:cacheprovider \
        tests/python/test_torch_cuda.py tests/python/test_torch_ops.py > "$OUT/pytest_torch.log" 2>&1
    echo "pytest rc $?" >> "$OUT/pytest_torch.log"; tail -3 "$OUT/pytest_torch.log"
    tar -czf "$OUT/extra.tgz" -C /tmp/x . 2>/dev/null
    echo "all: $(( $(date +%s) - t0 )) s"
    head -60 "$OUT/ncu_summary.txt"
fi
if [ "$MODE" = quick ]; then
    t0=$(date +%s)
    ( J=8 build "$BASE" /tmp/bb cuda_attn ) & ( J=8 build "$NEW" /tmp/b test_cuda cuda_attn ) & wait
    [ -x /tmp/b/test_cuda ] && [ -x /tmp/bb/cuda_attn ] || { echo "build failed"; exit 1; }
    echo "build: $(( $(date +%s) - t0 )) s"
    timeout 200 /tmp/b/test_cuda --quick > "$OUT/test_cuda.log" 2>&1; echo "test_cuda rc $?" >> "$OUT/test_cuda.log"
    grep -E "FAIL|checks|rc " "$OUT/test_cuda.log" | head -20
    echo "tests: $(( $(date +%s) - t0 )) s"
    ab_rounds "${REPS:-1}"
    echo "ab: $(( $(date +%s) - t0 )) s"
    mkdir -p /tmp/x
    if [ "${PROF:-1}" = 1 ]; then
        profiles /tmp/b "" > "$OUT/ncu_summary.txt" 2>&1
        mkdir -p /tmp/x/base2 && timeout 120 bash bench/profile_cuda.sh /tmp/bb /tmp/x/base2 tq-mse:2/2 > /dev/null 2>&1
        cp /tmp/x/base2/ncu.txt "$OUT/ncu_tq22base.txt"
    fi
    { echo "== new"; KDUR_SHAPES="1:32768 16:32768" kdur /tmp/b; echo "== base"; KDUR_SHAPES="1:32768 16:32768" kdur /tmp/bb; } > "$OUT/kdur.log" 2>&1
    echo "all: $(( $(date +%s) - t0 )) s"
    cat "$OUT/ab.log"
    [ "${PROF:-1}" = 1 ] && cat "$OUT/ncu_summary.txt" && grep -E "wavefronts|bank_conflicts|Duration" "$OUT/ncu_tq22base.txt"
    grep -E "FAIL|checks|rc " "$OUT/test_cuda.log" | tail -12
fi
if [ "$MODE" = final ]; then
    t0=$(date +%s)
    J=16 build "$NEW" /tmp/b test_cuda cuda_attn kvq_shared kvq_engine_shared kvq_cuda_shared || exit 1
    echo "build: $(( $(date +%s) - t0 )) s"
    ( timeout 200 /tmp/b/test_cuda --quick > "$OUT/test_cuda.log" 2>&1; echo "test_cuda rc $?" >> "$OUT/test_cuda.log"
      timeout 100 /tmp/b/test_cuda --sink > "$OUT/test_sink.log" 2>&1; echo "test_cuda --sink rc $?" >> "$OUT/test_sink.log" ) &
    tc=$!
    LD_LIBRARY_PATH=/tmp/b KVQ_LIBRARY_DIR=/tmp/b PYTHONPATH=$NEW/python timeout 200 python3 -m pytest -q -p no:cacheprovider \
        tests/python/test_torch_cuda.py tests/python/test_torch_ops.py > "$OUT/pytest_torch.log" 2>&1
    echo "pytest rc $?" >> "$OUT/pytest_torch.log"
    wait $tc
    echo "tests: $(( $(date +%s) - t0 )) s"
    for pol in tq-mse:4/4 tq-mse:2/2 tq-mse:4/2 tq-mse:3/3 rvq:2/2 tq-prod:3/tq-mse:2 q8 f16; do
        /tmp/b/cuda_attn --no-encode --policy "$pol" --runs 30 2>&1 | grep -E "B=|copy" >> "$OUT/table.log"
    done
    echo "bench: $(( $(date +%s) - t0 )) s"
    timeout 150 python3 bench/torch_sdpa.py --runs 30 > "$OUT/torch_sdpa.txt" 2>&1
    echo "all: $(( $(date +%s) - t0 )) s"
    grep -E "FAIL|checks|rc " "$OUT/test_cuda.log" "$OUT/test_sink.log" | tail -20
    tail -4 "$OUT/pytest_torch.log"
    grep -E "B= 16 ctx= 32768|B=  1 ctx=131072" "$OUT/table.log"
    grep -E "torch" "$OUT/torch_sdpa.txt" | tail -12
fi
if [ "$MODE" = full ]; then
    t0=$(date +%s)
    J=16 build "$NEW" /tmp/b test_cuda cuda_attn kvq_shared kvq_engine_shared kvq_cuda_shared || exit 1
    echo "build: $(( $(date +%s) - t0 )) s"
    ca() { timeout 90 /tmp/b/cuda_attn --no-encode --runs 10 "$@" 2>&1 | grep -E "B=|rror" >> "$OUT/tcq.log"; }
    for pol in tq-mse:4/4 tcq:3/tcq:3 tq-mse:4/tcq:3 tq-mse:5+chscale/tcq:3; do
        ca --policy "$pol" --shape 1 32768
        ca --policy "$pol" --shape 16 32768
    done
    for pol in tcq:2/tcq:2 tcq:4/tcq:4; do ca --policy "$pol" --shape 16 32768; done
    for pol in tq-mse:4/4,sink=1 tq-mse:5+chscale/tcq:3,sink=1; do
        ca --policy "$pol" --shape 1 32768
        ca --policy "$pol" --shape 16 32768
    done
    cat "$OUT/tcq.log"
    echo "bench: $(( $(date +%s) - t0 )) s"
    timeout $(( ${LIMIT:-585} - $(date +%s) + t0 )) /tmp/b/test_cuda > "$OUT/test_cuda_full.log" 2>&1; echo "test_cuda rc $?" >> "$OUT/test_cuda_full.log"
    echo "tests: $(( $(date +%s) - t0 )) s"
    grep -E "FAIL|checks|rc " "$OUT/test_cuda_full.log" | tail -20
fi
if [ "$MODE" = tq5 ]; then
    t0=$(date +%s)
    J=16 build "$NEW" /tmp/b test_cuda cuda_attn kvq_shared kvq_engine_shared kvq_cuda_shared || exit 1
    echo "build: $(( $(date +%s) - t0 )) s"
    timeout 240 /tmp/b/test_cuda --tq5 > "$OUT/test_tq5.log" 2>&1; echo "test_cuda --tq5 rc $?" >> "$OUT/test_tq5.log"
    grep -E "FAIL|checks|rc " "$OUT/test_tq5.log" | tail -8
    echo "tests: $(( $(date +%s) - t0 )) s"
    for sh in "1 32768" "16 32768" "1 131072"; do
        for pol in tq-mse:4/4 tq-mse:5/tq-mse:4 tq-mse:5+chscale/tq-mse:4 tq-mse:4/4; do
            timeout 60 /tmp/b/cuda_attn --no-encode --policy "$pol" --shape $sh --runs 30 2>&1 | grep -E "B=|rror" >> "$OUT/tq5.log"
        done
    done
    timeout 60 /tmp/b/cuda_attn --no-encode --policy tq-mse:5/tq-mse:4 --shape 16 32768 --runs 10 --generic 2>&1 | grep -E "B=|rror" >> "$OUT/tq5.log"
    cat "$OUT/tq5.log"
    echo "bench: $(( $(date +%s) - t0 )) s"
    for f in tq5 tq4; do
        cuobjdump -sass /tmp/b/CMakeFiles/kvq_cuda_obj.dir/src/cuda/attn_k_$f.cu.o 2>/dev/null | python3 -c "
import re, sys
cur = None; n = {}
for l in sys.stdin:
    m = re.match(r'\s*Function : (\S+)', l)
    if m: cur = m.group(1); n[cur] = 0; continue
    if cur and re.match(r'\s*/\*[0-9a-f]{4,}\*/\s+[A-Z@]', l): n[cur] += 1
for k, v in n.items():
    if 'VTQILi4ELi128' in k and 'attn_kernel' in k: print('$f K, tq-mse:4 V: attn_kernel SASS instructions', v, k[:80])
"
    done | tee "$OUT/sass.log"
    LD_LIBRARY_PATH=/tmp/b KVQ_LIBRARY_DIR=/tmp/b PYTHONPATH=$NEW/python timeout 200 python3 -m pytest -q -p no:cacheprovider \
        tests/python/test_torch_cuda.py tests/python/test_torch_ops.py > "$OUT/pytest_torch.log" 2>&1
    echo "pytest rc $?" >> "$OUT/pytest_torch.log"
    tail -4 "$OUT/pytest_torch.log"
    echo "all: $(( $(date +%s) - t0 )) s"
fi
if [ "$MODE" = tcq ]; then
    t0=$(date +%s)
    J=16 build "$NEW" /tmp/b test_cuda cuda_attn || exit 1
    echo "build: $(( $(date +%s) - t0 )) s"
    timeout 400 /tmp/b/test_cuda --tcq ${TCQ_QUICK---quick} > "$OUT/test_tcq.log" 2>&1; echo "test_cuda --tcq rc $?" >> "$OUT/test_tcq.log"
    echo "tests: $(( $(date +%s) - t0 )) s"
    for pol in tcq:3/tcq:3 tcq:2/tcq:2 tcq:4/tcq:4 tq-mse:4/tcq:3 q8/tcq:3 tq-mse:5+chscale/tcq:3,sink=1 tq-mse:4/4; do
        /tmp/b/cuda_attn --no-encode --policy "$pol" --runs 30 2>&1 | grep -E "B=|copy" >> "$OUT/tcq.log"
    done
    for pol in tcq:3/tcq:3 tq-mse:4/tcq:3; do
        /tmp/b/cuda_attn --no-encode --generic --policy "$pol" --shape 16 32768 --runs 10 2>&1 | grep -E "B=" >> "$OUT/tcq.log"
    done
    echo "all: $(( $(date +%s) - t0 )) s"
    grep -E "FAIL|checks|rc " "$OUT/test_tcq.log" | tail -20
    grep -E "B= 16 ctx= 32768|B=  1 ctx= 32768" "$OUT/tcq.log"
fi
if [ "$MODE" = s14 ]; then
    t0=$(date +%s)
    J=16 build "$NEW" /tmp/b test_cuda cuda_attn kvq_shared kvq_engine_shared kvq_cuda_shared || exit 1
    echo "build: $(( $(date +%s) - t0 )) s"
    ca() { timeout 60 /tmp/b/cuda_attn --no-encode --runs 20 "$@" 2>&1 | grep -E "B=|rror" >> "$OUT/s14.log"; }
    for sh in "1 32768" "16 32768" "1 131072"; do
        for pol in tq-mse:4/4 tq-mse:4/4,sink=1 tq-mse:5+chscale/tcq:3,sink=1 tcq:3/tcq:3 tq-mse:4/tcq:3 tq-mse:5/tq-mse:4; do
            ca --policy "$pol" --shape $sh
        done
    done
    for pol in tcq:2/tcq:2 tcq:4/tcq:4 q8/tcq:3; do ca --policy "$pol" --shape 16 32768; done
    cat "$OUT/s14.log"
    echo "bench: $(( $(date +%s) - t0 )) s"
    left=$(( ${LIMIT:-585} - $(date +%s) + t0 ))
    ( timeout $left /tmp/b/test_cuda --quick > "$OUT/test_cuda.log" 2>&1; echo "test_cuda rc $?" >> "$OUT/test_cuda.log" ) &
    tc=$!
    LD_LIBRARY_PATH=/tmp/b KVQ_LIBRARY_DIR=/tmp/b PYTHONPATH=$NEW/python timeout $(( left - 5 )) python3 -m pytest -q -p no:cacheprovider \
        tests/python/test_torch_cuda.py tests/python/test_torch_ops.py > "$OUT/pytest_torch.log" 2>&1
    echo "pytest rc $?" >> "$OUT/pytest_torch.log"
    wait $tc
    echo "tests: $(( $(date +%s) - t0 )) s"
    grep -E "FAIL|checks|rc " "$OUT/test_cuda.log" | tail -20
    tail -3 "$OUT/pytest_torch.log"
fi
if [ "$MODE" = s15 ]; then
    t0=$(date +%s)
    ( J=8 build "$BASE" /tmp/bb cuda_attn ) & ( J=8 build "$NEW" /tmp/b test_cuda cuda_attn ) & wait
    [ -x /tmp/b/test_cuda ] && [ -x /tmp/b/cuda_attn ] && [ -x /tmp/bb/cuda_attn ] || { echo "build failed"; exit 1; }
    echo "build: $(( $(date +%s) - t0 )) s"
    for r in $(seq "${REPS:-2}"); do
        for pol in ${POLS_AB:-tq-mse:2/2 tq-mse:4/4}; do
            for v in base new; do
                b=/tmp/b; [ $v = base ] && b=/tmp/bb
                timeout 60 $b/cuda_attn --no-encode --policy "$pol" --runs 30 2>&1 | grep -E "B=|rror" | sed "s/^/$v /" >> "$OUT/ab.log"
            done
        done
    done
    for pol in ${POLS_NEW:-tq-mse:4/2 q8}; do
        timeout 60 /tmp/b/cuda_attn --no-encode --policy "$pol" --runs 30 2>&1 | grep -E "B=|rror" | sed "s/^/new /" >> "$OUT/ab.log"
    done
    timeout 120 python3 bench/torch_sdpa.py --runs 30 > "$OUT/torch_sdpa.txt" 2>&1
    echo "bench: $(( $(date +%s) - t0 )) s"
    PROF_OUT=$OUT
    for pol in ${POLS_PROF:-tq-mse:2/2 tq-mse:4/4}; do
        n=$(echo "$pol" | tr -d ':/-' | sed 's/tqmse/tq/')
        mkdir -p /tmp/x/$n && timeout 90 bash bench/profile_cuda.sh /tmp/b /tmp/x/$n "$pol" > /tmp/x/$n/sum.txt 2>&1
        cp /tmp/x/$n/ncu.txt "$OUT/ncu_$n.txt"
        echo "== $n"; grep -E "Duration|DRAM Throughput|Issue Slots Busy|No Eligible|Registers Per|inst_executed|wavefronts|bank_conflicts" "$OUT/ncu_$n.txt" | head -12
    done
    echo "profiles: $(( $(date +%s) - t0 )) s"
    left=$(( ${LIMIT:-560} - $(date +%s) + t0 ))
    timeout $left /tmp/b/test_cuda --quick > "$OUT/test_cuda.log" 2>&1; echo "test_cuda rc $?" >> "$OUT/test_cuda.log"
    echo "tests: $(( $(date +%s) - t0 )) s"
    grep -E "FAIL|checks|rc " "$OUT/test_cuda.log" | tail -20
    grep -E "B= 16 ctx= 32768|B=  1 ctx=131072|B=  1 ctx= 32768" "$OUT/ab.log"
    grep -E "torch" "$OUT/torch_sdpa.txt" | tail -12
fi
if [ "$MODE" = py ]; then
    t0=$(date +%s)
    J=16 build "$NEW" /tmp/b kvq_shared kvq_engine_shared kvq_cuda_shared || exit 1
    echo "build: $(( $(date +%s) - t0 )) s"
    LD_LIBRARY_PATH=/tmp/b KVQ_LIBRARY_DIR=/tmp/b PYTHONPATH=$NEW/python timeout ${LIMIT:-300} python3 -m pytest -q -p no:cacheprovider \
        tests/python/test_torch_cuda.py tests/python/test_torch_ops.py > "$OUT/pytest_torch.log" 2>&1
    echo "pytest rc $?" >> "$OUT/pytest_torch.log"
    tail -4 "$OUT/pytest_torch.log"
    echo "all: $(( $(date +%s) - t0 )) s"
fi
