#!/usr/bin/env python3
"""Turns the JSON results of the kvq evaluation tools into PNG sheets and a
Markdown summary (issue 5).

    python3 scripts/report.py RESULTS_DIR [--out DIR] [--title TEXT]

RESULTS_DIR holds any of these files, one JSON object per line (lines that
are not JSON are ignored, a missing file skips its panels):

    bench.jsonl     kvq bench --json         throughput per policy and ctx
    ppl.jsonl       kvq ppl --json           perplexity
    kld.jsonl       kvq kld --json           KL divergence, top-1, per-layer attention error
    needle.jsonl    kvq needle --json        retrieval per ctx
    gencheck.jsonl  kvq gen-check --json     greedy generation vs the f16 cache
    codec.jsonl     kvq codec-bench --json   codec rate-distortion
    memplan.jsonl   kvq memplan --json       KV memory vs context, longest context

Writes into --out (default RESULTS_DIR), per model (file names prefixed with
the model when the directory holds several): throughput.png, quality.png,
codec.png, memory.png, layers.png, gencheck.png, needle.png (each only when
its data exists), sheet.png (every panel on one page) and summary.md.

Needs numpy and matplotlib (pip install numpy matplotlib); uses the Agg
backend (no display).
"""
import argparse
import json
import math
import os
import re
import sys

FILES = ["bench", "ppl", "kld", "needle", "gencheck", "codec", "memplan"]


def load_jsonl(path):
    rows = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    except OSError:
        pass
    return rows


def model_key(row):
    m = row.get("model") or "model"
    m = os.path.basename(str(m))
    return m[:-5] if m.endswith(".gguf") else m


def is_summary(row):
    return row.get("record", "summary") in ("summary", None) and not row.get("error")


def num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# ---------------------------------------------------------------- policies
def family(spec):
    return re.split(r"[:+]", spec or "f16")[0]


def policy_name(row):
    return row.get("policy") or "%s/%s" % (row.get("k", "f16"), row.get("v", "f16"))


def policy_family(row):
    k, v = row.get("k", "f16"), row.get("v", "f16")
    if k == v:
        return family(k)
    if k.startswith("f16"):
        return family(v)
    if v.startswith("f16"):
        return family(k)
    return family(k) + "/" + family(v)


FAMILY_COLORS = {}
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"]


def color_of(row):
    f = policy_family(row)
    if f in ("f16", "f32"):
        return "black"
    if f not in FAMILY_COLORS:
        FAMILY_COLORS[f] = PALETTE[len(FAMILY_COLORS) % len(PALETTE)]
    return FAMILY_COLORS[f]


def marker_of(row):
    if "+outliers" in (row.get("k", "") + row.get("v", "")):
        return "^"
    if row.get("window"):
        return "s"
    if row.get("f16_layers") or row.get("compress_sliding"):
        return "D"
    return "o"


def hollow(row):
    """Policies whose real cost is above the methods' bits (f16 window or f16 layers)."""
    return bool(row.get("window")) or bool(row.get("f16_layers"))


def order_policies(rows):
    """Policy names in first-seen order, f16 first."""
    seen = []
    for r in rows:
        p = policy_name(r)
        if p not in seen:
            seen.append(p)
    if "f16" in seen:
        seen.remove("f16")
        seen.insert(0, "f16")
    return seen


def fmt(x, spec=".3g", none="–"):
    return format(x, spec) if num(x) else none


# ---------------------------------------------------------------- readability
# Every text of every panel is at least FS points (readable at 100 % zoom at
# the DPI the PNGs are written with); legends are grouped by method family
# (MAX_LEGEND entries at most) and point labels never overlap (a label with
# no free place is left out; its point keeps its family's colour).
FS, FS_TITLE, MAX_LEGEND, DPI = 9, 10, 14, 90

MARKER_NOTES = [("o", "plain"), ("s", "+ f16 window"), ("^", "+outliers"), ("D", "f16 layers / sliding")]


def label_later(ax, x, y, text, color="black"):
    """Queues a point label; place_labels puts it once the layout is final."""
    if not hasattr(ax, "_kvq_labels"):
        ax._kvq_labels = []
    ax._kvq_labels.append((x, y, text, color))


def all_axes(fig):
    """The axes of a figure and of its subfigures (the sheet)."""
    out = list(fig.axes)
    for sf in getattr(fig, "subfigs", []):
        out += all_axes(sf)
    return out


