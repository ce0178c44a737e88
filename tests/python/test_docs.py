"""The examples of docs/PYTHON.md, run as they are written."""
from __future__ import annotations

import contextlib
import io
import os
import re

import pytest

from conftest import ROOT, SMOLLM, need

DOC = os.path.join(ROOT, "docs", "PYTHON.md")


def blocks():
    text = open(DOC, encoding="utf-8").read()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_doc_has_examples():
    b = blocks()
    assert len(b) >= 2
    assert any("KVCacheBuilder" in x for x in b) and any(".generate(" in x for x in b)


@pytest.mark.parametrize("i", range(len(blocks())))
def test_doc_example(i, monkeypatch):
    code = blocks()[i]
    if "kvq.Model(" in code:
        need(os.path.isfile(SMOLLM), f"model {SMOLLM}")
    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"docs/PYTHON.md block {i + 1}", "exec"), {"__name__": "__doc_example__"})
    text = out.getvalue()
    print(text)
    m = re.search(r"([0-9.]+)x smaller", text)
    if "KVCacheBuilder" in code:
        assert m and float(m.group(1)) >= 3.7, text
        # the figure the doc quotes is the one the example prints
        doc = open(DOC, encoding="utf-8").read()
        assert text.strip().splitlines()[-1] in doc
    if ".generate(" in code:
        assert len(text.strip()) > 20
