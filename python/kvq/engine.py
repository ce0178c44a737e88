"""The kvq engine from Python (include/kvq_engine.h): Model, Session, Sampler, generation."""
from __future__ import annotations

import codecs
import ctypes
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from ._errors import FileIOError, InvalidArgumentError, RangeError, check
from ._util import Handle, as_f32, check_int
from .cache import Cache, Policy, PolicyLike, _Pools, as_policy

DEFAULT_MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: the cache policy of Model.generate() (4-bit TurboQuant keys, centred and channel-scaled, 4-bit values)
DEFAULT_GENERATE_CACHE = "tq-mse:4+chscale/tq-mse:4"

Tokens = Union[Sequence[int], np.ndarray]


def _source_dir() -> Optional[str]:
    try:
        from ._build_info import SOURCE_DIR  # written by python/CMakeLists.txt at build time
    except ImportError:
        return None
    return SOURCE_DIR or None


def _repo_roots() -> List[str]:
    """Repository roots to look in: the current directory and its parents holding
    scripts/fetch-models.sh, then the source tree the package was built from."""
    roots = []
    d = os.path.abspath(os.getcwd())
    while True:
        if os.path.isfile(os.path.join(d, "scripts", "fetch-models.sh")):
            roots.append(d)
            break
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    src = _source_dir()
    if src and os.path.isfile(os.path.join(src, "scripts", "fetch-models.sh")) and src not in roots:
        roots.append(src)
    return roots


def default_model_path() -> str:
    """Where the default model is found, as the CLI finds it: $KVQ_MODELS_DIR,
    ./models, the repository's models/ (the current repository, then the one
    the package was built from). FileIOError when it is in none of them
    (``bash scripts/fetch-models.sh`` installs it)."""
    tried = []
    env = os.environ.get("KVQ_MODELS_DIR")
    if env:
        tried.append(os.path.join(env, DEFAULT_MODEL))
    tried.append(os.path.join("models", DEFAULT_MODEL))
    tried += [os.path.join(r, "models", DEFAULT_MODEL) for r in _repo_roots()]
    for p in tried:
        if os.access(p, os.R_OK):
            return p
    raise FileIOError(status=-12, call="kvq.Model", argument=DEFAULT_MODEL,
                      detail="default model not found in " + ", ".join(tried) +
                             " (bash scripts/fetch-models.sh installs it)")


def _ids(tokens: Tokens, n_vocab: int, name: str = "tokens") -> np.ndarray:
    """tokens as a C-contiguous int32 array (an int32 ndarray is used as is; a list is converted)."""
    if isinstance(tokens, np.ndarray) and tokens.dtype == np.int32 and tokens.ndim == 1 and \
            tokens.flags.c_contiguous:
        arr = tokens
    else:
        if isinstance(tokens, (str, bytes)):
            raise TypeError(f"{name} must be token ids (ints), not {type(tokens).__name__}; use model.tokenize()")
        try:
            a64 = np.asarray(tokens, dtype=np.int64)
        except (TypeError, ValueError, OverflowError) as e:
            raise TypeError(f"{name} must be a sequence of ints: {e}") from None
        if a64.ndim != 1:
            raise ValueError(f"{name} must be one-dimensional, has shape {a64.shape}")
        arr = a64.astype(np.int32)
        if a64.size and (a64.min() < 0 or a64.max() >= n_vocab):
            bad = int(a64[(a64 < 0) | (a64 >= n_vocab)][0])
            raise InvalidArgumentError(f"token id {bad} out of range [0, {n_vocab})", status=-2, argument=bad)
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= n_vocab):
        bad = int(arr[(arr < 0) | (arr >= n_vocab)][0])
        raise InvalidArgumentError(f"token id {bad} out of range [0, {n_vocab})", status=-2, argument=bad)
    return arr


