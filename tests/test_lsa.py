"""Native LSA kernels vs the numpy references, references vs finite differences, API contracts."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import lsa_native
from lsa_native import data, lsa
from lsa_native.reference import lsa as ref
from conftest import assert_within_probable_rounding

SHAPES = [  # (B, d, N): d = 1, N = 1, odd sizes, several chunks of the batch
    (1, 1, 1),
    (3, 1, 5),
    (7, 4, 1),
    (5, 3, 7),
    (131, 5, 30),
    (300, 2, 17),
    (130, 20, 100),
]
DTYPES = [np.float32, np.float64]


def random_problem(rng, B, d, N, dtype, query_slot_zero=True):
    """Random prompts and parameters, rounded to `dtype` and returned as (native inputs, float64
    copies of the same values) so that the reference sees exactly what the kernel sees."""
    E = rng.standard_normal((B, d + 1, N + 1)).astype(dtype)
    if query_slot_zero:
        E[:, d, N] = 0  # the query label slot of (3.4)
    W_pv = rng.standard_normal((d + 1, d + 1)).astype(dtype)
    W_kq = rng.standard_normal((d + 1, d + 1)).astype(dtype)
    y_q = rng.standard_normal(B).astype(dtype)
    as64 = lambda a: a.astype(np.float64)
    return (E, W_pv, W_kq, y_q), tuple(map(as64, (E, W_pv, W_kq, y_q)))


def n_ops(d, N):
    # Longest chain of roundings per output entry: (d+1)-term token dot products, an (N+1)-term
    # token sum, the (d+1)^2 parameter products and the batch/residual step.
    return 3 * (d + 1) + (N + 1) + 8


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,d,N", SHAPES)
def test_predict_matches_naive_reference(rng, B, d, N, dtype):
    (E, W_pv, W_kq, _), (E64, P64, K64, _) = random_problem(rng, B, d, N, dtype)
    y_hat = lsa.predict(E, W_pv, W_kq)
    assert y_hat.dtype == dtype and y_hat.shape == (B,)
    expected = ref.predict_naive(E64, P64, K64)
    magnitude = ref.predict_tokens(np.abs(E64), np.abs(P64), np.abs(K64))
    assert_within_probable_rounding(y_hat, expected, magnitude, n_ops(d, N), dtype, "predict")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,d,N", SHAPES)
def test_predict_any_query_slot(rng, B, d, N, dtype):
    """ŷ equals [f(E)]_{d+1,N+1} even when the query's label slot is not 0."""
    (E, W_pv, W_kq, _), (E64, P64, K64, _) = random_problem(rng, B, d, N, dtype, False)
    magnitude = ref.predict_tokens(np.abs(E64), np.abs(P64), np.abs(K64))
    assert_within_probable_rounding(lsa.predict(E, W_pv, W_kq), ref.predict_naive(E64, P64, K64),
                                    magnitude, n_ops(d, N), dtype, "predict")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,d,N", SHAPES)
