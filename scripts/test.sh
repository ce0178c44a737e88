#!/usr/bin/env bash
# The README's test command: installs the Python packages the reference tests
# need (pip), fetches the models and corpora (scripts/fetch-*.sh), builds
# kvq in Release and runs every test with CTest, then installs the Python
# package (pip install .) and runs its tests (pytest tests/python). System
# packages (a C compiler, cmake, python3, pip, unzip) are expected: .ci/run
# installs them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
JOBS="${JOBS:-2}"

echo "== python packages"
# The interpreter CMake will run the Python tests with: the first python3 on
# PATH (pyenv's on the developers' machines, Debian's /usr/bin/python3 on a
# fresh one), passed to CMake explicitly so both agree.
PY="$(command -v python3)"
PIP_PKGS=(numpy==2.4.6 gguf==0.19.0 matplotlib==3.11.2 pytest==9.2.0)  # matplotlib: tests/test_report.py; pytest: tests/python
# kvq.transformers' tests (tests/python/test_transformers.py): PyPI's torch is
# its CUDA build (~3 GB with the nvidia-* wheels; pip caches it); accelerate
# and gguf are what transformers' GGUF loader needs.
PIP_PKGS+=(torch==2.15.0 transformers==5.24.0 accelerate==1.15.0 safetensors==0.8.0 sentencepiece==0.2.3)
if ! "$PY" -m pip install -q --disable-pip-version-check "${PIP_PKGS[@]}" 2>/tmp/kvq-ci-pip.log; then
    # Debian's own python is "externally managed" (PEP 668)
    "$PY" -m pip install -q --disable-pip-version-check --break-system-packages "${PIP_PKGS[@]}"
fi
"$PY" -c 'import numpy, gguf, matplotlib, pytest, torch, transformers; print("numpy", numpy.__version__, "gguf ok, matplotlib", matplotlib.__version__, "pytest", pytest.__version__, "torch", torch.__version__, "transformers", transformers.__version__)'

echo "== models and corpora"
bash scripts/fetch-models.sh --all
bash scripts/fetch-corpora.sh

echo "== Release build + all tests"
cmake -B build -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$PY"
cmake --build build -j"$JOBS"
ctest --test-dir build --output-on-failure

echo "== the Python package: pip install . (scikit-build-core builds libkvq with CMake), tests/python"
# The installed package is what is tested (pytest runs from the root, where
# python/kvq is not on sys.path); the CLI comparisons use build/kvq.
t0=$(date +%s)
if ! CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" "$PY" -m pip install -q --disable-pip-version-check . 2>/tmp/kvq-ci-pip-kvq.log; then
    grep -q externally-managed /tmp/kvq-ci-pip-kvq.log || { cat /tmp/kvq-ci-pip-kvq.log; exit 1; }
    CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" "$PY" -m pip install -q --disable-pip-version-check --break-system-packages .
fi
echo "pip install . took $(( $(date +%s) - t0 )) s"
KVQ_CLI="$PWD/build/kvq" "$PY" -m pytest tests/python -q -rs
