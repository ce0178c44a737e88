#!/usr/bin/env python3
"""kvq inside transformers on one GPU: correctness, decode step time, and the serving figure (issue 12).

A random-weight Llama-3-8B-shaped model (32 layers, 32 query / 8 KV heads, head dim 128, hidden 4096,
intermediate 14336, vocab 128256, bf16, built on the GPU), every step through the model's own forward
(``model(input_ids, position_ids, cache_position, past_key_values=cache)``):

  a. correctness: kvq's CUDA attention against float64 attention on the decoded cache (and against
     SDPA on the original K/V: the codec's own error), for decode and prefill rows; the CUDA path
     against the CPU path (kvq.transformers.Cache on a small model, same weights): logits and tokens;
     the 8B-shaped model's logits with kvq f16 vs transformers' DynamicCache + SDPA.
  b. decode step time at batch x ctx (16 x 32K): transformers' DynamicCache + SDPA (its default),
     StaticCache + SDPA (eager and captured in a CUDA graph), kvq.transformers.Cache with
     attn_implementation="kvq" for tq-mse:4/4, q8, tq-mse:2/2 and f16 (eager and CUDA graph), same run.
  c. serving: for each, the largest batch at ctx that fits in the GPU's memory (weights + KV +
     activations: torch.cuda.max_memory_allocated of a run that completed) and its aggregate decode
     tokens/s.

Caches are filled synthetically: random K/V of a realistic scale (keys with per-channel scales,
exp(N(0, 0.5^2)) x 1.5, values N(0, 0.5^2)) appended through kvq's stores (the CUDA encoder) or
written into the DynamicCache / StaticCache tensors; prefilling 32K real tokens per sequence would cost
minutes of device time and measure prefill, not decode. The decode steps then run the real forward.

Output: JSON (--json) and a table at the end. Runs on transformers 5.17 (the GPU machine) and 5.24.
Usage: python3 bench/serve_h200.py [--quick] [--json OUT.json] [--sections abc]
"""
import argparse
import copy
import gc
import json
import math
import os
import subprocess
import sys
import time
import traceback

import numpy as np
import torch
import transformers
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, StaticCache

import kvq
import kvq.torch as kt
import kvq.transformers as kvqt
from kvq.transformers._cuda_store import CUDAStore, StoreGroup

GiB = 1 << 30
DEV = torch.device("cuda")
RESULTS = {"sections": {}}


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------- model and caches
def llama8b_config(layers=32):
    return LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=131072,
                       rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)


def small_config():
    return LlamaConfig(vocab_size=1000, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=128, max_position_embeddings=4096,
                       rope_theta=10000.0, tie_word_embeddings=False)


def make_model(cfg, dtype, device):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            torch.manual_seed(0)
            m = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    m.eval()
    m.set_attn_implementation("sdpa")
    return m


class GroupedCache(kvqt.Cache):
    """kvq.transformers.Cache whose CUDA stores share one StoreGroup (each step's index kernels run
    once for all layers). Reads the Cache's _specs (the lead's code) - a bench-side subclass."""

    kernels = None  # --emulate: the CPU stand-in of the kernels (tests/python/cuda_emul.py), CPU tensors

    def __init__(self, *a, group=True, page_tokens=256, **k):
        super().__init__(*a, **k)
        self._group = StoreGroup() if group else None
        self._page_tokens = page_tokens

    def _store(self, layer, key_states):
        if (key_states.device.type != "cuda" and self.kernels is None) or \
                (self._group is None and self.kernels is None):
            return super()._store(layer, key_states)
        batch = int(key_states.shape[0])
        if self._specs is None or self._specs[0].batch != batch:
            self._specs = kvqt.layer_specs(self.policy, self.geometry, batch, self.seed, self.max_tokens)
        return CUDAStore(self._specs[layer], key_states.device, page_tokens=self._page_tokens, group=self._group,
                         kernels=self.kernels() if self.kernels else None)