def test_loss_and_grad_matches_reference(rng, B, d, N, dtype):
    (E, W_pv, W_kq, y_q), (E64, P64, K64, y64) = random_problem(rng, B, d, N, dtype)
    loss, g_pv, g_kq, y_hat = lsa.loss_and_grad(E, y_q, W_pv, W_kq, return_predictions=True)
    loss_ref, g_pv_ref, g_kq_ref = ref.loss_and_grad_tokens(E64, y64, P64, K64)
    # Magnitudes: the same expressions on absolute values, residual → ŷ_abs + |y|.
    loss_abs, g_pv_abs, g_kq_abs = ref.loss_and_grad_tokens(
        np.abs(E64), -np.abs(y64), np.abs(P64), np.abs(K64))
    ops = n_ops(d, N)
    assert_within_probable_rounding(loss, loss_ref, loss_abs, ops, dtype, "loss")
    assert_within_probable_rounding(g_pv, g_pv_ref, g_pv_abs, ops, dtype, "dW_pv")
    assert_within_probable_rounding(g_kq, g_kq_ref, g_kq_abs, ops, dtype, "dW_kq")
    assert_within_probable_rounding(y_hat, ref.predict_naive(E64, P64, K64),
                                    ref.predict_tokens(np.abs(E64), np.abs(P64), np.abs(K64)),
                                    ops, dtype, "y_hat")
    # Exact zeros where parameters do not affect ŷ (SPEC 3.2).
    assert np.all(g_pv[:d] == 0)
    assert np.all(g_kq[:, d] == 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,d,N", SHAPES)
def test_forward_matches_naive_reference(rng, B, d, N, dtype):
    (E, W_pv, W_kq, _), (E64, P64, K64, _) = random_problem(rng, B, d, N, dtype, False)
    F = lsa.forward(E, W_pv, W_kq)
    assert F.dtype == dtype and F.shape == E.shape
    magnitude = ref.forward_gram(np.abs(E64), np.abs(P64), np.abs(K64))
    assert_within_probable_rounding(F, ref.forward_naive(E64, P64, K64), magnitude, n_ops(d, N) + 2 * d,
                                    dtype, "forward")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,d,N", SHAPES)
def test_vjp_matches_naive_reference(rng, B, d, N, dtype):
    (E, W_pv, W_kq, _), (E64, P64, K64, _) = random_problem(rng, B, d, N, dtype, False)
    d_F = rng.standard_normal(E.shape).astype(dtype)
    got = lsa.vjp(E, W_pv, W_kq, d_F)
    expected = ref.vjp_naive(E64, P64, K64, d_F.astype(np.float64))
    magnitude = ref.vjp_gram(np.abs(E64), np.abs(P64), np.abs(K64), np.abs(d_F.astype(np.float64)))
    for name, a, e, m in zip(("dW_pv", "dW_kq", "dE"), got, expected, magnitude):
        assert a.dtype == dtype
        assert_within_probable_rounding(a, e, m, n_ops(d, N) + 4 * d + 10, dtype, name)
    d_W_pv, d_W_kq, d_E = lsa.vjp(E, W_pv, W_kq, d_F, with_input_grad=False)
    assert d_E is None
    np.testing.assert_array_equal(d_W_pv, got[0])  # same arithmetic with or without dE


def _central_difference(f, x, h=1e-6):
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        g[idx] = (f(xp) - f(xm)) / (2 * h)
    return g


@pytest.mark.parametrize("B,d,N", [(2, 1, 1), (3, 2, 3), (2, 3, 4)])
def test_reference_vjps_match_finite_differences(rng, B, d, N):
    E = rng.standard_normal((B, d + 1, N + 1))
    W_pv, W_kq = rng.standard_normal((2, d + 1, d + 1))
    d_F = rng.standard_normal(E.shape)
    scalar = lambda F: float(np.sum(F * d_F))  # <d_F, f(E)> has gradient = VJP
    fd = (
        _central_difference(lambda W: scalar(ref.forward_naive(E, W, W_kq)), W_pv),
        _central_difference(lambda W: scalar(ref.forward_naive(E, W_pv, W)), W_kq),
        _central_difference(lambda X: scalar(ref.forward_naive(X, W_pv, W_kq)), E),
    )
    # Central differences of a cubic have truncation error O(h^2 · |f'''|) ≈ 1e-10 here and
    # cancellation error ≈ 1e-16 / 1e-6; 1e-6 relative sits far above both and far below a bug.
    for vjp in (ref.vjp_naive, ref.vjp_gram):
        for got, want in zip(vjp(E, W_pv, W_kq, d_F), fd):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


@pytest.mark.parametrize("B,d,N", [(3, 1, 1), (4, 2, 3), (5, 3, 6)])
def test_reference_loss_grad_matches_finite_differences(rng, B, d, N):
    batch = data.linear_regression_prompts(rng, B, d, N)
    W_pv, W_kq = rng.standard_normal((2, d + 1, d + 1))
    loss = lambda P, K: ref.loss_and_grad_tokens(batch.E, batch.y_q, P, K)[0]
    _, g_pv, g_kq = ref.loss_and_grad_tokens(batch.E, batch.y_q, W_pv, W_kq)
    fd_pv = _central_difference(lambda P: loss(P, W_kq), W_pv)
    fd_kq = _central_difference(lambda K: loss(W_pv, K), W_kq)
    np.testing.assert_allclose(g_pv, fd_pv, rtol=1e-6, atol=1e-7 * np.abs(fd_pv).max())
    np.testing.assert_allclose(g_kq, fd_kq, rtol=1e-6, atol=1e-7 * np.abs(fd_kq).max())


@pytest.mark.parametrize("B,d,N", [(4, 1, 1), (6, 2, 5), (5, 4, 9)])
def test_quadratic_form_identity(rng, B, d, N):
    """ZFB Lemma 5.1: ŷ = u^T H u with H = ½ X ⊗ (E E^T/N)."""
    batch = data.linear_regression_prompts(rng, B, d, N)
    W_pv, W_kq = rng.standard_normal((2, d + 1, d + 1))
    y_hat = lsa.predict(batch.E, W_pv, W_kq)
    magnitude = ref.predict_tokens(np.abs(batch.E), np.abs(W_pv), np.abs(W_kq))
    assert_within_probable_rounding(ref.quadratic_form(batch.E, W_pv, W_kq), y_hat, magnitude,
                                    4 * (d + 1) ** 2 + N, np.float64, "u^T H u")


def test_layouts_and_dtypes_are_converted(rng):
    B, d, N = 9, 3, 6
    (E, W_pv, W_kq, y_q), _ = random_problem(rng, B, d, N, np.float64)
    expected = lsa.predict(E, W_pv, W_kq)
    fortran = np.asfortranarray(E)
    strided = np.zeros((B, d + 1, 2 * (N + 1)))[:, :, ::2]
    strided[...] = E
    transposed_view = np.ascontiguousarray(np.swapaxes(E, 1, 2)).swapaxes(1, 2)
    for variant in (fortran, strided, transposed_view, E[::1]):
        np.testing.assert_array_equal(lsa.predict(variant, W_pv, W_kq), expected)
    # Parameters of another float dtype (or integers) are converted to E's dtype.
    got32 = lsa.predict(E.astype(np.float32), W_pv, W_kq)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    ints = np.eye(d + 1, dtype=np.int64)
    np.testing.assert_allclose(lsa.predict(E, ints, ints), lsa.predict(E, ints * 1.0, ints * 1.0))
    loss_f, _, _ = lsa.loss_and_grad(fortran, y_q, W_pv, W_kq)
    assert loss_f == lsa.loss_and_grad(E, y_q, W_pv, W_kq)[0]


def test_out_arguments_are_used(rng):
    (E, W_pv, W_kq, _), _ = random_problem(rng, 4, 2, 3, np.float32)
    out = np.empty(4, np.float32)
    assert lsa.predict(E, W_pv, W_kq, out=out) is out
    F = np.empty_like(E)
    assert lsa.forward(E, W_pv, W_kq, out=F) is F
    with pytest.raises(TypeError, match="out"):
        lsa.predict(E, W_pv, W_kq, out=np.empty(4, np.float64))
    with pytest.raises(ValueError, match="out"):
        lsa.forward(E, W_pv, W_kq, out=np.empty((4, 3, 5), np.float32))


@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda E, P, K: lsa.predict(E[0], P, K), ValueError, "E: expected a 3-d array"),
        (lambda E, P, K: lsa.predict(E[:, :1], P, K), ValueError, r"E: expected d\+1 >= 2"),
        (lambda E, P, K: lsa.predict(E[:, :, :1], P, K), ValueError, "N >= 1"),
        (lambda E, P, K: lsa.predict(E[:0], P, K), ValueError, "B >= 1"),
        (lambda E, P, K: lsa.predict(E.astype(np.int32), P, K), TypeError, "E: expected dtype"),
        (lambda E, P, K: lsa.predict(E.astype(np.float16), P, K), TypeError, "E: expected dtype"),
        (lambda E, P, K: lsa.predict(E, P[:-1], K), ValueError, r"W_pv: expected shape \(4, 4\)"),
        (lambda E, P, K: lsa.predict(E, P, np.eye(5)), ValueError, r"W_kq: expected shape \(4, 4\)"),
        (lambda E, P, K: lsa.predict(E, P.astype(complex), K), TypeError, "W_pv"),
        (lambda E, P, K: lsa.predict(E, P * np.nan, K), ValueError, "W_pv: contains non-finite"),
        (lambda E, P, K: lsa.loss_and_grad(E, np.zeros(3), P, K), ValueError, "y_q: expected shape"),
        (lambda E, P, K: lsa.loss_and_grad(E, np.full(5, np.inf), P, K), ValueError, "y_q"),
        (lambda E, P, K: lsa.vjp(E, P, K, E[:, :-1]), ValueError, "d_F: expected shape"),
        (lambda E, P, K: lsa.predict(np.where(E > 1, np.nan, E), P, K), ValueError,
         "E: contains non-finite"),
        (lambda E, P, K: lsa.loss_and_grad(np.where(E > 1, np.inf, E), np.zeros(5), P, K),
         ValueError, "E: contains non-finite"),
        (lambda E, P, K: lsa.predict("not an array", P, K), TypeError, "E: expected dtype"),
    ],
)
def test_bad_input_raises_clear_errors(rng, make, exc, match):
    (E, W_pv, W_kq, _), _ = random_problem(rng, 5, 3, 6, np.float64)
    with pytest.raises(exc, match=match):
        make(E, W_pv, W_kq)


