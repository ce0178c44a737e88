"""Shared helpers for the Python tests that use real models (tests/test_ref_*.py).

Skip policy: a test that needs something absent (a model file, numpy, gguf)
exits 77 (CTest SKIP_RETURN_CODE) when the environment variable CI is unset,
and fails (exit 1) when CI is set: CI installs everything through .ci/run.
"""
import argparse
import os
import sys

SKIP = 77

# Models installed by scripts/fetch-models.sh --all (names as in docs/MODELS.md).
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3 = "gemma-3-270m-q4_k_m.gguf"

# "The capital of France is Paris. The capital of Germany is"
SMOLLM2_PROMPT = [504, 3575, 282, 4649, 314, 7042, 30, 378, 3575, 282, 4521, 314]
SMOLLM2_PARIS, SMOLLM2_BERLIN = 7042, 11452
# the same with <bos>, as Gemma's tokenizer adds it
GEMMA3_PROMPT = [2, 818, 5279, 529, 7001, 563, 9079, 236761, 669, 5279, 529, 9405, 563]
GEMMA3_PARIS, GEMMA3_BERLIN = 9079, 15687


def in_ci() -> bool:
    v = os.environ.get("CI", "")
    return v != "" and v.lower() not in ("0", "false", "no")


def log(name: str, msg: str) -> None:
    print(f"[{name}] {msg}", flush=True)


def missing(name: str, what: str) -> "NoReturn":  # noqa: F821
    if in_ci():
        log(name, f"FAIL: {what} (CI is set: everything must be installed by .ci/run)")
        sys.exit(1)
    log(name, f"SKIP: {what}")
    sys.exit(SKIP)


def parse_args(name: str):
    ap = argparse.ArgumentParser(prog=name)
    ap.add_argument("--kvq", help="path to the kvq binary")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                    help="repository root")
    return ap.parse_args()


def import_reference(name: str, root: str):
    """Import scripts/ref_forward.py (needs numpy and gguf)."""
    try:
        import numpy  # noqa: F401
        import gguf  # noqa: F401
    except ImportError as e:
        missing(name, f"Python package missing ({e}); pip install numpy gguf")
    sys.path.insert(0, os.path.join(root, "scripts"))
    import ref_forward
    return ref_forward


def model_path(name: str, root: str, file: str) -> str:
    d = os.environ.get("KVQ_MODELS_DIR", os.path.join(root, "models"))
    p = os.path.join(d, file)
    if not os.path.isfile(p):
        missing(name, f"model {p} not found (run scripts/fetch-models.sh --all)")
    return p
