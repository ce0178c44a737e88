"""ctypes bindings of include/kvq.h and include/kvq_engine.h (private).

The two shared libraries (libkvq.so, libkvq-engine.so) are loaded from the
package directory, where `pip install .` puts them; $KVQ_LIBRARY_DIR, when
set, is searched first (a development build). Every prototype is declared
here once; data pointers are passed as integers (c_void_p), so a numpy
array goes through as ``arr.ctypes.data`` without a copy. ctypes.CDLL
releases the GIL around every foreign call.
"""
from __future__ import annotations

import ctypes
import glob
import os
import threading
from ctypes import (POINTER, Structure, c_char, c_char_p, c_double, c_float, c_int, c_int32, c_size_t,
                    c_uint, c_uint32, c_uint64, c_void_p)

_HERE = os.path.dirname(os.path.abspath(__file__))

KVQ_DIM_MIN = 32
KVQ_DIM_MAX = 512
KVQ_POLICY_SPEC_MAX = 80
KVQ_POLICY_MAX_F16 = 64
KVQ_POLICY_NAME_MAX = 256
KVQ_GGML_TYPE_SLOTS = 64

INT_MAX = 2**31 - 1
SIZE_MAX = 2**64 - 1 if ctypes.sizeof(c_size_t) == 8 else 2**32 - 1


def _find(stem: str) -> str:
    """Path of lib<stem>.so (or a versioned lib<stem>.so.N) in the search dirs."""
    dirs = []
    env = os.environ.get("KVQ_LIBRARY_DIR")
    if env:
        dirs.append(env)
    dirs.append(_HERE)
    for d in dirs:
        exact = os.path.join(d, f"lib{stem}.so")
        if os.path.isfile(exact):
            return exact
        versioned = sorted(glob.glob(os.path.join(d, f"lib{stem}.so.*")), key=len)
        if versioned:
            return versioned[0]
    raise ImportError(f"kvq: lib{stem}.so not found in {dirs} (install the package with `pip install .` "
                      "at the repository root, or set KVQ_LIBRARY_DIR to a build directory)")


# ---------------------------------------------------------------- structures
class CacheConfig(Structure):
    _fields_ = [
        ("n_layers", c_int), ("n_kv_heads", c_int), ("head_dim", c_int),
        ("k_spec", c_char_p), ("v_spec", c_char_p),
        ("f16_window", c_int),
        ("f16_layers", POINTER(c_int)), ("n_f16_layers", c_int),
        ("sliding_window", POINTER(c_int)),
        ("compress_sliding", c_int), ("outlier_calib_tokens", c_int),
        ("seed", c_uint64), ("reference_kernels", c_int),
        ("sink_tokens", c_int),
    ]


class PolicyStruct(Structure):
    _fields_ = [
        ("k_spec", c_char * KVQ_POLICY_SPEC_MAX), ("v_spec", c_char * KVQ_POLICY_SPEC_MAX),
        ("f16_window", c_int),
        ("f16_layers", c_int * KVQ_POLICY_MAX_F16), ("n_f16_layers", c_int),
        ("compress_sliding", c_int), ("calib_tokens", c_int),
        ("sink_tokens", c_int),
    ]


class ModelInfoStruct(Structure):
    _fields_ = [
        ("arch", c_char * 32), ("name", c_char * 96),
        ("n_layers", c_int), ("n_embd", c_int), ("n_ff", c_int),
        ("n_head", c_int), ("n_head_kv", c_int), ("head_dim", c_int),
        ("n_vocab", c_int), ("n_ctx_train", c_int), ("n_rot", c_int), ("rope_neox", c_int),
        ("rope_base", c_float), ("rope_base_swa", c_float), ("rope_freq_scale", c_float),
        ("has_rope_freqs", c_int), ("n_swa", c_int), ("n_swa_layers", c_int),
        ("sliding_window", POINTER(c_int)),  # (n_layers), points into the model
        ("norm_eps", c_float), ("attn_scale", c_float), ("embd_scale", c_float), ("final_softcap", c_float),
        ("gelu", c_int), ("qk_norm", c_int), ("post_norms", c_int), ("qkv_bias", c_int), ("tied_output", c_int),
        ("has_tokenizer", c_int), ("has_chat_template", c_int), ("add_bos", c_int),
        ("bos", c_int32), ("eos", c_int32),
        ("n_weight_bytes", c_uint64),
        ("type_count", c_int * KVQ_GGML_TYPE_SLOTS),
        ("n_coded", c_int), ("coded_bits", ctypes.c_double), ("weights_spec", c_char * 64),
    ]


