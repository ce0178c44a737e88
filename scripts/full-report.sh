#!/usr/bin/env bash
# Runs the evaluation matrix of issue 5 on one or more models and writes
# docs/results/<model>/: one JSON-lines file per tool, the PNG sheets and
# summary.md of scripts/report.py, commands.txt (every command run, with the
# git revision and the machine) and logs/ (each tool's stderr).
#
# usage: bash scripts/full-report.sh [--quick | --standard | --full] [options] MODEL...
#   MODEL             a .gguf path, or smollm2 | gemma3 | all (files in models/)
#   --quick           few chunks, short contexts, a subset of policies for the
#                     slow tools (default; ~15-30 min per model on 2 cores)
#   --standard        every policy in kld (ctx 2048, 2 windows) and ppl (code,
#                     ctx 2048, 1 window); the quick subset in needle (ctx
#                     2048 and 4096), gen-check (200 tokens) and bench (ctx 512
#                     and 4096) (~1 h per model on 2 cores)
#   --full            every policy in every tool, contexts up to the model's
#                     limit (hours on a 2-core machine)
#   --kvq PATH        the kvq binary (default build/kvq; built if missing)
#   --out DIR         results root (default docs/results)
#   --threads T       threads for every tool (default 2)
#   --only LIST       steps to run, comma-separated, of:
#                     codec,memplan,kld,ppl,needle,gencheck,bench,report
#   --policies LIST   replace the policy matrix (space-separated policies)
#   --mem SIZE        memory budget of memplan (default 16GiB)
#
# The policy matrix (issue 5 §9; tools/policy.h describes the strings):
#   f16; q8; q4; tq-mse:4; tq-mse:3; tq-mse:2; k=q8,v=tq-mse:4; k=q8,v=tq-mse:3;
#   tq-prod:3 and tq-prod:4 keys with v=tq-mse:4 or v=q8; qjl keys (v=q8);
#   polar; rvq:1; rvq:2; tq-mse:4/3 +outliers=8 — each also with w=128 (an f16
#   window of the 128 most recent tokens); for hybrid models (Gemma 3) also
#   q8, tq-mse:4, tq-mse:3 with sliding=1 (sliding-window layers compressed
#   too; by default only the global layers are).
#
# Needs: a build, bash scripts/fetch-models.sh --all, bash scripts/fetch-corpora.sh;
# report.py needs numpy + matplotlib (pip install numpy matplotlib), without
# them only summary.md is written. Ctrl-C stops the running tool (it prints
# what it has), skips the remaining steps and still writes the report.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODE=quick
KVQ=""
OUT="$ROOT/docs/results"
THREADS=2
ALL_STEPS="codec,memplan,kld,ppl,needle,gencheck,bench,report"
ONLY="$ALL_STEPS"
POLICIES=""
MEM=16GiB
MODELS=()

usage() { sed -n '2,/^set -uo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) MODE=quick ;;
        --standard) MODE=standard ;;
        --full) MODE=full ;;
        --kvq) shift; KVQ="${1:?--kvq needs a path}" ;;
        --out) shift; OUT="${1:?--out needs a directory}" ;;
        --threads) shift; THREADS="${1:?--threads needs a value}" ;;
        --only) shift; ONLY="${1:?--only needs a list}" ;;
        --policies) shift; POLICIES="${1:?--policies needs a list}" ;;
        --mem) shift; MEM="${1:?--mem needs a size}" ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "full-report.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
        *) MODELS+=("$1") ;;
    esac
    shift
done
[ "${#MODELS[@]}" -gt 0 ] || { usage >&2; exit 2; }

want() { case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# ---- the kvq binary
if [ -z "$KVQ" ]; then
    KVQ="$ROOT/build/kvq"
    if [ ! -x "$KVQ" ]; then
        echo "== building $KVQ" >&2
        cmake -S "$ROOT" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=Release >/dev/null &&
            cmake --build "$ROOT/build" -j2 --target kvq >/dev/null || { echo "full-report.sh: build failed" >&2; exit 1; }
    fi
fi
[ -x "$KVQ" ] || { echo "full-report.sh: no kvq binary at $KVQ" >&2; exit 1; }
has_cmd() { "$KVQ" "$1" --help >/dev/null 2>&1; }

# ---- models
resolve_model() {
    case "$1" in
        smollm2) echo "$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf" ;;
        gemma3) echo "$ROOT/models/gemma-3-270m-q4_k_m.gguf" ;;
        *) echo "$1" ;;
    esac
}
LIST=()
for m in "${MODELS[@]}"; do
    if [ "$m" = all ]; then LIST+=("$(resolve_model smollm2)" "$(resolve_model gemma3)")
    else LIST+=("$(resolve_model "$m")"); fi
done

PROSE="$ROOT/corpora/prose.txt"
HELDOUT="$ROOT/corpora/prose-heldout.txt"
CODE="$ROOT/corpora/code.txt"
[ -f "$HELDOUT" ] || HELDOUT="$PROSE"