@dataclass(frozen=True)
class ModelInfo:
    """Hyperparameters of a loaded model (kvq_model_info)."""
    path: str
    architecture: str          #: "llama", "qwen2", "gemma3"
    name: str
    n_layers: int
    n_heads: int               #: query heads
    n_kv_heads: int            #: key/value heads (grouped-query attention)
    head_dim: int
    n_vocab: int
    context_length: int        #: trained context (0 if unknown)
    sliding_windows: Tuple[int, ...]  #: per layer, 0 = global attention
    n_embd: int
    n_ff: int
    n_rot: int
    rope_base: float
    has_tokenizer: bool
    has_chat_template: bool
    add_bos: bool
    bos: int
    eos: int
    n_weight_bytes: int        #: every weight tensor, coded ones at their coded size
    n_coded: int = 0           #: matrices computed on kvq codes (``Model(weights=...)`` or a ``kvq quantize`` file)
    coded_bits: float = 0.0    #: their bits per weight, every stored byte counted (0 if none)
    weights_spec: str = ""     #: their codec spec, e.g. "tcq:4" ("" if none)
    raw: dict = field(repr=False, compare=False, default_factory=dict)  #: every kvq_model_info field

    @property
    def kv_bytes_per_token_f16(self) -> int:
        """What one token costs in an f16 cache: n_layers * n_kv_heads * head_dim * 2 * 2."""
        return self.n_layers * self.n_kv_heads * self.head_dim * 4


def _weights_args(weights: Optional[str], keep: Union[str, Sequence[str], None], seed: int,
                  threads: int) -> Optional[str]:
    """Checks Model()'s weight arguments before the file is mapped; returns keep as one comma list."""
    if weights is None:
        if keep is not None:
            raise InvalidArgumentError(status=-2, call="kvq.Model", argument=keep, detail="keep needs weights")
        return None
    if not isinstance(weights, str) or not weights or "\0" in weights:
        raise InvalidArgumentError(status=-2, call="kvq.Model", argument=weights,
                                   detail="weights must be a codec spec string such as 'tcq:4' or 'tq-mse:4@128'")
    if keep is not None and not isinstance(keep, str):
        keep = ",".join(keep)
    if keep is not None and "\0" in keep:
        raise InvalidArgumentError(status=-2, call="kvq.Model", argument=keep, detail="NUL in keep")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 64:
        raise InvalidArgumentError(status=-2, call="kvq.Model", argument=seed, detail="seed must be an int in [0, 2**64)")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InvalidArgumentError(status=-2, call="kvq.Model", argument=threads, detail="threads must be an int >= 1")
    return keep


def _code_weights(lib, ptr: int, weights: str, keep: Optional[str], seed: int, threads: int) -> None:
    """kvq_model_quantize_weights on a freshly loaded model (no session exists yet)."""
    pools = _Pools()
    err = ctypes.create_string_buffer(512)
    try:  # ctypes releases the GIL around the call (coding a model takes seconds)
        rc = lib.kvq_model_quantize_weights(ptr, weights.encode(), None if keep is None else keep.encode(),
                                            seed, pools.get(threads), err, len(err))
    finally:
        pools.free()
    check(rc, "kvq_model_quantize_weights", argument=weights, detail=err.value.decode("utf-8", "replace"))


