"""The CUDA backend of lsa_native.multihead (H >= 2: cuda/multihead_kernels.cuh; H = 1: the LSA
kernels): on a GPU, every entry point vs the CPU kernels (entrywise within the rounding bound of
the sums of products, as in tests/test_multihead.py), odd sizes, d = 1, N = 1, N + 1 > 32 tokens, H (d+1) > 32 head entries, the merged and the
separate parametrization, device arrays in and out, determinism. Without a GPU the device errors
are checked in tests/test_multihead.py; these tests carry the ``cuda`` marker and skip.
"""
from __future__ import annotations

import numpy as np
import pytest

from lsa_native import cuda
from lsa_native import multihead as mh
from conftest import assert_within_probable_rounding
from test_cuda import needs_gpu
from test_multihead import _n_ops, loss_magnitude

pytestmark = [pytest.mark.cuda, needs_gpu]

DTYPES = [np.float32, np.float64]
# (B, d, N, H): d = 1, N = 1; odd sizes; N + 1 > 32; H (d+1) > 32; (d+1)² > 32; H = 1 (the LSA route);
# lanes per prompt 4, 8, 16, 32 (HeadsLayout::default_group) with many prompts per block; d + 1 > 32
# (more G tiles than lanes); the benchmark's d = 20, N = 100, H = 8
SHAPES = [(1, 1, 1, 2), (7, 3, 7, 3), (37, 5, 20, 5), (11, 4, 40, 2), (5, 6, 9, 8), (3, 9, 4, 4),
          (9, 3, 5, 1), (301, 2, 9, 2), (1000, 5, 20, 5), (77, 7, 30, 6), (3, 34, 4, 2),
          (150, 20, 100, 8)]


def _close(a, b, magnitude, n_ops, dtype, what):
    """GPU vs CPU entrywise within the rounding bound: `magnitude` is the entry point on absolute
    values (float64), both sides' rounding counted (conftest.assert_within_probable_rounding); a bound
    relative to the largest entry can fail where that entry cancels (B = d = N = 1)."""
    a = a if isinstance(a, (np.ndarray, float)) else cuda.to_host(a)
    assert_within_probable_rounding(a, b, magnitude, n_ops, dtype, what)


def _problem(rng, B, d, N, H, dtype):
    E = rng.standard_normal((B, d + 1, N + 1)).astype(dtype)
    E[:, d, N] = 0
    W_pv, W_kq = (0.5 * rng.standard_normal((2, H, d + 1, d + 1))).astype(dtype)
    return E, rng.standard_normal(B).astype(dtype), W_pv, W_kq, rng.standard_normal(E.shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_every_entry_point_matches_the_cpu(rng, dtype, shape):
    E, y, W_pv, W_kq, dF = _problem(rng, *shape, dtype)
    dev = {k: cuda.to_device(v) for k, v in dict(E=E, y=y, dF=dF).items()}
    aE, ay, aP, aK, aF = (np.abs(a).astype(np.float64) for a in (E, y, W_pv, W_kq, dF))
    ops = _n_ops(*shape)
    _close(mh.predict(dev["E"], W_pv, W_kq), mh.predict(E, W_pv, W_kq), mh.predict(aE, aP, aK), ops,
           dtype, "predict")
    _close(mh.forward(dev["E"], W_pv, W_kq), mh.forward(E, W_pv, W_kq), mh.forward(aE, aP, aK), ops,
           dtype, "forward")
    got = mh.loss_and_grad(dev["E"], dev["y"], W_pv, W_kq, return_predictions=True)
    want_lg = mh.loss_and_grad(E, y, W_pv, W_kq, return_predictions=True)
    mag_lg = list(mh.loss_and_grad(aE, -ay, aP, aK, return_predictions=True))  # residual |ŷ| + |y|
    mag_lg[0] = loss_magnitude(want_lg[3] - y, mag_lg[3] + ay, ops, dtype)
    for a, b, m, name in zip(got, want_lg, mag_lg, ("loss", "dW_pv", "dW_kq", "y_hat")):
        _close(a, b, m, ops, dtype, name)
    for fn, up in ((mh.vjp, "dF"), (mh.predict_vjp, "y")):
        got = fn(dev["E"], W_pv, W_kq, dev[up])
        want = fn(E, W_pv, W_kq, dF if up == "dF" else y)
        magnitude = fn(aE, aP, aK, aF if up == "dF" else ay)
        for a, b, m, name in zip(got, want, magnitude, ("dW_pv", "dW_kq", "dE")):
            _close(a, b, m, ops, dtype, f"{fn.__name__} {name}")
    # host arrays with device="cuda": the same kernels, results back on the host
    host = mh.loss_and_grad(E, y, W_pv, W_kq, device="cuda")
    assert all(isinstance(a, np.ndarray) for a in host[1:])
    _close(host[0], want_lg[0], mag_lg[0], ops, dtype, "loss (host arrays)")


def test_separate_parametrization_and_determinism(rng):
    d, N, H, r = 5, 20, 5, 1
    E, y, W_pv, _, _ = _problem(rng, 64, d, N, H, np.float64)
    W_k, W_q = 0.5 * rng.standard_normal((2, H, r, d + 1))
    Ed = cuda.to_device(E)
    first = mh.loss_and_grad(Ed, y, W_pv, W_k=W_k, W_q=W_q, device="cuda")
    again = mh.loss_and_grad(Ed, y, W_pv, W_k=W_k, W_q=W_q, device="cuda")
    want = mh.loss_and_grad(E, y, W_pv, W_k=W_k, W_q=W_q)
    assert first[0] == again[0]  # fixed-order reductions: bitwise repeatable
    for a, b, c in zip(first[1:], again[1:], want[1:]):
        a, b = (cuda.to_host(x) if not isinstance(x, np.ndarray) else x for x in (a, b))
        assert np.array_equal(a, b)
        np.testing.assert_allclose(a, c, rtol=1e-10, atol=1e-12)


def test_one_head_is_lsa_on_cuda_bitwise(rng):
    from lsa_native import lsa

    E, y, W_pv, W_kq, _ = _problem(rng, 33, 4, 9, 1, np.float64)
    Ed = cuda.to_device(E)
    got = mh.loss_and_grad(Ed, y, W_pv, W_kq)
    want = lsa.loss_and_grad(Ed, y, W_pv[0], W_kq[0])
    assert got[0] == want[0]
    for a, b in zip(got[1:], want[1:]):
        assert np.array_equal(cuda.to_host(a)[0] if not isinstance(a, np.ndarray) else a[0],
                              cuda.to_host(b) if not isinstance(b, np.ndarray) else b)


def test_batch_sums_are_bitwise_repeatable_over_many_blocks(rng):
    """Many blocks, several rounds of prompts per block, 8 prompts per warp: the per-block sums in
    slot order and the fixed-order reduction give bitwise equal results run to run."""
    E, y, W_pv, W_kq, _ = _problem(rng, 20000, 2, 9, 3, np.float32)
    Ed, yd = cuda.to_device(E), cuda.to_device(y)
    first = mh.loss_and_grad(Ed, yd, W_pv, W_kq)
    again = mh.loss_and_grad(Ed, yd, W_pv, W_kq)
    assert first[0] == again[0]
    for a, b in zip(first[1:], again[1:]):
        assert np.array_equal(cuda.to_host(a) if not isinstance(a, np.ndarray) else a,
                              cuda.to_host(b) if not isinstance(b, np.ndarray) else b)
    want = mh.loss_and_grad(E, y, W_pv, W_kq)
    assert abs(first[0] - want[0]) <= 2e-4 * want[0]
