"""The engine from Python: model info, tokenizer, logits, sessions, and generation
equal to `kvq run` (greedy and seeded), bad model files."""
from __future__ import annotations

import ctypes
import os
import shutil

import numpy as np
import pytest

import kvq
from conftest import run_cli

PROMPT = "The capital of France is"
CACHE_K, CACHE_V = "tq-mse:4+chscale", "tq-mse:4"


def cli_run(cli, model_path, *args):
    r = run_cli(cli, "run", "-m", model_path, *args)
    return r.stdout


def test_info(smollm):
    i = smollm.info
    assert i.architecture == "llama" and i.n_layers == 30 and i.head_dim == 64
    assert i.n_heads == 9 and i.n_kv_heads == 3 and i.n_vocab == 49152
    assert i.context_length > 0 and i.sliding_windows == (0,) * 30
    assert i.has_tokenizer and i.has_chat_template and i.kv_bytes_per_token_f16 == 30 * 3 * 64 * 4
    assert "llama" in repr(smollm)


def test_gemma_sliding_windows(gemma_path):
    with kvq.Model(gemma_path) as m:
        w = m.info.sliding_windows
        assert m.info.architecture == "gemma3" and len(w) == m.info.n_layers
        assert 0 in w and max(w) > 0  # local layers with a window, global layers without
        with m.session("tq-mse:4", threads=2) as s:
            lg = s.eval(m.tokenize("Hello there"))
            assert np.isfinite(lg).all()
            assert s.cache.sliding_window == list(w)


def test_tokenizer(smollm):
    ids = smollm.tokenize("Hello world")
    assert ids and all(isinstance(t, int) for t in ids)
    assert smollm.detokenize(ids) == "Hello world"
    assert smollm.detokenize(np.asarray(ids, np.int32)) == "Hello world"
    text = "naïve café — 東京 🙂"
    assert smollm.detokenize(smollm.tokenize(text, add_special=False)) == text
    chat = smollm.chat_prompt("Hi", system="Be brief.")
    assert "Be brief." in chat and "Hi" in chat and "<|im_start|>" in chat
    special = smollm.tokenize("<|im_start|>", add_special=False, parse_special=True)
    plain = smollm.tokenize("<|im_start|>", add_special=False, parse_special=False)
    assert len(special) == 1 and len(plain) > 1
    assert smollm.token_bytes(special[0]) == b"" or smollm.is_eog(special[0]) in (True, False)
    assert smollm.tokenize("", add_special=False) == []
    long = "word " * 5000
    assert len(smollm.tokenize(long)) >= 5000  # grows the buffer (KVQ_ERR_RANGE path)


def test_logits_and_sessions(smollm):
    ids = smollm.tokenize(PROMPT)
    a = smollm.logits(ids)  # fresh f16 session
    assert a.shape == (49152,) and a.dtype == np.float32 and np.isfinite(a).all()
    allp = smollm.logits(ids, all=True)
    assert allp.shape == (len(ids), 49152)
    assert np.allclose(allp[-1], a, atol=1e-4)
    with smollm.session("tq-mse:4+chscale/tq-mse:4", threads=2) as s:
        first = smollm.logits(ids[:3], cache=s)
        rest = smollm.logits(ids[3:], cache=s)  # the session continues
        assert s.pos == len(ids) and len(s) == len(ids)
        c = s.cache
        assert c.length(0) == len(ids) and 0 < c.memory_bytes() and str(c.policy) == "tq-mse:4+chscale/tq-mse:4"
        assert s.state_bytes() > 0 and s.kernels
        s.truncate(3)
        again = s.eval(ids[3:])
        assert np.array_equal(again, rest)
        assert first.shape == (49152,)
        with pytest.raises(kvq.InvalidArgumentError):
            s.eval([49152])
        with pytest.raises(kvq.InvalidArgumentError):
            s.eval([-1])
        with pytest.raises(kvq.InvalidArgumentError):
            s.eval([])
        with pytest.raises(TypeError):
            s.eval("text")
        assert s.pos == len(ids)  # errors leave the position unchanged
        assert s.eval([1, 2], logits=False) is None
    with pytest.raises(kvq.ClosedError):
        s.eval(ids)
    with pytest.raises(kvq.NoDecodeError):
        smollm.session("q8/qjl")
    with pytest.raises(kvq.InvalidArgumentError):
        smollm.session("q8,f16layers=40")


