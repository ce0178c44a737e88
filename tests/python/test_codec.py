"""kvq.Plan: round trips against `kvq codec-bench --json` on the same data, dtypes, scores."""
from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

import kvq
from conftest import gauss, run_cli


def write_vecfile(path: str, x: np.ndarray, kind: int = 1) -> None:
    """A KVQVEC01 vector file (docs/FORMAT.md) of float32 rows."""
    x = np.ascontiguousarray(x, dtype="<f4")
    n, d = x.shape
    head = bytearray(64)
    head[0:8] = b"KVQVEC01"
    struct.pack_into("<IIQIIII", head, 8, d, 0, n, 0, 0, kind, 0)
    h = 0xCBF29CE484222325
    mask = (1 << 64) - 1
    for b in bytes(head) + x.tobytes():  # FNV-1a 64 (checksum field zero)
        h = ((h ^ b) * 0x100000001B3) & mask
    struct.pack_into("<Q", head, 40, h)
    with open(path, "wb") as f:
        f.write(head)
        f.write(x.tobytes())


def py_metrics(x: np.ndarray, xr: np.ndarray):
    """codec-bench's cosine and rel_mse, in float64."""
    a, b = x.astype(np.float64), xr.astype(np.float64)
    xx, yy, xy = (a * a).sum(1), (b * b).sum(1), (a * b).sum(1)
    ee = ((a - b) ** 2).sum(1)
    cos = np.where((xx > 0) & (yy > 0), xy / np.sqrt(xx * yy), np.where(xx == yy, 1.0, 0.0))
    return cos.mean(), np.where(xx > 0, ee / np.where(xx > 0, xx, 1), 0).mean()


