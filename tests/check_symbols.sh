#!/bin/sh
# Fails when a shared library exports a defined dynamic symbol whose name does
# not start with kvq_ (a program linking kvq beside ggml or anything else must
# not clash). Usage: tests/check_symbols.sh LIB.so [LIB.so ...]
status=0
for lib in "$@"; do
    syms=$(nm -D --defined-only "$lib") || { echo "nm failed on $lib"; exit 1; }
    n=$(printf '%s\n' "$syms" | awk 'NF >= 3 {print $3}' | grep -c '^kvq_')
    bad=$(printf '%s\n' "$syms" | awk 'NF >= 3 {print $3}' | grep -v '^kvq_')
    if [ -n "$bad" ]; then
        echo "$lib exports names without the kvq_ prefix:"
        printf '%s\n' "$bad" | sed 's/^/  /'
        status=1
    fi
    [ "$n" -gt 0 ] || { echo "$lib exports no kvq_ symbol"; status=1; }
    echo "$lib: $n kvq_ symbols"
done
exit $status
