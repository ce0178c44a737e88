#!/usr/bin/env bash
# Anchors for issue 16: GGUF's own weight types, applied by upstream llama.cpp's
# llama-quantize to the same source weights, measured by llama.cpp's own engine
# (llama-perplexity --kl-divergence against the source model).
#
#   bash bench/anchors/weights.sh build              # llama.cpp (bench/anchors/llamacpp.sh build)
#   bash bench/anchors/weights.sh quantize [MODEL]   # .anchors/weights/MODEL-TYPE.gguf (idempotent)
#   bash bench/anchors/weights.sh sizes              # size / bits-per-weight / type table
#   bash bench/anchors/weights.sh kld MODEL          # llama-perplexity KLD of every TYPE vs the source
#   bash bench/anchors/weights.sh table [MODEL]      # the tables (bench/anchors/weights.py)
#   bash bench/anchors/weights.sh all [MODEL]        # build, quantize, kld, table
#   MODEL: smollm2 | gemma3 (both when left out, where optional)
#
# Environment (defaults in brackets):
#   TYPES    llama-quantize types  [Q4_0 Q4_K Q3_K IQ4_NL Q5_K Q6_K]
#   WOUT     raw logs and tables   [bench/results/weights-anchors-2026-12-02]
#   CTX, CHUNKS, THREADS           [2048, 2, 2: as bench/anchors/llamacpp.sh]
#   FORCE    set: redo KLD rows that already have a result
#   LLAMA_ARGS extra llama-perplexity arguments  [-nr where /proc/cpuinfo has amx_int8]
#
# How the files are made (checked in the vendored source, llama.cpp 0c1e570:
# tools/quantize/quantize.cpp, src/llama-quant.cpp):
#   llama-quantize --allow-requantize --pure --token-embedding-type q8_0 SRC DST TYPE 2
# - the sources are already quantized (SmolLM2 Q4_1 = 5.0 bits per weight over the
#   block matrices, Gemma 3 Q4_K_M a mixture of Q5_0/Q4_K/Q6_K/Q8_0 = 5.43):
#   --allow-requantize dequantizes them to f32 and quantizes that again;
# - --pure turns off the k-quant mixture (llama_tensor_get_type_impl): every 2-D
#   blk.* tensor gets TYPE ... except where its row length (ne[0]) is not a multiple
#   of TYPE's block: tensor_type_fallback still runs under --pure. K-types have a
#   256-value super-block; n_embd is 576 (SmolLM2) and 640 (Gemma 3), so every
#   matrix that reads the residual stream (attn_q/k/v, ffn_gate/up, and on SmolLM2
#   attn_output) falls back: Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1,
#   Q6_K -> Q8_0. Only ffn_down (and Gemma's attn_output, 1024 wide) hold the
#   K-type. The sizes table counts what the files really hold;
# - both models tie the output matrix to token_embd (no output.weight). With
#   tied embeddings llama-quantize treats token_embd as the output tensor, but
#   --token-embedding-type is looked at first (llama_tensor_get_type), so
#   token_embd stays Q8_0, the source's type, and is copied unchanged (same type:
#   no requantization). Only the block matrices differ from the source.
# - 1-D tensors (norms) are never quantized: f32 as in the source.
# KLD rows: the source model with an f16 cache is the reference (its logits file is
# the one of `llamacpp.sh base`: the same text, windows, ctx and chunks as the cache
# rows of bench/results/anchors-2026-12-02); each TYPE runs with an f16 cache too,
# so the rows differ in the weights alone.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
AN="$ROOT/.anchors"
WDIR="$AN/weights"
LQUANT="$AN/build/bin/llama-quantize"
PPL="$AN/build/bin/llama-perplexity"
WOUT=${WOUT:-bench/results/weights-anchors-2026-12-02}
TYPES=${TYPES:-"Q4_0 Q4_K Q3_K IQ4_NL Q5_K Q6_K"}
CTX=${CTX:-2048}
CHUNKS=${CHUNKS:-2}
THREADS=${THREADS:-2}
NICE="nice -n 10"
# -nr (--no-repack) where the CPU has AMX: llama.cpp 0c1e570's AMX buffer type segfaults
# in ggml_backend_amx_mul_mat at the warm-up run on the 2026-12-02 box (amx_int8); the
# base and every row use the same flags
if [ -z "${LLAMA_ARGS+x}" ]; then
  if grep -qw amx_int8 /proc/cpuinfo 2>/dev/null; then LLAMA_ARGS="-nr"; else LLAMA_ARGS=""; fi
fi
export LLAMA_ARGS
MODELS="smollm2 gemma3"

