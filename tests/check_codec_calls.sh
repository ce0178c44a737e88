#!/bin/sh
# The call graph between the files of src/codec is acyclic (docs/DESIGN.md
# §1.1): no two files call each other, directly or around a longer loop.
# A file "calls" another when its object file has an undefined symbol that
# the other's object file defines (nm), so the check sees what the compiler
# and linker see, in the build's own configuration (x86 or portable,
# sanitizers or not).
# Usage: tests/check_codec_calls.sh OBJECT...
#   OBJECT  object files; arguments may hold ;-separated lists (CMake's
#           $<TARGET_OBJECTS:...>); only those under src/codec/ are read.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
for arg in "$@"; do
    old_ifs=$IFS
    IFS=';'
    for o in $arg; do
        IFS=$old_ifs
        case "$o" in */src/codec/*) ;; *) continue ;; esac
        f=$(basename "$o")
        f=${f%%.*} # tq_kernels.c.o -> tq_kernels
        nm --defined-only "$o" | awk -v f="$f" 'NF >= 3 && $2 ~ /^[A-TV-Z]$/ {print $3, f}' >>"$tmp/def"
        nm -u "$o" | awk -v f="$f" '{print $NF, f}' >>"$tmp/use"
        n=$((n + 1))
    done
    IFS=$old_ifs
done
[ "$n" -gt 0 ] || { echo "check_codec_calls: no object files of src/codec given"; exit 2; }
touch "$tmp/def" "$tmp/use"
# edges "caller callee symbol", one per symbol
awk 'NR == FNR {def[$1] = $2; next} ($1 in def) && def[$1] != $2 {print $2, def[$1], $1}' \
    "$tmp/def" "$tmp/use" | sort -u >"$tmp/edges"
status=0
# pairs that call each other
awk '{e[$1 " " $2] = e[$1 " " $2] " " $3}
     END {for (k in e) {split(k, a, " "); r = a[2] " " a[1]
          if ((r in e) && a[1] < a[2]) print a[1] ".c and " a[2] ".c call each other:\n  " a[1] " ->" e[k] "\n  " a[2] " ->" e[r]}}' \
    "$tmp/edges" >"$tmp/pairs"
if [ -s "$tmp/pairs" ]; then cat "$tmp/pairs"; status=1; fi
# longer loops (tsort fails on any loop and names its files)
if ! awk '{print $1, $2}' "$tmp/edges" | sort -u | tsort >/dev/null 2>"$tmp/loops"; then
    echo "loop in the calls between src/codec files:"
    sed 's/^/  /' "$tmp/loops"
    status=1
fi
echo "check_codec_calls: $n files, $(awk '{print $1, $2}' "$tmp/edges" | sort -u | wc -l) caller -> callee pairs, $([ $status -eq 0 ] && echo acyclic || echo NOT acyclic)"
exit $status
