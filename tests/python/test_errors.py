"""Every error path: library statuses as kvq.Error subclasses, bad arrays rejected
before any C call, hostile inputs (NaN/Inf, wrong dims, huge sizes, empty arrays,
wrong dtypes, closed objects, bad specs and policies) never crash the interpreter."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import kvq
from conftest import gauss


def test_hierarchy():
    assert issubclass(kvq.UnknownMethodError, kvq.Error) and issubclass(kvq.UnknownMethodError, ValueError)
    assert issubclass(kvq.OutOfMemoryError, MemoryError)
    assert issubclass(kvq.FileIOError, OSError)
    assert issubclass(kvq.SizeOverflowError, OverflowError)
    assert issubclass(kvq.StateError, RuntimeError)
    assert issubclass(kvq.TruncatedError, kvq.FormatError)
    codes = {c.status for c in (kvq.NullPointerError, kvq.InvalidArgumentError, kvq.UnsupportedDimError,
                                kvq.BitsRangeError, kvq.UnknownMethodError, kvq.NonFiniteError, kvq.RangeError,
                                kvq.SizeOverflowError, kvq.OutOfMemoryError, kvq.NoDecodeError,
                                kvq.NeedsCalibrationError, kvq.FileIOError, kvq.FormatError, kvq.TruncatedError,
                                kvq.UnsupportedError, kvq.StateError, kvq.ChecksumError)}
    assert codes == set(range(-17, 0))  # one class per status of include/kvq.h
    assert kvq.strerror(-6) == "input contains NaN or Inf"


def test_error_carries_status_reason_argument():
    with pytest.raises(kvq.UnknownMethodError) as e:
        kvq.Plan("tq-foo:4", 128)
    err = e.value
    assert err.status == -5 and err.reason == kvq.strerror(-5) and err.argument == "tq-foo:4"
    assert "tq-foo:4" in str(err) and "kvq_plan_create" in str(err)
    with pytest.raises(kvq.BitsRangeError) as e:
        kvq.Plan("tq-mse:9", 128)
    assert e.value.status == -4
    with pytest.raises(kvq.UnsupportedDimError):
        kvq.Plan("tq-mse:4", 100)
    with pytest.raises(kvq.UnsupportedDimError):
        kvq.Plan("tq-mse:4", 0)
    with pytest.raises(kvq.UnsupportedDimError):
        kvq.Plan("q8", 1024)
    with pytest.raises(kvq.NeedsCalibrationError):
        kvq.Plan("tq-mse:4+outliers=8", 128)


@pytest.mark.parametrize("spec", ["", "tq-mse:", "tq-mse:4+", "tq-mse:4+bogus", "q8+m=-1", "\x00",
                                  "tq-mse:4\x00junk", "é" * 100, "x" * 10000, "tq-mse:4+outliers=100000",
                                  "rvq:99", "polar:1", "tq-prod:1"])
def test_bad_specs(spec):
    with pytest.raises(kvq.Error):
        kvq.Plan(spec, 128, calib=np.zeros((4, 128), np.float32))


@pytest.mark.parametrize("policy,err", [
    ("", kvq.InvalidArgumentError), ("tq-mse:4,", kvq.InvalidArgumentError), ("w=abc", kvq.InvalidArgumentError),
    ("q8,w=-1", kvq.InvalidArgumentError), ("q8,frob=1", kvq.InvalidArgumentError),
    ("q8/tq-prod:4", kvq.NoDecodeError), ("tq-mse:12", kvq.BitsRangeError), ("zip", kvq.UnknownMethodError),
    ("q8,f16layers=1;;2", kvq.InvalidArgumentError), ("q8,sliding=2", kvq.InvalidArgumentError),
    ("q8\x00", kvq.InvalidArgumentError)])
def test_bad_policies(policy, err):
    with pytest.raises(err) as e:
        kvq.Policy(policy)
    if policy not in ("", "q8\x00"):
        assert e.value.detail  # the parser's reason
    with pytest.raises(err):
        kvq.Cache(1, 1, 64, policy)


def test_cache_create_errors():
    with pytest.raises(kvq.InvalidArgumentError):
        kvq.Cache(0, 1, 64)
    with pytest.raises(kvq.InvalidArgumentError):
        kvq.Cache(1, -3, 64)
    with pytest.raises(kvq.UnsupportedDimError):
        kvq.Cache(1, 1, 60)
    with pytest.raises(kvq.InvalidArgumentError):
        kvq.Cache(2, 1, 64, "q8,f16layers=5")
    with pytest.raises(kvq.InvalidArgumentError):
        kvq.Cache(2, 1, 64, sliding_window=[0])  # one entry per layer
    with pytest.raises(kvq.InvalidArgumentError):
        kvq.Cache(2, 1, 64, sliding_window=[0, -4])
    with pytest.raises(kvq.InvalidArgumentError):
        kvq.Cache(2**40, 1, 64)  # beyond a C int: refused in Python
    with pytest.raises(TypeError):
        kvq.Cache(1.5, 1, 64)
    with pytest.raises(TypeError):
        kvq.Cache(1, 1, 64, 42)
    with pytest.raises((kvq.OutOfMemoryError, kvq.SizeOverflowError, kvq.InvalidArgumentError)):
        kvq.Cache(2**31 - 1, 2**31 - 1, 512)  # huge: refused by the library, no crash


def test_array_checks_before_c(rng):
    c = kvq.Cache(1, 2, 64, "q8")
    good = gauss(rng, 4, 2, 64)
    with pytest.raises(TypeError):
        c.append(0, good.astype(np.float64), good)
    with pytest.raises(TypeError):
        c.append(0, good.tolist(), good)
    with pytest.raises(ValueError):
        c.append(0, gauss(rng, 4, 3, 64), gauss(rng, 4, 3, 64))  # wrong heads
    with pytest.raises(ValueError):
        c.append(0, good, good[:3])  # k and v differ
    with pytest.raises(ValueError):
        c.append(0, good.reshape(8, 64), good.reshape(8, 64))  # wrong rank
    with pytest.raises(ValueError):
        c.append(0, good[:, :, ::-1], good)  # not contiguous
    with pytest.raises(kvq.InvalidArgumentError):
        c.append(1, good, good)  # layer out of range
    c.append(0, np.empty((0, 2, 64), np.float32), np.empty((0, 2, 64), np.float32))  # empty: nothing
    assert len(c) == 0
    c.append(0, good, good)
    with pytest.raises(kvq.InvalidArgumentError):
        c.attend(0, gauss(rng, 1, 3, 64))  # 3 heads for 2 kv heads
    with pytest.raises(ValueError):
        c.attend(0, gauss(rng, 1, 2, 32))  # wrong dim
    with pytest.raises(kvq.InvalidArgumentError):
        c.attend(0, gauss(rng, 5, 2, 64))  # more query tokens than positions
    with pytest.raises(kvq.InvalidArgumentError):
        c.attend(0, gauss(rng, 1, 2, 64), pos0=4)  # beyond len
    with pytest.raises(kvq.InvalidArgumentError):
        c.attend(0, gauss(rng, 1, 2, 64), scale=float("nan"))
    with pytest.raises(kvq.InvalidArgumentError):
        c.attend(0, gauss(rng, 1, 2, 64), pos0=-1)
    with pytest.raises(ValueError):
        c.attend(0, gauss(rng, 1, 2, 64), out=np.empty((1, 2, 32), np.float32))
    ro = np.empty((1, 2, 64), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        c.attend(0, gauss(rng, 1, 2, 64), out=ro)
    assert c.attend(0, np.empty((0, 2, 64), np.float32)).shape == (0, 2, 64)
    with pytest.raises(kvq.SizeOverflowError):
        c.memory_plan(2**63)
    with pytest.raises(kvq.InvalidArgumentError):
        c.memory_plan(2**70)
    with pytest.raises(kvq.InvalidArgumentError):
        c.truncate(-1)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite(rng, bad):
    p = kvq.Plan("tq-mse:4", 64)
    x = gauss(rng, 8, 64)
    x[3, 7] = bad
    with pytest.raises(kvq.NonFiniteError):
        p.encode(x)
    with pytest.raises(kvq.NonFiniteError):
        p.encode(x.astype(np.float16))
    c = kvq.Cache(1, 1, 64, "tq-mse:4")
    k = gauss(rng, 8, 1, 64)
    c.append(0, k, k)
    k2 = k.copy()
    k2[2, 0, 5] = bad
    before = c.memory_bytes()
    with pytest.raises(kvq.NonFiniteError):
        c.append(0, k2, k)
    assert len(c) == 8 and c.memory_bytes() == before  # all or nothing


def test_range_errors(rng):
    c = kvq.Cache(1, 1, 64, "f16")
    k = gauss(rng, 2, 1, 64)
    k[0, 0, 0] = 1e6  # beyond f16
    with pytest.raises(kvq.RangeError):
        c.append(0, k, k)
    p = kvq.Plan("tq-mse:4", 64)
    with pytest.raises(kvq.RangeError):
        p.encode(np.full((1, 64), 3e38, np.float32))
    kvq.Plan("tq-mse:4+scale32", 64).encode(np.full((1, 64), 1e30, np.float32))


def test_codec_shape_errors(rng):
    p = kvq.Plan("tq-mse:4", 64)
    with pytest.raises(ValueError):
        p.encode(gauss(rng, 4, 32))
    with pytest.raises(ValueError):
        p.encode(gauss(rng, 2, 4, 64))
    with pytest.raises(TypeError):
        p.encode([[0.0] * 64])
    with pytest.raises(TypeError):
        p.encode(np.zeros((1, 64), np.int32))
    codes = p.encode(gauss(rng, 4, 64))
    with pytest.raises(ValueError):
        p.decode(codes[:, :10])
    with pytest.raises(TypeError):
        p.decode(codes.astype(np.int8))
    with pytest.raises(ValueError):
        p.score(gauss(rng, 2, 64), codes, prepared=True)  # not prepared rows
    with pytest.raises(ValueError):
        p.accumulate(np.ones((1, 3), np.float32), codes)  # 3 weights for 4 codes
    with pytest.raises(kvq.NoDecodeError):
        kvq.Plan("qjl", 64).accumulate(np.ones((1, 1), np.float32), kvq.Plan("qjl", 64).encode(gauss(rng, 1, 64)))
    with pytest.raises(ValueError):
        kvq.Plan("q8", 64, calib=gauss(rng, 4, 32))


def test_closed_objects(rng):
    p = kvq.Plan("q8", 64)
    codes = p.encode(gauss(rng, 2, 64))
    p.close()
    with pytest.raises(kvq.ClosedError):
        p.encode(gauss(rng, 2, 64))
    with pytest.raises(kvq.ClosedError):
        p.decode(codes)
    with kvq.Cache(1, 1, 64) as c:
        c.append(0, gauss(rng, 1, 1, 64), gauss(rng, 1, 1, 64))
    for call in (lambda: c.append(0, gauss(rng, 1, 1, 64), gauss(rng, 1, 1, 64)), lambda: len(c),
                 lambda: c.attend(0, gauss(rng, 1, 1, 64)), c.memory_bytes, lambda: c.truncate(0), c.clear,
                 lambda: c.memory_plan(10)):
        with pytest.raises(kvq.ClosedError):
            call()
    assert issubclass(kvq.ClosedError, ValueError) and "closed" in repr(c)
    del c, p
    gc.collect()