KV_HOOK = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_size_t, c_void_p, c_void_p, c_void_p, c_size_t)
ATTN_HOOK = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_size_t, c_void_p, c_size_t, c_int)


class SessionParams(Structure):
    _fields_ = [
        ("k_spec", c_char_p), ("v_spec", c_char_p),
        ("f16_window", c_int),
        ("f16_layers", POINTER(c_int)), ("n_f16_layers", c_int),
        ("compress_sliding", c_int), ("calib_tokens", c_int),
        ("seed", c_uint64), ("n_batch", c_int), ("isa", c_int), ("f32_acts", c_int),
        ("kv_hook", c_void_p), ("kv_hook_user", c_void_p),
        ("attn_hook", c_void_p), ("attn_hook_user", c_void_p),
        ("sink_tokens", c_int),
    ]


class SamplerParams(Structure):
    _fields_ = [
        ("temperature", c_float), ("top_k", c_int), ("top_p", c_float), ("min_p", c_float),
        ("repeat_penalty", c_float), ("repeat_last_n", c_int), ("seed", c_uint64),
    ]


class GgufInfo(Structure):
    _fields_ = [("version", c_uint32), ("alignment", c_uint32), ("n_kv", c_uint64), ("n_tensors", c_uint64),
                ("data_offset", c_uint64), ("file_size", c_uint64)]


class GgufTensorInfo(Structure):
    _fields_ = [("name", c_char * 128), ("type", c_uint32), ("n_dims", c_uint32), ("ne", c_uint64 * 4),
                ("n_bytes", c_uint64), ("offset", c_uint64)]


# ---------------------------------------------------------------- prototypes
_VP, _SZ = c_void_p, c_size_t
_PSZ = POINTER(c_size_t)

_CORE = {
    "kvq_version_number": (c_uint, []),
    "kvq_strerror": (c_char_p, [c_int]),
    "kvq_dtype_size": (_SZ, [c_int]),
    "kvq_cpu_isa": (c_int, []),
    "kvq_isa_name": (c_char_p, [c_int]),
    "kvq_pool_create": (c_int, [POINTER(_VP), c_int]),
    "kvq_pool_free": (None, [_VP]),
    "kvq_pool_size": (c_int, [_VP]),
    "kvq_plan_create": (c_int, [POINTER(_VP), c_char_p, c_int, c_uint64, _VP, _SZ]),
    "kvq_plan_free": (None, [_VP]),
    "kvq_spec_needs_calibration": (c_int, [c_char_p, POINTER(c_int)]),
    "kvq_plan_spec": (c_char_p, [_VP]),
    "kvq_plan_dim": (c_int, [_VP]),
    "kvq_plan_code_bytes": (_SZ, [_VP]),
    "kvq_plan_bits_per_value": (c_double, [_VP]),
    "kvq_plan_can_decode": (c_int, [_VP]),
    "kvq_plan_query_floats": (_SZ, [_VP]),
    "kvq_plan_isa": (c_int, [_VP]),
    "kvq_plan_clone_isa": (c_int, [POINTER(_VP), _VP, c_int]),
    "kvq_encode": (c_int, [_VP, _VP, c_int, _SZ, _VP]),
    "kvq_decode": (c_int, [_VP, _VP, _SZ, _VP]),
    "kvq_query_prepare": (c_int, [_VP, _VP, _VP]),
    "kvq_score": (c_int, [_VP, _VP, _SZ, _VP, _SZ, _VP]),
    "kvq_accumulate": (c_int, [_VP, _VP, _SZ, _VP, _SZ, _VP]),
    "kvq_unrotate": (c_int, [_VP, _VP, _VP]),
    "kvq_cache_create": (c_int, [POINTER(_VP), POINTER(CacheConfig)]),
    "kvq_cache_free": (None, [_VP]),
    "kvq_cache_append": (c_int, [_VP, c_int, _VP, _VP, _SZ]),
    "kvq_cache_attend": (c_int, [_VP, c_int, _VP, _SZ, c_int, _SZ, c_float, _VP, _VP]),
    "kvq_cache_len": (_SZ, [_VP, c_int]),
    "kvq_cache_truncate": (c_int, [_VP, _SZ]),
    "kvq_cache_clear": (None, [_VP]),
    "kvq_cache_memory_bytes": (_SZ, [_VP]),
    "kvq_cache_bytes_per_token": (_SZ, [_VP]),
    "kvq_cache_memory_plan": (c_int, [_VP, _SZ, _SZ, _PSZ, _PSZ]),
    "kvq_policy_init": (None, [POINTER(PolicyStruct)]),
    "kvq_policy_parse": (c_int, [POINTER(PolicyStruct), c_char_p, c_char_p, _SZ]),
    "kvq_policy_name": (c_int, [POINTER(PolicyStruct), c_char_p, _SZ]),
    "kvq_policy_to_cache_config": (None, [POINTER(PolicyStruct), POINTER(CacheConfig)]),
}

