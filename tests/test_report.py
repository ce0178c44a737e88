#!/usr/bin/env python3
"""kvq bench and kvq memplan briefly on SmolLM2, then scripts/report.py on
their output: the JSON results have the documented fields and sane values,
and the PNG panels and summary.md appear.

    python3 tests/test_report.py --kvq build/kvq --root .

Exit 77 (skipped) when matplotlib or the model is missing and CI is unset.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77


def skip_or_fail(msg):
    if os.environ.get("CI"):
        print("test_report: FAIL: %s (CI is set)" % msg)
        return 1
    print("test_report: SKIP: %s" % msg)
    return SKIP


def run(cmd, out_path=None):
    env = dict(os.environ, KVQ_NO_PROGRESS="1")
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    if r.returncode != 0:
        raise RuntimeError("%s: exit %d\n%s" % (" ".join(cmd), r.returncode, r.stderr[-2000:]))
    if out_path:
        with open(out_path, "w") as f:
            f.write(r.stdout)
    return r.stdout


def jsonl(text):
    return [json.loads(l) for l in text.splitlines() if l.startswith("{")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvq", required=True)
    ap.add_argument("--root", required=True)
    a = ap.parse_args()
    try:
        import matplotlib  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as e:
        return skip_or_fail("%s (pip install numpy matplotlib)" % e)
    model = os.path.join(a.root, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        return skip_or_fail("%s missing (bash scripts/fetch-models.sh)" % model)

    fails = []

    def check(cond, msg):
        if not cond:
            fails.append(msg)
            print("test_report: CHECK failed: " + msg)

    pols = "q8 tq-mse:3,w=32 k=q8,v=tq-mse:4"
    with tempfile.TemporaryDirectory() as d:
        # bench: two short contexts, three policies (+ f16 added first)
        out = run([a.kvq, "bench", "-m", model, "--ctx", "96,160", "--gen", "4", "--prefill", "16", "--rounds", "2",
                   "--threads", "2", "--policies", pols, "--json"], os.path.join(d, "bench.jsonl"))
        rows = jsonl(out)
        check(len(rows) == 8, "bench: 8 results (2 ctx x 4 policies), got %d" % len(rows))
        check([r["policy"] for r in rows[:4]] == ["f16", "q8", "tq-mse:3,w=32", "q8/tq-mse:4"],
              "bench: policy order f16 first: %s" % [r.get("policy") for r in rows[:4]])
        for r in rows:
            check(not r.get("error"), "bench: error %s" % r.get("error"))
            for k in ("prefill_tok_s", "gen_tok_s", "prefill_speedup", "gen_speedup"):
                check(r.get(k, 0) > 0, "bench %s %s: %s > 0" % (r.get("policy"), r.get("ctx"), k))
            check(r.get("prefill_tokens") == 16 and r.get("gen_tokens") == 4, "bench: token counts")
            check(r.get("f16_kv_bytes_per_token") == 30 * 3 * 64 * 4, "bench: f16 bytes per token")
        f16 = [r for r in rows if r["policy"] == "f16"]
        check(all(abs(r["gen_speedup"] - 1) < 1e-9 for r in f16), "bench: f16 speedup is 1")
        q8 = [r for r in rows if r["policy"] == "q8"]
        check(all(r["kv_bytes_per_token"] == 30 * 3 * 2 * 68 for r in q8), "bench: q8 record bytes (d=64: 68)")
        check(all(r["kv_bytes"] == 30 * 256 * 3 * 2 * 68 for r in q8), "bench: q8 KV bytes at 160 = one page")

        # memplan: f16 and the policies in 1 GiB
        out = run([a.kvq, "memplan", "-m", model, "--mem", "1GiB", "--policies", pols, "--points", "4K,32K",
                   "--json"], os.path.join(d, "memplan.jsonl"))
        rows = jsonl(out)
        check(len(rows) == 4, "memplan: 4 results, got %d" % len(rows))
        by = {r["policy"]: r for r in rows}
        if "f16" in by and "q8" in by:
            f = by["f16"]
            # f16 at 4K: 16 pages of 256 tokens, 30 layers x 3 heads x 256 x 64 x 2 x 2 bytes
            check(f["points"][0]["kv_bytes"] == 4096 * 23040, "memplan: f16 KV at 4K exact")
            check(f["points"][0]["fits"] is True, "memplan: f16 at 4K fits in 1 GiB")
            check(0 < f["max_ctx"] < by["q8"]["max_ctx"], "memplan: q8 fits more than f16")
            total = f["weights_bytes"] + f["kv_bytes_at_max"] + f["runtime_bytes_at_max"]
            check(total <= 1 << 30, "memplan: max_ctx fits the budget")
            check(f["max_ctx_model"] == min(f["max_ctx"], 8192), "memplan: capped by the model's context")

        # policy strings (tools/policy.h): canonical names, fields, errors
        out = run([a.kvq, "memplan", "-m", model, "--mem", "1GiB", "--points", "1K", "--json", "--policies",
                   "k=q8,v=tq-mse:4,w=128,f16layers=0;-1|tq-mse:3/tq-mse:3,sliding=1"])
        rows = jsonl(out)
        names = [r.get("policy") for r in rows]
        check(names == ["f16", "q8/tq-mse:4,w=128,f16layers=0;-1", "tq-mse:3,sliding=1"], "policy names %s" % names)
        if len(rows) == 3:
            r = rows[1]
            check(r["k"] == "q8" and r["v"] == "tq-mse:4" and r["window"] == 128 and r["f16_layers"] == [0, -1],
                  "policy fields %s" % r)
            # two f16 layers of 30: 28 layers of q8 (68+68 B/head) and tq-mse:4 (34 B/head at d=64), 2 of f16
            check(r["kv_bytes_per_token"] == 3 * (28 * (68 + 34) + 2 * 256), "policy bytes %d" % r["kv_bytes_per_token"])
        for bad in ("tq-mse:4,zz=1", "k=q8,w=x", "q8,f16layers=0;99", "nosuch:3"):
            r = subprocess.run([a.kvq, "memplan", "-m", model, "--mem", "1GiB", "--policies", bad],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
            check(r.returncode == 2, "bad policy %r: exit %d" % (bad, r.returncode))

        # report
        r = subprocess.run([sys.executable, os.path.join(a.root, "scripts", "report.py"), d], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=300)
        check(r.returncode == 0, "report.py exit %d: %s" % (r.returncode, r.stderr[-2000:]))
        for f in ("throughput.png", "memory.png", "sheet.png", "summary.md"):
            p = os.path.join(d, f)
            check(os.path.exists(p) and os.path.getsize(p) > 1000, "report: %s written" % f)
        for f in ("quality.png", "layers.png", "needle.png"):
            check(not os.path.exists(os.path.join(d, f)), "report: %s skipped without data" % f)
        md = open(os.path.join(d, "summary.md")).read() if os.path.exists(os.path.join(d, "summary.md")) else ""
        check("| q8 |" in md and "## Throughput" in md and "## Memory" in md, "summary.md tables")
    if fails:
        print("test_report: %d failures" % len(fails))
        return 1
    print("test_report: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
