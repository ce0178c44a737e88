"""Threads: two caches used by two threads at once, and proof that the GIL is
released during the C kernels (another Python thread runs meanwhile)."""
from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest

import kvq
from conftest import gauss


def _spinner(counter: list, stop: threading.Event) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        counter[0] = n


def test_gil_released_during_kernels(rng):
    """While the main thread is inside one long C call, a pure-Python thread keeps
    counting. Were the GIL held through the call, the counter could advance only
    for one switch interval (set to 1 ms here) around it."""
    p = kvq.Plan("tq-mse:4", 128, seed=1)
    rows = 20000
    x = gauss(rng, rows, 128)
    while True:  # size the call to take >= 0.25 s on this machine
        t0 = time.perf_counter()
        p.encode(x)
        dt = time.perf_counter() - t0
        if dt >= 0.25 or rows >= 4_000_000:
            break
        rows = min(4_000_000, int(rows * 0.35 / max(dt, 1e-3)) + 1)
        x = gauss(rng, rows, 128)
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    counter, stop = [0], threading.Event()
    th = threading.Thread(target=_spinner, args=(counter, stop), daemon=True)
    th.start()
    try:
        time.sleep(0.05)
        a0 = counter[0]
        time.sleep(0.2)  # the spinner's rate with the GIL free
        rate = (counter[0] - a0) / 0.2
        c0 = counter[0]
        t0 = time.perf_counter()
        p.encode(x)  # one C call
        dt = time.perf_counter() - t0
        c1 = counter[0]
    finally:
        stop.set()
        th.join()
        sys.setswitchinterval(old)
    during = (c1 - c0) / rate  # seconds' worth of spinning done during the call
    print(f"\n[gil] one kvq_encode call of {rows} rows: {dt * 1e3:.0f} ms; the other thread ran "
          f"{during * 1e3:.0f} ms' worth of Python meanwhile")
    assert during > max(0.02, 0.1 * dt), (during, dt)


def _worker(cache: kvq.Cache, q: np.ndarray, reps: int, results: list, spans: list, i: int) -> None:
    out = None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = cache.attend(0, q, pos0=0)
        spans.append((i, t0, time.perf_counter()))
    results[i] = out


def test_two_threads_two_caches(rng):
    d, hkv, hq, n = 128, 2, 8, 1024
    caches, qs = [], []
    for seed in (1, 2):
        c = kvq.Cache(1, hkv, d, "tq-mse:4/q8", seed=seed)
        k, v = gauss(rng, n, hkv, d), gauss(rng, n, hkv, d)
        c.append(0, k, v)
        caches.append(c)
        qs.append(gauss(rng, n, hq, d))
    expected = [c.attend(0, q, pos0=0) for c, q in zip(caches, qs)]
    t0 = time.perf_counter()
    for c, q in zip(caches, qs):
        c.attend(0, q, pos0=0)
    single = time.perf_counter() - t0
    reps = max(2, int(0.6 / max(single / 2, 1e-3)))
    results, spans = [None, None], []
    threads = [threading.Thread(target=_worker, args=(caches[i], qs[i], reps, results, spans, i)) for i in (0, 1)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    for r, e in zip(results, expected):
        assert np.array_equal(r, e)  # each thread got its own cache's exact result
    # wall time during which calls of both threads were inside the C kernel at once
    a = [(s, e) for i, s, e in spans if i == 0]
    b = [(s, e) for i, s, e in spans if i == 1]
    both = sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)
    print(f"\n[threads] 2 x {reps} prefill attends ({n} tokens): serial {reps * single:.2f} s, two threads "
          f"{wall:.2f} s; both threads inside C at once for {both:.2f} s")
    assert both > 0  # the kernels of the two threads overlapped


def test_one_cache_shared_is_serialized(rng):
    """Two threads on one cache: calls are serialized (a lock), never concurrent in C."""
    c = kvq.Cache(1, 1, 64, "q8")
    errors = []

    def work(seed):
        r = np.random.default_rng(seed)
        try:
            for _ in range(50):
                k = r.standard_normal((4, 1, 64)).astype(np.float32)
                c.append(0, k, k)
                c.attend(0, r.standard_normal((1, 1, 64)).astype(np.float32))
        except Exception as e:  # pragma: no cover
            errors.append(e)

    ts = [threading.Thread(target=work, args=(s,)) for s in (1, 2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and len(c) == 400


def test_close_while_in_use(rng):
    """Closing a plan another thread is encoding with frees it only after that call."""
    p = kvq.Plan("tq-mse:4", 128)
    x = gauss(rng, 200000, 128)
    done = []

    def run():
        try:
            done.append(p.encode(x).shape)
        except kvq.ClosedError:
            done.append("closed")

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.005)
    p.close()
    t.join()
    assert done in ([(200000, p.code_bytes)], ["closed"])  # finished, or refused before it started
    with pytest.raises(kvq.ClosedError):
        p.encode(x[:1])