def test_core_rejects_wrong_layout_without_crashing(rng):
    """The private module never copies: a non-contiguous array is a ValueError, a wrong dtype a
    TypeError, both naming the argument (the native validate())."""
    from lsa_native import _core

    (E, W_pv, W_kq, _), _ = random_problem(rng, 5, 3, 6, np.float64)
    out = np.empty(5)
    with pytest.raises(ValueError, match="E: arrays must be C-contiguous"):
        _core.lsa_predict(np.asfortranarray(E), W_pv, W_kq, out)
    with pytest.raises(TypeError, match=r"W_pv: expected dtype float64 \(E's dtype\), got float32"):
        _core.lsa_predict(E, W_pv.astype(np.float32), W_kq, out)
    with pytest.raises(ValueError, match="W_kq"):
        _core.lsa_predict(E, W_pv, np.eye(3), out)
    with pytest.raises(ValueError, match="out"):
        _core.lsa_predict(E, W_pv, W_kq, np.empty(4))


def test_results_do_not_depend_on_thread_count(rng):
    (E, W_pv, W_kq, y_q), _ = random_problem(rng, 1000, 5, 30, np.float32)
    d_F = rng.standard_normal(E.shape).astype(np.float32)
    default = lsa_native.num_threads()
    results = []
    try:
        for n in (1, 2, 3):
            lsa_native.set_num_threads(n)
            results.append((lsa.loss_and_grad(E, y_q, W_pv, W_kq), lsa.vjp(E, W_pv, W_kq, d_F)))
    finally:
        lsa_native.set_num_threads(0)
    assert lsa_native.num_threads() == default
    for (l, gp, gk), (vp, vk, ve) in results[1:]:
        (l0, gp0, gk0), (vp0, vk0, ve0) = results[0]
        assert l == l0
        for a, b in ((gp, gp0), (gk, gk0), (vp, vp0), (vk, vk0), (ve, ve0)):
            np.testing.assert_array_equal(a, b)