_ENGINE = {
    "kvq_gguf_open": (c_int, [POINTER(_VP), c_char_p]),
    "kvq_gguf_close": (None, [_VP]),
    "kvq_gguf_get_info": (c_int, [_VP, POINTER(GgufInfo)]),
    "kvq_gguf_get_tensor": (c_int, [_VP, c_uint64, POINTER(GgufTensorInfo)]),
    "kvq_gguf_get_string": (c_int, [_VP, c_char_p, c_char_p, _SZ]),
    "kvq_ggml_type_name": (c_char_p, [c_uint32]),
    "kvq_model_load": (c_int, [POINTER(_VP), c_char_p, c_char_p, _SZ]),
    "kvq_model_free": (None, [_VP]),
    "kvq_model_get_info": (c_int, [_VP, POINTER(ModelInfoStruct)]),
    "kvq_model_layer_window": (c_int, [_VP, c_int]),
    "kvq_model_quantize_weights": (c_int, [_VP, c_char_p, c_char_p, c_uint64, _VP, c_char_p, _SZ]),
    "kvq_model_save": (c_int, [_VP, c_char_p, c_char_p, _SZ]),
    "kvq_model_gguf": (_VP, [_VP]),
    "kvq_tokenize": (c_int, [_VP, c_char_p, _SZ, c_int, c_int, _VP, _SZ, _PSZ]),
    "kvq_token_to_piece": (c_int, [_VP, c_int32, _VP, _SZ, _PSZ]),
    "kvq_token_is_eog": (c_int, [_VP, c_int32]),
    "kvq_chat_format": (c_int, [_VP, c_char_p, c_char_p, c_char_p, _SZ, _PSZ]),
    "kvq_session_default_params": (SessionParams, []),
    "kvq_session_params_set_policy": (None, [POINTER(SessionParams), POINTER(PolicyStruct)]),
    "kvq_session_create": (c_int, [POINTER(_VP), _VP, POINTER(SessionParams), _VP]),
    "kvq_session_free": (None, [_VP]),
    "kvq_session_eval": (c_int, [_VP, _VP, _SZ, _VP, c_int]),
    "kvq_session_pos": (_SZ, [_VP]),
    "kvq_session_truncate": (c_int, [_VP, _SZ]),
    "kvq_session_cache": (_VP, [_VP]),
    "kvq_session_kernels": (c_char_p, [_VP]),
    "kvq_session_state_bytes": (_SZ, [_VP]),
    "kvq_sampler_default_params": (SamplerParams, []),
    "kvq_sampler_run_params": (SamplerParams, []),
    "kvq_sampler_create": (c_int, [POINTER(_VP), POINTER(SamplerParams), _SZ]),
    "kvq_sampler_free": (None, [_VP]),
    "kvq_sampler_reset": (None, [_VP, c_uint64]),
    "kvq_sampler_accept": (c_int, [_VP, c_int32]),
    "kvq_sampler_sample": (c_int, [_VP, _VP, POINTER(c_int32)]),
}


_missing = []


def _declare(lib: ctypes.CDLL, table: dict) -> None:
    for name, (res, args) in table.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:  # calling it raises AttributeError; tests/python checks none is missing
            _missing.append(name)
            continue
        fn.restype = res
        fn.argtypes = args


def _check_layouts(lib: ctypes.CDLL, size_fn: str, mirrors: list) -> None:
    """Each mirrored struct has the size the library was built with (an older or
    newer libkvq under this package would otherwise corrupt memory)."""
    fn = getattr(lib, size_fn, None)
    if fn is None:  # an old library: reported by missing_functions()
        return
    fn.restype = c_size_t
    fn.argtypes = [c_char_p]
    for cname, cls in mirrors:
        n = fn(cname.encode())
        if n != ctypes.sizeof(cls):
            raise ImportError(f"kvq: {cname} is {n} bytes in {lib._name} but {ctypes.sizeof(cls)} in the Python "
                              "package's mirror: the library and the package come from different versions")


def missing_functions() -> list:
    """Functions of the headers the loaded libraries lack (loads libkvq-engine)."""
    engine()
    return list(_missing)


core = ctypes.CDLL(_find("kvq"))
_declare(core, _CORE)
_check_layouts(core, "kvq_struct_size", [("kvq_cache_config", CacheConfig), ("kvq_policy", PolicyStruct)])