def place_labels(fig):
    """Puts the queued labels next to their points, each where it overlaps no
    other label, point or the axes' edge; returns how many found no place."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    skipped = 0
    for ax in all_axes(fig):
        labels = getattr(ax, "_kvq_labels", [])
        if not labels:
            continue
        box = ax.get_window_extent(r)
        taken = []
        pts = [ax.transData.transform((x, y)) for x, y, _, _ in labels]
        for (px, py) in pts:  # the points themselves are taken (5 px around)
            taken.append((px - 5, py - 5, px + 5, py + 5))
        scale = fig.dpi / 72.0
        order = sorted(range(len(labels)), key=lambda i: (pts[i][0], pts[i][1]))
        for i in order:
            x, y, text, color = labels[i]
            px, py = pts[i]
            t = ax.text(0, 0, text, fontsize=FS)
            bb = t.get_window_extent(r)
            t.remove()
            w, h = bb.width, bb.height
            cands = [(6, 2), (6, -h / scale - 2), (-6 - w / scale, 2), (-6 - w / scale, -h / scale - 2),
                     (6, 10), (6, -h / scale - 10), (-6 - w / scale, 10), (-6 - w / scale, -h / scale - 10),
                     (-w / scale / 2, 8), (-w / scale / 2, -h / scale - 8)]
            for dx, dy in cands:
                x0, y0 = px + dx * scale, py + dy * scale
                rect = (x0, y0, x0 + w, y0 + h)
                inside = rect[0] >= box.x0 and rect[2] <= box.x1 and rect[1] >= box.y0 and rect[3] <= box.y1
                if inside and not any(rect[0] < q[2] and q[0] < rect[2] and rect[1] < q[3] and q[1] < rect[3]
                                      for q in taken):
                    taken.append(rect)
                    a = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=FS,
                                    color=color, va="bottom", ha="left")
                    a.set_in_layout(False)
                    break
            else:
                skipped += 1
        ax._kvq_labels = []
    return skipped


def family_legend(ax, rows, loc="best", markers=True, outside=False):
    """One legend entry per method family (its colour), and the marker
    meanings used; MAX_LEGEND entries at most."""
    from matplotlib.lines import Line2D
    fams, seen = [], set()
    for r in rows:
        f = policy_family(r)
        if f not in seen:
            seen.add(f)
            fams.append((f, color_of(r)))
    h = [Line2D([], [], color=c, marker="o", ls="", label=f) for f, c in fams]
    if markers:
        used = {marker_of(r) for r in rows}
        h += [Line2D([], [], color="gray", marker=m, ls="", mfc="none", label=n) for m, n in MARKER_NOTES
              if m in used and m != "o"]
    h = h[:MAX_LEGEND]
    kw = dict(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0) if outside else dict(loc=loc)
    ax.legend(handles=h, fontsize=FS, ncol=1, **kw)


def family_lines_legend(ax, rows, outside=True):
    """Legend of line plots coloured by family: families, plus the dashed style."""
    from matplotlib.lines import Line2D
    fams, seen = [], set()
    for r in rows:
        f = policy_family(r)
        if f not in seen:
            seen.add(f)
            fams.append((f, color_of(r)))
    h = [Line2D([], [], color=c, lw=1.5, label=f) for f, c in fams][:MAX_LEGEND - 1]
    if any(hollow(r) for r in rows):
        h.append(Line2D([], [], color="gray", lw=1.2, ls="--", label="+ f16 window / layers"))
    kw = dict(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0) if outside else dict(loc="best")
    ax.legend(handles=h, fontsize=FS, **kw)


# ---------------------------------------------------------------- panels
# Each panel draws into a figure region (a list of axes it creates from a
# SubplotSpec) and returns False when it has no data.

def panel_throughput(fig, spec, d):
    rows = [r for r in d["bench"] if is_summary(r)]
    if not rows:
        return False
    pols = order_policies(rows)
    ctxs = sorted({r["ctx"] for r in rows if "ctx" in r})
    gs = spec.subgridspec(1, 2, wspace=0.05)
    axes = [fig.add_subplot(gs[0, 0]), fig.add_subplot(gs[0, 1])]
    h = 0.8 / max(1, len(ctxs))
    cmap = __import__("matplotlib").colormaps["viridis"]
    for ai, (key, title) in enumerate([("prefill_speedup", "prefill tok/s vs f16"), ("gen_speedup", "decode tok/s vs f16")]):
        ax = axes[ai]
        for ci, c in enumerate(ctxs):
            ys, xs = [], []
            for pi, p in enumerate(pols):
                v = [r.get(key) for r in rows if policy_name(r) == p and r.get("ctx") == c]
                if v and num(v[0]):
                    ys.append(pi + (ci - (len(ctxs) - 1) / 2) * h)
                    xs.append(v[0])
            ax.barh(ys, xs, height=h, color=cmap(ci / max(1, len(ctxs) - 1) * 0.85), label="ctx %d" % c)
        ax.axvline(1.0, color="k", lw=0.8, ls="--")
        ax.set_title(title, fontsize=FS_TITLE)
        ax.set_yticks(range(len(pols)))
        ax.set_yticklabels(pols if ai == 0 else [], fontsize=FS)
        ax.invert_yaxis()
        ax.tick_params(axis="x", labelsize=FS)
        ax.grid(axis="x", alpha=0.3)
    axes[1].legend(fontsize=FS, loc="lower right")
    th = rows[0].get("threads")
    axes[0].set_xlabel("ratio to f16 (same run, interleaved; %s threads)" % th, fontsize=FS)
    return True


def quality_rows(d):
    rows = [r for r in d["kld"] if is_summary(r) and num(r.get("kld"))]
    return rows


def panel_quality(fig, spec, d):
    krows = quality_rows(d)
    prows = [r for r in d["ppl"] if is_summary(r) and num(r.get("ppl"))]
    if not krows and not prows:
        return False
    gs = spec.subgridspec(1, 2, wspace=0.3)
    ax1, ax2 = fig.add_subplot(gs[0, 0]), fig.add_subplot(gs[0, 1])
    if krows:
        pts = [r for r in krows if num(r.get("bits_per_value")) and r["kld"] > 0]
        for r in pts:
            c = color_of(r)
            ax1.scatter(r["bits_per_value"], r["kld"], c="none" if hollow(r) else c, edgecolors=c,
                        marker=marker_of(r), s=28, zorder=3)
            label_later(ax1, r["bits_per_value"], r["kld"], policy_name(r), c)
        ax1.set_yscale("log")
        ax1.set_ylabel("mean KL(f16 || policy) per token", fontsize=FS)
        ax1.set_title("rate–distortion: KLD vs bits per value", fontsize=FS_TITLE)
        tops = [r for r in krows if num(r.get("top1")) and num(r.get("bits_per_value"))]
        for r in tops:
            c = color_of(r)
            ax2.scatter(r["bits_per_value"], 100 * (1 - r["top1"]) + 1e-3, c="none" if hollow(r) else c,
                        edgecolors=c, marker=marker_of(r), s=28, zorder=3)
            label_later(ax2, r["bits_per_value"], 100 * (1 - r["top1"]) + 1e-3, policy_name(r), c)
        ax2.set_yscale("log")
        ax2.set_ylabel("top-1 disagreement with f16 (%)", fontsize=FS)
        ax2.set_title("next-token top-1 disagreement vs bits", fontsize=FS_TITLE)
    else:
        base = [r["ppl"] for r in prows if policy_name(r) == "f16"]
        for r in prows:
            if not num(r.get("bits_per_value")):
                continue
            y = 100 * (r["ppl"] / base[0] - 1) if base else r["ppl"]
            c = color_of(r)
            ax1.scatter(r["bits_per_value"], y, c="none" if hollow(r) else c, edgecolors=c, marker=marker_of(r), s=28)
            label_later(ax1, r["bits_per_value"], y, policy_name(r), c)
        ax1.set_ylabel("perplexity change vs f16 (%)" if base else "perplexity", fontsize=FS)
        ax1.set_title("perplexity vs bits per value", fontsize=FS_TITLE)
        ax2.set_visible(False)
    for ax in (ax1, ax2):
        ax.set_xlabel("bits per value (K, V methods; hollow: + f16 window/layers)", fontsize=FS)
        ax.tick_params(labelsize=FS)
        ax.grid(alpha=0.3, which="both")
    family_legend(ax2 if ax2.get_visible() else ax1, krows or prows, outside=True)
    return True


def panel_codec(fig, spec, d):
    rows = [r for r in d["codec"] if num(r.get("bits_per_value"))]
    if not rows:
        return False
    gs = spec.subgridspec(1, 2, wspace=0.3)
    ax1, ax2 = fig.add_subplot(gs[0, 0]), fig.add_subplot(gs[0, 1])
    for r in rows:
        m = r.get("method", "?")
        c = color_of({"k": m, "v": m})
        if num(r.get("rel_mse")) and r["rel_mse"] > 0:
            ax1.scatter(r["bits_per_value"], r["rel_mse"], color=c, s=20)
            label_later(ax1, r["bits_per_value"], r["rel_mse"], m, c)
        if num(r.get("ip_rel_err")) and r["ip_rel_err"] > 0:
            ax2.scatter(r["bits_per_value"], r["ip_rel_err"], color=c, s=20)
            label_later(ax2, r["bits_per_value"], r["ip_rel_err"], m, c)
    data = rows[0].get("data", "")
    ax1.set_title("codec: relative MSE vs bits (d=%s%s)" % (rows[0].get("dim", "?"), ", " + data if data else ""),
                  fontsize=FS_TITLE)
    ax2.set_title("codec: inner-product relative error vs bits", fontsize=FS_TITLE)
    for ax in (ax1, ax2):
        ax.set_yscale("log")
        ax.set_xlabel("bits per value (all stored bytes)", fontsize=FS)
        ax.tick_params(labelsize=FS)
        ax.grid(alpha=0.3, which="both")
    return True


def panel_memory(fig, spec, d):
    rows = [r for r in d["memplan"] if is_summary(r) and r.get("points")]
    brows = [r for r in d["bench"] if is_summary(r) and num(r.get("kv_bytes"))]
    if not rows and not brows:
        return False
    gs = spec.subgridspec(1, 2, wspace=0.35)
    ax1, ax2 = fig.add_subplot(gs[0, 0]), fig.add_subplot(gs[0, 1])
    if rows:
        for r in rows:
            pts = sorted((p["ctx"], p["kv_bytes"]) for p in r["points"] if num(p.get("kv_bytes")))
            if not pts:
                continue
            c = color_of(r)
            ax1.plot([p[0] for p in pts], [p[1] / 2**20 for p in pts], marker=marker_of(r), ms=3, lw=1.2 if
                     policy_name(r) == "f16" else 0.8, color=c, label=policy_name(r),
                     ls="--" if hollow(r) else "-")
        ax1.set_title("KV cache memory vs context (exact plan)", fontsize=FS_TITLE)
        pols = order_policies(rows)
        maxc = []
        for p in pols:
            r = [x for x in rows if policy_name(x) == p][0]
            maxc.append((p, r.get("max_ctx", 0), r))
        ax2.barh(range(len(maxc)), [m[1] for m in maxc], color=[color_of(m[2]) for m in maxc])
        ax2.set_yticks(range(len(maxc)))
        ax2.set_yticklabels([m[0] for m in maxc], fontsize=FS)
        ax2.invert_yaxis()
        ax2.set_xscale("log")
        mem = rows[0].get("mem_bytes", 0)
        ctxm = rows[0].get("n_ctx_train")
        if num(ctxm) and ctxm > 0:
            ax2.axvline(ctxm, color="k", ls="--", lw=0.8)
        ax2.set_title("longest context in %.3g GiB\n(weights + KV + runtime)%s" %
                      (mem / 2**30, "; dashed: model's context" if ctxm else ""), fontsize=FS)
        ax2.tick_params(labelsize=FS)
        ax2.grid(axis="x", alpha=0.3, which="both")
    else:
        for p in order_policies(brows):
            pts = sorted((r["ctx"], r["kv_bytes"]) for r in brows if policy_name(r) == p)
            r0 = [r for r in brows if policy_name(r) == p][0]
            ax1.plot([q[0] for q in pts], [q[1] / 2**20 for q in pts], marker="o", ms=3, color=color_of(r0), label=p)
        ax1.set_title("KV cache memory vs context (kvq bench)", fontsize=FS_TITLE)
        ax2.set_visible(False)
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xlabel("context (tokens)", fontsize=FS)
    ax1.set_ylabel("MiB", fontsize=FS)
    ax1.tick_params(labelsize=FS)
    ax1.grid(alpha=0.3, which="both")
    family_lines_legend(ax1, rows or brows, outside=False)
    return True


def panel_layers(fig, spec, d):
    rows = [r for r in quality_rows(d) if isinstance(r.get("layer_err"), list) and policy_name(r) != "f16"]
    if not rows:
        return False
    ax = fig.add_subplot(spec)
    for r in rows:
        y = [v if num(v) and v > 0 else float("nan") for v in r["layer_err"]]
        ax.plot(range(len(y)), y, color=color_of(r), marker=marker_of(r), ms=2.5, lw=0.8,
                ls="--" if hollow(r) else "-", label=policy_name(r))
    ax.set_yscale("log")
    ax.set_xlabel("layer", fontsize=FS)
    ax.set_ylabel("relative L2 error of the attention output", fontsize=FS)
    ax.set_title("attention-output error per layer vs f16\n(end to end, mean over scored positions)", fontsize=FS_TITLE)
    ax.tick_params(labelsize=FS)
    ax.grid(alpha=0.3, which="both")
    family_lines_legend(ax, rows, outside=True)
    return True


GEN_KEYS = ["mean_coherent", "mean_diverge"]  # kvq gen-check summaries


def gen_metric(rows):
    for k in GEN_KEYS:
        if any(num(r.get(k)) for r in rows):
            return k
    return None


def panel_gencheck(fig, spec, d):
    rows = [r for r in d["gencheck"] if is_summary(r)]
    keys = [k for k in GEN_KEYS if any(num(r.get(k)) for r in rows)]
    if not rows or not keys:
        return False
    pols = order_policies(rows)
    n = max((r.get("n", 0) for r in rows if num(r.get("n"))), default=0)
    gs = spec.subgridspec(1, len(keys), wspace=0.05)
    titles = {"mean_coherent": "tokens before EOS or a degenerate repeat",
              "mean_diverge": "tokens identical to the f16 cache's stream"}
    for ki, key in enumerate(keys):
        ax = fig.add_subplot(gs[0, ki])
        vals = []
        for p in pols:
            v = [r[key] for r in rows if policy_name(r) == p and num(r.get(key))]
            vals.append(sum(v) / len(v) if v else 0)
        ax.barh(range(len(pols)), vals, color=[color_of([r for r in rows if policy_name(r) == p][0]) for p in pols])
        ax.set_yticks(range(len(pols)))
        ax.set_yticklabels(pols if ki == 0 else [], fontsize=FS)
        ax.invert_yaxis()
        if n:
            ax.axvline(n, color="k", ls="--", lw=0.8)
        ax.set_xlabel("mean over %d prompts (greedy, up to %d tokens)" % (rows[0].get("n_prompts", 0), n), fontsize=FS)
        ax.set_title("output comparison: " + titles.get(key, key), fontsize=FS_TITLE)
        ax.tick_params(labelsize=FS)
        ax.grid(axis="x", alpha=0.3)
    return True


NEEDLE_KEYS = ["accuracy", "found_rate", "recall", "found", "correct", "score"]


def panel_needle(fig, spec, d):
    rows = [r for r in d["needle"] if is_summary(r) and "ctx" in r]
    key = next((k for k in NEEDLE_KEYS if any(num(r.get(k)) or isinstance(r.get(k), bool) for r in rows)), None)
    if not rows or not key:
        return False
    import numpy as np
    pols = order_policies(rows)
    ctxs = sorted({r["ctx"] for r in rows})
    m = np.full((len(pols), len(ctxs)), np.nan)
    cnt = np.zeros_like(m)
    for r in rows:
        v = r.get(key)
        v = float(v) if isinstance(v, (bool, int, float)) else float("nan")
        i, j = pols.index(policy_name(r)), ctxs.index(r["ctx"])
        m[i, j] = (0 if np.isnan(m[i, j]) else m[i, j]) + v
        cnt[i, j] += 1
    m = m / np.maximum(cnt, 1)
    ax = fig.add_subplot(spec)
    im = ax.imshow(m, aspect="auto", cmap="RdYlGn", vmin=0, vmax=1)
    ax.set_xticks(range(len(ctxs)))
    ax.set_xticklabels([str(c) for c in ctxs], fontsize=FS)
    ax.set_yticks(range(len(pols)))
    ax.set_yticklabels(pols, fontsize=FS)
    for i in range(len(pols)):
        for j in range(len(ctxs)):
            if not np.isnan(m[i, j]):
                ax.text(j, i, "%.2f" % m[i, j], ha="center", va="center", fontsize=FS)
    ax.tick_params(labelsize=FS)
    ax.set_xlabel("context (tokens)", fontsize=FS)
    ax.set_title("needle retrieval (%s)" % key, fontsize=FS_TITLE)
    fig.colorbar(im, ax=ax, fraction=0.03)
    return True


PANELS = [  # name, function, height (relative), needs policies count scaling
    ("throughput", panel_throughput, 1.0, True),
    ("quality", panel_quality, 1.0, False),
    ("codec", panel_codec, 0.9, False),
    ("memory", panel_memory, 1.0, True),
    ("layers", panel_layers, 0.9, False),
    ("gencheck", panel_gencheck, 0.8, True),
    ("needle", panel_needle, 0.8, True),
]


def n_policies(d):
    names = set()
    for k in ("bench", "kld", "memplan", "gencheck", "needle"):
        names |= {policy_name(r) for r in d[k]}
    return max(1, len(names))


def save_png(fig, path, dpi):
    """Saves a figure as a 256-colour PNG (plots have few colours: 3-5x smaller),
    cropped to what is drawn (nothing clipped)."""
    import io
    buf = io.BytesIO()
    fig.savefig(buf, dpi=dpi, format="png", bbox_inches="tight", pad_inches=0.15)
    try:
        from PIL import Image
        buf.seek(0)
        im = Image.open(buf).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
        im.save(path, optimize=True)
    except Exception:  # Pillow missing or too old: the plain PNG
        with open(path, "wb") as f:
            f.write(buf.getvalue())


def finish_layout(fig):
    """Runs the constrained layout once, freezes it, then places the point labels."""
    fig.canvas.draw()
    fig.set_layout_engine("none")
    return place_labels(fig)


def panel_height(name, npol):
    """Inches: rows of policy names (bar charts, the needle map) need FS-point rows."""
    row = FS / 72.0 * 1.9
    by_pols = {"throughput": 1.0, "memory": 1.0, "gencheck": 1.0, "needle": 1.2}
    if name in by_pols:
        return max(3.6, by_pols[name] * row * npol + 1.8)
    return {"quality": 6.5, "codec": 4.8, "layers": 5.0}.get(name, 4.5)


def draw_panel(name, fn, d, title, npol, width=12.0):
    """A figure holding one panel, or None when the panel has no data."""
    import matplotlib.pyplot as plt
    fig = plt.figure(figsize=(width, panel_height(name, npol)), layout="constrained")
    gs = fig.add_gridspec(1, 1)
    if not fn(fig, gs[0, 0], d):
        plt.close(fig)
        return None
    fig.suptitle("%s — %s" % (title, name), fontsize=FS_TITLE + 1)
    return fig


def render(d, outdir, prefix, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    npol = n_policies(d)
    have = []
    for name, fn, _, _ in PANELS:
        fig = draw_panel(name, fn, d, title, npol)
        if fig is None:
            continue
        finish_layout(fig)
        path = os.path.join(outdir, prefix + name + ".png")
        save_png(fig, path, DPI)
        plt.close(fig)
        written.append(path)
        have.append((name, fn))
    if have:
        # the sheet: two panels side by side per row (a screen is wider than tall)
        rows = [have[i:i + 2] for i in range(0, len(have), 2)]
        hs = [max(panel_height(n, npol) for n, _ in r) for r in rows]
        W = 24.0
        fig = plt.figure(figsize=(W, sum(hs) + 0.8), layout="constrained")
        gs = fig.add_gridspec(len(rows), 2, height_ratios=hs)
        for ri, r in enumerate(rows):
            for ci, (name, fn) in enumerate(r):
                sub = gs[ri, ci] if len(r) == 2 else gs[ri, :]
                sf = fig.add_subfigure(sub)
                sf.suptitle(name, fontsize=FS_TITLE + 1)
                fn(sf, sf.add_gridspec(1, 1)[0, 0], d)
        fig.suptitle(title, fontsize=FS_TITLE + 4)
        finish_layout(fig)
        path = os.path.join(outdir, prefix + "sheet.png")
        save_png(fig, path, 72)
        plt.close(fig)
        written.append(path)
    return written


# ---------------------------------------------------------------- summary
def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def summary(d, title, images):
    s = ["# %s\n\n" % title]
    s.append("Generated by `scripts/report.py` from the JSON results in this folder.\n\n")
    bench = [r for r in d["bench"] if is_summary(r)]
    kld = {policy_name(r): r for r in quality_rows(d)}
    ppl = {policy_name(r): r for r in d["ppl"] if is_summary(r) and num(r.get("ppl"))}
    mem = {policy_name(r): r for r in d["memplan"] if is_summary(r)}
    gen = [r for r in d["gencheck"] if is_summary(r)]
    needle = [r for r in d["needle"] if is_summary(r)]
    nkey = next((k for k in NEEDLE_KEYS if any(num(r.get(k)) or isinstance(r.get(k), bool) for r in needle)), None)
    pols = order_policies(bench + list(kld.values()) + list(ppl.values()) + list(mem.values()) + gen + needle)
    maxctx = max((r["ctx"] for r in bench if "ctx" in r), default=None)
    # base perplexities: kld's (its text) and ppl's (its text, e.g. the code corpus)
    kld_f16ppl = next((r.get("ppl_base") for r in kld.values() if num(r.get("ppl_base"))), None)
    ppl_f16ppl = ppl.get("f16", {}).get("ppl")

    def ppl_cell(pp, base, p):
        rel = " (%+.2f%%)" % (100 * (pp / base - 1)) if num(pp) and num(base) and p != "f16" else ""
        return fmt(pp, ".3f") + rel

    if pols:
        s.append("## Overview\n\n")
        hdr = ["policy", "bits/value"]
        if kld:
            ktext = next((r.get("text") for r in kld.values() if r.get("text")), None)
            hdr += ["KLD", "top-1", "ppl %s" % ktext if ppl and ktext else "ppl"]
        if ppl:
            ptext = next((r.get("text") for r in ppl.values() if r.get("text")), None)
            ktext = next((r.get("text") for r in kld.values() if r.get("text")), None)
            hdr += ["ppl %s" % ptext if kld and ptext and ptext != ktext else "ppl"]
        if maxctx:
            hdr += ["prefill ×f16 @%d" % maxctx, "decode ×f16 @%d" % maxctx]
        if mem:
            hdr += ["KV MiB @32K", "max ctx"]
        gkeys = [k for k in GEN_KEYS if any(num(r.get(k)) for r in gen)]
        hdr += ["gen " + k.replace("mean_", "") for k in gkeys]
        if needle and nkey:
            hdr += ["needle"]
        rows = []
        for p in pols:
            src = kld.get(p) or ppl.get(p) or mem.get(p) or next((r for r in bench if policy_name(r) == p), {})
            row = [p, fmt(src.get("bits_per_value"), ".3f")]
            if kld:
                k = kld.get(p, {})
                pp = k.get("ppl") if p != "f16" else kld_f16ppl
                row += [fmt(k.get("kld"), ".4g"), fmt(k.get("top1"), ".4f"), ppl_cell(pp, kld_f16ppl, p)]
            if ppl:
                row += [ppl_cell(ppl.get(p, {}).get("ppl"), ppl_f16ppl, p)]
            if maxctx:
                b = next((r for r in bench if policy_name(r) == p and r.get("ctx") == maxctx), {})
                row += [fmt(b.get("prefill_speedup"), ".2f"), fmt(b.get("gen_speedup"), ".2f")]
            if mem:
                m = mem.get(p, {})
                pt = next((q for q in m.get("points", []) if q.get("ctx") == 32768), {})
                row += [fmt(pt.get("kv_bytes", float("nan")) / 2**20 if num(pt.get("kv_bytes")) else None, ".1f"),
                        str(m.get("max_ctx", "–"))]
            for gk in gkeys:
                v = [r[gk] for r in gen if policy_name(r) == p and num(r.get(gk))]
                row += [fmt(sum(v) / len(v) if v else None, ".1f")]
            if needle and nkey:
                v = [float(r[nkey]) for r in needle if policy_name(r) == p and isinstance(r.get(nkey), (int, float))]
                row += [fmt(sum(v) / len(v) if v else None, ".2f")]
            rows.append(row)
        s.append(md_table(hdr, rows))
        s.append("\nbits/value: the K and V methods' stored bits (codes + scales), mean of K and V; "
                 "f16 windows and f16 layers are not counted.")
        if gkeys:
            s.append(" gen coherent: mean tokens before EOS or a degenerate repeat; gen diverge: mean tokens "
                     "identical to the f16 cache's greedy stream (kvq gen-check, n = %s)." %
                     max((r.get("n", 0) for r in gen), default=0))
        if needle and nkey:
            s.append(" needle: passkey retrieval accuracy over all contexts and depths.")
        s.append("\n")

    if bench:
        b0 = bench[0]
        s.append("\n## Throughput (`kvq bench`)\n\n")
        s.append("Model %s, %s threads, kernels %s, tokens from %s. Per ctx: prefill = the %s prompt tokens "
                 "before ctx − gen (in %s interleaved calls), decode = %s greedy steps ending at ctx; "
                 "ratios to f16 measured side by side in the same run.\n\n" %
                 (b0.get("model"), b0.get("threads"), b0.get("kernels"), b0.get("text"), b0.get("prefill_tokens"),
                  b0.get("rounds"), b0.get("gen_tokens")))
        rows = []
        for r in sorted(bench, key=lambda r: (r.get("ctx", 0), pols.index(policy_name(r)) if policy_name(r) in pols else 0)):
            rows.append([r.get("ctx"), policy_name(r), fmt(r.get("prefill_tok_s"), ".1f"), fmt(r.get("prefill_speedup"), ".2f"),
                         fmt(r.get("gen_tok_s"), ".1f"), fmt(r.get("gen_speedup"), ".2f"), r.get("kv_bytes_per_token", "–"),
                         fmt(r.get("kv_bytes", float("nan")) / 2**20 if num(r.get("kv_bytes")) else None, ".2f")])
        s.append(md_table(["ctx", "policy", "prefill tok/s", "×f16", "decode tok/s", "×f16", "KV B/token", "KV MiB"], rows))

    if mem:
        m0 = next(iter(mem.values()))
        pts = [p["ctx"] for p in m0.get("points", [])]
        s.append("\n## Memory (`kvq memplan`)\n\n")
        s.append("Budget %.3g GiB; weights %.1f MiB (the mapped GGUF file); model context %s. KV bytes are exact "
                 "(pages counted whole); runtime buffers are an estimate (see tools/memplan.c).\n\n" %
                 (m0.get("mem_bytes", 0) / 2**30, m0.get("weights_bytes", 0) / 2**20, m0.get("n_ctx_train")))
        rows = []
        for p in pols:
            if p not in mem:
                continue
            m = mem[p]
            kv = {q["ctx"]: q.get("kv_bytes") for q in m.get("points", [])}
            rows.append([p, m.get("kv_bytes_per_token", "–"), fmt(m.get("compression_long"), ".2f")] +
                        [fmt(kv.get(c, float("nan")) / 2**20 if num(kv.get(c)) else None, ".1f") for c in pts] +
                        [m.get("max_ctx", "–")])
        s.append(md_table(["policy", "B/token", "×f16 (long ctx)"] + ["KV MiB @%s" % c for c in pts] + ["max ctx"], rows))

    codec = d["codec"]
    if codec:
        s.append("\n## Codec (`kvq codec-bench`)\n\n")
        rows = [[r.get("method"), fmt(r.get("bits_per_value"), ".3f"), fmt(r.get("cosine"), ".5f"),
                 fmt(r.get("rel_mse"), ".5f"), fmt(r.get("ip_rel_err"), ".5f"), fmt(r.get("ip_bias"), ".4f")]
                for r in codec]
        s.append(md_table(["method", "bits", "cosine", "rel MSE", "ip rel err", "ip bias"], rows))

    if images:
        s.append("\n## Figures\n\n")
        for p in images:
            s.append("![%s](%s)\n" % (os.path.basename(p), os.path.basename(p)))
    missing = [f + ".jsonl" for f in FILES if not d[f]]
    if missing:
        s.append("\nNo data (panels skipped): %s.\n" % ", ".join(missing))
    return "".join(s)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", help="directory with the *.jsonl results")
    ap.add_argument("--out", help="output directory (default: the results directory)")
    ap.add_argument("--title", help="title (default: the model)")
    ap.add_argument("--no-png", action="store_true", help="only the Markdown summary")
    a = ap.parse_args(argv)
    out = a.out or a.results
    os.makedirs(out, exist_ok=True)
    data = {f: load_jsonl(os.path.join(a.results, f + ".jsonl")) for f in FILES}
    models = []
    for f in FILES:
        for r in data[f]:
            if f != "codec" and model_key(r) not in models:
                models.append(model_key(r))
    if not models:
        models = [os.path.basename(os.path.abspath(a.results))]
    for m in models:
        d = {f: [r for r in data[f] if f == "codec" or model_key(r) == m] for f in FILES}
        prefix = "" if len(models) == 1 else re.sub(r"[^A-Za-z0-9._-]", "_", m) + "-"
        title = a.title or m
        images = []
        if not a.no_png:
            try:
                images = render(d, out, prefix, title)
            except ImportError as e:
                print("report.py: %s (pip install numpy matplotlib); writing the summary only" % e, file=sys.stderr)
        with open(os.path.join(out, prefix + "summary.md"), "w", encoding="utf-8") as f:
            f.write(summary(d, title, images))
        print("report.py: %s: %d figures, %s" % (m, len(images), os.path.join(out, prefix + "summary.md")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