def test_concurrent_calls_give_identical_results(rng):
    (E, W_pv, W_kq, y_q), _ = random_problem(rng, 2000, 5, 30, np.float64)
    expected = lsa.loss_and_grad(E, y_q, W_pv, W_kq)
    results = [None] * 4

    def work(i):
        results[i] = [lsa.loss_and_grad(E, y_q, W_pv, W_kq) for _ in range(5)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for per_thread in results:
        for loss, g_pv, g_kq in per_thread:
            assert loss == expected[0]
            np.testing.assert_array_equal(g_pv, expected[1])
            np.testing.assert_array_equal(g_kq, expected[2])


def test_package_metadata():
    assert lsa_native.__version__.count(".") == 2
    assert isinstance(lsa_native.cuda_compiled(), bool)
    assert lsa_native.cpu_kernel_isa() in ("avx512", "avx2-fma", "baseline")
    if not lsa_native.cuda_compiled():
        assert lsa_native.cuda_available() is False


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_kernels_work_in_forked_children(rng):
    """The worker pool survives fork() (a child gets a fresh pool even when a worker held a lock
    at the fork): each child computes the same loss, never deadlocks (bounded wait)."""
    import os
    import time

    (E, W_pv, W_kq, y_q), _ = random_problem(rng, 3000, 5, 30, np.float32)
    expected = lsa.loss_and_grad(E, y_q, W_pv, W_kq)[0]  # starts the pool in the parent
    for _ in range(20):  # forks right after a call: the workers may still be settling
        lsa.loss_and_grad(E, y_q, W_pv, W_kq)
        pid = os.fork()
        if pid == 0:  # child: exit code says whether the result matched
            os._exit(0 if lsa.loss_and_grad(E, y_q, W_pv, W_kq)[0] == expected else 3)
        deadline = time.monotonic() + 300  # a deadlock watchdog, not a threshold
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        if done[0] == 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("a forked child deadlocked in the kernels")
        assert os.WIFEXITED(done[1]) and os.WEXITSTATUS(done[1]) == 0