class Model:
    """A GGUF model loaded by the kvq engine (kvq_model_load).

    ``Model()`` loads the default model (models/SmolLM2-135M-Instruct.Q4_1.gguf,
    found as the CLI finds it: $KVQ_MODELS_DIR, ./models, the repository's
    models/). The model is immutable: any number of sessions and threads may
    use it at once. Errors: FileIOError (missing, unreadable, a directory),
    FormatError / TruncatedError (a damaged file), UnsupportedError, with the
    loader's reason in ``.detail``.

    Example::

        m = kvq.Model()
        for piece in m.generate("Give three tips for staying healthy.", chat=True):
            print(piece, end="", flush=True)
    """

    def __init__(self, path: Union[str, os.PathLike, None] = None, *, weights: Optional[str] = None,
                 keep: Union[str, Sequence[str], None] = None, seed: int = 0, threads: int = 2) -> None:
        self._h = None
        lib = _lib.engine()
        if path is None:
            path = default_model_path()
        spath = os.fspath(path)
        if not isinstance(spath, str):
            spath = os.fsdecode(spath)
        if "\0" in spath:
            raise FileIOError(status=-12, call="kvq_model_load", argument=spath, detail="NUL in path")
        keep_s = _weights_args(weights, keep, seed, threads)
        out = ctypes.c_void_p()
        err = ctypes.create_string_buffer(512)
        check(lib.kvq_model_load(ctypes.byref(out), os.fsencode(spath), err, len(err)), "kvq_model_load",
              argument=spath, detail=err.value.decode("utf-8", "replace"))
        self._lib = lib
        self._h = Handle(out.value, lib.kvq_model_free, f"kvq.Model({spath!r})")
        if weights is not None:
            try:
                _code_weights(lib, out.value, weights, keep_s, seed, threads)
            except BaseException:
                self.close()
                raise
        self._read_info(out.value, spath)
        self._piece_cache: dict = {}

    def _read_info(self, ptr: int, spath: str) -> None:
        lib = self._lib
        out = ctypes.c_void_p(ptr)
        st = _lib.ModelInfoStruct()
        check(lib.kvq_model_get_info(out.value, ctypes.byref(st)), "kvq_model_get_info")
        raw = {}
        for name, _t in st._fields_:
            if name == "sliding_window":
                continue  # a pointer into the model: read through kvq_model_layer_window below
            v = getattr(st, name)
            raw[name] = v.decode("utf-8", "replace") if isinstance(v, bytes) else (list(v) if name == "type_count" else v)
        windows = tuple(lib.kvq_model_layer_window(out.value, l) for l in range(st.n_layers))
        self.info = ModelInfo(
            path=spath, architecture=raw["arch"], name=raw["name"], n_layers=st.n_layers, n_heads=st.n_head,
            n_kv_heads=st.n_head_kv, head_dim=st.head_dim, n_vocab=st.n_vocab, context_length=st.n_ctx_train,
            sliding_windows=windows, n_embd=st.n_embd, n_ff=st.n_ff, n_rot=st.n_rot, rope_base=st.rope_base,
            has_tokenizer=bool(st.has_tokenizer), has_chat_template=bool(st.has_chat_template),
            add_bos=bool(st.add_bos), bos=st.bos, eos=st.eos, n_weight_bytes=st.n_weight_bytes,
            n_coded=st.n_coded, coded_bits=st.coded_bits, weights_spec=raw["weights_spec"], raw=raw)

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Writes the model as a GGUF file (kvq_model_save, as ``kvq quantize``): the source's metadata and
        tensors, the coded matrices as kvq-coded tensors (docs/FORMAT.md) that ``Model(path)`` loads back
        without re-coding (calibrated specs with their statistics). Written to PATH.tmp and renamed: a failure
        leaves no half file. Errors: UnsupportedError for a source tensor the writer cannot size, FileIOError,
        with the reason in ``.detail``.

        Example::

            kvq.Model("in.gguf", weights="tcq:4").save("out.kvq.gguf")
        """
        spath = os.fsdecode(os.fspath(path))
        if "\0" in spath:
            raise FileIOError(status=-12, call="kvq_model_save", argument=spath, detail="NUL in path")
        err = ctypes.create_string_buffer(512)
        p = self._h.acquire()
        try:
            rc = self._lib.kvq_model_save(p, os.fsencode(spath), err, len(err))
        finally:
            self._h.release()
        check(rc, "kvq_model_save", argument=spath, detail=err.value.decode("utf-8", "replace"))

    # ------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Releases the model; sessions still open keep it alive until they close."""
        if self._h is not None:
            self._h.close()

    @property
    def closed(self) -> bool:
        return self._h.closed

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        i = self.info
        return (f"<kvq.Model {i.name or i.path!r} {i.architecture} layers={i.n_layers} heads={i.n_heads}/"
                f"{i.n_kv_heads} head_dim={i.head_dim}{' closed' if self.closed else ''}>")

    # ------------------------------------------------------------ tokenizer
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> List[int]:
        """Token ids of text (UTF-8). add_special: BOS/EOS as the model adds them;
        parse_special: control tokens written in the text ("<|im_start|>") become their ids."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, not {type(text).__name__}")
        raw = text.encode("utf-8", "surrogatepass")
        cap = len(raw) + 16
        n = ctypes.c_size_t()
        p = self._h.acquire()
        try:
            for _ in range(2):
                buf = np.empty(cap, dtype=np.int32)
                rc = self._lib.kvq_tokenize(p, raw, len(raw), int(bool(add_special)), int(bool(parse_special)),
                                            buf.ctypes.data, cap, ctypes.byref(n))
                if rc == RangeError.status and n.value > cap:
                    cap = n.value
                    continue
                check(rc, "kvq_tokenize")
                return buf[: n.value].tolist()
            raise RangeError(status=-7, call="kvq_tokenize")
        finally:
            self._h.release()

    def token_bytes(self, token: int) -> bytes:
        """The bytes of one token (a UTF-8 character may span tokens; control tokens give b"")."""
        token = check_int(token, "token", -(2**31), 2**31 - 1)
        got = self._piece_cache.get(token)
        if got is not None:
            return got
        p = self._h.acquire()
        try:
            cap, n = 64, ctypes.c_size_t()
            for _ in range(2):
                buf = ctypes.create_string_buffer(cap)
                rc = self._lib.kvq_token_to_piece(p, token, buf, cap, ctypes.byref(n))
                if rc == RangeError.status and n.value > cap:
                    cap = n.value
                    continue
                check(rc, "kvq_token_to_piece", argument=token)
                b = buf.raw[: n.value]
                self._piece_cache[token] = b
                return b
            raise RangeError(status=-7, call="kvq_token_to_piece", argument=token)
        finally:
            self._h.release()

    def detokenize(self, tokens: Tokens) -> str:
        """The text of token ids (invalid UTF-8 replaced by U+FFFD)."""
        ids = _ids(tokens, self.info.n_vocab)
        return b"".join(self.token_bytes(int(t)) for t in ids).decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        """True if token ends generation (EOS, end of turn)."""
        token = check_int(token, "token", -(2**31), 2**31 - 1)
        p = self._h.acquire()
        try:
            return bool(self._lib.kvq_token_is_eog(p, token))
        finally:
            self._h.release()

    def chat_prompt(self, user: str, system: Optional[str] = None) -> str:
        """One user turn and the assistant's prefix in the model's chat format
        (system None: the template's default; "": none). Tokenize it with
        parse_special=True, as generate(chat=True) does."""
        if not isinstance(user, str) or (system is not None and not isinstance(system, str)):
            raise TypeError("user and system must be str")
        u = user.encode("utf-8", "surrogatepass")
        s = None if system is None else system.encode("utf-8", "surrogatepass")
        if b"\0" in u or (s and b"\0" in s):
            raise InvalidArgumentError("NUL character in a chat turn", status=-2)
        n = ctypes.c_size_t()
        p = self._h.acquire()
        try:
            probe = ctypes.create_string_buffer(1)
            rc = self._lib.kvq_chat_format(p, s, u, probe, 1, ctypes.byref(n))
            if rc and rc != RangeError.status:
                check(rc, "kvq_chat_format")
            buf = ctypes.create_string_buffer(n.value + 1)
            check(self._lib.kvq_chat_format(p, s, u, buf, len(buf), ctypes.byref(n)), "kvq_chat_format")
            return buf.raw[: n.value].decode("utf-8", "replace")
        finally:
            self._h.release()

    # ------------------------------------------------------------ evaluation
    def session(self, policy: PolicyLike = "f16", threads: int = 2, *, seed: Optional[int] = None,
                n_batch: int = 0, f32_acts: bool = False) -> "Session":
        """A new Session (one sequence with its own compressed cache) on this model."""
        return Session(self, policy, threads, seed=seed, n_batch=n_batch, f32_acts=f32_acts)

    def logits(self, tokens: Tokens, cache: Union[PolicyLike, "Session"] = "f16", all: bool = False,
               threads: int = 2) -> np.ndarray:
        """Logits after tokens: (n_vocab,) for the last position, or (n, n_vocab) with all=True.
        cache: a policy (a fresh session is used and freed) or a Session (its
        sequence continues with these tokens)."""
        if isinstance(cache, Session):
            return cache.eval(tokens, all=all)
        with self.session(cache, threads) as s:
            return s.eval(tokens, all=all)

    def generate(self, prompt: Union[str, Tokens], max_tokens: int = 128, cache: Union[PolicyLike, "Session"] = DEFAULT_GENERATE_CACHE,
                 temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                 repeat_penalty: float = 1.0, seed: int = 0, chat: bool = False, system: Optional[str] = None,
                 threads: int = 2, *, tokens: bool = False, repeat_last_n: int = 64) -> "Generation":
        """Generates text as ``kvq run`` does, yielding pieces as they come.

        Returns a Generation: iterate it for the text pieces (str; token ids
        with ``tokens=True``); each step is one C call with the GIL released.
        The defaults are kvq run's sampling defaults (kvq_sampler_run_params)
        with a compressed cache; the same arguments give the same tokens as
        ``kvq run -p PROMPT -n max_tokens --cache-k K --cache-v V --temp T
        --top-k .. --seed S [--chat]``. prompt: text (chat=True wraps it in
        the chat template with `system`) or token ids. cache: a policy or an
        existing Session to continue.
        """
        return Generation(self, prompt, max_tokens=max_tokens, cache=cache, temperature=temperature, top_k=top_k,
                          top_p=top_p, min_p=min_p, repeat_penalty=repeat_penalty, repeat_last_n=repeat_last_n,
                          seed=seed, chat=chat, system=system, threads=threads, yield_tokens=tokens)


class Session:
    """One sequence on a model: its compressed KV cache, activation buffers and position
    (kvq_session). Used by one thread at a time (calls are serialized by a lock)."""

    def __init__(self, model: Model, policy: PolicyLike = "f16", threads: int = 2, *, seed: Optional[int] = None,
                 n_batch: int = 0, f32_acts: bool = False) -> None:
        self._h = None
        if not isinstance(model, Model):
            raise TypeError(f"model must be a kvq.Model, not {type(model).__name__}")
        lib = _lib.engine()
        self._lib = lib
        self.model = model
        self._policy = as_policy(policy)
        self._threads = check_int(threads, "threads", 1, 1024)
        prm = lib.kvq_session_default_params()
        lib.kvq_session_params_set_policy(ctypes.byref(prm), ctypes.byref(self._policy._s))
        if seed is not None:
            prm.seed = check_int(seed, "seed", 0, 2**64 - 1)
        prm.n_batch = check_int(n_batch, "n_batch", 0, _lib.INT_MAX) or prm.n_batch
        prm.f32_acts = 1 if f32_acts else 0
        mptr = model._h.acquire()
        pool = ctypes.c_void_p()
        try:
            if self._threads > 1:
                check(_lib.core.kvq_pool_create(ctypes.byref(pool), self._threads), "kvq_pool_create",
                      argument=self._threads)
            out = ctypes.c_void_p()
            rc = lib.kvq_session_create(ctypes.byref(out), mptr, ctypes.byref(prm), pool.value)
            if rc:
                _lib.core.kvq_pool_free(pool.value)
                check(rc, "kvq_session_create", argument=self._policy.name)
            poolv = pool.value

            def free(p: int) -> None:
                lib.kvq_session_free(p)
                _lib.core.kvq_pool_free(poolv)

            self._lock = threading.Lock()
            self._h = Handle(out.value, free, "kvq.Session", deps=(model._h,))
        finally:
            model._h.release()
        self._nv = model.info.n_vocab
        self._logits = np.empty(self._nv, dtype=np.float32)
        self._cache: Optional[Cache] = None

    def close(self) -> None:
        """Frees the session (and its cache)."""
        if self._cache is not None:
            self._cache.close()
        if self._h is not None:
            self._h.close()

    @property
    def closed(self) -> bool:
        return self._h.closed

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def _enter(self) -> int:
        self._lock.acquire()
        try:
            return self._h.acquire()
        except BaseException:
            self._lock.release()
            raise

    def _leave(self) -> None:
        self._h.release()
        self._lock.release()

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def pos(self) -> int:
        """Tokens evaluated so far."""
        p = self._enter()
        try:
            return self._lib.kvq_session_pos(p)
        finally:
            self._leave()

    def __len__(self) -> int:
        return self.pos

    def eval(self, tokens: Tokens, logits: bool = True, all: bool = False) -> Optional[np.ndarray]:
        """Evaluates tokens at positions pos .. pos+n-1 (one batch, in chunks of n_batch).
        Returns the last position's logits (n_vocab,), every position's (n, n_vocab)
        with all=True, or None with logits=False. On error the position is unchanged."""
        ids = _ids(tokens, self._nv)
        n = ids.shape[0]
        if n == 0:
            raise InvalidArgumentError("no tokens to evaluate", status=-2, argument=[])
        if not logits:
            out, optr = None, None
        else:
            out = np.empty((n, self._nv) if all else (self._nv,), dtype=np.float32)
            optr = out.ctypes.data
        p = self._enter()
        try:
            check(self._lib.kvq_session_eval(p, ids.ctypes.data, n, optr, 1 if (all and logits) else 0),
                  "kvq_session_eval")
        finally:
            self._leave()
        return out

    def _eval_into(self, ids: np.ndarray, out: np.ndarray) -> None:
        p = self._enter()
        try:
            check(self._lib.kvq_session_eval(p, ids.ctypes.data, ids.shape[0], out.ctypes.data, 0),
                  "kvq_session_eval")
        finally:
            self._leave()

    def truncate(self, pos: int) -> None:
        """Forgets positions >= pos (StateError: a sliding-window layer already dropped what pos needs)."""
        pos = check_int(pos, "pos", 0, _lib.SIZE_MAX)
        p = self._enter()
        try:
            check(self._lib.kvq_session_truncate(p, pos), "kvq_session_truncate", argument=pos)
        finally:
            self._leave()

    @property
    def cache(self) -> Cache:
        """The session's kvq.Cache (memory figures, lengths, attend on its layers); owned by the session."""
        if self._cache is None:
            p = self._enter()
            try:
                cp = self._lib.kvq_session_cache(p)
            finally:
                self._leave()
            i = self.model.info
            self._cache = Cache._borrowed(cp, self._h, self._lock, i.n_layers, i.n_kv_heads, i.head_dim,
                                          self._policy, list(i.sliding_windows), self._threads)
        return self._cache

    @property
    def kernels(self) -> str:
        """Names of the weight kernels in use ("avx512-vnni q8 acts")."""
        p = self._enter()
        try:
            return self._lib.kvq_session_kernels(p).decode()
        finally:
            self._leave()

    def state_bytes(self) -> int:
        """Bytes of the activation buffers (the run state beside the cache)."""
        p = self._enter()
        try:
            return self._lib.kvq_session_state_bytes(p)
        finally:
            self._leave()

    def __repr__(self) -> str:
        if self.closed:
            return "<kvq.Session closed>"
        return f"<kvq.Session {self._policy.name!r} pos={self.pos}>"


class Sampler:
    """Token sampler with its own seeded RNG (kvq_sampler), llama.cpp's order:
    repetition penalty, temperature (<= 0 or top_k == 1: argmax), top-k, top-p,
    min-p, sampling. Defaults are kvq run's (kvq_sampler_run_params)."""

    def __init__(self, n_vocab: int, temperature: Optional[float] = None, top_k: Optional[int] = None,
                 top_p: Optional[float] = None, min_p: Optional[float] = None,
                 repeat_penalty: Optional[float] = None, repeat_last_n: Optional[int] = None, seed: int = 0) -> None:
        self._h = None
        lib = _lib.engine()
        self._lib = lib
        prm = lib.kvq_sampler_run_params()
        for name, v in (("temperature", temperature), ("top_p", top_p), ("min_p", min_p),
                        ("repeat_penalty", repeat_penalty)):
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
                    raise TypeError(f"{name} must be a number")
                setattr(prm, name, float(v))
        if top_k is not None:
            prm.top_k = check_int(top_k, "top_k", -(2**31), _lib.INT_MAX)
        if repeat_last_n is not None:
            prm.repeat_last_n = check_int(repeat_last_n, "repeat_last_n", -(2**31), _lib.INT_MAX)
        prm.seed = check_int(seed, "seed", 0, 2**64 - 1)
        self.n_vocab = check_int(n_vocab, "n_vocab", 0, _lib.INT_MAX)
        self.params = {name: getattr(prm, name) for name, _ in prm._fields_}
        out = ctypes.c_void_p()
        check(lib.kvq_sampler_create(ctypes.byref(out), ctypes.byref(prm), self.n_vocab), "kvq_sampler_create",
              argument=self.params)
        self._h = Handle(out.value, lib.kvq_sampler_free, "kvq.Sampler")
        self._out = ctypes.c_int32()
        self._lock = threading.Lock()

    def close(self) -> None:
        if self._h is not None:
            self._h.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self) -> "Sampler":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def accept(self, token: int) -> None:
        """Records a token (prompt or generated) for the repetition penalty."""
        token = check_int(token, "token", -(2**31), 2**31 - 1)
        with self._lock:
            p = self._h.acquire()
            try:
                check(self._lib.kvq_sampler_accept(p, token), "kvq_sampler_accept", argument=token)
            finally:
                self._h.release()

    def sample(self, logits: np.ndarray) -> int:
        """Picks the next token from logits (n_vocab,) float32 (not modified; not accepted).
        NonFiniteError when a logit is NaN or all are -inf."""
        logits = as_f32(logits, "logits", (1,), last=self.n_vocab)
        with self._lock:
            p = self._h.acquire()
            try:
                check(self._lib.kvq_sampler_sample(p, logits.ctypes.data, ctypes.byref(self._out)),
                      "kvq_sampler_sample")
                return self._out.value
            finally:
                self._h.release()

    def reset(self, seed: int) -> None:
        """Forgets the accepted tokens and restarts the RNG from seed."""
        seed = check_int(seed, "seed", 0, 2**64 - 1)
        with self._lock:
            p = self._h.acquire()
            try:
                self._lib.kvq_sampler_reset(p, seed)
            finally:
                self._h.release()


