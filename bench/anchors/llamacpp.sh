#!/usr/bin/env bash
# Anchors for issue 13: upstream llama.cpp (and TheTom's turboquant fork)
# measured beside kvq on the same GGUF, the same text and the same windows.
#
#   bash bench/anchors/llamacpp.sh build                 # get + build llama.cpp (idempotent)
#   bash bench/anchors/llamacpp.sh llama  smollm2|gemma3 # llama.cpp KLD rows
#   bash bench/anchors/llamacpp.sh base   smollm2|gemma3 # only the f16 base (logits file + log)
#   bash bench/anchors/llamacpp.sh turbo  smollm2|gemma3 # TheTom's turbo rows (needs TURBO_PPL)
#   bash bench/anchors/llamacpp.sh kvq    smollm2|gemma3 # kvq KLD rows (POLICIES)
#   bash bench/anchors/llamacpp.sh speed  smollm2|gemma3 # llama-bench beside kvq bench
#   bash bench/anchors/llamacpp.sh table  smollm2|gemma3 # the table (bench/anchors/table.py)
#   bash bench/anchors/llamacpp.sh all    smollm2|gemma3 # llama, turbo, kvq, table
#
# Environment (defaults in brackets):
#   OUT        where raw outputs go      [bench/results/anchors-2026-12-02]
#   CHUNKS     windows of CTX tokens     [2, as the matrix of docs/RESULTS.md]
#   CTX        window                    [2048]
#   THREADS    threads, both engines     [2]
#   POLICIES   kvq policies, space separated; on gemma3 ",sliding=1" is
#              appended to each one      [the list below]
#   KVQ        kvq binary                [build-anchors/kvq]
#   TURBO_PPL  llama-perplexity of TheTom's llama-cpp-turboquant, built by hand
#              outside the repo; rows skipped when unset or absent
#   TURBO_BENCH llama-bench of the same build (speed rows, optional)
#   LLAMA_ARGS extra llama-perplexity arguments of every KLD row and base [none];
#              -nr (--no-repack) on a CPU with AMX: 0c1e570's AMX buffer type
#              segfaults at the warm-up run there (ggml_backend_amx_mul_mat,
#              2026-12-02 box), -nr turns the extra buffer types off
#
# What was checked in the vendored source (llama.cpp 0c1e570, in
# llama-cpp-python 0.3.36):
# - Attention rotation (src/llama-kv-cache.cpp, llama_kv_cache ctor): on by
#   default for every quantized K (V) cache type whose head dim % 64 == 0
#   (both models: 64 and 256); switched OFF by the env var
#   LLAMA_ATTN_ROT_DISABLE=1. There is no LLAMA_ATTN_ROT_K/V_OVERRIDE in this
#   version. The rotation is a fixed Hadamard matrix held in host memory: it
#   stores nothing per token, so q8_0 stays 8.5 and q4_0 4.5 bits per value.
# - See table.py and docs/RESULTS.md for the scored positions and BOS.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
AN="$ROOT/.anchors"
LCPP_VERSION=0.3.36
LCPP_SRC="$AN/llama.cpp"
LCPP_BUILD="$AN/build"
PPL="$LCPP_BUILD/bin/llama-perplexity"
LBENCH="$LCPP_BUILD/bin/llama-bench"
LQUANT="$LCPP_BUILD/bin/llama-quantize"   # built too: used read-only by the weight-quantization work
OUT=${OUT:-bench/results/anchors-2026-12-02}
CHUNKS=${CHUNKS:-2}
CTX=${CTX:-2048}
THREADS=${THREADS:-2}
LLAMA_ARGS=${LLAMA_ARGS:-}
KVQ=${KVQ:-build-anchors/kvq}
TEXT=corpora/prose-heldout.txt
NICE="nice -n 10"
DEFAULT_POLICIES="q8 q4 tq-mse:4 tq-mse:4+chscale/tq-mse:4 tq-mse:3+chscale/tq-mse:3 tq-mse:2 tq-mse:4+chscale/tq-mse:2"
POLICIES=${POLICIES:-$DEFAULT_POLICIES}
# cmake flags of the llama.cpp build (CPU only, static, the two tools only)
LCPP_CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF
  -DGGML_METAL=OFF -DGGML_BLAS=OFF -DGGML_OPENMP=ON -DBUILD_SHARED_LIBS=OFF
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF)

