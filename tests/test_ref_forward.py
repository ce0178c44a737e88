#!/usr/bin/env python3
"""Sanity checks of the float64 reference forward pass (scripts/ref_forward.py)
on the real models, independent of the C engine:

  - "The capital of France is Paris. The capital of Germany is" -> " Berlin"
    is the top-1 prediction (and " Paris" after "...France is" on SmolLM2);
  - causality: the logits of a prefix equal the first rows of the full run;
  - Gemma 3 sliding window: with the window forced to 4 tokens, positions
    0..3 are unchanged and later positions change.

Run as: python3 tests/test_ref_forward.py [--root REPO]   (exit 77 = skipped)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_common as rc  # noqa: E402

NAME = "test_ref_forward"


def main() -> int:
    args = rc.parse_args(NAME)
    rf = rc.import_reference(NAME, args.root)
    import numpy as np

    smol = rc.model_path(NAME, args.root, rc.SMOLLM2)
    gemma = rc.model_path(NAME, args.root, rc.GEMMA3)
    failures = 0

    def check(cond, msg):
        nonlocal failures
        rc.log(NAME, ("ok   " if cond else "FAIL ") + msg)
        if not cond:
            failures += 1

    # SmolLM2 (llama)
    m = rf.Model(smol)
    lg = rf.forward(m, rc.SMOLLM2_PROMPT)
    check(lg.shape == (len(rc.SMOLLM2_PROMPT), 49152), f"smollm2 logits shape {lg.shape}")
    check(bool(np.isfinite(lg).all()), "smollm2 logits finite")
    check(int(np.argmax(lg[4])) == rc.SMOLLM2_PARIS, f"smollm2 'France is' -> ' Paris' (argmax {int(np.argmax(lg[4]))})")
    check(int(np.argmax(lg[-1])) == rc.SMOLLM2_BERLIN, f"smollm2 'Germany is' -> ' Berlin' (argmax {int(np.argmax(lg[-1]))})")
    pre = rf.forward(m, rc.SMOLLM2_PROMPT[:5])
    d = float(np.abs(pre - lg[:5]).max())
    check(d < 1e-9, f"smollm2 causal: prefix rows equal (max diff {d:.2e})")
    del m, lg, pre

    # Gemma 3 (gemma3)
    m = rf.Model(gemma)
    check(m.n_swa == 512, f"gemma3 sliding_window = {m.n_swa}")
    lg = rf.forward(m, rc.GEMMA3_PROMPT)
    check(lg.shape == (len(rc.GEMMA3_PROMPT), 262144), f"gemma3 logits shape {lg.shape}")
    check(bool(np.isfinite(lg).all()), "gemma3 logits finite")
    top3 = [int(i) for i in np.argsort(-lg[5])[:3]]
    check(rc.GEMMA3_PARIS in top3, f"gemma3 'France is' -> ' Paris' in top 3 {top3}")
    check(int(np.argmax(lg[-1])) == rc.GEMMA3_BERLIN, f"gemma3 'Germany is' -> ' Berlin' (argmax {int(np.argmax(lg[-1]))})")
    m.n_swa = 4
    sw = rf.forward(m, rc.GEMMA3_PROMPT)
    d0 = float(np.abs(sw[:4] - lg[:4]).max())
    d1 = float(np.abs(sw[4:] - lg[4:]).max(axis=1).min())
    check(d0 < 1e-9, f"gemma3 window 4: rows 0..3 unchanged (max diff {d0:.2e})")
    check(d1 > 1e-3, f"gemma3 window 4: rows 4.. changed (min row diff {d1:.2e})")

    if failures:
        rc.log(NAME, f"{failures} check(s) failed")
        return 1
    rc.log(NAME, "all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
