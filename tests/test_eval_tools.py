#!/usr/bin/env python3
"""The quality evaluation tools (kvq ppl, kld, needle, gen-check) on SmolLM2,
briefly (tiny contexts, one window), through their --json output:

  ppl        fields present; f16 perplexity finite and plausible (2..200);
             tokens scored = ctx/2 - 1; results independent of --batch
             (no f16 window: a batch or several calls give the same logits)
  kld        f16 vs the f16 base: KLD exactly 0, top-1 agreement exactly 1,
             every per-layer attention error 0, same perplexity as the base;
             KLD(tq-mse:2) > KLD(tq-mse:4) > 0; a layer error per layer
  needle     result and summary records parse, accuracy in [0, 1], the
             answers are strings, one key per trial
  gen-check  f16 first and identical to itself (diverge null), a tested
             policy's fields, coherent <= generated, f16 never degenerate
             beyond itself, degenerate = also_f16 + beyond_f16, the cache's
             bits per value (16 for f16, 3.25 for tq-mse:3 on d = 64);
             --prompts-file: the file's prompts (2, with a blank line and
             non-ASCII text), malformed files refused with exit 2 and the
             line and column, --prompts above the file's count refused
  Ctrl-C     ppl stops after the current window on SIGINT, exits 130 and
             still writes the summary, marked interrupted and partial

Run as: python3 tests/test_eval_tools.py --kvq build/kvq --root REPO
Skips (exit 77) when the model or corpus is missing, unless CI is set.
"""
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_common as rc  # noqa: E402

NAME = "test_eval_tools"
FAILS = []
CWD = "/"  # not the repository: the tools must find corpora/ themselves (needle's filler)


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        rc.log(NAME, "FAIL: " + msg)


def run_json(kvq, args, timeout=300):
    cmd = [kvq] + args + ["--json", "--threads", "2"]
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout, cwd=CWD)
    rc.log(NAME, f"{' '.join(args[:1])}: exit {p.returncode} in {time.time() - t0:.1f} s")
    if p.returncode != 0:
        rc.log(NAME, "stderr: " + p.stderr[-2000:])
        FAILS.append(f"{' '.join(cmd)} exited {p.returncode}")
        return []
    recs = []
    for line in p.stdout.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            recs.append(json.loads(line))
        except json.JSONDecodeError as e:
            FAILS.append(f"bad JSON line from {args[0]}: {line[:200]} ({e})")
    return recs


def summaries(recs):
    return [r for r in recs if r.get("record") == "summary"]


def by_policy(recs):
    return {r["policy"]: r for r in summaries(recs)}


def has(rec, fields, what):
    for f in fields:
        check(f in rec, f"{what}: field '{f}' missing")


def test_ppl(kvq, model, text):
    recs = run_json(kvq, ["ppl", "-m", model, "-f", text, "--ctx", "128", "--chunks", "1",
                          "--policies", "f16 tq-mse:4", "--batch", "0"])
    s = by_policy(recs)
    check("f16" in s and "tq-mse:4" in s, f"ppl: summaries {list(s)}")
    if "f16" not in s or "tq-mse:4" not in s:
        return
    f = s["f16"]
    has(f, ["tool", "model", "text", "ctx", "chunks", "policy", "k", "v", "ppl", "ppl_se", "nll", "tokens",
            "kv_bytes", "bits_per_value", "bits_k", "bits_v", "seconds", "interrupted"], "ppl")
    check(f["tokens"] == 63, f"ppl: {f['tokens']} tokens scored, expected 63")
    check(f["ppl"] is not None and math.isfinite(f["ppl"]) and 2.0 < f["ppl"] < 200.0, f"ppl: f16 ppl {f['ppl']}")
    check(f["bits_per_value"] == 16.0, f"ppl: f16 bits {f['bits_per_value']}")
    check(abs(s["tq-mse:4"]["bits_k"] - 4.25) < 1e-9, f"ppl: tq-mse:4 bits at d=64 {s['tq-mse:4']['bits_k']}")
    check(s["tq-mse:4"]["kv_bytes"] < f["kv_bytes"], "ppl: tq-mse:4 holds fewer bytes than f16")
    check(f["interrupted"] is False, "ppl: not interrupted")
    # the same window in calls of 24 tokens
    recs2 = run_json(kvq, ["ppl", "-m", model, "-f", text, "--ctx", "128", "--chunks", "1",
                           "--policy", "tq-mse:4", "--batch", "24"])
    s2 = by_policy(recs2)
    if "tq-mse:4" in s2:
        check(s2["tq-mse:4"]["ppl"] == s["tq-mse:4"]["ppl"],
              f"ppl: --batch 24 gives {s2['tq-mse:4']['ppl']} vs {s['tq-mse:4']['ppl']} in one call")