model_file() {
  case "$1" in
    smollm2) echo models/SmolLM2-135M-Instruct.Q4_1.gguf ;;
    gemma3)  echo models/gemma-3-270m-q4_k_m.gguf ;;
    *) echo "unknown model '$1' (smollm2|gemma3)" >&2; return 1 ;;
  esac
}

log() { echo "[anchors $(date -u +%H:%M:%S)] $*" >&2; }

# ---------------------------------------------------------------- build
do_build() {
  mkdir -p "$AN/dl"
  if [ ! -f "$LCPP_SRC/CMakeLists.txt" ]; then
    local sdist="$AN/dl/llama_cpp_python-$LCPP_VERSION.tar.gz"
    if [ ! -f "$sdist" ]; then
      log "pip download llama-cpp-python==$LCPP_VERSION (sdist)"
      pip download --no-binary :all: --no-deps "llama-cpp-python==$LCPP_VERSION" -d "$AN/dl"
    fi
    log "unpacking vendor/llama.cpp"
    rm -rf "$AN/x"; mkdir -p "$AN/x"
    tar xzf "$sdist" -C "$AN/x" "llama_cpp_python-$LCPP_VERSION/vendor/llama.cpp" \
      "llama_cpp_python-$LCPP_VERSION/.git/modules/vendor/llama.cpp/HEAD"
    mv "$AN/x/llama_cpp_python-$LCPP_VERSION/vendor/llama.cpp" "$LCPP_SRC"
    cp "$AN/x/llama_cpp_python-$LCPP_VERSION/.git/modules/vendor/llama.cpp/HEAD" "$AN/llama.cpp.commit"
    rm -rf "$AN/x" "$LCPP_SRC/.git"   # .git: a gitlink into the sdist's absent .git/modules
  fi
  if [ ! -x "$PPL" ] || [ ! -x "$LBENCH" ] || [ ! -x "$LQUANT" ]; then
    log "building llama-perplexity, llama-bench, llama-quantize: cmake ${LCPP_CMAKE_FLAGS[*]}"
    $NICE cmake -S "$LCPP_SRC" -B "$LCPP_BUILD" "${LCPP_CMAKE_FLAGS[@]}" > "$AN/cmake.log"
    $NICE cmake --build "$LCPP_BUILD" -j2 --target llama-perplexity llama-bench llama-quantize > "$AN/build.log"
  fi
  log "llama.cpp $(cat "$AN/llama.cpp.commit" 2>/dev/null || echo '?') built: $PPL"
}

# ---------------------------------------------------------------- helpers
PY="env PYTHONPATH=$ROOT/python KVQ_LIBRARY_DIR=$ROOT/$(dirname "$KVQ") python3 $ROOT/bench/anchors/table.py"

kvq_built() {
  if [ ! -x "$KVQ" ]; then
    log "building kvq: cmake -B $(dirname "$KVQ") -DCMAKE_BUILD_TYPE=Release -DKVQ_CUDA=OFF"
    $NICE cmake -B "$(dirname "$KVQ")" -DCMAKE_BUILD_TYPE=Release -DKVQ_CUDA=OFF -DKVQ_BUILD_TESTS=OFF > /dev/null
    # the tool and the two shared libraries of the Python package (table.py's tokenizer), no tests
    $NICE cmake --build "$(dirname "$KVQ")" -j2 --target kvq kvq_shared kvq_engine_shared > /dev/null
  fi
}

# llama_text MODEL -> path of the text llama-perplexity reads (same windows as kvq kld)
llama_text() {
  local t="$AN/text-$1.txt"
  [ -f "$t" ] || $PY llama-text "$(model_file "$1")" "$TEXT" "$t" >&2
  echo "$t"
}

has_kld() { [ -f "$1" ] && grep -q "Mean    KLD" "$1"; }

