"""Shared fixtures of the Python package's tests (run by scripts/test.sh after `pip install .`).

They test the installed package (import kvq finds site-packages, never
python/ of the source tree). Model-dependent tests skip when models/ lacks
the models, except under CI=true, where that is a failure (as the C tests).
The CLI comparisons use $KVQ_CLI, else build/kvq of the repository.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMOLLM = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA = os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")
CI = os.environ.get("CI") == "true"


def need(path_ok: bool, what: str) -> None:
    """Skips the test when a resource is absent, fails under CI=true."""
    if not path_ok:
        if CI:
            pytest.fail(f"{what} missing under CI=true")
        pytest.skip(f"{what} missing")


@pytest.fixture(scope="session")
def root() -> str:
    return ROOT


@pytest.fixture(scope="session")
def cli() -> str:
    """The kvq CLI to compare against."""
    path = os.environ.get("KVQ_CLI") or os.path.join(ROOT, "build", "kvq")
    need(os.access(path, os.X_OK), f"the kvq CLI ({path}; build it or set KVQ_CLI)")
    return path


def run_cli(cli: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    r = subprocess.run([cli, *args], capture_output=True, timeout=timeout, cwd=ROOT)
    if r.returncode != 0:
        raise AssertionError(f"{cli} {' '.join(args)} failed ({r.returncode}): {r.stderr.decode(errors='replace')}")
    return r


@pytest.fixture(scope="session")
def smollm_path() -> str:
    need(os.path.isfile(SMOLLM), f"model {SMOLLM} (bash scripts/fetch-models.sh)")
    return SMOLLM


@pytest.fixture(scope="session")
def gemma_path() -> str:
    need(os.path.isfile(GEMMA), f"model {GEMMA} (bash scripts/fetch-models.sh --all)")
    return GEMMA


@pytest.fixture(scope="session")
def smollm(smollm_path):
    import kvq
    m = kvq.Model(smollm_path)
    yield m
    m.close()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def gauss(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def have_cc() -> bool:
    return shutil.which("cc") is not None or shutil.which("gcc") is not None