def kv_scales(n_layers, d, seed=1):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return [(torch.exp(torch.randn(d, generator=g) * 0.5) * 1.5).to(DEV) for _ in range(n_layers)]


def rand_kv(B, H, T, d, kscale, dtype=torch.bfloat16):
    k = torch.randn(B, H, T, d, device=DEV, dtype=dtype).mul_(kscale.to(dtype))
    v = torch.randn(B, H, T, d, device=DEV, dtype=dtype).mul_(0.5)
    return k, v


def fill_chunk(B, H, d):
    """Tokens per fill chunk: at most 32M values per K (bounded temporaries at any batch)."""
    t = max(16, (32 << 20) // (B * H * d))
    return 1 << int(math.log2(t))


def build_cache(kind, model, B, ctx, cap, scales, policy=None, group=True):
    """A filled cache of `kind` for B sequences of ctx positions (capacity cap), and its KV bytes."""
    cfg = model.config
    L, H, d = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim
    if kind == "dynamic":
        model.set_attn_implementation("sdpa")
        cache = DynamicCache()
        for l in range(L):
            k, v = rand_kv(B, H, ctx, d, scales[l])
            cache.update(k, v, l)
            del k, v
        return cache, 2 * L * B * H * ctx * d * 2
    if kind == "static":
        model.set_attn_implementation("sdpa")
        try:
            cache = StaticCache(config=cfg, max_cache_len=cap)
        except TypeError:
            cache = StaticCache(config=cfg, max_batch_size=B, max_cache_len=cap, device=DEV, dtype=torch.bfloat16)
        ids = torch.zeros(B, 1, dtype=torch.long, device=DEV)
        with torch.no_grad():  # initialises the layers' tensors (lazily allocated in transformers 5)
            model(input_ids=ids, position_ids=torch.zeros(B, 1, dtype=torch.long, device=DEV),
                  cache_position=torch.zeros(1, dtype=torch.long, device=DEV), past_key_values=cache, use_cache=True,
                  logits_to_keep=1)
        for l, layer in enumerate(cache.layers):
            layer.keys[:, :, :ctx].normal_().mul_(scales[l].to(layer.keys.dtype))
            layer.values[:, :, :ctx].normal_().mul_(0.5)
        return cache, sum(x.keys.numel() * 2 + x.values.numel() * 2 for x in cache.layers)
    # kvq
    cache = GroupedCache(model, policy, max_tokens=cap, group=group)  # switches the model to "kvq"
    dummy = torch.zeros(B, H, 1, d, device=DEV, dtype=torch.bfloat16)
    for layer in cache.layers:
        layer.lazy_initialization(dummy, dummy)
    tc = fill_chunk(B, H, d)
    for t0 in range(0, ctx, tc):  # chunk-major: a StoreGroup's layers append each chunk in turn
        n = min(tc, ctx - t0)
        for l, layer in enumerate(cache.layers):
            k, v = rand_kv(B, H, n, d, scales[l])
            layer.store.append(k, v)
            del k, v
    for layer in cache.layers:
        layer.total = ctx
    return cache, cache.memory_bytes()


def check_kvq(cache):
    if isinstance(cache, kvqt.Cache):
        for layer in cache.layers:
            if layer.store is not None and hasattr(layer.store, "check"):
                layer.store.check()


class _Event:
    """A CUDA event (the host clock under --emulate)."""

    def __init__(self):
        self.e = torch.cuda.Event(enable_timing=True) if DEV.type == "cuda" else None
        self.t = 0.0

    def record(self):
        if self.e is not None:
            self.e.record()
        else:
            self.t = time.perf_counter()

    def elapsed_time(self, other):
        return self.e.elapsed_time(other.e) if self.e is not None else (other.t - self.t) * 1e3


def decode_run(model, cache, B, pos0, n_warm, n_steps, graph):
    """Times decode steps through model(...): per-step CUDA events, median; returns a dict."""
    V = model.config.vocab_size
    ids = torch.randint(0, V, (B, 1), device=DEV)
    pos = torch.full((B, 1), pos0, dtype=torch.long, device=DEV)
    cpos = torch.full((1,), pos0, dtype=torch.long, device=DEV)

    def step():
        return model(input_ids=ids, position_ids=pos, cache_position=cpos, past_key_values=cache, use_cache=True,
                     logits_to_keep=1).logits

    def advance():
        pos.add_(1)
        cpos.add_(1)

    evs = [(_Event(), _Event()) for _ in range(n_steps)]
    out = {}
    with torch.no_grad():
        if not graph:
            for _ in range(n_warm):
                step()
                advance()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for e0, e1 in evs:
                e0.record()
                logits = step()
                e1.record()
                advance()
            torch.cuda.synchronize()
            wall = time.perf_counter() - t0
        else:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(n_warm):
                    step()
                    advance()
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                logits = step()
            if isinstance(cache, kvqt.Cache):  # the capture ran the Python once (host copies only)
                for layer in cache.layers:
                    layer.total -= 1
                    if hasattr(layer.store, "sync_lengths"):
                        layer.store.sync_lengths()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for e0, e1 in evs:
                e0.record()
                g.replay()
                e1.record()
                advance()
            torch.cuda.synchronize()
            wall = time.perf_counter() - t0
            del g
    ms = sorted(e0.elapsed_time(e1) for e0, e1 in evs)
    med = ms[len(ms) // 2]
    out.update(step_ms_median=med, step_ms_min=ms[0], step_ms_max=ms[-1], wall_ms_per_step=wall * 1e3 / n_steps,
               tok_s=B / (med / 1e3), tok_s_wall=B * n_steps / wall,
               logits_finite=bool(torch.isfinite(logits.float()).all()))
    check_kvq(cache)
    return out


def cleanup():
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


CONFIGS = {
    # name: (cache kind, kvq policy, graph)
    "dynamic_sdpa": ("dynamic", None, False),
    "static_sdpa": ("static", None, False),
    "static_sdpa_graph": ("static", None, True),
    "kvq_f16_graph": ("kvq", "f16", True),
    "kvq_tq4_eager": ("kvq", "tq-mse:4/tq-mse:4", False),
    "kvq_tq4_graph": ("kvq", "tq-mse:4/tq-mse:4", True),
    "kvq_tq4_graph_nogroup": ("kvq", "tq-mse:4/tq-mse:4", True),
    "kvq_q8_graph": ("kvq", "q8/q8", True),
    "kvq_tq2_graph": ("kvq", "tq-mse:2/tq-mse:2", True),
}


def run_config(name, model, B, ctx, n_warm, n_steps, scales):
    kind, policy, graph = CONFIGS[name]
    cap = ctx + n_warm + n_steps + 8
    cleanup()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    cache, kv_bytes = build_cache(kind, model, B, ctx, cap, scales, policy, group=not name.endswith("nogroup"))
    torch.cuda.synchronize()
    fill_s = time.perf_counter() - t0
    r = decode_run(model, cache, B, ctx, n_warm, n_steps, graph)
    r.update(config=name, batch=B, ctx=ctx, kv_bytes=int(kv_bytes), fill_s=fill_s,
             max_memory_allocated=int(torch.cuda.max_memory_allocated()),
             max_memory_reserved=int(torch.cuda.max_memory_reserved()))
    del cache
    cleanup()
    return r


# ---------------------------------------------------------------- section a
def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def attention_checks(quick):
    """kvq attention on an 8B-shaped layer vs float64 attention on the decoded cache and vs SDPA on the
    original K/V, decode row and the last prefill rows."""
    out = []
    B, H, HQ, d, ctx = 4, 8, 32, 128, 1024 if quick else 4096
    scale = d ** -0.5
    ks = kv_scales(1, d, seed=3)[0]
    for policy in ("tq-mse:4/tq-mse:4", "q8/q8", "tq-mse:2/tq-mse:2", "f16/f16"):
        kspec, vspec = policy.split("/")
        spec = kvqt.LayerSpec(layer=0, batch=B, n_kv_heads=H, n_q_heads=HQ, head_dim=d, k_spec=kspec, v_spec=vspec,
                              f16_window=0, sliding_window=0, seed=0, max_tokens=0)
        st = CUDAStore(spec, DEV)
        torch.manual_seed(5)
        k, v = rand_kv(B, H, ctx, d, ks)
        q = torch.randn(B, HQ, ctx, d, device=DEV, dtype=torch.float32) * 1.2  # f32 out: the kernels' error
        st.append(k, v)
        pre = st.attend(q, scale)  # (B, ctx, HQ, d): every row causal, on the codes
        k1, v1 = rand_kv(B, H, 1, d, ks)
        q1 = torch.randn(B, HQ, 1, d, device=DEV, dtype=torch.float32) * 1.2
        st.append(k1, v1)
        dec = st.attend(q1, scale)
        st.check()
        kf, vf = torch.cat([k, k1], 2), torch.cat([v, v1], 2)  # (B, H, ctx+1, d)
        kp = kvq.Plan(kspec, d, kvqt._cuda_store.plan_seed(0, 0, 0)).clone("scalar")
        vp = kvq.Plan(vspec, d, kvqt._cuda_store.plan_seed(0, 0, 1)).clone("scalar")
        kin = kf.float().cpu().reshape(-1, d).numpy()
        vin = vf.float().cpu().reshape(-1, d).numpy()
        kd = torch.from_numpy(kp.decode(kp.encode(kin))).view(kf.shape).to(DEV, torch.float64)
        vd = torch.from_numpy(vp.decode(vp.encode(vin))).view(vf.shape).to(DEV, torch.float64)
        G = HQ // H

        def sdpa64(qq, kk, vv, causal_rows=None):
            kk = kk.repeat_interleave(G, 1)
            vv = vv.repeat_interleave(G, 1)
            n = kk.shape[2]
            mask = None
            if causal_rows is not None:
                mask = torch.arange(n, device=DEV)[None, :] <= causal_rows[:, None]
            return torch.nn.functional.scaled_dot_product_attention(qq.double(), kk, vv, attn_mask=mask,
                                                                    scale=scale).transpose(1, 2)

        rows = torch.arange(ctx - 8, ctx, device=DEV)
        ref_dec = sdpa64(q1, kd, vd)
        ref_pre = sdpa64(q[:, :, -8:], kd[:, :, :ctx], vd[:, :, :ctx], rows)
        raw_dec = sdpa64(q1, kf.double(), vf.double())
        out.append(dict(policy=policy, ctx=ctx, batch=B,
                        decode_vs_decoded_f64=rel(dec.float(), ref_dec), prefill_vs_decoded_f64=rel(
                            pre[:, -8:].float(), ref_pre),
                        decode_vs_sdpa_on_original_kv=rel(dec.float(), raw_dec)))
        log(f"  attention {policy:20s} ctx {ctx}: decode vs f64 on decoded cache {out[-1]['decode_vs_decoded_f64']:.2e}, "
            f"prefill rows {out[-1]['prefill_vs_decoded_f64']:.2e}; vs SDPA on the original K/V (codec error) "
            f"{out[-1]['decode_vs_sdpa_on_original_kv']:.2e}")
        del st, k, v, q, kd, vd
        cleanup()
    return out


def cuda_vs_cpu_small():
    """kvq.transformers.Cache on the CPU (CPUStore, the C cache) vs on CUDA (CUDAStore), one small model with
    the same f32 weights, left padding, generate 8 tokens greedily: logits and tokens."""
    res = []
    cfg = small_config()
    m_cpu = make_model(cfg, torch.float32, "cpu")
    m_gpu = copy.deepcopy(m_cpu).to(DEV)
    torch.manual_seed(7)
    ids = torch.randint(3, 1000, (2, 24))
    mask = torch.ones(2, 24, dtype=torch.long)
    mask[1, :5] = 0  # left padding of sequence 1
    for policy in ("f16", "tq-mse:4/tq-mse:4", "q8/tq-mse:2"):
        outs = {}
        for dev, m in (("cpu", m_cpu), ("cuda", m_gpu)):
            cache = kvqt.Cache(m, policy)
            with torch.no_grad():
                g = m.generate(ids.to(dev), attention_mask=mask.to(dev), past_key_values=cache, max_new_tokens=8,
                               do_sample=False, output_logits=True, return_dict_in_generate=True, pad_token_id=0)
            outs[dev] = (g.sequences.cpu(), torch.stack([x.float().cpu() for x in g.logits]))
            m.set_attn_implementation("sdpa")
        same = bool(torch.equal(outs["cpu"][0], outs["cuda"][0]))
        e = rel(outs["cuda"][1], outs["cpu"][1])
        res.append(dict(policy=policy, tokens_equal=same, logits_rel_diff=e))
        log(f"  small model CUDA vs CPU {policy:18s}: tokens equal {same}, logits rel diff {e:.2e}")
    # the CUDA path with the f16 policy vs transformers' own cache + SDPA
    with torch.no_grad():
        ref = m_gpu.generate(ids.to(DEV), attention_mask=mask.to(DEV), max_new_tokens=8, do_sample=False,
                             output_logits=True, return_dict_in_generate=True, pad_token_id=0)
        cache = kvqt.Cache(m_gpu, "f16")
        got = m_gpu.generate(ids.to(DEV), attention_mask=mask.to(DEV), past_key_values=cache, max_new_tokens=8,
                             do_sample=False, output_logits=True, return_dict_in_generate=True, pad_token_id=0)
        m_gpu.set_attn_implementation("sdpa")
    e = rel(torch.stack([x.float() for x in got.logits]), torch.stack([x.float() for x in ref.logits]))
    same = bool(torch.equal(got.sequences, ref.sequences))
    res.append(dict(policy="f16 (CUDA) vs DynamicCache+SDPA", tokens_equal=same, logits_rel_diff=e))
    log(f"  small model kvq f16 (CUDA) vs DynamicCache+SDPA: tokens equal {same}, logits rel diff {e:.2e}")
    return res


def teacher_forced(model, cache, ids, tokens):
    """Logits (steps, B, V) of the prompt's last position and of each given token fed in turn."""
    out = [model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1].float()]
    for t in range(tokens.shape[1]):
        out.append(model(input_ids=tokens[:, t:t + 1], past_key_values=cache, use_cache=True,
                         logits_to_keep=1).logits[:, -1].float())
    return torch.stack(out)


def big_model_logits(model, quick):
    """8B-shaped model, a 256-token prompt (B=2) + 8 decode steps past a page boundary (the pools grow):
    kvq f16 / tq-mse:4 vs DynamicCache + SDPA, teacher-forced on the reference's greedy tokens, per step."""
    res = []
    T = 128 if quick else 250
    torch.manual_seed(9)
    ids = torch.randint(3, model.config.vocab_size, (2, T), device=DEV)
    with torch.no_grad():
        model.set_attn_implementation("sdpa")
        ref_tok = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)[:, T:]
        ref = teacher_forced(model, DynamicCache(), ids, ref_tok)
        for policy in ("f16", "tq-mse:4/tq-mse:4"):
            for grouped in (True, False):
                cache = GroupedCache(model, policy, group=grouped)
                got = teacher_forced(model, cache, ids, ref_tok)
                check_kvq(cache)
                model.set_attn_implementation("sdpa")
                per = [rel(got[i], ref[i]) for i in range(got.shape[0])]
                agree = float((got.argmax(-1) == ref.argmax(-1)).float().mean())
                res.append(dict(policy=policy, grouped=grouped, prompt=T, steps=len(per), logits_rel_diff=per,
                                argmax_agreement=agree, lengths=cache.sequence_lengths()))
                log(f"  8B-shaped model kvq {policy:18s} (group {grouped!s:5s}) vs DynamicCache+SDPA, teacher-forced: "
                    f"logits rel diff per step {' '.join(f'{e:.1e}' for e in per)}; argmax agreement {agree:.2f}")
                del cache
    cleanup()
    return res