# groups_of N "P1 P2 ..." [FIRST]: the policies in groups of at most N, one
# group per word with '|' between policies; f16 is left out (kld and gen-check
# add their base themselves), FIRST (e.g. f16) starts the first group
groups_of() {
    local n="$1" g="${3:-}" k=0 p
    [ -n "$g" ] && k=1
    for p in $2; do
        [ "$p" = f16 ] && continue
        g="$g${g:+|}$p"
        k=$((k + 1))
        if [ "$k" -ge "$n" ]; then echo "$g"; g=""; k=0; fi
    done
    [ -n "$g" ] && echo "$g"
    return 0
}

INTERRUPTED=0
trap 'INTERRUPTED=1' INT

# runs one step: NAME OUTFILE CMD...; stdout appended to OUTFILE (JSON lines), stderr to logs/NAME.log
run_step() {
    local name="$1" out="$2"
    shift 2
    [ "$INTERRUPTED" = 0 ] || return 0
    local cmdline
    cmdline="$(printf '%q ' "$@" | sed "s|$ROOT/||g")"
    echo "== $(basename "$DIR"): $name" >&2
    local t0=$SECONDS
    # stderr: to the log, and to the terminal too when there is one (progress lines)
    if [ -t 2 ]; then
        "$@" >> "$out" 2> >(tee -a "$DIR/logs/$name.log" >&2)
    else
        "$@" >> "$out" 2>> "$DIR/logs/$name.log"
    fi
    local rc=$?
    local n
    n="$(grep -c '^{' "$out" 2>/dev/null || true)"
    echo "   $name: exit $rc, $((SECONDS - t0)) s, ${n:-0} results in $(basename "$out")" >&2
    printf '%s\n# exit %s, %s s\n' "$cmdline" "$rc" "$((SECONDS - t0))" >> "$DIR/commands.txt"  # one append: runs may overlap
    [ "$rc" = 130 ] && INTERRUPTED=1
    return 0
}