# kld_rows ENGINE PPL_BINARY COMMIT MODEL ROWS...   (a row: CTK/CTV/ROT, ROT on|off|-)
kld_rows() {
  local engine=$1 ppl=$2 commit=$3 model=$4; shift 4
  local gguf; gguf=$(model_file "$model")
  local dir="$OUT/$model"; mkdir -p "$dir"
  local tag; [ "$engine" = llama.cpp ] && tag=llama || tag=llama-$engine
  local base="$AN/base-$engine-$model-c$CTX-n$CHUNKS.kld"
  local text; text=$(llama_text "$model")
  local common=(-m "$gguf" -c "$CTX" -t "$THREADS" -fa on -lv 4 $LLAMA_ARGS)   # -lv 4: the KV cache sizes in the log
  if [ ! -s "$base" ] || ! grep -q "Final estimate" "$dir/$tag-f16-base.log" 2>/dev/null; then
    log "$engine $model: f16 base (--kl-divergence-base), $CHUNKS chunks of $CTX"
    { echo "# engine=$engine"; echo "# commit=$commit"; echo "# ctk=f16"; echo "# ctv=f16"
      echo "# command=$ppl ${common[*]} -f $text --chunks $CHUNKS --kl-divergence-base $base"
      $NICE "$ppl" "${common[@]}" -f "$text" --chunks "$CHUNKS" --kl-divergence-base "$base" 2>&1; } \
      > "$dir/$tag-f16-base.log"
    $PY windows "$gguf" "$TEXT" "$base" "$CTX" | tee "$dir/windows-$engine.txt" >&2 || \
      log "WARNING: $engine's windows differ from kvq kld's ($dir/windows-$engine.txt)"
  fi
  local row ctk ctv rot envs log
  for row in "$@"; do
    IFS=/ read -r ctk ctv rot <<< "$row"
    log="$dir/$tag-$ctk-$ctv-rot$rot.log"
    if has_kld "$log" && [ -z "${FORCE:-}" ]; then log "have $log"; continue; fi
    case "$rot" in
      off) envs=(LLAMA_ATTN_ROT_DISABLE=1) ;;
      uniform) envs=(TURBO_LAYER_ADAPTIVE=0 TURBO_AUTO_ASYMMETRIC=0) ;;
      *) envs=() ;;
    esac
    log "$engine $model: -ctk $ctk -ctv $ctv, rotation $rot"
    { echo "# engine=$engine"; echo "# commit=$commit"; echo "# ctk=$ctk"; echo "# ctv=$ctv"; echo "# rot=$rot"
      echo "# command=${envs[*]} $ppl ${common[*]} -ctk $ctk -ctv $ctv --kl-divergence-base $base --kl-divergence"
      env "${envs[@]}" $NICE "$ppl" "${common[@]}" -ctk "$ctk" -ctv "$ctv" \
        --kl-divergence-base "$base" --kl-divergence 2>&1; } > "$log"
    has_kld "$log" || log "WARNING: no KLD in $log"
  done
}

# ---------------------------------------------------------------- llama.cpp rows
LLAMA_ROWS=${LLAMA_ROWS:-"q8_0/q8_0/on q8_0/q8_0/off q4_0/q4_0/on q4_0/q4_0/off q8_0/q4_0/on"}
do_llama() {
  do_build; kvq_built
  kld_rows llama.cpp "$PPL" "$(cat "$AN/llama.cpp.commit")" "$1" $LLAMA_ROWS
}

# ---------------------------------------------------------------- TheTom's fork
# Not on PyPI: built by hand outside the repo (see docs/RESULTS.md for the
# commit and the commands); TURBO_PPL names its llama-perplexity. The turbo
# types carry their own rotation (a 128-point WHT); in the fork the upstream
# Hadamard rotation is OFF by default (LLAMA_ATTN_ROT_K/V_OVERRIDE=1 turn it
# on). Two defaults of the fork change the types behind the user's back, so
# the rows set them to "uniform" (every layer the type asked for):
#   TURBO_LAYER_ADAPTIVE: unset + turbo2 V => mode 7, V of the first 2 and
#     last 2 layers q8_0 ("Boundary V"); =0 keeps every layer turbo2;
#   TURBO_AUTO_ASYMMETRIC: K upgraded to q8_0 when n_head/n_head_kv >= 6
#     (3 on SmolLM2, 4 on Gemma 3: not triggered; =0 anyway).
# A row whose third field is "default" runs with the fork's defaults.
# Head dim 64 (SmolLM2) is zero-padded to 128 in the turbo cache: the bits
# column divides the cache's real bytes by the real (unpadded) values.
TURBO_ROWS=${TURBO_ROWS:-"turbo4/turbo4/uniform turbo3/turbo3/uniform turbo2/turbo2/uniform turbo2/turbo2/default"}
do_turbo() {
  if [ -z "${TURBO_PPL:-}" ] || [ ! -x "${TURBO_PPL:-}" ]; then
    log "turboquant rows skipped: TURBO_PPL (llama-perplexity of TheTom/llama-cpp-turboquant) not set or not executable"
    return 0
  fi
  kvq_built
  local commit; commit=$(git -C "$(dirname "$TURBO_PPL")/../.." rev-parse HEAD 2>/dev/null || echo "${TURBO_COMMIT:-?}")
  kld_rows turboquant "$TURBO_PPL" "${TURBO_COMMIT:-$commit}" "$1" $TURBO_ROWS
}