def profile_eager(model, scales):
    """Host synchronisations in one eager decode step (kvq tq-mse:4/4 and DynamicCache, 4 x 2K): the aten ops
    that copy to the host (_local_scalar_dense, item, copy to CPU) and CUDA sync calls, with their callers."""
    from torch.profiler import ProfilerActivity, profile
    res = {}
    for name in ("kvq_tq4_eager", "dynamic_sdpa"):
        kind, policy, _ = CONFIGS[name]
        cache, _ = build_cache(kind, model, 4, 2048, 2100, scales, policy)
        ids = torch.randint(0, 1000, (4, 1), device=DEV)
        with torch.no_grad():
            for i in range(2):
                model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
                model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
                torch.cuda.synchronize()
        rows = []
        for ev in prof.events():
            n = ev.name
            if any(k in n for k in ("_local_scalar_dense", "cudaStreamSynchronize", "cudaDeviceSynchronize",
                                    "cudaMemcpy", "aten::item", "nonzero")):
                stack = [f for f in (ev.stack or []) if "torch/" not in f and "profiler" not in f][:4]
                rows.append(f"{n} <- {' <- '.join(stack)}")
        uniq = {}
        for r in rows:
            uniq[r] = uniq.get(r, 0) + 1
        res[name] = [f"{c} x {r}" for r, c in sorted(uniq.items(), key=lambda x: -x[1])][:12]
        log(f"  {name}: {len(rows)} host syncs in one eager step")
        for line in res[name]:
            log(f"    {line[:300]}")
        del cache
        cleanup()
    model.set_attn_implementation("sdpa")
    return res