for MODEL in "${LIST[@]}"; do
    [ "$INTERRUPTED" = 0 ] || break
    if [ ! -f "$MODEL" ]; then
        echo "full-report.sh: $MODEL missing (bash scripts/fetch-models.sh --all)" >&2
        continue
    fi
    NAME="$(basename "$MODEL" .gguf)"
    DIR="$OUT/$NAME"
    mkdir -p "$DIR/logs"
    INFO="$("$KVQ" inspect -m "$MODEL" 2>/dev/null || true)"
    HD="$(printf '%s\n' "$INFO" | grep -oiE 'head[ _]dim[^0-9]*[0-9]+' | grep -oE '[0-9]+$' | head -1)"
    CTXMAX="$(printf '%s\n' "$INFO" | grep -oiE 'context[^0-9]*[0-9]+' | grep -oE '[0-9]+$' | head -1)"
    HYBRID=0
    printf '%s\n' "$INFO" | grep -iE '^sliding window' | grep -qv none && HYBRID=1
    HD="${HD:-64}"
    CTXMAX="${CTXMAX:-8192}"

    # ---- policies
    if [ -n "$POLICIES" ]; then
        ALL="$POLICIES"
        SLOW="$POLICIES"
    else
        BASE="q8 q4 tq-mse:4 tq-mse:3 tq-mse:2 k=q8,v=tq-mse:4 k=q8,v=tq-mse:3 tq-prod:3/tq-mse:4 tq-prod:4/tq-mse:4 \
tq-prod:3/q8 tq-prod:4/q8 qjl/q8 polar rvq:1 rvq:2 tq-mse:4+outliers=8 tq-mse:3+outliers=8 \
tq-mse:4+chscale/tq-mse:4 tq-mse:3+chscale/tq-mse:3 tq-mse:4+chscale/tq-mse:2"
        ALL="f16"
        for p in $BASE; do ALL="$ALL $p $p,w=128"; done
        [ "$HYBRID" = 1 ] && ALL="$ALL q8,sliding=1 tq-mse:4,sliding=1 tq-mse:3,sliding=1 tq-mse:4+chscale/tq-mse:4,sliding=1"
        # the slow tools (bench, needle, gen-check) in quick and standard mode; calib=32: short
        # gen-check prompts would otherwise run their first 128 tokens on an f16 cache
        SLOW="f16 q8 q4 tq-mse:4 tq-mse:3 tq-mse:2 k=q8,v=tq-mse:3 tq-prod:4/q8 qjl/q8 polar rvq:1 rvq:2 \
tq-mse:4+outliers=8 tq-mse:3,w=128 tq-mse:2,w=128 tq-mse:4+chscale/tq-mse:4,calib=32 tq-mse:3+chscale/tq-mse:3,calib=32"
        [ "$HYBRID" = 1 ] && SLOW="$SLOW tq-mse:4,sliding=1"
        [ "$MODE" = full ] && SLOW="$ALL"
    fi

    # ---- settings per mode; contexts capped by the model
    cap_list() { # keeps the entries <= CTXMAX
        local out="" c
        for c in ${1//,/ }; do [ "$c" -le "$CTXMAX" ] && out="$out${out:+,}$c"; done
        echo "${out:-$CTXMAX}"
    }
    if [ "$MODE" = quick ]; then
        CODEC_N=4000; KLD_ARGS=(--ctx 512 --chunks 2); PPL_ARGS=()
        NEEDLE_ARGS=(--ctx 1024 --depths 0.1,0.5,0.9 --trials 1)
        GEN_ARGS=(--n 64 --prompts 4)
        BENCH_ARGS=(--ctx 512,1024 --gen 16 --prefill 128 --rounds 8)
    elif [ "$MODE" = standard ]; then
        CODEC_N=20000; KLD_ARGS=(--ctx 2048 --chunks 2); PPL_ARGS=(--ctx 2048 --chunks 1)
        NEEDLE_ARGS=(--ctx "$(cap_list 2048,4096)" --depths 0.1,0.5,0.9 --trials 1)
        GEN_ARGS=(--n 200 --prompts 4)
        BENCH_ARGS=(--ctx "$(cap_list 512,4096)" --gen 16 --prefill 256 --rounds 4)
    else
        CODEC_N=20000; KLD_ARGS=(--ctx 2048 --chunks 8); PPL_ARGS=(--ctx 2048 --chunks 8)
        NEEDLE_ARGS=(--ctx "$(cap_list 1024,4096,8192,16384,32768)" --trials 2)
        GEN_ARGS=(--n 200)
        BENCH_ARGS=(--ctx "$(cap_list 512,4096,8192,16384,32768)" --gen 32 --prefill 512 --rounds 4)
    fi

    # a partial run (--only) adds to commands.txt, a whole one starts it anew
    [ "$ONLY" = "$ALL_STEPS" ] && : > "$DIR/commands.txt"
    {
        echo "# scripts/full-report.sh --$MODE --only $ONLY $NAME"
        echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
    } >> "$DIR/commands.txt"

    # ---- steps (each result file is rewritten by its step)
    C=(--threads "$THREADS" --json)
    if want codec && has_cmd codec-bench; then
        : > "$DIR/codec.jsonl"
        run_step codec "$DIR/codec.jsonl" "$KVQ" codec-bench --method all --dim "$HD" --n "$CODEC_N" --json
    fi
    if want memplan && has_cmd memplan; then
        : > "$DIR/memplan.jsonl"
        run_step memplan "$DIR/memplan.jsonl" "$KVQ" memplan -m "$MODEL" --mem "$MEM" --policies "$ALL" \
            --points 1K,2K,4K,8K,16K,32K,64K,128K --threads "$THREADS" --json
    fi
    # the quality tools take at most 32 policies per run (the base runs again in each group)
    if want kld && has_cmd kld; then
        : > "$DIR/kld.jsonl"
        for G in $(groups_of 16 "$ALL"); do
            run_step kld "$DIR/kld.jsonl" "$KVQ" kld -m "$MODEL" -f "$HELDOUT" "${KLD_ARGS[@]}" --policies "${G//|/ }" "${C[@]}"
        done
    fi
    if want ppl && has_cmd ppl && [ "${#PPL_ARGS[@]}" -gt 0 ]; then
        : > "$DIR/ppl.jsonl"
        for G in $(groups_of 16 "$ALL" f16); do
            run_step ppl "$DIR/ppl.jsonl" "$KVQ" ppl -m "$MODEL" -f "$CODE" "${PPL_ARGS[@]}" --policies "${G//|/ }" "${C[@]}"
        done
    fi
    if want needle && has_cmd needle; then
        : > "$DIR/needle.jsonl"
        for G in $(groups_of 16 "$SLOW" f16); do
            run_step needle "$DIR/needle.jsonl" "$KVQ" needle -m "$MODEL" "${NEEDLE_ARGS[@]}" --policies "${G//|/ }" "${C[@]}"
        done
    fi
    if want gencheck && has_cmd gen-check; then
        : > "$DIR/gencheck.jsonl"
        for G in $(groups_of 16 "$SLOW"); do
            run_step gencheck "$DIR/gencheck.jsonl" "$KVQ" gen-check -m "$MODEL" ${GEN_ARGS[@]+"${GEN_ARGS[@]}"} \
                --policies "${G//|/ }" "${C[@]}"
        done
    fi
    if want bench && has_cmd bench; then
        : > "$DIR/bench.jsonl"
        run_step bench "$DIR/bench.jsonl" "$KVQ" bench -m "$MODEL" "${BENCH_ARGS[@]}" --policies "$SLOW" "${C[@]}"
    fi
    if want report; then
        echo "== $NAME: report" >&2
        python3 "$ROOT/scripts/report.py" "$DIR" --title "$NAME ($MODE)" || echo "full-report.sh: report.py failed" >&2
    fi
done
[ "$INTERRUPTED" = 0 ] || { echo "full-report.sh: interrupted" >&2; exit 130; }
exit 0
