#!/usr/bin/env python3
"""Tables of bench/anchors/llamacpp.sh: llama.cpp (and fork) rows beside kvq's.

  table.py kld DIR          one markdown table of DIR/llama-*.log (llama-perplexity
                            --kl-divergence) and DIR/kvq-kld.jsonl (kvq kld --json)
  table.py speed DIR        llama-bench (-o jsonl) and kvq bench (--json) of DIR/speed-*.jsonl
  table.py windows GGUF TEXT BASE CTX
                            do kvq kld's windows of TEXT hold the same tokens as the
                            llama-perplexity logits file BASE? (kvq's tokenizer through
                            the Python package: PYTHONPATH=python KVQ_LIBRARY_DIR=build)
  table.py llama-text GGUF TEXT OUT
                            the text to give llama-perplexity so that its windows are kvq
                            kld's: when the model adds BOS, llama-perplexity tokenizes with
                            BOS prepended to the whole text and then overwrites the first
                            token of every chunk with BOS, so its chunks run one token ahead
                            of kvq's (which overwrites the text's own first token); TEXT less
                            the bytes of its first token (kvq's tokenizer) removes the offset.
                            Without BOS: TEXT unchanged. `windows` checks the result.

Bits per value of a llama.cpp row are measured, not looked up (2 decimals: the
log prints MiB with 2 decimals): the KV bytes of
its "llama_kv_cache: size = ..." log lines over (cells x layers x n_embd_k_gqa)
values, so a type that pads the head dim is charged for the padding.
"""
import glob
import json
import math
import os
import re
import struct
import sys

# ---------------------------------------------------------------- llama.cpp logs

HDR = re.compile(r"^# (\w+)=(.*)$")
STAMP = re.compile(r"^\d+\.\d+\.\d+\.\d+ [A-Z] ")  # the log's "0.02.755.614 I " prefix
NUM = r"([-+0-9.eE]+|nan|inf)"
PATTERNS = {
    "kld": re.compile(r"^Mean\s+KLD:\s+" + NUM + r"\s+±\s+" + NUM),
    "kld_p99": re.compile(r"^99\.0%\s+KLD:\s+" + NUM),
    "kld_median": re.compile(r"^Median\s+KLD:\s+" + NUM),
    "top1": re.compile(r"^Same top p:\s+" + NUM + r"\s+±\s+" + NUM + r"\s*%"),
    "ppl": re.compile(r"^Mean PPL\(Q\)\s+:\s+" + NUM + r"\s+±\s+" + NUM),
    "ppl_base": re.compile(r"^Mean PPL\(base\)\s+:\s+" + NUM),
}
# llama_kv_cache: size =   45.00 MiB (  2048 cells,  30 layers,  1/1 seqs), K (f16):   22.50 MiB, V (f16):   22.50 MiB
KVSIZE = re.compile(r"llama_kv_cache: size =\s+[0-9.]+ MiB \(\s*(\d+) cells,\s+(\d+) layers.*K \((\w+)\):\s+([0-9.]+) MiB, "
                    r"V \((\w+)\):\s+([0-9.]+) MiB")
GQA = re.compile(r"print_info: n_embd_([kv])_gqa\s+=\s+(\d+)")
ROT = re.compile(r"llama_kv_cache: attn_rot_([kv]) = (\d)")
SCORED = re.compile(r"kl_divergence: computing over (\d+) chunks, n_ctx=(\d+)")