# ---------------------------------------------------------------- section c
def per_seq_bytes(name, model, cap, ctx):
    cfg = model.config
    L, H, d = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim
    kind, policy, _ = CONFIGS[name]
    if kind == "static":
        return 2 * L * H * cap * d * 2
    if kind == "dynamic":
        return 2 * L * H * cap * d * 2
    pol = kvq.Policy(policy)
    kb, vb = kvq.Plan(pol.k_spec, d).code_bytes, kvq.Plan(pol.v_spec, d).code_bytes
    pages = -(-cap // 256)
    return L * pages * 256 * H * (kb + vb)


def serving(model, ctx, n_warm, n_steps, scales, names, sec_b, mem_total, base_alloc):
    """Largest batch at ctx per config, from a memory model calibrated on section b's batch-16 run, checked
    by running it (and the next batch up, which must fail or becomes the new largest)."""
    out = []
    cap = ctx + n_warm + n_steps + 8
    budget = mem_total - 1.0 * GiB  # the CUDA context, cuBLAS workspaces, allocator slack
    for name in names:
        per = per_seq_bytes(name, model, cap, ctx)
        if CONFIGS[name][0] == "dynamic":
            per = per * (1 + 1 / 64)  # torch.cat's new K (or V) of one layer beside the old one
        ref = next((r for r in sec_b if r["config"] == name and "max_memory_allocated" in r), None)
        # what does not grow with the KV (weights, fill temporaries; decode activations are ~MBs per
        # sequence), from section b's run
        fixed = base_alloc + 2 * GiB
        if ref is not None:
            fixed = max(base_alloc, ref["max_memory_allocated"] - ref["batch"] * per)
        Bp = int((budget - fixed) // per)
        log(f"  serving {name}: {per / GiB:.3f} GiB per sequence, {fixed / GiB:.2f} GiB besides -> predicted "
            f"batch {Bp}")
        best, tried, B = None, [], Bp
        while B >= 1 and len(tried) < 6:
            try:
                r = run_config(name, model, B, ctx, n_warm, n_steps, scales)
                tried.append((B, "ok"))
                log(f"    batch {B}: ok, {r['step_ms_median']:.2f} ms/step, {r['tok_s']:.0f} tok/s, max allocated "
                    f"{r['max_memory_allocated'] / GiB:.1f} GiB")
                best = r
                if any(b == B + 1 for b, _ in tried):
                    break
                B += 1
            except torch.cuda.OutOfMemoryError:
                tried.append((B, "oom"))
                log(f"    batch {B}: out of memory")
                cleanup()
                if best is not None:
                    break
                B -= 1
            except Exception as e:  # noqa: BLE001 - report and go on
                tried.append((B, f"error {type(e).__name__}: {e}"))
                log(f"    batch {B}: {type(e).__name__}: {e}")
                traceback.print_exc()
                cleanup()
                break
        out.append(dict(config=name, predicted_batch=Bp, tried=tried, best=best))
    return out


# ---------------------------------------------------------------- main
def environment():
    if DEV.type != "cuda":
        return dict(torch=torch.__version__, transformers=transformers.__version__, device="cpu (emulated)",
                    mem_total=0)
    env = dict(torch=torch.__version__, cuda=torch.version.cuda, transformers=transformers.__version__,
               kvq=kvq.__version__, python=sys.version.split()[0], device=torch.cuda.get_device_name(0))
    try:
        env["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:  # noqa: BLE001
        env["nvidia_smi"] = f"unavailable: {e}"
    p = torch.cuda.get_device_properties(0)
    env["sms"] = p.multi_processor_count
    env["mem_total"] = torch.cuda.mem_get_info()[1]
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small shapes: check the pipeline, not the figures")
    ap.add_argument("--json", default=None)
    ap.add_argument("--sections", default="abc")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--serve-configs", default="dynamic_sdpa,static_sdpa_graph,kvq_f16_graph,kvq_tq4_graph,"
                                               "kvq_q8_graph,kvq_tq2_graph")
    ap.add_argument("--profile-eager", action="store_true", help="list the host syncs of one eager step")
    ap.add_argument("--emulate", action="store_true",
                    help="a CPU smoke test of this script: tiny model, CPU tensors, kvq kernels emulated")
    args = ap.parse_args()
    global DEV
    if args.emulate:
        DEV = torch.device("cpu")
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
        from cuda_emul import EmuKernels
        GroupedCache.kernels = EmuKernels
        torch.cuda.synchronize = lambda *a: None
        torch.cuda.reset_peak_memory_stats = lambda *a: None
        torch.cuda.max_memory_allocated = lambda *a: 0
        torch.cuda.max_memory_reserved = lambda *a: 0
        torch.cuda.empty_cache = lambda *a: None
        torch.cuda.memory_allocated = lambda *a: 0
        args.batch, args.ctx, args.steps = 2, 40, 2
        args.configs = "dynamic_sdpa,static_sdpa,kvq_tq4_eager"
        args.sections = "b"
    if args.quick:
        args.batch, args.ctx, args.steps = 4, 2048, 4
    env = environment()
    RESULTS["env"] = env
    RESULTS["args"] = vars(args)
    log("env:", json.dumps(env))
    t_start = time.perf_counter()

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(RESULTS, f, indent=1, default=str)

    if "a" in args.sections:
        log("== a. correctness")
        RESULTS["sections"]["a_attention"] = attention_checks(args.quick)
        RESULTS["sections"]["a_cuda_vs_cpu"] = cuda_vs_cpu_small()
        save()
    model = None
    if "b" in args.sections or "c" in args.sections or "a" in args.sections:
        t0 = time.perf_counter()
        cfg = llama8b_config()
        if args.emulate:
            cfg = llama8b_config(2)
            cfg.vocab_size, cfg.intermediate_size = 1000, 1024
        model = make_model(cfg, torch.bfloat16, DEV)
        torch.cuda.synchronize()
        base_alloc = torch.cuda.memory_allocated()
        log(f"model: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, "
            f"{base_alloc / GiB:.2f} GiB, built in {time.perf_counter() - t0:.1f} s")
        RESULTS["model"] = dict(params=sum(p.numel() for p in model.parameters()), weight_bytes=base_alloc)
    if "a" in args.sections:
        RESULTS["sections"]["a_big_model"] = big_model_logits(model, args.quick)
        save()
    scales = kv_scales(model.config.num_hidden_layers, 128) if model is not None else None
    if args.profile_eager:
        RESULTS["profile_eager"] = profile_eager(model, scales)
        save()
    sec_b = []
    if "b" in args.sections:
        log(f"== b. decode step at batch {args.batch} x ctx {args.ctx}")
        for name in args.configs.split(","):
            try:
                r = run_config(name, model, args.batch, args.ctx, 3, args.steps, scales)
                log(f"  {name:24s} {r['step_ms_median']:8.2f} ms/step (min {r['step_ms_min']:.2f}, max "
                    f"{r['step_ms_max']:.2f}; wall {r['wall_ms_per_step']:.2f})  {r['tok_s']:7.0f} tok/s  KV "
                    f"{r['kv_bytes'] / GiB:6.2f} GiB  max allocated {r['max_memory_allocated'] / GiB:6.2f} GiB  "
                    f"fill {r['fill_s']:.1f} s")
            except Exception as e:  # noqa: BLE001 - record and go on
                traceback.print_exc()
                r = dict(config=name, error=f"{type(e).__name__}: {e}")
                log(f"  {name}: FAILED {r['error']}")
                cleanup()
            sec_b.append(r)
            save()
        RESULTS["sections"]["b_decode"] = sec_b
    if "c" in args.sections and not args.quick:
        log(f"== c. serving at ctx {args.ctx}")
        RESULTS["sections"]["c_serving"] = serving(model, args.ctx, 2, max(4, args.steps // 2), scales,
                                                   args.serve_configs.split(","), sec_b, env["mem_total"],
                                                   RESULTS["model"]["weight_bytes"])
        save()
    RESULTS["elapsed_s"] = time.perf_counter() - t_start
    save()
    # ---- the table
    log("\n== summary (%s, torch %s, transformers %s)" % (env["device"], env["torch"], env["transformers"]))
    base = {r["config"]: r for r in sec_b if "step_ms_median" in r}
    if base:
        ref = base.get("dynamic_sdpa") or next(iter(base.values()))
        log(f"decode at {args.batch} x {args.ctx}: config | ms/step | tok/s | vs dynamic_sdpa | vs static_sdpa_graph")
        sg = base.get("static_sdpa_graph")
        for n, r in base.items():
            log(f"  {n:24s} | {r['step_ms_median']:8.2f} | {r['tok_s']:7.0f} | {r['tok_s'] / ref['tok_s']:5.2f}x | "
                + (f"{r['tok_s'] / sg['tok_s']:5.2f}x" if sg else "-"))
    sv = RESULTS["sections"].get("c_serving")
    if sv:
        log(f"serving at ctx {args.ctx}: config | max batch | max allocated GiB | ms/step | aggregate tok/s")
        for s in sv:
            b = s["best"]
            if b:
                log(f"  {s['config']:24s} | {b['batch']:4d} | {b['max_memory_allocated'] / GiB:6.1f} | "
                    f"{b['step_ms_median']:7.2f} | {b['tok_s']:7.0f}")
            else:
                log(f"  {s['config']:24s} | none ({s['tried']})")
    log(f"elapsed {RESULTS['elapsed_s']:.0f} s")


if __name__ == "__main__":
    main()
