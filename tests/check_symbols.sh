#!/bin/sh
# Exported symbols of the shared libraries:
#  - every defined dynamic symbol is named kvq_* (a program linking kvq beside
#    ggml or anything else must not clash);
#  - every function a public header declares with KVQ_API is exported.
# Usage: tests/check_symbols.sh HEADER... -- LIB.so...
status=0
headers=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do headers="$headers $1"; shift; done
[ "${1:-}" = "--" ] && shift
all=""
for lib in "$@"; do
    names=$(nm -D --defined-only "$lib" | awk 'NF >= 3 {print $3}') || { echo "nm failed on $lib"; exit 1; }
    bad=$(printf '%s\n' "$names" | grep -v '^kvq_')
    if [ -n "$bad" ]; then
        echo "$lib exports names without the kvq_ prefix:"
        printf '%s\n' "$bad" | sed 's/^/  /'
        status=1
    fi
    echo "$lib: $(printf '%s\n' "$names" | grep -c '^kvq_') kvq_ symbols"
    all="$all
$names"
done
for h in $headers; do
    for f in $(tr '\n' ' ' < "$h" | grep -o 'KVQ_API [^(;]*(' | grep -o 'kvq_[a-z0-9_]*($' | tr -d '('); do
        printf '%s\n' "$all" | grep -qx "$f" || { echo "$h declares $f but no library exports it"; status=1; }
    done
done
exit $status
