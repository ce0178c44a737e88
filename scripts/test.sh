#!/usr/bin/env bash
# The README's test command: installs the Python packages the reference tests
# need (pip), fetches the models and corpora (scripts/fetch-*.sh), builds
# kvq in Release and runs every test with CTest. System packages (a C
# compiler, cmake, python3, pip, unzip) are expected: .ci/run installs them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
JOBS="${JOBS:-2}"

echo "== python packages"
# The interpreter CMake will run the Python tests with: the first python3 on
# PATH (pyenv's on the developers' machines, Debian's /usr/bin/python3 on a
# fresh one), passed to CMake explicitly so both agree.
PY="$(command -v python3)"
PIP_PKGS=(numpy==2.4.6 gguf==0.19.0 matplotlib==3.11.2)  # matplotlib: tests/test_report.py (scripts/report.py)
if ! "$PY" -m pip install -q --disable-pip-version-check "${PIP_PKGS[@]}" 2>/tmp/kvq-ci-pip.log; then
    # Debian's own python is "externally managed" (PEP 668)
    "$PY" -m pip install -q --disable-pip-version-check --break-system-packages "${PIP_PKGS[@]}"
fi
"$PY" -c 'import numpy, gguf, matplotlib; print("numpy", numpy.__version__, "gguf ok, matplotlib", matplotlib.__version__)'

echo "== models and corpora"
bash scripts/fetch-models.sh --all
bash scripts/fetch-corpora.sh

echo "== Release build + all tests"
cmake -B build -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$PY"
cmake --build build -j"$JOBS"
ctest --test-dir build --output-on-failure