SPECS = ["tq-mse:4", "tq-mse:2", "tq-mse:3+outliers=8", "tq-prod:4", "q8", "q4", "polar", "rvq:2", "f16", "bf16",
         "tq-mse:4+chscale", "qjl"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(7)
    n, d = 1500, 128
    x = rng.standard_normal((n, d)).astype(np.float32)
    x *= np.linspace(0.3, 3.0, d, dtype=np.float32)[rng.permutation(d)]  # uneven channels, as real keys
    x[:, 5] += 4.0
    path = str(tmp_path_factory.mktemp("vec") / "keys.kvqvec")
    write_vecfile(path, x)
    return x, path


@pytest.mark.parametrize("spec", SPECS)
def test_round_trip_matches_codec_bench(cli, data, spec):
    x, path = data
    seed = 3
    r = run_cli(cli, "codec-bench", "--method", spec, "--dim", "128", "--n", str(len(x)), "--data", path,
                "--seed", str(seed), "--json")
    c = json.loads(r.stdout.decode().strip().splitlines()[-1])
    calib = x[:256] if kvq.Plan.needs_calibration(spec) else None
    with kvq.Plan(spec, 128, seed=seed, calib=calib) as p:
        assert p.bits_per_value == pytest.approx(c["bits_per_value"], abs=1e-4)
        assert p.code_bytes * 8 / 128 == pytest.approx(p.bits_per_value)
        codes = p.encode(x)
        assert codes.shape == (len(x), p.code_bytes) and codes.dtype == np.uint8
        if c["cosine"] is None:
            assert not p.can_decode
            with pytest.raises(kvq.NoDecodeError):
                p.decode(codes)
            return
        assert p.can_decode
        cos, mse = py_metrics(x, p.decode(codes))
        assert cos == pytest.approx(c["cosine"], abs=2e-6), (cos, c)
        assert mse == pytest.approx(c["rel_mse"], abs=2e-6), (mse, c)


def test_plan_properties():
    p = kvq.Plan("tq-mse:4", 128, seed=1)
    assert p.spec == "tq-mse:4" and p.dim == 128 and p.code_bytes == 66
    assert p.bits_per_value == pytest.approx(4.125) and p.can_decode
    assert p.query_floats >= 128 and p.isa in ("scalar", "avx2", "avx512")
    assert "tq-mse:4" in repr(p)
    assert not kvq.Plan("tq-prod:3", 64).can_decode
    assert kvq.Plan.needs_calibration("tq-mse:4+outliers=8") and not kvq.Plan.needs_calibration("q8")
    p.close()
    p.close()  # idempotent
    assert p.closed and "closed" in repr(p)


def test_dtypes_f16_bf16(rng):
    p = kvq.Plan("tq-mse:4", 64, seed=2)
    x = gauss(rng, 50, 64)
    x16 = x.astype(np.float16)
    # f16 input == f32 input of the same (f16-rounded) values
    assert np.array_equal(p.encode(x16), p.encode(x16.astype(np.float32)))
    # bf16 as uint16 bit patterns (upper half of the f32 bits, round to nearest even)
    u = x.view(np.uint32)
    bf = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    xb = (bf.astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(p.encode(bf, dtype="bf16"), p.encode(xb))
    with pytest.raises(TypeError, match="bf16"):
        p.encode(bf)  # uint16 without dtype="bf16" is ambiguous
    with pytest.raises(TypeError):
        p.encode(x.astype(np.float64))
    with pytest.raises(TypeError):
        p.encode(x16, dtype="f32")


def test_one_row_and_empty(rng):
    p = kvq.Plan("q8", 128)
    x = gauss(rng, 128)
    c = p.encode(x)
    assert c.shape == (p.code_bytes,)
    assert p.decode(c).shape == (128,)
    assert p.encode(np.empty((0, 128), np.float32)).shape == (0, p.code_bytes)
    assert p.decode(np.empty((0, p.code_bytes), np.uint8)).shape == (0, 128)
    assert p.score(gauss(rng, 2, 128), np.empty((0, p.code_bytes), np.uint8)).shape == (2, 0)


def test_score_prepare_accumulate(rng):
    d, n = 128, 300
    p = kvq.Plan("tq-mse:4", d, seed=5)
    x, q = gauss(rng, n, d), gauss(rng, 4, d)
    codes = p.encode(x)
    xr = p.decode(codes).astype(np.float64)
    est = p.score(q, codes)
    assert est.shape == (4, n)
    ref = q.astype(np.float64) @ xr.T
    # integer scores (8-bit query copy): a few 1e-3 of |q||k|
    scale = np.linalg.norm(q, axis=1)[:, None] * np.linalg.norm(xr, axis=1)[None, :]
    assert np.max(np.abs(est - ref) / scale) < 1e-2
    qp = p.prepare(q)
    assert qp.shape == (4, p.query_floats)
    assert np.array_equal(p.score(qp, codes, prepared=True), est)
    assert np.array_equal(p.score(q[0], codes), est[0])
    out = np.empty((4, n), np.float32)
    assert p.score(q, codes, out=out) is out
    # accumulate in the rotated domain, then unrotate: sum_i w_i v_i
    w = rng.random((2, n)).astype(np.float32)
    acc = p.accumulate(w, codes)
    res = p.unrotate(acc)
    assert np.allclose(res, w.astype(np.float64) @ xr, rtol=1e-3, atol=1e-3 * np.abs(w @ xr).max())
    # accumulate adds to acc in place
    acc2 = p.accumulate(w, codes, acc.copy())
    assert np.allclose(acc2, 2 * acc, rtol=1e-5, atol=1e-5)


def test_no_copy_of_inputs(rng):
    """Inputs go to C as they are: a C-contiguous float32 array is not copied (a
    read-only view works) and never modified."""
    p = kvq.Plan("tq-mse:3", 128)
    x = gauss(rng, 10, 128)
    x.flags.writeable = False
    before = x.copy()
    p.encode(x)
    assert np.array_equal(x, before)
    with pytest.raises(ValueError, match="C-contiguous"):
        p.encode(np.asfortranarray(gauss(rng, 10, 128)))
    with pytest.raises(ValueError, match="C-contiguous"):
        p.encode(gauss(rng, 10, 256)[:, ::2])


def test_clone_isa(rng):
    p = kvq.Plan("tq-mse:4", 128, seed=9)
    ref = p.clone("scalar")
    assert ref.isa == "scalar" and ref.spec == p.spec
    x, q = gauss(rng, 64, 128), gauss(rng, 3, 128)
    assert np.array_equal(ref.encode(x), p.encode(x))  # the encoders agree bit for bit (test_tq_encode)
    assert np.allclose(ref.score(q, p.encode(x)), p.score(q, p.encode(x)), rtol=1e-5, atol=1e-4)
    for isa in ("avx2", "avx512"):
        try:
            assert p.clone(isa).isa == isa
        except kvq.UnsupportedError as e:  # the CPU lacks it
            assert e.status == -15 and e.argument == isa
    with pytest.raises(kvq.InvalidArgumentError):
        p.clone("neon")