def test_kld(kvq, model, text):
    recs = run_json(kvq, ["kld", "-m", model, "-f", text, "--ctx", "128", "--chunks", "1",
                          "--policies", "f16 tq-mse:4 tq-mse:2"])
    s = by_policy(recs)
    check(set(s) == {"f16", "tq-mse:4", "tq-mse:2"}, f"kld: summaries {list(s)}")
    if len(s) != 3:
        return
    f = s["f16"]
    has(f, ["kld", "kld_se", "kld_p99", "kld_max", "top1", "ppl_base", "ppl", "tokens", "bits_per_value",
            "layer_err", "worst_layer", "base"], "kld")
    check(f["kld"] == 0.0 and f["kld_p99"] == 0.0 and f["kld_max"] == 0.0, f"kld: f16 vs f16 KLD {f['kld']}")
    check(f["top1"] == 1.0, f"kld: f16 vs f16 top-1 {f['top1']}")
    check(f["ppl"] == f["ppl_base"], "kld: f16 ppl equals the base's")
    check(len(f["layer_err"]) == 30 and all(e == 0.0 for e in f["layer_err"]),
          f"kld: f16 layer errors {f['layer_err'][:4]}...")
    k4, k2 = s["tq-mse:4"]["kld"], s["tq-mse:2"]["kld"]
    check(k2 > k4 > 0.0, f"kld: expected KLD(tq-mse:2) {k2} > KLD(tq-mse:4) {k4} > 0")
    check(0.0 < s["tq-mse:4"]["top1"] <= 1.0, "kld: tq-mse:4 top-1 in (0, 1]")
    le = s["tq-mse:4"]["layer_err"]
    check(len(le) == 30 and all(e is not None and e > 0.0 for e in le), "kld: tq-mse:4 layer errors all > 0")
    check(s["tq-mse:4"]["tokens"] == 63, "kld: 63 scored tokens")
    # calib=N: the first N tokens stay f16 until the per-head +chscale plans
    # are calibrated on them; a window shorter than N is never compressed
    recs = run_json(kvq, ["kld", "-m", model, "-f", text, "--ctx", "128", "--chunks", "1",
                          "--policies", "tq-mse:4+chscale/tq-mse:4,calib=200 tq-mse:4+chscale/tq-mse:4,calib=16"])
    s = by_policy(recs)
    never, early = "tq-mse:4+chscale/tq-mse:4,calib=200", "tq-mse:4+chscale/tq-mse:4,calib=16"
    check(set(s) == {never, early}, f"kld calib: summaries {list(s)}")
    if len(s) == 2:
        check(s[never]["calib_tokens"] == 200 and s[early]["calib_tokens"] == 16, "kld calib: calib_tokens fields")
        check(s[never]["kld"] == 0.0, f"kld calib=200 > ctx: expected an f16 cache, KLD {s[never]['kld']}")
        check(s[early]["kld"] > 0.0, f"kld calib=16: expected compression, KLD {s[early]['kld']}")


def test_needle(kvq, model):
    recs = run_json(kvq, ["needle", "-m", model, "--ctx", "256", "--depths", "0.5", "--trials", "1",
                          "--policies", "f16 q8"])
    res = [r for r in recs if r.get("record") == "result"]
    summ = summaries(recs)
    check(len(res) == 2 and len(summ) == 2, f"needle: {len(res)} results, {len(summ)} summaries")
    for r in res:
        has(r, ["policy", "ctx", "depth", "trials", "correct", "accuracy", "keys", "answers"], "needle")
        check(r["ctx"] == 256 and r["depth"] == 0.5 and r["trials"] == 1, "needle: ctx/depth/trials")
        check(0.0 <= r["accuracy"] <= 1.0, "needle: accuracy in [0, 1]")
        check(len(r["keys"]) == 1 and r["keys"][0].isdigit() and 5 <= len(r["keys"][0]) <= 7, "needle: key")
        check(len(r["answers"]) == 1 and isinstance(r["answers"][0], str), "needle: answers")
    rc.log(NAME, "needle answers: " + ", ".join(f"{r['policy']}: {r['answers']} (key {r['keys']})" for r in res))


def test_gen_check(kvq, model):
    recs = run_json(kvq, ["gen-check", "-m", model, "--n", "12", "--prompts", "2", "--policy", "tq-mse:3"])
    s = summaries(recs)
    check(len(s) == 2 and s[0]["policy"] == "f16" and s[1]["policy"] == "tq-mse:3",
          f"gen-check: summaries {[r.get('policy') for r in s]}")
    if len(s) != 2:
        return
    for r in s:
        has(r, ["n", "prompts", "n_prompts", "mean_coherent", "mean_diverge", "identical", "eos", "degenerate"],
            "gen-check")
        check(r["n_prompts"] == 2 and len(r["prompts"]) == 2, "gen-check: 2 prompts")
        for p in r["prompts"]:
            check(0 <= p["coherent"] <= p["generated"] <= 12, f"gen-check: coherent/generated {p}")
    check(s[0]["identical"] == 2 and all(p["diverge"] is None for p in s[0]["prompts"]),
          "gen-check: f16 identical to itself")
    for r in s:
        has(r, ["degenerate_also_f16", "degenerate_beyond_f16", "bits_per_value_all_layers", "kv_bytes_per_token",
                "kv_bytes", "kv_positions", "prompts_file"], "gen-check")
        check(r["degenerate"] == r["degenerate_also_f16"] + r["degenerate_beyond_f16"], f"gen-check: degenerate split {r}")
        check(r["prompts_file"] is None, "gen-check: built-in prompts")
        for p in r["prompts"]:
            check(p["beyond_f16"] == (p["degenerate_at"] is not None and
                                      s[0]["prompts"][p["prompt"]]["degenerate_at"] is None),
                  f"gen-check: beyond_f16 {p}")
            check(p["prompt_tokens"] > 0, f"gen-check: prompt_tokens {p}")
    check(s[0]["degenerate_beyond_f16"] == 0, "gen-check: f16 beyond itself")
    check(abs(s[0]["bits_per_value_all_layers"] - 16.0) < 1e-9 and abs(s[1]["bits_per_value_all_layers"] - 3.25) < 1e-9,
          f"gen-check: bits {s[0]['bits_per_value_all_layers']} {s[1]['bits_per_value_all_layers']}")