model_file() {
  case "$1" in
    smollm2) echo models/SmolLM2-135M-Instruct.Q4_1.gguf ;;
    gemma3)  echo models/gemma-3-270m-q4_k_m.gguf ;;
    *) echo "unknown model '$1' (smollm2|gemma3)" >&2; return 1 ;;
  esac
}

log() { echo "[weights $(date -u +%H:%M:%S)] $*" >&2; }

do_build() { bash bench/anchors/llamacpp.sh build; }

# ---------------------------------------------------------------- quantize
do_quantize() {
  local model=$1 src t dst qlog
  src=$(model_file "$model")
  mkdir -p "$WDIR" "$WOUT/$model"
  for t in $TYPES; do
    dst="$WDIR/$model-$t.gguf"
    qlog="$WOUT/$model/quantize-$t.log"
    if [ -s "$dst" ] && grep -q "quant size" "$qlog" 2>/dev/null; then log "have $dst"; continue; fi
    log "llama-quantize $model -> $t"
    { echo "# command=$LQUANT --allow-requantize --pure --token-embedding-type q8_0 $src $dst $t $THREADS"
      $NICE "$LQUANT" --allow-requantize --pure --token-embedding-type q8_0 "$src" "$dst" "$t" "$THREADS" 2>&1; } \
      > "$qlog.tmp" || { log "FAILED: see $qlog"; mv "$qlog.tmp" "$qlog"; return 1; }
    # the per-tensor lines carry \r progress; keep the log readable
    tr '\r' '\n' < "$qlog.tmp" > "$qlog"; rm -f "$qlog.tmp"
  done
}

# ---------------------------------------------------------------- kld
do_kld() {
  local model=$1 t gguf qlog dir="$WOUT/$1"
  local base="$AN/base-llama.cpp-$model-c$CTX-n$CHUNKS.kld"   # llamacpp.sh's name for it
  mkdir -p "$dir"
  OUT="$WOUT" CTX="$CTX" CHUNKS="$CHUNKS" THREADS="$THREADS" bash bench/anchors/llamacpp.sh base "$model"
  [ -s "$base" ] || { log "no base logits $base"; return 1; }
  local common=(-c "$CTX" -t "$THREADS" -fa on -lv 4 $LLAMA_ARGS)
  for t in $TYPES; do
    gguf="$WDIR/$model-$t.gguf"
    qlog="$dir/llama-w-$t.log"
    [ -s "$gguf" ] || { log "missing $gguf (run quantize)"; continue; }
    if grep -q "Mean    KLD" "$qlog" 2>/dev/null && [ -z "${FORCE:-}" ]; then log "have $qlog"; continue; fi
    log "llama-perplexity $model weights $t (f16 cache) vs the source"
    { echo "# engine=llama.cpp"; echo "# commit=$(cat "$AN/llama.cpp.commit")"; echo "# weights=$t"
      echo "# model=$gguf"; echo "# ctk=f16"; echo "# ctv=f16"
      echo "# command=$PPL -m $gguf ${common[*]} --kl-divergence-base $base --kl-divergence"
      $NICE "$PPL" -m "$gguf" "${common[@]}" --kl-divergence-base "$base" --kl-divergence 2>&1; } > "$qlog"
    grep -q "Mean    KLD" "$qlog" || log "WARNING: no KLD in $qlog"
  done
}

# ---------------------------------------------------------------- tables
ggufs() {  # the source, then its re-quantized files, in TYPES order
  local model=$1 t
  echo "$(model_file "$model")"
  for t in $TYPES; do [ -s "$WDIR/$model-$t.gguf" ] && echo "$WDIR/$model-$t.gguf"; done
}
do_sizes() {
  local m files=()
  for m in $MODELS; do mapfile -t -O "${#files[@]}" files < <(ggufs "$m"); done
  mkdir -p "$WOUT"
  python3 bench/anchors/weights.py sizes "${files[@]}" | tee "$WOUT/sizes.md"
}
do_table() {
  local model=$1 files
  mapfile -t files < <(ggufs "$model")
  python3 bench/anchors/weights.py kld "$WOUT/$model" "${files[@]}" | tee "$WOUT/$model/table.md"
}

each() { local f=$1 m; shift; for m in ${1:-$MODELS}; do "$f" "$m"; done; }

case "${1:-}" in
  build)    do_build ;;
  quantize) do_build; each do_quantize "${2:-}" ;;
  sizes)    do_sizes ;;
  kld)      do_kld "${2:?model}" ;;
  table)    each do_table "${2:-}" ;;
  all)      do_build; each do_quantize "${2:-}"; do_sizes; each do_kld "${2:-}"; each do_table "${2:-}" ;;
  *) echo "usage: $0 build|quantize|sizes|kld|table|all [smollm2|gemma3]" >&2; exit 2 ;;
esac