def parse_llama_log(path):
    r = {"file": os.path.basename(path)}
    k_bits = v_bits = None
    caches, gqa = [], {}
    for line in open(path, errors="replace"):
        line = STAMP.sub("", line.rstrip("\n"))
        m = HDR.match(line)
        if m:
            r[m.group(1)] = m.group(2)
            continue
        for key, pat in PATTERNS.items():
            m = pat.match(line.strip())
            if m:
                r[key] = float(m.group(1))
                if key in ("kld", "ppl") and m.lastindex >= 2:
                    r[key + "_se"] = float(m.group(2))
                if key == "top1":
                    r["top1"] /= 100.0
        m = KVSIZE.search(line)
        if m:
            caches.append((int(m.group(1)), int(m.group(2)), float(m.group(4)), float(m.group(6))))
        m = ROT.search(line)
        if m:
            r["rot_" + m.group(1)] = int(m.group(2))
        m = GQA.search(line)
        if m:
            gqa[m.group(1)] = int(m.group(2))
        m = SCORED.search(line)
        if m:
            r["chunks"], r["ctx"] = int(m.group(1)), int(m.group(2))
    if caches and "k" in gqa and "v" in gqa:
        # MiB are printed with 2 decimals: good to 0.01 MiB of ~10-50 MiB
        kb = sum(c[2] for c in caches) * 2**20 * 8
        vb = sum(c[3] for c in caches) * 2**20 * 8
        kv = sum(c[0] * c[1] for c in caches)
        k_bits, v_bits = kb / (kv * gqa["k"]), vb / (kv * gqa["v"])
        r["bits_k"], r["bits_v"] = k_bits, v_bits
        r["bits"] = 0.5 * (k_bits + v_bits)
        r["kv_mib"] = sum(c[2] + c[3] for c in caches)
    if "chunks" in r:
        r["tokens"] = r["chunks"] * (r["ctx"] - 1 - r["ctx"] // 2)
    return r


def fmt(x, nd):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def kld_table(d):
    rows = []
    for p in sorted(glob.glob(os.path.join(d, "llama-*.log"))):
        r = parse_llama_log(p)
        if "kld" not in r:
            print(f"(skipped {os.path.basename(p)}: no KLD in it)", file=sys.stderr)
            continue
        rows.append(r)
    order = {"llama.cpp": 0, "turboquant": 1}
    rows.sort(key=lambda r: (order.get(r.get("engine"), 9), -r.get("bits_k", 0), -r.get("bits_v", 0),
                             -r.get("rot_k", 0), r.get("rot", "")))
    out = []
    out.append("| engine | cache K/V (policy) | bits/value | KLD ± se | KLD p99 | top-1 | ppl (f16 ppl) | scored |")
    out.append("|---|---|---|---|---|---|---|---|")
    for r in rows:
        name = r.get("ctk", "?") + ("/" + r["ctv"] if r.get("ctv") != r.get("ctk") else "")
        rot = r.get("rot")
        if "rot_k" in r and r.get("engine") == "llama.cpp":  # what the log says, not what was asked
            on = {k for k in ("k", "v") if r.get("rot_" + k)}
            name += ", rotation " + ("on" if on == {"k", "v"} else "off" if not on else "on for " + "".join(on).upper())
            if rot in ("on", "off") and (rot == "on") != bool(on):
                name += f" (asked: {rot})"
        elif rot in ("on", "off"):
            name += f", rotation {rot}"
        elif rot == "uniform":
            name += ", every layer"
        elif rot == "default":
            name += ", fork defaults"
        out.append(f"| {r.get('engine', '?')} | `{name}` | {fmt(r.get('bits'), 2)} | {fmt(r['kld'], 4)} ± "
                   f"{fmt(r.get('kld_se'), 4)} | {fmt(r.get('kld_p99'), 3)} | {fmt(r.get('top1'), 3)} | "
                   f"{fmt(r.get('ppl'), 2)} ({fmt(r.get('ppl_base'), 2)}) | {r.get('tokens', '-')} |")
    kv = os.path.join(d, "kvq-kld.jsonl")
    if os.path.exists(kv):
        for line in open(kv):
            line = line.strip()
            if not line.startswith("{"):
                continue
            j = json.loads(line)
            if j.get("record") != "summary":
                continue
            out.append(f"| kvq | `{j.get('policy')}` | {fmt(j.get('bits_per_value'), 3)} | {fmt(j.get('kld'), 4)} ± "
                       f"{fmt(j.get('kld_se'), 4)} | {fmt(j.get('kld_p99'), 3)} | {fmt(j.get('top1'), 3)} | "
                       f"{fmt(j.get('ppl'), 2)} ({fmt(j.get('ppl_base'), 2)}) | {j.get('tokens', '-')} |")
    print("\n".join(out))


# ---------------------------------------------------------------- speed

def speed_rows(d):
    """(engine, cache, test, depth) -> [tok/s per round], test "prefill" or "decode"."""
    rows = {}
    for p in sorted(glob.glob(os.path.join(d, "speed-*.jsonl"))):
        for line in open(p):
            line = line.strip()
            if not line.startswith("{"):
                continue
            j = json.loads(line)
            if "avg_ts" in j:  # llama-bench -o jsonl: pp512 @ d, tg32 @ d
                test = "prefill" if j.get("n_prompt") else "decode"
                key = ("llama.cpp", f"{j['type_k']}/{j['type_v']}", test, j.get("n_depth", 0))
                rows.setdefault(key, []).append(j["avg_ts"])
            elif j.get("tool") == "bench" and "gen_tok_s" in j:
                # kvq bench: prefill of 512 tokens ending at ctx - 32, then 32 decode steps ending at ctx
                pol = j.get("policy")
                rows.setdefault(("kvq", pol, "prefill", j["ctx"]), []).append(j["prefill_tok_s"])
                rows.setdefault(("kvq", pol, "decode", j["ctx"]), []).append(j["gen_tok_s"])
    return rows


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def speed_table(d):
    rows = speed_rows(d)
    depths = {"llama.cpp": sorted({k[3] for k in rows if k[0] == "llama.cpp"}),
              "kvq": sorted({k[3] for k in rows if k[0] == "kvq"})}
    caches = []
    for k in rows:
        if (k[0], k[1]) not in caches:
            caches.append((k[0], k[1]))
    nd = max(len(depths["llama.cpp"]), len(depths["kvq"]))
    head = ["engine", "cache"]
    for i in range(nd):
        dl = "/".join(str(depths[e][i]) for e in ("llama.cpp", "kvq") if i < len(depths[e]))
        head += [f"decode @ {dl} tok/s", "× own f16", "× llama.cpp f16",
                 f"prefill @ {dl} tok/s", "× own f16", "× llama.cpp f16"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for e, c in caches:
        cells = [e, f"`{c}`"]
        own_f16 = "f16/f16" if e == "llama.cpp" else "f16"
        for i in range(nd):
            for test in ("decode", "prefill"):
                if i >= len(depths[e]):
                    cells += ["-", "-", "-"]
                    continue
                dep = depths[e][i]
                v = rows.get((e, c, test, dep))
                f = rows.get((e, own_f16, test, dep))
                ld = depths["llama.cpp"][i] if i < len(depths["llama.cpp"]) else None
                lf = rows.get(("llama.cpp", "f16/f16", test, ld))
                m = median(v) if v else None
                cells.append("-" if m is None else f"{m:.1f} ({len(v)})")
                cells.append("-" if not (m and f) else f"{m / median(f):.2f}")
                cells.append("-" if not (m and lf) else f"{m / median(lf):.2f}")
        print("| " + " | ".join(cells) + " |")
    print("\n(medians over rounds, number of rounds in brackets; llama.cpp: pp512 and tg32 at depth d "
          "(llama-bench -d); kvq: 512 prefill tokens ending at ctx - 32 and 32 decode steps ending at ctx)")


# ---------------------------------------------------------------- windows

def kvq_model(gguf):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
    import kvq  # noqa: E402
    return kvq.Model(gguf)


def read_llama_tokens(base):
    with open(base, "rb") as f:
        if f.read(8) != b"_logits_":
            raise SystemExit(f"{base}: not a llama-perplexity logits file")
        n_ctx, n_vocab, n_chunk = struct.unpack("<Iii", f.read(12))
        toks = struct.unpack(f"<{n_ctx * n_chunk}i", f.read(4 * n_ctx * n_chunk))
    return n_ctx, n_chunk, list(toks)


def windows(gguf, text, base, ctx):
    ctx = int(ctx)
    m = kvq_model(gguf)
    info = m.info
    ids = m.tokenize(open(text, encoding="utf-8").read(), add_special=False)
    n_ctx, n_chunk, lt = read_llama_tokens(base)
    if n_ctx != ctx:
        raise SystemExit(f"{base}: n_ctx {n_ctx}, not {ctx}")
    print(f"kvq: {len(ids)} tokens (no special tokens), add_bos={info.add_bos} bos={info.bos}; "
          f"llama-perplexity base: {n_chunk} chunks of {n_ctx}")
    print(f"first tokens kvq   {ids[:8]}")
    print(f"first tokens llama {lt[:8]}")
    same = 0
    for w in range(n_chunk):
        kw = list(ids[w * ctx:(w + 1) * ctx])
        lw = list(lt[w * ctx:(w + 1) * ctx])
        if info.add_bos:  # both replace the first token of a window by BOS
            kw[0] = lw[0] = info.bos
        diff = [i for i in range(ctx) if i >= len(kw) or kw[i] != lw[i]]
        print(f"window {w}: {'identical' if not diff else f'{len(diff)} positions differ, first at {diff[0]}'}")
        same += not diff
    print(f"{same}/{n_chunk} windows identical")
    return 0 if same == n_chunk else 1


def llama_text(gguf, text, out):
    m = kvq_model(gguf)
    raw = open(text, "rb").read()
    if not m.info.add_bos:
        open(out, "wb").write(raw)
        print(f"{out}: {text} unchanged (the model adds no BOS)")
        return
    ids = m.tokenize(raw.decode("utf-8"), add_special=False)
    first = m.token_bytes(ids[0])
    if not raw.startswith(first):
        raise SystemExit(f"{text}: does not start with the bytes of its first token {first!r}")
    open(out, "wb").write(raw[len(first):])
    print(f"{out}: {text} without its first token {ids[0]} ({first!r})")


def main():
    a = sys.argv[1:]
    if a and a[0] == "kld" and len(a) == 2:
        kld_table(a[1])
    elif a and a[0] == "speed" and len(a) == 2:
        speed_table(a[1])
    elif a and a[0] == "windows" and len(a) == 5:
        return windows(*a[1:])
    elif a and a[0] == "llama-text" and len(a) == 4:
        llama_text(*a[1:])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
