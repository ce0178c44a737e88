"""kvq.transformers: the compressed Cache and the "kvq" attention inside transformers' models (CPU).

Tiny random-weight llama / qwen2 / gemma3 models check the mechanics against
transformers' own DynamicCache + SDPA (f32 policy: the same function to
float rounding; compressed policies: bounded error, and a padded batch
gives each sequence exactly what it gets alone); the real models
(SmolLM2-135M and Gemma 3 270M, loaded from our GGUF files by transformers'
GGUF loader) check greedy tokens and logits with the f16 policy and the
KLD against `kvq kld` on kvq's own engine.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import run_cli
from hf_util import need_module, tiny_model

torch = need_module("torch")
need_module("transformers")
from transformers import DynamicCache  # noqa: E402
import transformers  # noqa: E402

import kvq  # noqa: E402
import kvq.transformers as kt  # noqa: E402
from kvq.transformers.hf_models import load_gguf  # noqa: E402

ARCHS = ["llama", "qwen2", "gemma3"]


def logits_steps(model, ids, cache, prefill: int, chunk: int = 0):
    """Logits of a prefill of `prefill` tokens (in chunks of `chunk`, 0 = one) then one token at a time."""
    out = []
    with torch.inference_mode():
        step = chunk or prefill
        for i in range(0, prefill, step):
            out.append(model(input_ids=ids[:, i:min(prefill, i + step)], **kt.cache_kwargs(cache)).logits)
        for i in range(prefill, ids.shape[1]):
            out.append(model(input_ids=ids[:, i:i + 1], **kt.cache_kwargs(cache)).logits)
    return torch.cat(out, dim=1)


def rel(a, b) -> float:
    return float((a - b).norm() / b.norm())


@pytest.fixture(scope="module", params=ARCHS)
def tiny(request):
    return request.param, tiny_model(request.param)


def test_f32_policy_is_transformers_attention(tiny):
    arch, m = tiny
    ids = torch.randint(0, 384, (1, 60), generator=torch.Generator().manual_seed(1))
    base = logits_steps(m, ids, DynamicCache(), 40)
    for chunk in (0, 7):
        c = kt.Cache(m, policy="f32,sliding=1")
        got = logits_steps(m, ids, c, 40, chunk)
        assert rel(got, base) < 1e-5, (arch, chunk)
        assert c.get_seq_length() == 60 and c.sequence_lengths() == [60]
    assert m.config._attn_implementation == "kvq"


def test_compressed_policies_bounded(tiny):
    """Errors vs transformers' own cache shrink with the bits, and every policy runs on every architecture."""
    arch, m = tiny
    ids = torch.randint(0, 384, (1, 80), generator=torch.Generator().manual_seed(2))
    base = logits_steps(m, ids, DynamicCache(), 64)
    errs = {}
    for pol in ("f32,sliding=1", "f16,sliding=1", "q8,sliding=1", "tq-mse:4/tq-mse:4,sliding=1",
                "tq-mse:2/tq-mse:2,sliding=1", "tq-prod:3/q8", "q8/tq-mse:2,w=8", "tq-mse:4+chscale/tq-mse:4,calib=16"):
        c = kt.Cache(m, policy=pol)
        errs[pol] = rel(logits_steps(m, ids, c, 64), base)
        assert c.memory_bytes() > 0
    order = ["f32,sliding=1", "f16,sliding=1", "q8,sliding=1", "tq-mse:4/tq-mse:4,sliding=1", "tq-mse:2/tq-mse:2,sliding=1"]
    assert [errs[p] for p in order] == sorted(errs[p] for p in order), (arch, errs)
    assert errs["f32,sliding=1"] < 1e-5 and errs["f16,sliding=1"] < 2e-3 and errs["q8,sliding=1"] < 2e-2, errs
    assert all(0 < e < 1.0 for p, e in errs.items() if not p.startswith("f")), (arch, {p: round(e, 4) for p, e in errs.items()})


