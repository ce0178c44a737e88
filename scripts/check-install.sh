#!/usr/bin/env bash
# Installs a kvq build into a temporary prefix and builds and runs the tiny
# consumer program (tests/consumer) three ways: through pkg-config, through
# find_package(kvq), and with kvq as an add_subdirectory() subproject.
# usage: scripts/check-install.sh [BUILD_DIR]   (default: build)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
TMP="$(mktemp -d /tmp/kvq-install.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
PREFIX="$TMP/prefix"

echo "== cmake --install $BUILD --prefix $PREFIX"
cmake --install "$BUILD" --prefix "$PREFIX" >"$TMP/install.log"
for f in include/kvq.h include/kvq_engine.h lib/libkvq.a lib/libkvq.so lib/libkvq.so.0 lib/libkvq-engine.a \
         lib/libkvq-engine.so lib/pkgconfig/kvq.pc lib/pkgconfig/kvq-engine.pc lib/cmake/kvq/kvqConfig.cmake bin/kvq; do
    [ -e "$PREFIX/$f" ] || { echo "missing after install: $f"; exit 1; }
done
"$PREFIX/bin/kvq" --help >/dev/null

echo "== pkg-config (shared, then static)"
export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig"
cc -std=c11 -Wall -Werror "$ROOT/tests/consumer/consumer.c" -o "$TMP/consumer_pc" \
    $(pkg-config --cflags --libs kvq-engine) -lm -Wl,-rpath,"$PREFIX/lib"
"$TMP/consumer_pc"
cc -std=c11 -Wall -Werror "$ROOT/tests/consumer/consumer.c" -o "$TMP/consumer_pc_static" \
    $(pkg-config --cflags kvq-engine) "$PREFIX/lib/libkvq-engine.a" "$PREFIX/lib/libkvq.a" \
    $(pkg-config --static --libs-only-other --libs-only-l kvq | sed 's/-lkvq//') -lm
"$TMP/consumer_pc_static"

echo "== find_package(kvq)"
cmake -S "$ROOT/tests/consumer" -B "$TMP/fp" -DCMAKE_PREFIX_PATH="$PREFIX" >"$TMP/fp.log"
cmake --build "$TMP/fp" -j2 >>"$TMP/fp.log"
"$TMP/fp/consumer"
"$TMP/fp/consumer_static"

echo "== add_subdirectory(kvq)"
cmake -S "$ROOT/tests/consumer" -B "$TMP/sub" -DKVQ_SOURCE_DIR="$ROOT" -DKVQ_CUDA=OFF >"$TMP/sub.log"
cmake --build "$TMP/sub" -j2 --target consumer >>"$TMP/sub.log"
"$TMP/sub/consumer"
echo "install check: ok"