def test_greedy_equals_kvq_run(cli, smollm, smollm_path):
    out = cli_run(cli, smollm_path, "-p", PROMPT, "-n", "24", "--temp", "0", "--cache-k", CACHE_K,
                  "--cache-v", CACHE_V, "--threads", "2")
    g = smollm.generate(PROMPT, max_tokens=24, temperature=0, cache=f"{CACHE_K}/{CACHE_V}")
    text = "".join(g)
    assert out.startswith(PROMPT.encode())  # kvq run echoes a plain prompt
    assert b"".join(smollm.token_bytes(t) for t in g.tokens) == out[len(PROMPT):-1]
    assert text == out[len(PROMPT):-1].decode("utf-8", "replace")
    assert g.stop in ("length", "eog") and len(g.tokens) <= 24 and g.n_prompt == len(smollm.tokenize(PROMPT))


def test_seeded_chat_equals_kvq_run(cli, smollm, smollm_path):
    q = "Give three tips for staying healthy."
    out = cli_run(cli, smollm_path, "-p", q, "--chat", "-n", "40", "--seed", "7", "--cache-k", CACHE_K,
                  "--cache-v", CACHE_V)
    g = smollm.generate(q, max_tokens=40, chat=True, seed=7)  # kvq run's sampling defaults
    pieces = list(g)
    assert b"".join(smollm.token_bytes(t) for t in g.tokens) == out[:-1]
    assert "".join(pieces) == g.text
    # another seed gives another text; the same seed the same
    assert smollm.generate(q, max_tokens=40, chat=True, seed=7, tokens=True).read() == g.text
    ids = list(smollm.generate(q, max_tokens=40, chat=True, seed=7, tokens=True))
    assert ids == g.tokens


def test_generate_matches_c_kvq_generate(smollm):
    """The Python loop gives the tokens of the library's kvq_generate (same session policy, sampler)."""
    lib = kvq._lib.engine()
    prompt = smollm.tokenize(PROMPT)
    g = smollm.generate(prompt, max_tokens=16, seed=3, cache="q8/tq-mse:4", tokens=True)
    mine = list(g)
    got = []
    cb_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int32)
    cb = cb_t(lambda user, tok: got.append(tok) or 0)
    lib.kvq_generate.restype = ctypes.c_int
    lib.kvq_generate.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                                 cb_t, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_int)]
    s = smollm.session("q8/tq-mse:4", threads=2)
    smp = kvq.Sampler(smollm.info.n_vocab, seed=3)
    ids = np.asarray(prompt, np.int32)
    n, stop = ctypes.c_size_t(), ctypes.c_int()
    sp, mp = s._h.acquire(), smp._h.acquire()
    try:
        rc = lib.kvq_generate(sp, mp, ids.ctypes.data, len(ids), 16, cb, None, ctypes.byref(n), ctypes.byref(stop))
    finally:
        s._h.release()
        smp._h.release()
    assert rc == 0 and got == mine and n.value == len(mine)


def test_generation_object(smollm):
    g = smollm.generate("Hello", max_tokens=5, temperature=0, cache="f16")
    assert g.stop is None
    text = g.read()
    assert g.stop in ("length", "eog") and text == g.text and g.session.pos >= g.n_prompt
    g.close()
    g2 = smollm.generate("Hello", max_tokens=0)
    assert list(g2) == [] and g2.stop == "length"
    with pytest.raises(kvq.InvalidArgumentError):
        smollm.generate([], max_tokens=3)
    with pytest.raises(TypeError):
        smollm.generate([1, 2], chat=True)
    with pytest.raises(kvq.InvalidArgumentError):
        smollm.generate("Hello", max_tokens=-1)
    with pytest.raises(kvq.UnknownMethodError):
        smollm.generate("Hello", cache="tq-zip:4")
    with smollm.session("f16") as s:
        a = smollm.generate("Once upon a time", max_tokens=4, temperature=0, cache=s, tokens=True)
        first = list(a)
        assert s.pos == len(smollm.tokenize("Once upon a time")) + 3
        b = list(smollm.generate([first[-1]], max_tokens=3, temperature=0, cache=s, tokens=True))
        assert len(b) == 3  # continues the same sequence