def test_padded_batch_equals_single_sequences(tiny):
    """Left padding: each sequence of a padded batch gets exactly the logits and tokens it gets alone."""
    arch, m = tiny
    g = torch.Generator().manual_seed(3)
    a = torch.randint(1, 384, (1, 30), generator=g)
    b = torch.randint(1, 384, (1, 19), generator=g)
    pad = 0
    ids = torch.cat([a, torch.cat([torch.full((1, 11), pad), b], dim=1)])
    mask = torch.cat([torch.ones(1, 30, dtype=torch.long),
                      torch.cat([torch.zeros(1, 11, dtype=torch.long), torch.ones(1, 19, dtype=torch.long)], 1)])
    pol = "tq-mse:4/tq-mse:4,sliding=1"
    with torch.inference_mode():
        batched = m.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=pad,
                             **kt.cache_kwargs(kt.Cache(m, policy=pol)))
        for row, single in ((0, a), (1, b)):
            alone = m.generate(single, max_new_tokens=12, do_sample=False, pad_token_id=pad,
                               **kt.cache_kwargs(kt.Cache(m, policy=pol)))
            assert torch.equal(batched[row, -12:], alone[0, -12:]), (arch, row)


def test_generate_matches_dynamic_cache_f32(tiny):
    arch, m = tiny
    ids = torch.randint(0, 384, (2, 17), generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        ref = m.generate(ids, max_new_tokens=30, do_sample=False, **kt.cache_kwargs(DynamicCache()))
        got = m.generate(ids, max_new_tokens=30, do_sample=False, **kt.cache_kwargs(kt.Cache(m, policy="f32,sliding=1")))
    assert torch.equal(got, ref)


def test_cache_kwargs_name_the_installed_argument(tiny):
    """generate and forward take kvq's Cache under the name the installed transformers expects, without a FutureWarning."""
    import warnings
    arch, m = tiny
    ids = torch.randint(0, 384, (1, 9), generator=torch.Generator().manual_seed(5))
    kw = kt.cache_kwargs(kt.Cache(m, policy="f32,sliding=1"))
    assert list(kw) == ["cache" if tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (5, 24)
                        else "past_key_values"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        with torch.inference_mode():
            got = m.generate(ids, max_new_tokens=6, do_sample=False, **kw)
            ref = m.generate(ids, max_new_tokens=6, do_sample=False, **kt.cache_kwargs(DynamicCache()))
    assert torch.equal(got, ref)
    assert kw[next(iter(kw))].get_seq_length() == ids.shape[1] + 5


def test_kvq_attention_without_kvq_cache_is_sdpa():
    m = tiny_model("gemma3")
    ids = torch.randint(0, 384, (1, 50), generator=torch.Generator().manual_seed(5))
    base = logits_steps(m, ids, DynamicCache(), 40)
    kt.register()
    m.set_attn_implementation("kvq")
    got = logits_steps(m, ids, DynamicCache(), 40)
    m.set_attn_implementation("sdpa")
    assert rel(got, base) < 1e-5


def test_errors():
    m = tiny_model("llama")
    ids = torch.randint(1, 384, (2, 12), generator=torch.Generator().manual_seed(6))
    right = torch.ones(2, 12, dtype=torch.long)
    right[1, -3:] = 0
    with torch.inference_mode(), pytest.raises(NotImplementedError, match="left padding"):
        m(input_ids=ids, attention_mask=right, **kt.cache_kwargs(kt.Cache(m, policy="q8")))
    # a non-finite key reaches the C cache's check: nothing stored, a kvq error
    with torch.inference_mode():
        c = kt.Cache(m, policy="tq-mse:4/tq-mse:4")
        store_layer = c.layers[0]
        k = torch.randn(1, 2, 3, 32)
        k[0, 1, 2, 5] = float("nan")
        kk, _ = c.update(k, torch.randn(1, 2, 3, 32), 0)
        q = torch.randn(1, 4, 3, 32)
        with pytest.raises(kvq.NonFiniteError):
            kt.kvq_attention_forward(m.model.layers[0].self_attn, q, kk, None, None, scaling=0.2)
        assert store_layer.store.lengths() == [0]
    with pytest.raises(kvq.UnknownMethodError):
        kt.Cache(m, policy="nope:4")
    c = kt.Cache(m, policy="q8")
    with torch.inference_mode():
        m(input_ids=ids, **kt.cache_kwargs(c))
    with pytest.raises(NotImplementedError):
        c.reorder_cache(torch.tensor([1, 0]))
    c.reorder_cache(torch.tensor([0, 1]))     # identity: allowed


def test_crop_rewinds():
    m = tiny_model("llama")
    ids = torch.randint(0, 384, (1, 40), generator=torch.Generator().manual_seed(7))
    c = kt.Cache(m, policy="q8")
    ref = logits_steps(m, ids, kt.Cache(m, policy="q8"), 40)
    with torch.inference_mode():
        m(input_ids=ids, **kt.cache_kwargs(c))
        c.crop(25)
        assert c.get_seq_length() == 25 and c.sequence_lengths() == [25]
        got = m(input_ids=ids[:, 25:], **kt.cache_kwargs(c)).logits
    assert rel(got, ref[:, 25:]) < 1e-5


# ---------------------------------------------------------------- real models
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
           "The three laws of thermodynamics are"]


@pytest.fixture(scope="module")
def smollm(smollm_path):
    return load_gguf(smollm_path)


@pytest.fixture(scope="module")
def gemma(gemma_path):
    return load_gguf(gemma_path)


@pytest.mark.parametrize("which", ["smollm", "gemma"])
def test_real_model_f16_greedy_and_logits(which, request):
    m, tok = request.getfixturevalue(which)
    for p in PROMPTS:
        ids = tok(p, return_tensors="pt").input_ids
        with torch.inference_mode():
            ref = m.generate(ids, max_new_tokens=16, do_sample=False, **kt.cache_kwargs(DynamicCache()))
            got = m.generate(ids, max_new_tokens=16, do_sample=False, **kt.cache_kwargs(kt.Cache(m, policy="f16")))
        assert torch.equal(got, ref), (which, p, tok.decode(got[0]), tok.decode(ref[0]))
    ids = tok(PROMPTS[2], return_tensors="pt").input_ids
    with torch.inference_mode():
        ref = m.generate(ids, max_new_tokens=16, do_sample=False)
    base = logits_steps(m, ref, DynamicCache(), ids.shape[1])
    assert rel(logits_steps(m, ref, kt.Cache(m, policy="f32,sliding=1"), ids.shape[1]), base) < 1e-5
    assert rel(logits_steps(m, ref, kt.Cache(m, policy="f16"), ids.shape[1]), base) < 1e-3


def kld_hf(model, ids, pol: str, ctx: int, batch: int) -> float:
    win = ids[:, :ctx]
    def run(cache):
        with torch.inference_mode():
            return torch.log_softmax(torch.cat([model(input_ids=win[:, i:i + batch], **kt.cache_kwargs(cache)).logits[0]
                                                for i in range(0, ctx, batch)]).float(), -1)[ctx // 2:]
    base, lp = run(DynamicCache()), run(kt.Cache(model, policy=pol))
    return float((base.exp() * (base - lp)).sum(-1).mean())


def test_kld_agrees_with_kvq_engine(smollm, smollm_path, cli, root):
    """KLD vs transformers' own cache, on transformers, and `kvq kld` on kvq's engine: same order of magnitude."""
    m, tok = smollm
    text = open(f"{root}/corpora/prose-heldout.txt", encoding="utf-8").read()
    ids = tok(text, return_tensors="pt", add_special_tokens=False).input_ids
    ctx, batch = 384, 128
    for pol in ("tq-mse:4/tq-mse:4", "tq-mse:2/tq-mse:2"):
        hf = kld_hf(m, ids, pol, ctx, batch)
        r = run_cli(cli, "kld", "-m", smollm_path, "-f", "corpora/prose-heldout.txt", "--ctx", str(ctx),
                    "--batch", str(batch), "--chunks", "1", "--policy", pol, "--no-layers", "--json")
        eng = [json.loads(line) for line in r.stdout.decode().splitlines() if line.startswith("{")][-1]
        k = eng.get("kld", eng.get("kld_mean"))
        assert k is not None, eng
        assert math.isfinite(hf) and hf > 0
        assert 1 / 3 < hf / k < 3, (pol, hf, k)
