#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz (docs/FUZZING.md), one at a time.
#
# usage: tests/fuzz/run.sh BUILD_DIR [SECONDS] [TARGET...]
#   BUILD_DIR  a build configured with -DCMAKE_C_COMPILER=clang -DKVQ_FUZZ=ON
#              whose kvq_fuzzers target is built
#   SECONDS    per target (default 60)
#   TARGET     gguf tokenizer spec vecfile codec (default: all)
# First the regression inputs of tests/fuzz/regress/<target>/ (inputs that
# crashed once) run once each, then the fuzzer runs for SECONDS from the seed
# corpus (tests/fuzz/make_corpus.py, generated into BUILD_DIR/fuzz-corpus) and
# what it adds. Any crash, leak, sanitizer report, timeout (25 s an input, as OSS-Fuzz) or
# out-of-memory (2 GiB) fails the script; the input is saved under
# BUILD_DIR/fuzz-artifacts/<target>/. A summary line per target gives the
# executions and libFuzzer's final cov / ft figures.
set -euo pipefail

BUILD="${1:?usage: tests/fuzz/run.sh BUILD_DIR [SECONDS] [TARGET...]}"
SECS="${2:-60}"
shift $(( $# >= 2 ? 2 : $# ))
TARGETS=("$@")
[ "${#TARGETS[@]}" -gt 0 ] || TARGETS=(gguf tokenizer spec vecfile codec)
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="$BUILD/tests/fuzz"
CORPUS="$BUILD/fuzz-corpus"
ART="$BUILD/fuzz-artifacts"
PY="$(command -v python3)"

export KVQ_ROOT="${KVQ_ROOT:-$ROOT}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

mkdir -p "$ART"
if [ ! -d "$CORPUS" ]; then
    "$PY" "$ROOT/tests/fuzz/make_corpus.py" "$CORPUS" --root "$KVQ_ROOT"
fi

summary=()
for t in "${TARGETS[@]}"; do
    exe="$BIN/fuzz_$t"
    [ -x "$exe" ] || { echo "run.sh: $exe not built (cmake --build $BUILD --target kvq_fuzzers)" >&2; exit 2; }
    mkdir -p "$ART/$t" "$CORPUS/$t"
    dict=()
    [ -f "$ROOT/tests/fuzz/$t.dict" ] && dict=(-dict="$ROOT/tests/fuzz/$t.dict")
    if compgen -G "$ROOT/tests/fuzz/regress/$t/*" >/dev/null; then
        echo "== fuzz_$t: regression inputs"
        "$exe" "${dict[@]}" -artifact_prefix="$ART/$t/" "$ROOT"/tests/fuzz/regress/"$t"/* 2>&1 | tail -n 3
    fi
    echo "== fuzz_$t: ${SECS} s"
    log="$ART/$t/last.log"
    start=$(date +%s)
    set +e
    "$exe" "${dict[@]}" -max_total_time="$SECS" -timeout=25 -rss_limit_mb=2048 -max_len=131072 \
        -print_final_stats=1 -artifact_prefix="$ART/$t/" "$CORPUS/$t" >"$log" 2>&1
    rc=$?
    set -e
    end=$(date +%s)
    if [ "$rc" -ne 0 ]; then
        tail -n 60 "$log"
        echo "run.sh: fuzz_$t failed (exit $rc); the input is in $ART/$t/" >&2
        exit 1
    fi
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    covft=$(grep -o 'DONE *cov: [0-9]* ft: [0-9]*' "$log" | tail -n 1 | sed 's/DONE *//' || true)
    [ -n "$covft" ] || covft=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -n 1 || echo '?')
    summary+=("$(printf 'fuzz_%-10s %5d s %10s execs  %s  corpus %d  crashes 0' "$t" $((end - start)) "$runs" "$covft" \
        "$(find "$CORPUS/$t" -type f | wc -l)")")
done
echo "== fuzzing summary"
printf '%s\n' "${summary[@]}"
