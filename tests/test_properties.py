"""Property-based checks over the public API (issue 13): random shapes, dtypes, strides, magnitudes
(1e-300 … 1e300), NaN/inf placement and aliasing. For every call:

- never a crash (the interpreter survives: a native fault would kill the test run);
- either a finite result, or ValueError / TypeError / FloatingPointError whose message names one of
  the call's arguments or outputs;
- never a silent non-finite value.

Each case draws its inputs through ``data`` (hypothesis), builds numpy arrays from a drawn seed (fast
to generate, shrinks on the seed and the drawn knobs) and returns (call, names). The default profile
runs a few dozen examples per case (the file takes well under a minute on 2 cores); the ``slow``
test runs the same cases with many more examples.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import lsa_native as ln  # noqa: E402
from conftest import SEED  # noqa: E402
from lsa_native import (baselines, data as lndata, kernel_attention as ka, lsa, population,  # noqa: E402
                        sampling, theory, train)

CLEAN = (ValueError, TypeError, FloatingPointError)
MAGNITUDES = [1e-300, 1e-150, 1e-30, 1e-5, 1.0, 1e5, 1e30, 1e150, 1e300]


def _nonfinite(x, depth=0) -> bool:
    if depth > 4 or x is None or isinstance(x, (str, bytes, bool)):
        return False
    if isinstance(x, (float, np.floating, complex, np.complexfloating)):
        return not np.isfinite(x)
    if isinstance(x, np.ndarray):
        return x.dtype.kind in "fc" and not bool(np.all(np.isfinite(x)))
    if isinstance(x, dict):
        return any(_nonfinite(v, depth + 1) for v in x.values())
    if isinstance(x, (list, tuple)):
        return any(_nonfinite(v, depth + 1) for v in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return any(_nonfinite(getattr(x, f.name), depth + 1) for f in dataclasses.fields(x))
    return False


def check_call(call, names) -> None:
    """The property: a finite result or a clean error naming an argument or output."""
    try:
        with np.errstate(all="ignore"):
            result = call()
    except CLEAN as e:
        msg = str(e)
        assert any(re.search(r"(?<![A-Za-z0-9_])" + re.escape(n) + r"(?![A-Za-z0-9_])", msg)
                   for n in names), f"{type(e).__name__} names none of {names}: {msg}"
        return
    assert not _nonfinite(result), f"silent non-finite result: {result!r}"[:500]


class Draw:
    """Arrays from a drawn seed with drawn magnitude, dtype, layout and NaN/inf placement."""

    def __init__(self, data):
        self.data = data
        self.rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))

    def int(self, lo, hi, label):
        return self.data.draw(st.integers(lo, hi), label=label)

    def pick(self, options, label):
        return self.data.draw(st.sampled_from(options), label=label)

    def array(self, shape, label, **kw):
        with np.errstate(all="ignore"):  # casts of NaN/inf/huge values are part of the point
            return self._array(shape, label, **kw)

    def _array(self, shape, label, *, dtype=np.float64, spd=False, positive=False):
        scale = self.pick(MAGNITUDES, f"{label} magnitude")
        a = self.rng.standard_normal(shape)
        if spd:
            a = a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])
        if positive:
            a = np.abs(a) + 0.1
        a = a * scale
        poison = self.pick([None, None, None, np.nan, np.inf, -np.inf], f"{label} poison")
        if poison is not None and a.size:
            a.flat[self.int(0, a.size - 1, f"{label} poison index")] = poison
        kind = self.pick(["same", "same", "float32", "int32", "complex", "strided", "fortran"],
                         f"{label} layout")
        if kind == "float32":
            a = a.astype(np.float32)
        elif kind == "int32":
            a = np.clip(a, -1e9, 1e9).astype(np.int32)
        elif kind == "complex":
            a = a + 1j
        elif kind == "strided" and a.ndim:
            a = np.repeat(a, 2, axis=-1)[..., ::2]
        elif kind == "fortran":
            a = np.asfortranarray(a)
        return a if kind != "same" else a.astype(dtype, copy=False)


def _lsa_args(dr):
    B, d, N = dr.int(1, 5, "B"), dr.int(1, 4, "d"), dr.int(1, 9, "N")
    dtype = dr.pick([np.float32, np.float64], "dtype")
    E = dr.array((B, d + 1, N + 1), "E", dtype=dtype)
    return B, d, N, E, dr.array((d + 1, d + 1), "W_pv"), dr.array((d + 1, d + 1), "W_kq")


def case_lsa(dr):
    B, d, N, E, W_pv, W_kq = _lsa_args(dr)
    op = dr.pick(["predict", "loss_and_grad", "forward", "vjp", "predict_vjp"], "op")
    names = ["E", "W_pv", "W_kq", "y_q", "d_F", "d_y", "out", "y_hat", "F", "loss", "dW_pv",
             "dW_kq", "dE"]
    if op == "predict":
        alias = dr.pick([None, "E", "W_pv"], "out aliases")
        if alias == "E" and E.dtype.kind == "f" and E.flags.c_contiguous:
            return (lambda: lsa.predict(E, W_pv, W_kq, out=E.reshape(-1)[:B])), names
        if alias == "W_pv" and W_pv.dtype == E.dtype and W_pv.flags.c_contiguous and W_pv.size >= B:
            return (lambda: lsa.predict(E, W_pv, W_kq, out=W_pv.reshape(-1)[:B])), names
        return (lambda: lsa.predict(E, W_pv, W_kq)), names
    if op == "loss_and_grad":
        y = dr.array((B,), "y_q")
        return (lambda: lsa.loss_and_grad(E, y, W_pv, W_kq, return_predictions=True)), names
    if op == "forward":
        if dr.pick([False, True], "out=E") and E.dtype.kind == "f" and E.flags.c_contiguous:
            return (lambda: lsa.forward(E, W_pv, W_kq, out=E)), names
        return (lambda: lsa.forward(E, W_pv, W_kq)), names
    if op == "vjp":
        dF = dr.array(np.shape(E), "d_F")
        return (lambda: lsa.vjp(E, W_pv, W_kq, dF)), names
    dy = dr.array((B,), "d_y")
    return (lambda: lsa.predict_vjp(E, W_pv, W_kq, dy)), names


def case_kernel_attention(dr):
    B, d, n = dr.int(1, 4, "B"), dr.int(1, 3, "d"), dr.int(1, 6, "n")
    L, H = dr.int(1, 2, "L"), dr.int(1, 2, "H")
    dtype = dr.pick([np.float32, np.float64], "dtype")
    Z0 = dr.array((B, d + 1, n + 1), "Z0", dtype=dtype)
    V = dr.array((L, H, d + 1, d + 1), "V")
    Bk, Ck = dr.array((L, H, d, d), "B"), dr.array((L, H, d, d), "C")
    act = dr.pick(["linear", "relu", "exp", "softmax", None, "nope", ["exp"] * H], "activation")
    op = dr.pick(["forward", "predict", "vjp", "loss_and_grad"], "op")
    names = ["Z0", "V", "B", "C", "activation", "y_q", "d_Z_out", "Z_L", "predictions", "loss",
             "d_V", "d_B", "d_C", "d_Z0"]
    if op == "forward":
        return (lambda: ka.forward(Z0, V, Bk, Ck, act, return_predictions=True)), names
    if op == "predict":
        return (lambda: ka.predict(Z0, V, Bk, Ck, act, every_layer=True)), names
    if op == "vjp":
        dZ = dr.array(np.shape(Z0), "d_Z_out")
        return (lambda: ka.vjp(Z0, V, Bk, Ck, act, dZ)), names
    y = dr.array((B,), "y_q")
    return (lambda: ka.loss_and_grad(Z0, y, V, Bk, Ck, act, input_grad=True)), names


def case_population(dr):
    d, N = dr.int(1, 4, "d"), dr.int(1, 10**6, "N")
    W_pv, W_kq = dr.array((d + 1, d + 1), "W_pv"), dr.array((d + 1, d + 1), "W_kq")
    Lam = dr.array((d, d), "Lambda", spd=True)
    noise = dr.pick([0.0, 0.5, -1.0, np.nan, 1e200], "noise_std")
    op = dr.pick(["fixed", "random_diagonal", "samples", "reduced", "minimum", "flow"], "op")
    names = ["W_pv", "W_kq", "Lambda", "Lambdas", "moments", "N", "noise_std", "U11", "u", "loss",
             "minimum_loss", "times", "step", "max_steps", "diverged", "second", "third", "mean"]
    if op == "fixed":
        return (lambda: population.loss_and_grad(W_pv, W_kq, Lam, N, noise_std=noise)), names
    if op == "random_diagonal":
        m = dr.array((3, d), "moments", positive=True)
        return (lambda: population.loss_and_grad_random_diagonal(W_pv, W_kq, m, N)), names
    if op == "samples":
        S = np.stack([Lam, Lam.T])
        return (lambda: population.loss_and_grad_samples(W_pv, W_kq, S, N)), names
    if op == "reduced":
        U = dr.array((d, d), "U11")
        u = dr.pick([0.5, -3.0, 1e300, np.nan], "u")
        return (lambda: population.reduced_loss_and_grad(U, u, Lam, N)), names
    if op == "minimum":
        return (lambda: population.minimum_loss(Lam, N)), names
    t = dr.pick([1e-3, 0.1], "time")
    return (lambda: population.gradient_flow(W_pv, W_kq, N, Lambda=Lam, times=[0.0, t],
                                             max_steps=20000)), names


def case_data_and_baselines(dr):
    B, n, d = dr.int(1, 4, "B"), dr.int(1, 6, "n"), dr.int(1, 4, "d")
    X, y, xq = dr.array((B, n, d), "X"), dr.array((B, n), "y"), dr.array((B, d), "x_q")
    op = dr.pick(["embed", "ols", "ridge", "zero", "kernel_matrix", "bayes", "functional_gd",
                  "linear_prompts", "kernel_gp_prompts", "psd_part"], "op")
    kernel = dr.pick(["linear", "relu", "exp", "nope"], "kernel")
    bw = dr.pick([1.0, 1e-3, 1e300, 0.0, np.nan], "bandwidth")
    names = ["X", "y", "x_q", "lam", "kernel", "bandwidth", "K", "X1", "X2", "step_sizes", "dtype",
             "jitter", "noise_std", "ols", "ridge", "bayes_estimator", "functional_gd", "E"]
    if op == "embed":
        return (lambda: lndata.embed(X, y, xq)), names
    if op == "ols":
        return (lambda: baselines.ols(X, y, xq)), names
    if op == "ridge":
        lam = dr.pick([0.1, 0.0, -1.0, 1e300], "lam")
        return (lambda: baselines.ridge(X, y, xq, lam)), names
    if op == "zero":
        return (lambda: baselines.zero_estimator(X, y, xq)), names
    if op == "kernel_matrix":
        return (lambda: baselines.kernel_matrix(kernel, X, X, bw)), names
    if op == "bayes":
        return (lambda: baselines.bayes_estimator(X, y, xq, kernel, bw, jitter=1e-8)), names
    if op == "functional_gd":
        r = dr.array((dr.int(1, 3, "steps"),), "step_sizes")
        return (lambda: baselines.functional_gd(X, y, xq, kernel, r, bw)), names
    if op == "psd_part":
        K = dr.array((B, n, n), "K")
        return (lambda: baselines.psd_part(K)), names
    dtype = dr.pick([np.float32, np.float64, np.int32], "dtype")
    if op == "linear_prompts":
        noise = dr.pick([0.0, 0.1, -1.0, np.nan], "noise_std")
        return (lambda: lndata.linear_regression_prompts(dr.rng, B, d, n, noise_std=noise,
                                                         dtype=dtype)), names
    return (lambda: lndata.kernel_gp_prompts(dr.rng, B, d, n, kernel, bandwidth=bw,
                                             dtype=dtype)), names


def case_theory(dr):
    d, N, M = dr.int(1, 4, "d"), dr.int(1, 50, "N"), dr.int(1, 50, "M")
    Lam = dr.array((d, d), "Lambda", spd=True)
    op = dr.pick(["gamma", "thm41", "sigma_bound", "pl", "thm42", "limit_error", "diag_error",
                  "cor43", "thm45", "quadratic"], "op")
    names = ["Lambda", "N", "M", "sigma", "ThetaThetaT", "eps", "w", "A", "a", "moments",
             "noise_std", "Lambda_test", "Gamma", "W_pv, W_kq", "sigma_bound", "mu", "M, N",
             "thm42_prediction_error", "limit_predictor_error", "random_diagonal_error", "v",
             "beta", "Sigma, best_linear_error", "second", "third", "mean", "B"]
    if op == "gamma":
        return (lambda: theory.gamma(Lam, N)), names
    if op == "thm41":
        return (lambda: theory.thm41_limits(Lam, N)), names
    if op == "sigma_bound":
        return (lambda: theory.sigma_bound(Lam, N)), names
    if op == "pl":
        sigma = dr.pick([1e-3, 0.1, 10.0, -1.0], "sigma")
        TT = dr.array((d, d), "ThetaThetaT", spd=True)
        return (lambda: theory.pl_constant(Lam, N, sigma, TT)), names
    if op == "thm42":
        w = dr.array((d,), "w")
        return (lambda: theory.thm42_prediction_error(Lam, N, M, w)), names
    if op == "limit_error":
        A = dr.array((d, d), "A")
        return (lambda: theory.limit_predictor_error(A, M, Lam)), names
    m = dr.array((3, d), "moments", positive=True)
    if op == "diag_error":
        a = dr.array((d,), "a")
        return (lambda: theory.random_diagonal_error(a, M, m)), names
    if op == "cor43":
        eps = dr.pick([0.1, 1e-300, -1.0, np.inf], "eps")
        return (lambda: theory.cor43_thresholds(Lam, eps)), names
    if op == "thm45":
        return (lambda: theory.thm45_limits(m, N)), names
    w, v = dr.array((d,), "w"), dr.array((d,), "v")
    beta = dr.pick([0.5, 1e200, np.nan], "beta")
    return (lambda: theory.quadratic_task_moments(Lam, w, v, beta)), names


def case_sampling_and_train(dr):
    op = dr.pick(["normals", "gammas", "linear_sample", "linear_loss", "clip", "distance",
                  "dist_identity", "threads"], "op")
    names = ["n", "shape", "seed", "step", "dtype", "batch", "W_pv", "W_kq", "loss", "dW_pv",
             "dW_kq", "grad", "max_norm", "theta", "target", "relative_distance", "M", "y_q", "E"]
    if op == "normals":
        n = dr.pick([0, 5, 2.5, -1, 10**20], "n")
        return (lambda: sampling.normals(n, seed=dr.int(0, 2**64 - 1, "seed"))), names
    if op == "gammas":
        shape = dr.pick(MAGNITUDES + [0.0, -1.0, np.nan], "shape")
        return (lambda: sampling.gammas(7, shape)), names
    d, n = dr.int(1, 4, "d"), dr.int(1, 6, "n")
    if op == "linear_sample":
        B = dr.pick([1, 3, 0, 2**62], "batch")
        return (lambda: sampling.LinearPrompts(d, n).sample_embedding(B)), names
    if op == "linear_loss":
        W_pv, W_kq = dr.array((d + 1, d + 1), "W_pv"), dr.array((d + 1, d + 1), "W_kq")
        return (lambda: sampling.LinearPrompts(d, n).lsa_loss_and_grad(W_pv, W_kq, batch=3)), names
    if op == "clip":
        g = dr.array((dr.int(1, 6, "size"),), "grad")
        return (lambda: train.clip_grad_norm(g, dr.pick([1.0, 0.0, np.nan], "max_norm"))), names
    if op == "distance":
        a, b = dr.array((5,), "theta"), dr.array((5,), "target")
        return (lambda: train.relative_distance(a, b)), names
    if op == "dist_identity":
        M = dr.array((2, d, d), "M")
        return (lambda: train.dist_to_identity(M)), names
    k = dr.pick([1, 2, 2.5, -1, True], "n")

    def threads():
        try:
            return ln.set_num_threads(k)
        finally:
            ln.set_num_threads(0)
    return threads, names


CASES = [case_lsa, case_kernel_attention, case_population, case_data_and_baselines, case_theory,
         case_sampling_and_train]
# No deadline and no speed health checks: a loaded machine must not fail a property. Examples come
# from the run's seed (@seed(SEED)): fresh each run, replayed by LSA_TEST_SEED like every other test
# (Hypothesis' own random seed was not: a CI failure could be replayed only from its printout).
_SETTINGS = dict(deadline=None, derandomize=False,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
@seed(SEED)
@settings(max_examples=60, **_SETTINGS)
@given(data=st.data())
def test_property_finite_or_named_error(case, data):
    call, names = case(Draw(data))
    check_call(call, names)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
@seed(SEED)
@settings(max_examples=1500, **_SETTINGS)
@given(data=st.data())
def test_property_finite_or_named_error_large(case, data):
    call, names = case(Draw(data))
    check_call(call, names)
