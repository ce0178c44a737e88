#!/usr/bin/env python3
"""scripts/report.py's figures from a fixture (no model, no kvq run): every
panel and the sheet render from synthetic results of 40 policies in 12
method families, and each one is readable:

  - every text drawn is at least report.FS (9) points,
  - nothing is clipped: every text lies inside the saved image,
  - point labels do not overlap one another,
  - legends have at most report.MAX_LEGEND entries (grouped by family),
  - the PNGs are as large as their figures at report.DPI (sheet: wider than tall).

    python3 tests/test_report_figures.py [--kvq build/kvq] [--root .]

Exit 77 (skipped) when matplotlib is missing and CI is unset.
"""
import argparse
import math
import os
import sys
import tempfile

SKIP = 77
FAILS = []


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("test_report_figures: CHECK failed: " + msg)


METHODS = [("q8", 8.5), ("q4", 5.0), ("tq-mse:4", 4.25), ("tq-mse:3", 3.25), ("tq-mse:2", 2.25),
           ("tq-prod:3", 3.875), ("qjl", 1.125), ("polar", 3.875), ("rvq:2", 4.5), ("rvq:1", 2.5),
           ("tcq:2", 2.25), ("tq-mse:4+outliers=8", 5.0), ("tq-mse:4+chscale", 4.25)]


def policies():
    """40 policies: the methods alone, with a window, and keys/values mixed."""
    out = []
    for k, b in METHODS:
        out.append((k, k, 0, b))
    for k, b in METHODS[:9]:
        out.append((k + ",w=128", k, 128, b))
    for (k, bk), (v, bv) in zip(METHODS, METHODS[3:] + METHODS[:3]):
        if len(out) >= 40:
            break
        if v.startswith(("qjl", "tq-prod")):  # key-only methods
            continue
        out.append((k + "/" + v, k + "|" + v, 0, 0.5 * (bk + bv)))
    return out[:40]


def fixture():
    model = "Fixture-135M.gguf"
    pols = [("f16", "f16", 0, 16.0)] + policies()
    d = {f: [] for f in ("bench", "ppl", "kld", "needle", "gencheck", "codec", "memplan")}
    for i, (name, spec, w, bits) in enumerate(pols):
        k, _, v = spec.partition("|")
        v = v or k
        base = {"model": model, "policy": name, "k": k, "v": v, "window": w, "f16_layers": [],
                "compress_sliding": 0, "record": "summary"}
        q = max(1e-4, 2.0 ** (-bits) * (1 + 0.3 * math.sin(i)))
        for ctx in (512, 2048):
            d["bench"].append(dict(base, tool="bench", ctx=ctx, threads=2, prefill_speedup=1 - 0.01 * i,
                                   gen_speedup=1 - 0.015 * i, kv_bytes=int(ctx * 23040 * bits / 16)))
        d["kld"].append(dict(base, tool="kld", kld=0 if name == "f16" else q, top1=1 - min(0.9, 3 * q),
                             ppl=30 * (1 + q), bits_per_value=bits,
                             layer_err=[0.0 if name == "f16" else q * (1 + 0.1 * l) for l in range(30)]))
        d["ppl"].append(dict(base, tool="ppl", ppl=30 * (1 + q), bits_per_value=bits))
        for ctx in (1024, 2048, 4096, 8192):
            d["needle"].append(dict(base, tool="needle", ctx=ctx, accuracy=max(0.0, 1 - q * ctx / 512)))
        d["gencheck"].append(dict(base, tool="gen-check", n=200, n_prompts=8, mean_coherent=200 * (1 - q),
                                  mean_diverge=200 * (1 - 4 * q)))
        pts = [{"ctx": c, "kv_bytes": int(c * 23040 * bits / 16)} for c in (4096, 32768, 131072)]
        d["memplan"].append(dict(base, tool="memplan", points=pts, max_ctx=int(2 ** 22 / bits), mem_bytes=2 ** 30,
                                 n_ctx_train=8192))
    for m, b in METHODS:
        d["codec"].append({"tool": "codec-bench", "method": m, "bits_per_value": b, "rel_mse": 2 ** (-b),
                           "ip_rel_err": 2 ** (-b / 2), "dim": 64, "data": "gauss"})
    return d


def texts_of(fig):
    """Every visible text artist of a figure, its subfigures and axes."""
    import matplotlib.text as mt
    return [t for t in fig.findobj(mt.Text) if t.get_visible() and t.get_text().strip()]