def test_gen_check_prompts_file(kvq, model, tmp):
    good = os.path.join(tmp, "prompts.json")
    with open(good, "w", encoding="utf-8") as f:
        json.dump(["Name three colours.", "Caf\u00e9 menu:\n\n1."], f)
    recs = run_json(kvq, ["gen-check", "-m", model, "--n", "6", "--prompts-file", good, "--completion",
                          "--per-prompt"])
    s = summaries(recs)
    check(len(s) == 1 and s[0]["n_prompts"] == 2 and s[0]["prompts_file"] == good and not s[0]["chat"],
          f"gen-check --prompts-file: {s}")
    texts = [r for r in recs if r.get("record") == "prompt"]
    check(len(texts) == 2 and all(isinstance(r["text"], str) for r in texts), "gen-check --prompts-file: texts")
    bad = [("[]", "line 1, column 2: no prompts"),
           ("", "line 1, column 1: empty file"),
           ('["a",\n "b\nc"]', "line 2, column 4: prompt 2: raw control character U+000A"),
           ('["a", ]', "trailing comma"),
           (b'["caf\xe9"]', "line 1, column 6: prompt 1: invalid UTF-8"),
           ('["' + "x" * 16385 + '"]', "prompt 1 is longer than 16384 bytes")]
    for i, (text, want) in enumerate(bad):
        path = os.path.join(tmp, f"bad{i}.json")
        with open(path, "wb") as f:
            f.write(text if isinstance(text, bytes) else text.encode("utf-8"))
        p = subprocess.run([kvq, "gen-check", "-m", model, "--prompts-file", path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60, cwd=CWD)
        check(p.returncode == 2 and want in p.stderr and p.stdout == "",
              f"gen-check bad file {i}: exit {p.returncode}, stderr {p.stderr[-300:]!r}, want {want!r}")
    p = subprocess.run([kvq, "gen-check", "-m", model, "--prompts-file", good, "--prompts", "3"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60, cwd=CWD)
    check(p.returncode == 2 and "there are 2 prompts in" in p.stderr, f"gen-check --prompts 3 of 2: {p.stderr[-300:]!r}")


def test_sigint(kvq, model, text):
    cmd = [kvq, "ppl", "-m", model, "-f", text, "--ctx", "64", "--chunks", "200", "--json", "--per-window",
           "--threads", "2"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = p.stdout.readline()
    p.send_signal(signal.SIGINT)
    try:
        rest, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        check(False, "sigint: ppl did not stop")
        return
    check(p.returncode == 130, f"sigint: exit {p.returncode}, want 130 ({err[-300:]})")
    recs = [json.loads(x) for x in (first + rest).splitlines() if x.strip()]
    win = [r for r in recs if r["record"] == "window"]
    s = summaries(recs)
    check(len(win) >= 1 and len(s) == 1, f"sigint: {len(win)} window records, {len(s)} summaries")
    if s:
        check(s[0]["interrupted"] is True and s[0]["partial"] is True and 1 <= s[0]["chunks"] < 200,
              f"sigint: summary {s[0]}")
        check(s[0]["tokens"] == 31 * s[0]["chunks"], "sigint: tokens of the finished windows")


def main() -> int:
    args = rc.parse_args(NAME)
    kvq = args.kvq or os.path.join(args.root, "build", "kvq")
    model = rc.model_path(NAME, args.root, rc.SMOLLM2)
    text = os.path.join(args.root, "corpora", "prose.txt")
    if not os.path.isfile(text):
        rc.missing(NAME, f"{text} not found (run scripts/fetch-corpora.sh)")
    t0 = time.time()
    test_ppl(kvq, model, text)
    test_kld(kvq, model, text)
    test_needle(kvq, model)
    test_gen_check(kvq, model)
    with tempfile.TemporaryDirectory() as tmp:
        test_gen_check_prompts_file(kvq, model, tmp)
    test_sigint(kvq, model, text)
    rc.log(NAME, f"{'FAIL' if FAILS else 'OK'} ({len(FAILS)} failures) in {time.time() - t0:.1f} s")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