# ---------------------------------------------------------------- kvq rows
do_kvq() {
  kvq_built
  local model=$1 dir="$OUT/$1" pols=() p
  mkdir -p "$dir"
  for p in $POLICIES; do
    if [ "$model" = gemma3 ]; then pols+=("$p,sliding=1"); else pols+=("$p"); fi
  done
  log "kvq $model: ${pols[*]}"
  { echo "# command: $KVQ kld -m $(model_file "$model") -f $TEXT --ctx $CTX --chunks $CHUNKS --threads $THREADS --no-layers --policies \"${pols[*]}\" --json"
    $NICE "$KVQ" kld -m "$(model_file "$model")" -f "$TEXT" --ctx "$CTX" --chunks "$CHUNKS" --threads "$THREADS" \
      --no-layers --policies "${pols[*]}" --json 2>> "$dir/kvq-kld.err"; } >> "$dir/kvq-kld.jsonl"
}

# ---------------------------------------------------------------- speed
# llama-bench per cache type and kvq bench per policy, SPEED_ROUNDS rounds,
# the two engines' order swapped every round (the box is shared: ratios only).
SPEED_TYPES=${SPEED_TYPES:-"f16 q8_0 q4_0"}
SPEED_ROUNDS=${SPEED_ROUNDS:-2}
SPEED_REPS=${SPEED_REPS:-3}
SPEED_POLICIES=${SPEED_POLICIES:-$POLICIES}
do_speed() {
  do_build; kvq_built
  local model=$1 dir="$OUT/$1" gguf r t pols=() p
  gguf=$(model_file "$model"); mkdir -p "$dir"
  for p in $SPEED_POLICIES; do
    if [ "$model" = gemma3 ]; then pols+=("$p,sliding=1"); else pols+=("$p"); fi
  done
  local lb=(-m "$gguf" -fa 1 -d 4096,8000 -n 32 -t "$THREADS" -r "$SPEED_REPS" -o jsonl)
  local kb=(bench -m "$gguf" --ctx 4096,8192 --threads "$THREADS" --policies "${pols[*]}" --json)
  echo "# llama-bench: $LBENCH ${lb[*]} -ctk T -ctv T  (T in $SPEED_TYPES; commit $(cat "$AN/llama.cpp.commit"))" > "$dir/speed-commands.txt"
  echo "# kvq: $KVQ ${kb[*]}" >> "$dir/speed-commands.txt"
  speed_llama() {
    for t in $SPEED_TYPES; do
      log "speed round $1: llama-bench $model $t"
      $NICE "$LBENCH" "${lb[@]}" -ctk "$t" -ctv "$t" >> "$dir/speed-llama-r$1.jsonl" 2>> "$dir/speed-llama.err"
    done
  }
  speed_kvq() {
    log "speed round $1: kvq bench $model ${pols[*]}"
    $NICE "$KVQ" "${kb[@]}" >> "$dir/speed-kvq-r$1.jsonl" 2>> "$dir/speed-kvq.err"
  }
  for r in $(seq 1 "$SPEED_ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then speed_llama "$r"; speed_kvq "$r"; else speed_kvq "$r"; speed_llama "$r"; fi
  done
  $PY speed "$dir" | tee "$dir/speed.md"
}

# ---------------------------------------------------------------- table
do_table() {
  local dir="$OUT/$1"
  $PY kld "$dir" | tee "$dir/table.md"
}

case "${1:-}" in
  build) do_build ;;
  llama) do_llama "${2:?model}" ;;
  base)  do_build; kvq_built; kld_rows llama.cpp "$PPL" "$(cat "$AN/llama.cpp.commit")" "${2:?model}" ;;
  turbo) do_turbo "${2:?model}" ;;
  kvq)   do_kvq "${2:?model}" ;;
  speed) do_speed "${2:?model}" ;;
  table) do_table "${2:?model}" ;;
  all)   do_llama "${2:?model}"; do_turbo "$2"; do_kvq "$2"; do_table "$2" ;;
  *) echo "usage: $0 build|llama|base|turbo|kvq|speed|table|all [smollm2|gemma3]" >&2; exit 2 ;;
esac
