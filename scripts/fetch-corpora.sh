#!/usr/bin/env bash
# Install the evaluation text corpora into corpora/ (git-ignored). See docs/CORPORA.md.
#
#   corpora/prose.txt        Jane Austen, "Pride and Prejudice" (public domain)
#   corpora/prose-heldout.txt Jane Austen, "Persuasion" (public domain), a second
#                            text for calibration/evaluation splits
#   corpora/code.txt         the C sources of libxcrypt 4.4.33 (LGPL-2.1+ / BSD /
#                            public domain), large generated tables left out
#
# Both come from Debian packages fetched with `apt-get download` (nothing is
# installed): r-cran-janeaustenr (the novels as an R lazy-load database, decoded
# here by a small Python reader of R's serialization format) and
# libxcrypt-source. Idempotent; results are checked against the sha256 below
# when the package version is the one they were recorded with.
#
# usage: scripts/fetch-corpora.sh [--corpora-dir DIR]
# Exit status: 0 on success, 1 when a download or a check failed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/corpora"
while [ $# -gt 0 ]; do
    case "$1" in
        --corpora-dir) shift; OUT="${1:?--corpora-dir needs a value}" ;;
        -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "fetch-corpora.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done

AUSTEN_PKG=r-cran-janeaustenr
AUSTEN_VER=1.0.0-1
PROSE_SHA=dfc684d4f857fa938268f9ab9c5567b64bd0691251eca959644adeabe6287a4d
HELDOUT_SHA=8061549557aebd2fd6e353d18d9197cb707029112bd52d4d8b174583a925848a
XCRYPT_PKG=libxcrypt-source
XCRYPT_VER=1:4.4.33-2
CODE_SHA=353579119f5336317b4f290265458b1515a83c706d541c83d44147cefcce85bc

die() { echo "fetch-corpora.sh: error: $*" >&2; exit 1; }
for c in apt-get dpkg-deb sha256sum python3; do
    command -v "$c" >/dev/null 2>&1 || die "'$c' not found (this script needs Debian's apt and python3)"
done

mkdir -p "$OUT"
TMP="$(mktemp -d)"
cleanup() { rm -rf "$TMP"; }
trap cleanup EXIT

candidate() { apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: //p'; }

download() { # package -> extracts into $TMP/<package>
    local pkg="$1"
    [ -n "$(candidate "$pkg")" ] && [ "$(candidate "$pkg")" != "(none)" ] || {
        echo "fetch-corpora.sh: $pkg unknown to apt, running apt-get update" >&2
        apt-get update -qq >/dev/null 2>&1 || die "apt-get update failed (network down?)"
    }
    (cd "$TMP" && apt-get download -qq "$pkg" >/dev/null 2>"$TMP/$pkg.log") || {
        cat "$TMP/$pkg.log" >&2; die "apt-get download $pkg failed (network down? package gone?)"; }
    mkdir -p "$TMP/$pkg"
    dpkg-deb -x "$TMP"/"${pkg}"_*.deb "$TMP/$pkg"
}

check() { # file expected_sha package pinned_version
    local got; got="$(sha256sum "$1" | cut -d' ' -f1)"
    if [ "$got" = "$2" ]; then
        echo "ok      $1 ($(stat -c %s "$1") bytes, sha256 $got)"
    elif [ "$(candidate "$3")" = "$4" ]; then
        die "$1: sha256 $got, expected $2 (from $3 $4)"
    else
        echo "warning: $1: sha256 $got differs from the one recorded for $3 $4" \
             "(apt now has $(candidate "$3")); update docs/CORPORA.md" >&2
    fi
}

have() { [ -s "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

# ---- prose ----------------------------------------------------------------
if have "$OUT/prose.txt" "$PROSE_SHA" && have "$OUT/prose-heldout.txt" "$HELDOUT_SHA"; then
    echo "ok      $OUT/prose.txt, $OUT/prose-heldout.txt (already present)"
else
    download "$AUSTEN_PKG"
    python3 - "$TMP/$AUSTEN_PKG/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb" "$OUT" <<'EOF'
# Reads the character vectors of an R lazy-load database (.rdb: a sequence of
# [u32 big-endian length][zlib stream] records, each an R serialization of one
# object, format 2 or 3, XDR). Each novel is a character vector of lines.
import os, struct, sys, zlib

def records(path):
    data = open(path, "rb").read()
    pos = 0
    while pos < len(data):
        d = zlib.decompressobj()
        out = d.decompress(data[pos + 4:])
        pos = len(data) - len(d.unused_data)
        yield out

def strings(blob):
    if blob[:2] != b"X\n":
        raise SystemExit("not an XDR R serialization")
    p = 2
    version = struct.unpack(">i", blob[p:p + 4])[0]
    p += 12
    if version == 3:
        p += 4 + struct.unpack(">i", blob[p:p + 4])[0]
    flags, n = struct.unpack(">ii", blob[p:p + 8])
    p += 8
    if flags & 0xFF != 16:  # STRSXP
        return None
    lines = []
    for _ in range(n):
        f, ln = struct.unpack(">ii", blob[p:p + 8])
        p += 8
        if f & 0xFF != 9:  # CHARSXP
            raise SystemExit("unexpected element type")
        if ln < 0:
            lines.append("")
        else:
            lines.append(blob[p:p + ln].decode("utf-8"))
            p += ln
    return lines

books = {}
for blob in records(sys.argv[1]):
    lines = strings(blob)
    if lines:
        title = next(l for l in lines if l.strip()).strip().upper()
        books[title] = "\n".join(lines).strip("\n") + "\n"
want = {"PRIDE AND PREJUDICE": "prose.txt", "PERSUASION": "prose-heldout.txt"}
for title, name in want.items():
    if title not in books:
        raise SystemExit(f"'{title}' not found in the package (found: {sorted(books)})")
    with open(os.path.join(sys.argv[2], name), "w", encoding="utf-8") as f:
        f.write(books[title])
EOF
fi
check "$OUT/prose.txt" "$PROSE_SHA" "$AUSTEN_PKG" "$AUSTEN_VER"
check "$OUT/prose-heldout.txt" "$HELDOUT_SHA" "$AUSTEN_PKG" "$AUSTEN_VER"

# ---- code -----------------------------------------------------------------
if have "$OUT/code.txt" "$CODE_SHA"; then
    echo "ok      $OUT/code.txt (already present)"
else
    download "$XCRYPT_PKG"
    src="$TMP/$XCRYPT_PKG/usr/src/libxcrypt"
    [ -d "$src/lib" ] || die "libxcrypt sources not found in $XCRYPT_PKG"
    # Every .c/.h in lib/ and test/, sorted, minus generated tables and test
    # vectors (mostly numbers, not code), each preceded by a one-line marker.
    (cd "$src" && LC_ALL=C find lib test -type f \( -name '*.c' -o -name '*.h' \) \
        ! -name 'alg-des-tables.c' ! -name 'alg-gost3411-2012-precalc.h' \
        ! -name 'special-char-salt.c' ! -name 'des-cases.h' | LC_ALL=C sort) > "$TMP/files"
    : > "$OUT/code.txt.tmp"
    while IFS= read -r f; do
        printf '/* ==== libxcrypt/%s ==== */\n' "$f" >> "$OUT/code.txt.tmp"
        cat "$src/$f" >> "$OUT/code.txt.tmp"
    done < "$TMP/files"
    mv -f "$OUT/code.txt.tmp" "$OUT/code.txt"
fi
check "$OUT/code.txt" "$CODE_SHA" "$XCRYPT_PKG" "$XCRYPT_VER"