def test_sampler(smollm):
    with pytest.raises(kvq.InvalidArgumentError):
        kvq.Sampler(100, repeat_penalty=0.0)
    with pytest.raises(kvq.InvalidArgumentError):
        kvq.Sampler(100, temperature=float("nan"))
    with pytest.raises(kvq.InvalidArgumentError):
        kvq.Sampler(0)
    s = kvq.Sampler(8, temperature=0)
    lg = np.arange(8, dtype=np.float32)
    assert s.sample(lg) == 7
    lg[3] = np.nan
    with pytest.raises(kvq.NonFiniteError):
        s.sample(lg)
    with pytest.raises(kvq.NonFiniteError):
        s.sample(np.full(8, -np.inf, np.float32))
    with pytest.raises(ValueError):
        s.sample(np.zeros(9, np.float32))
    s.accept(3)
    s.reset(1)
    s.close()
    with pytest.raises(kvq.ClosedError):
        s.sample(np.zeros(8, np.float32))


def test_model_files(tmp_path, smollm_path):
    with pytest.raises(kvq.FileIOError) as e:
        kvq.Model(str(tmp_path / "missing.gguf"))
    assert e.value.status == -12 and isinstance(e.value, OSError)
    with pytest.raises(kvq.FileIOError):
        kvq.Model(str(tmp_path))  # a directory
    bad = tmp_path / "garbage.gguf"
    bad.write_bytes(b"not a gguf file at all" * 100)
    with pytest.raises(kvq.FormatError) as e:
        kvq.Model(str(bad))
    assert e.value.detail
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(kvq.FormatError):
        kvq.Model(str(empty))
    size = os.path.getsize(smollm_path)
    for cut in (16, 4096, size // 2, size - 1):
        t = tmp_path / f"cut{cut}.gguf"
        with open(smollm_path, "rb") as f, open(t, "wb") as g:
            g.write(f.read(cut))
        with pytest.raises(kvq.FormatError) as e:  # FormatError or its subclass TruncatedError
            kvq.Model(str(t))
        assert e.value.detail, cut
        t.unlink()


def test_default_model_lookup(tmp_path, monkeypatch, smollm_path):
    d = tmp_path / "mdir"
    d.mkdir()
    os.symlink(smollm_path, d / kvq.DEFAULT_MODEL)
    monkeypatch.setenv("KVQ_MODELS_DIR", str(d))
    assert kvq.default_model_path() == str(d / kvq.DEFAULT_MODEL)
    monkeypatch.delenv("KVQ_MODELS_DIR")
    monkeypatch.chdir(tmp_path)  # no ./models, no repository here: the source tree's models/
    src = kvq.engine._source_dir()
    built = os.path.join(src, "models", kvq.DEFAULT_MODEL) if src else ""
    if os.path.isfile(built):
        assert os.path.samefile(kvq.default_model_path(), built)
        with kvq.Model() as m:
            assert m.info.architecture == "llama"
    else:
        with pytest.raises(kvq.FileIOError, match="fetch-models"):
            kvq.Model()


def test_model_outlives_close(smollm_path):
    m = kvq.Model(smollm_path)
    s = m.session("q8")
    m.close()  # the session keeps the model's memory alive
    assert s.eval([1, 2, 3]).shape == (49152,)
    with pytest.raises(kvq.ClosedError):
        m.session()
    with pytest.raises(kvq.ClosedError):
        m.tokenize("x")
    s.close()