class Generation:
    """An ongoing generation (Model.generate): an iterator of text pieces (or token ids).

    The loop is kvq run's (tools/run.c, kvq_generate): accept the prompt into
    the sampler, evaluate it, then sample; stop at an end-of-generation token
    (not emitted); emit, accept, and evaluate the token, until max_tokens or
    the trained context is full. After the iteration: ``tokens`` (generated
    ids), ``stop`` ("length", "eog", "context"), ``n_prompt``, timings,
    ``session`` (its cache's memory figures).
    """

    def __init__(self, model: Model, prompt, *, max_tokens, cache, temperature, top_k, top_p, min_p,
                 repeat_penalty, repeat_last_n, seed, chat, system, threads, yield_tokens) -> None:
        self.model = model
        self.max_tokens = check_int(max_tokens, "max_tokens", 0, 2**62)
        if isinstance(prompt, str):
            text = model.chat_prompt(prompt, system) if chat else prompt
            ids = model.tokenize(text, add_special=True, parse_special=bool(chat))
        else:
            if chat:
                raise TypeError("chat=True needs the prompt as text")
            ids = _ids(prompt, model.info.n_vocab, "prompt").tolist()
        self.prompt_tokens: List[int] = list(ids)
        self.n_prompt = len(ids)
        self._own = False
        if self.n_prompt == 0 and (not isinstance(cache, Session) or cache.pos == 0):
            raise InvalidArgumentError("the prompt has no tokens", status=-2, argument=prompt)
        self.sampler = Sampler(model.info.n_vocab, temperature, top_k, top_p, min_p, repeat_penalty,
                               repeat_last_n, seed)
        if isinstance(cache, Session):
            self.session = cache
        else:
            self.session, self._own = model.session(cache, threads), True
        self.tokens: List[int] = []
        self.stop: Optional[str] = None
        self.prompt_seconds = 0.0
        self.generate_seconds = 0.0
        self._yield_tokens = yield_tokens
        self._it = self._run()

    def __iter__(self) -> "Generation":
        return self

    def __next__(self):
        return next(self._it)

    @property
    def text(self) -> str:
        """The text generated so far."""
        return self.model.detokenize(self.tokens)

    def read(self) -> str:
        """Runs the generation to its end and returns the whole text."""
        for _ in self:
            pass
        return self.text

    def _run(self) -> Iterator:
        m, s, smp = self.model, self.session, self.sampler
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        logits = np.empty(m.info.n_vocab, dtype=np.float32)
        ctx_max = m.info.context_length if m.info.context_length > 0 else 1 << 30
        try:
            for t in self.prompt_tokens:
                smp.accept(t)
            t0 = time.perf_counter()
            if self.prompt_tokens:
                s._eval_into(np.asarray(self.prompt_tokens, dtype=np.int32), logits)
            t1 = time.perf_counter()
            self.prompt_seconds = t1 - t0
            self.stop = "length"
            one = np.empty(1, dtype=np.int32)
            n_done = 0
            while n_done < self.max_tokens:
                nxt = smp.sample(logits)
                if m.is_eog(nxt):
                    self.stop = "eog"
                    break
                smp.accept(nxt)
                self.tokens.append(nxt)
                n_done += 1
                if self._yield_tokens:
                    yield nxt
                else:
                    piece = dec.decode(m.token_bytes(nxt))
                    if piece:
                        yield piece
                if n_done == self.max_tokens:
                    break
                if s.pos >= ctx_max:
                    self.stop = "context"
                    break
                one[0] = nxt
                s._eval_into(one, logits)
            self.generate_seconds = time.perf_counter() - t1
            if not self._yield_tokens:
                rest = dec.decode(b"", final=True)
                if rest:
                    yield rest
        finally:
            self.sampler.close()

    def close(self) -> None:
        """Stops the generation and frees its session (if it made one)."""
        it = getattr(self, "_it", None)
        if it is not None:
            it.close()
        if getattr(self, "_own", False):
            self.session.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
