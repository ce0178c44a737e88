"""The installed package: version agreement, where it was loaded from, the
ctypes structures against the C headers, docstrings."""
from __future__ import annotations

import ctypes
import importlib.metadata
import os
import pydoc
import re
import subprocess

import pytest

import kvq
from conftest import ROOT, have_cc


def test_version_is_the_library_version():
    n = kvq.version_number()
    assert kvq.__version__ == f"{n // 10000}.{n // 100 % 100}.{n % 100}"
    try:
        assert importlib.metadata.version("kvq") == kvq.__version__  # pyproject's (from CMakeLists.txt)
    except importlib.metadata.PackageNotFoundError:
        if not os.environ.get("KVQ_LIBRARY_DIR"):
            raise
        pytest.skip("a development run from the source tree (KVQ_LIBRARY_DIR): no installed metadata")
    cm = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    assert re.search(r"project\(kvq VERSION ([0-9.]+)", cm).group(1) == kvq.__version__
    hdr = open(os.path.join(ROOT, "include", "kvq.h")).read()
    parts = [re.search(rf"#define KVQ_VERSION_{k} (\d+)", hdr).group(1) for k in ("MAJOR", "MINOR", "PATCH")]
    assert ".".join(parts) == kvq.__version__


def test_installed_not_source_tree():
    """The tests run against the installed package (pip install .), libraries beside it."""
    pkg = os.path.dirname(kvq.__file__)
    if not os.environ.get("KVQ_LIBRARY_DIR"):
        assert not os.path.samefile(pkg, os.path.join(ROOT, "python", "kvq"))
        assert os.path.isfile(os.path.join(pkg, "libkvq.so"))
        assert os.path.isfile(os.path.join(pkg, "libkvq-engine.so"))
    assert kvq.cpu_isa() in ("scalar", "avx2", "avx512")


def test_every_header_function_is_bound():
    assert kvq._lib.missing_functions() == []


def test_help_reads_well():
    text = pydoc.render_doc(kvq.Cache, renderer=pydoc.plaintext)
    for word in ("attend", "append", "memory_plan", "max_tokens", "f16_bytes", "truncate", "GIL"):
        assert word in text
    for obj in (kvq.Plan, kvq.Cache, kvq.KVCacheBuilder, kvq.Policy, kvq.Model, kvq.Session, kvq.Sampler,
                kvq.Generation, kvq.Error):
        assert obj.__doc__ and len(obj.__doc__) > 40, obj
        for name, member in vars(obj).items():
            if not name.startswith("_") and callable(member):
                assert member.__doc__ or name.startswith("with_") or name in ("close",), (obj, name)
    assert kvq.Model.generate.__annotations__ and kvq.Cache.attend.__annotations__


C_LAYOUT = r"""
#include <stddef.h>
#include <stdio.h>
#include "kvq.h"
#include "kvq_engine.h"
#define F(T, f) printf(#T "." #f " %zu\n", offsetof(T, f))
#define S(T) printf(#T " %zu\n", sizeof(T))
int main(void) {
    S(kvq_cache_config); F(kvq_cache_config, k_spec); F(kvq_cache_config, f16_layers);
    F(kvq_cache_config, sliding_window); F(kvq_cache_config, seed); F(kvq_cache_config, reference_kernels);
    S(kvq_policy); F(kvq_policy, v_spec); F(kvq_policy, f16_layers); F(kvq_policy, calib_tokens);
    S(kvq_model_info); F(kvq_model_info, n_layers); F(kvq_model_info, rope_base); F(kvq_model_info, norm_eps);
    F(kvq_model_info, bos); F(kvq_model_info, n_weight_bytes); F(kvq_model_info, type_count);
    S(kvq_session_params); F(kvq_session_params, seed); F(kvq_session_params, isa); F(kvq_session_params, kv_hook);
    F(kvq_session_params, attn_hook_user);
    S(kvq_sampler_params); F(kvq_sampler_params, repeat_last_n); F(kvq_sampler_params, seed);
    S(kvq_gguf_info); S(kvq_gguf_tensor_info); F(kvq_gguf_tensor_info, ne); F(kvq_gguf_tensor_info, offset);
    return 0;
}
"""

PY = {"kvq_cache_config": "CacheConfig", "kvq_policy": "PolicyStruct", "kvq_model_info": "ModelInfoStruct",
      "kvq_session_params": "SessionParams", "kvq_sampler_params": "SamplerParams", "kvq_gguf_info": "GgufInfo",
      "kvq_gguf_tensor_info": "GgufTensorInfo"}


def test_struct_layouts_match_headers(tmp_path):
    """Every ctypes structure has the size and field offsets of the C header's."""
    if not have_cc():
        pytest.skip("no C compiler")
    src, exe = tmp_path / "layout.c", tmp_path / "layout"
    src.write_text(C_LAYOUT)
    cc = "cc" if subprocess.run(["sh", "-c", "command -v cc"], capture_output=True).returncode == 0 else "gcc"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, check=True, text=True).stdout
    for line in out.splitlines():
        name, value = line.split()
        if "." in name:
            t, f = name.split(".")
            got = getattr(getattr(kvq._lib, PY[t]), f).offset
        else:
            got = ctypes.sizeof(getattr(kvq._lib, PY[name]))
        assert got == int(value), (name, got, value)