_engine = None
_engine_lock = threading.Lock()


def engine() -> ctypes.CDLL:
    """libkvq-engine, loaded on first use (the codec and cache need only libkvq)."""
    global _engine
    with _engine_lock:
        if _engine is None:
            lib = ctypes.CDLL(_find("kvq-engine"))
            _declare(lib, _ENGINE)
            _check_layouts(lib, "kvq_engine_struct_size",
                           [("kvq_model_info", ModelInfoStruct), ("kvq_session_params", SessionParams),
                            ("kvq_sampler_params", SamplerParams), ("kvq_gguf_info", GgufInfo),
                            ("kvq_gguf_tensor_info", GgufTensorInfo)])
            _engine = lib
        return _engine


# ---------------------------------------------------------------- libkvq-cuda (include/kvq_cuda.h)
class CudaLayerConfig(Structure):
    _fields_ = [("k", c_void_p), ("v", c_void_p), ("n_kv_heads", c_int), ("n_q_heads", c_int),
                ("page_tokens", c_int), ("window", c_int), ("sink", c_int)]


class CudaBatch(Structure):
    _fields_ = [("n_seq", c_int), ("pages", c_void_p), ("block_table", c_void_p), ("max_pages", c_int),
                ("main_len", c_void_p), ("win_len", c_void_p), ("window", c_void_p), ("max_main_len", c_int),
                ("seq_map", c_void_p), ("sink_len", c_void_p), ("sink", c_void_p)]


_CUDA = {
    "kvq_cuda_device_count": (c_int, []),
    "kvq_cuda_plan_create": (c_int, [POINTER(_VP), _VP]),
    "kvq_cuda_plan_create_heads": (c_int, [POINTER(_VP), POINTER(_VP), c_int]),
    "kvq_cuda_plan_free": (None, [_VP]),
    "kvq_cuda_plan_code_bytes": (_SZ, [_VP]),
    "kvq_cuda_encode": (c_int, [_VP, _VP, c_int, _SZ, _VP, _VP, _VP]),
    "kvq_cuda_layer_create": (c_int, [POINTER(_VP), POINTER(CudaLayerConfig)]),
    "kvq_cuda_layer_free": (None, [_VP]),
    "kvq_cuda_layer_page_bytes": (_SZ, [_VP]),
    "kvq_cuda_layer_window_bytes": (_SZ, [_VP, c_int]),
    "kvq_cuda_layer_sink_bytes": (_SZ, [_VP, c_int]),
    "kvq_cuda_store_pages": (c_int, [_VP, c_int, _VP, _VP, c_int, _SZ, _VP, _VP, _VP]),
    "kvq_cuda_store_window": (c_int, [_VP, c_int, _VP, _VP, c_int, _SZ, _VP, _VP, _VP, _VP]),
    "kvq_cuda_store_sink": (c_int, [_VP, c_int, _VP, _VP, c_int, _SZ, _VP, _VP, _VP, _VP]),
    "kvq_cuda_attend": (c_int, [_VP, POINTER(CudaBatch), _VP, c_float, _VP, _VP]),
    "kvq_cuda_attend_workspace_bytes": (_SZ, [_VP, c_int, c_int]),
    "kvq_cuda_layer_reserve": (c_int, [_VP, c_int, c_int]),
    "kvq_cuda_attend_ws": (c_int, [_VP, POINTER(CudaBatch), _VP, c_float, _VP, _VP, _SZ, _VP]),
}

_cuda = None
_cuda_error: "str | None" = None
_cuda_lock = threading.Lock()


def cuda() -> ctypes.CDLL:
    """libkvq-cuda, loaded on the first CUDA operation (kvq.torch); OSError if this build has none.

    The wheel holds it when built with ``pip install . -Ccmake.define.KVQ_CUDA=ON``;
    $KVQ_LIBRARY_DIR (a CMake build directory with CUDA) is searched first.
    """
    global _cuda, _cuda_error
    with _cuda_lock:
        if _cuda is None:
            if _cuda_error is not None:
                raise OSError(_cuda_error)
            try:
                path = _find("kvq-cuda")
            except ImportError as e:
                _cuda_error = (f"{e}; libkvq-cuda is built only with CUDA: "
                               "pip install . -Ccmake.define.KVQ_CUDA=ON (nvcc needed)")
                raise OSError(_cuda_error) from None
            lib = ctypes.CDLL(path)
            _declare(lib, _CUDA)
            _cuda = lib
        return _cuda


def strerror(status: int) -> str:
    return core.kvq_strerror(status).decode()