def check_figure(report, name, fig, path):
    from PIL import Image
    r = fig.canvas.get_renderer()
    small = [(t.get_text()[:30], t.get_fontsize()) for t in texts_of(fig) if t.get_fontsize() < report.FS - 1e-9]
    check(not small, "%s: texts below %g pt: %s" % (name, report.FS, small[:5]))
    # nothing clipped: the saved image (bbox_inches="tight": the tight box) holds every axis's
    # drawn tick labels, axis labels, title and legend
    tight = fig.get_tightbbox(r)  # inches
    x0, y0, x1, y1 = (v * fig.dpi for v in (tight.x0, tight.y0, tight.x1, tight.y1))
    for ax in report.all_axes(fig):
        if not ax.get_visible():
            continue
        parts = [ax.xaxis.get_tightbbox(r), ax.yaxis.get_tightbbox(r), ax.title.get_window_extent(r)]
        if ax.get_legend() is not None:
            parts.append(ax.get_legend().get_window_extent(r))
        for bb in parts:
            if bb is None or bb.width == 0:
                continue
            inside = bb.x0 >= x0 - 2 and bb.x1 <= x1 + 2 and bb.y0 >= y0 - 2 and bb.y1 <= y1 + 2
            check(inside, "%s: part of an axis outside the saved image (%s)" % (name, bb))
    # point labels (annotations) do not overlap
    import matplotlib.text as mt
    for ax in report.all_axes(fig):
        anns = [a.get_window_extent(r) for a in ax.findobj(mt.Annotation) if a.get_visible()]
        for i in range(len(anns)):
            for j in range(i):
                a, b = anns[i], anns[j]
                ov = min(a.x1, b.x1) - max(a.x0, b.x0) > 1 and min(a.y1, b.y1) - max(a.y0, b.y0) > 1
                check(not ov, "%s: labels overlap" % name)
        leg = ax.get_legend()
        if leg is not None:
            n = len(leg.get_texts())
            check(n <= report.MAX_LEGEND, "%s: legend of %d entries (> %d)" % (name, n, report.MAX_LEGEND))
    with Image.open(path) as im:
        w, h = im.size
    check(w >= 600 and h >= 250, "%s: %dx%d px" % (name, w, h))
    want_w, want_h = (tight.width + 0.3) * report.DPI, (tight.height + 0.3) * report.DPI  # pad 0.15 in
    check(abs(w - want_w) <= 3 + 0.015 * want_w and abs(h - want_h) <= 3 + 0.015 * want_h, "%s: image %dx%d px, the drawing %.0fx%.0f" %
          (name, w, h, want_w, want_h))
    return w, h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvq")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy  # noqa: F401
        import PIL  # noqa: F401
    except ImportError as e:
        if os.environ.get("CI"):
            print("test_report_figures: FAIL: %s (CI is set)" % e)
            return 1
        print("test_report_figures: SKIP: %s" % e)
        return SKIP
    sys.path.insert(0, os.path.join(a.root, "scripts"))
    import report

    d = fixture()
    npol = report.n_policies(d)
    check(npol >= 30, "fixture: %d policies" % npol)
    with tempfile.TemporaryDirectory() as out:
        for name, fn, _, _ in report.PANELS:
            fig = report.draw_panel(name, fn, d, "fixture", npol)
            check(fig is not None, "%s: no figure" % name)
            if fig is None:
                continue
            skipped = report.finish_layout(fig)
            path = os.path.join(out, name + ".png")
            report.save_png(fig, path, report.DPI)
            w, h = check_figure(report, name, fig, path)
            print("test_report_figures: %s: %dx%d px, %d labels left out" % (name, w, h, skipped))
            plt.close(fig)
        # the whole rendering path, sheet included
        written = report.render(d, out, "", "fixture")
        names = sorted(os.path.basename(p) for p in written)
        check(len(written) == len(report.PANELS) + 1 and "sheet.png" in names, "render wrote %s" % names)
        from PIL import Image
        with Image.open(os.path.join(out, "sheet.png")) as im:
            w, h = im.size
        check(w > 1200, "sheet: %dx%d px: laid out two panels wide" % (w, h))
        print("test_report_figures: sheet %dx%d px" % (w, h))
    if FAILS:
        print("test_report_figures: %d checks failed" % len(FAILS))
        return 1
    print("test_report_figures: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
