"""H-head linear self-attention (lsa_native.multihead, native Gram-first CPU kernels): vs the naive
numpy reference (per-head attention matrices) for every entry point, both parametrizations, both
dtypes, odd sizes, d = 1, N = 1; H = 1 bitwise equal to lsa in float64; gradients vs central
differences; thread-count independence; bad input."""
from __future__ import annotations

import numpy as np
import pytest

import lsa_native
from lsa_native import lsa
from lsa_native import multihead as mh
from lsa_native.reference import multihead as ref

from conftest import ROUNDING_FACTOR, assert_within_probable_rounding, rounded, unit_roundoff

SIZES = [(1, 1, 1, 2), (5, 1, 9, 3), (4, 6, 13, 2), (7, 5, 20, 5), (3, 20, 40, 4), (2, 3, 2, 7)]


def _draw(rng, B, d, N, H, label_slot=True):
    E = rng.standard_normal((B, d + 1, N + 1))
    if not label_slot:
        E[:, d, N] = 0
    W_pv, W_kq = rng.standard_normal((2, H, d + 1, d + 1))
    return E, W_pv, W_kq


def _n_ops(B, d, N, H):
    """Longest chain of roundings per output entry: (d+1)-term products on both sides of the
    (N+1)-term token Gram sum, the H heads, the residual and the batch mean."""
    return B + N + H + 3 * (d + 1) + 8


def loss_magnitude(r, r_abs, n_ops, dtype):
    """The magnitude for conftest's rounding bounds (bound γ·m, γ <= ROUNDING_FACTOR·n_ops·u) of the loss
    L = ½ mean r², r = ŷ − y, given r_abs = ŷ on absolute values + |y|: |Δr| <= γ·r_abs, so
    |ΔL| <= γ·mean(|r|·r_abs + γ·r_abs²/2). (The loss on absolute values, ½ mean r_abs², bounds by
    r_abs² instead: float32 then let a relative loss error up to ~1.5 pass at d = 20.)"""
    gamma = ROUNDING_FACTOR * n_ops * unit_roundoff(dtype)
    r, r_abs = np.asarray(r, np.float64), np.asarray(r_abs, np.float64)
    return float(np.mean(np.abs(r) * r_abs + gamma * r_abs**2 / 2))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("B,d,N,H", SIZES)
def test_matches_reference(rng, B, d, N, H, dtype):
    """Entrywise within the forward-error bound of the sums of products (conftest's
    assert_within_probable_rounding): the reference runs in float64 on the same dtype-rounded inputs, the
    magnitude is the same expression on absolute values (the residual ŷ − y as |ŷ| + |y|: y → −|y|;
    the loss's from loss_magnitude).
    A tolerance relative to the largest entry (2e-4 in float32, on the unrounded inputs) failed
    for ~1 seed in 10⁴ at B = 1, where a cancelling ŷ is the largest entry."""
    E, W_pv, W_kq = _draw(rng, B, d, N, H, label_slot=bool(rng.integers(2)))
    y_q = rng.standard_normal(B)
    d_F = rng.standard_normal(E.shape)
    d_y = rng.standard_normal(B)
    c, (E, W_pv, W_kq, y_q, d_F, d_y) = rounded(dtype, E, W_pv, W_kq, y_q, d_F, d_y)
    aE, aP, aK, ay, aF, ady = (np.abs(a) for a in (E, W_pv, W_kq, y_q, d_F, d_y))
    ops = _n_ops(B, d, N, H)

    def close(got, want, magnitude, what):
        got = np.asarray(got)
        assert got.dtype == dtype and got.shape == np.shape(want), what
        assert_within_probable_rounding(got, want, magnitude, ops, dtype, what)

    close(mh.predict(c[0], c[1], c[2]), ref.predict(E, W_pv, W_kq), ref.predict(aE, aP, aK), "predict")
    close(mh.forward(c[0], c[1], c[2]), ref.forward(E, W_pv, W_kq), ref.forward(aE, aP, aK), "forward")
    L, *grads, y_hat = mh.loss_and_grad(c[0], c[3], c[1], c[2], return_predictions=True)
    want = ref.loss_and_grad(E, y_q, W_pv, W_kq)
    magnitude = ref.loss_and_grad(aE, -ay, aP, aK)[1:]
    magnitude = [loss_magnitude(ref.predict(E, W_pv, W_kq) - y_q, ref.predict(aE, aP, aK) + ay, ops,
                                dtype), *magnitude]
    for name, g, w, m in zip(("loss", "dW_pv", "dW_kq"), [L, *grads], want, magnitude):
        assert_within_probable_rounding(g, w, m, ops, dtype, "loss_and_grad " + name)
    close(y_hat, ref.predict(E, W_pv, W_kq), ref.predict(aE, aP, aK), "y_hat")
    for name, g, w, m in zip(("dW_pv", "dW_kq", "dE"), mh.vjp(c[0], c[1], c[2], c[4]),
                             ref.vjp(E, W_pv, W_kq, d_F), ref.vjp(aE, aP, aK, aF)):
        close(g, w, m, "vjp " + name)
    for name, g, w, m in zip(("dW_pv", "dW_kq", "dE"), mh.predict_vjp(c[0], c[1], c[2], c[5]),
                             ref.predict_vjp(E, W_pv, W_kq, d_y), ref.predict_vjp(aE, aP, aK, ady)):
        close(g, w, m, "predict_vjp " + name)
    assert mh.vjp(c[0], c[1], c[2], c[4], with_input_grad=False)[-1] is None
    assert mh.predict_vjp(c[0], c[1], c[2], c[5], with_input_grad=False)[-1] is None


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("r", [1, 2, 4])
def test_separate_matches_reference(rng, r, dtype):
    """As test_matches_reference (rounding bound, reference on the rounded inputs), through
    W^KQ_h = W^K_hᵀ W^Q_h: magnitudes from |W^K|, |W^Q| (merge and chain on absolute values)."""
    B, d, N, H = 6, 3, 11, 3
    E = rng.standard_normal((B, d + 1, N + 1))
    W_pv = rng.standard_normal((H, d + 1, d + 1))
    W_k, W_q = rng.standard_normal((2, H, r, d + 1))
    y_q = rng.standard_normal(B)
    c, (E, W_pv, W_k, W_q, y_q) = rounded(dtype, E, W_pv, W_k, W_q, y_q)
    W_kq = ref.merge_kq(W_k, W_q)
    assert np.linalg.matrix_rank(W_kq[0]) == r
    aE, aP, aK, aQ, ay = (np.abs(a) for a in (E, W_pv, W_k, W_q, y_q))
    aKQ = ref.merge_kq(aK, aQ)
    ops = _n_ops(B, d, N, H) + 2 * r
    assert_within_probable_rounding(mh.predict(c[0], c[1], W_k=c[2], W_q=c[3]), ref.predict(E, W_pv, W_kq),
                                    ref.predict(aE, aP, aKQ), ops, dtype, "predict")
    L, d_pv, d_k, d_q = mh.loss_and_grad(c[0], c[4], c[1], W_k=c[2], W_q=c[3])
    L_ref, d_pv_ref, d_kq_ref = ref.loss_and_grad(E, y_q, W_pv, W_kq)
    d_k_ref, d_q_ref = ref.chain_kq(W_k, W_q, d_kq_ref)
    _, d_pv_abs, d_kq_abs = ref.loss_and_grad(aE, -ay, aP, aKQ)
    L_abs = loss_magnitude(ref.predict(E, W_pv, W_kq) - y_q, ref.predict(aE, aP, aKQ) + ay, ops, dtype)
    d_k_abs, d_q_abs = ref.chain_kq(aK, aQ, d_kq_abs)
    for name, g, w, m in (("loss", L, L_ref, L_abs), ("dW_pv", d_pv, d_pv_ref, d_pv_abs),
                          ("dW_k", d_k, d_k_ref, d_k_abs), ("dW_q", d_q, d_q_ref, d_q_abs)):
        assert np.shape(g) == np.shape(w) and (name == "loss" or g.dtype == dtype), name
        assert_within_probable_rounding(g, w, m, ops, dtype, name)


def test_one_head_is_lsa_bitwise(rng):
    """H = 1 (merged) equals the one-head LSA bitwise in float64, every entry point."""
    B, d, N = 9, 4, 17
    E, W_pv, W_kq = _draw(rng, B, d, N, 1)
    y_q, d_y = rng.standard_normal((2, B))
    d_F = rng.standard_normal(E.shape)
    one = (W_pv[0], W_kq[0])
    assert np.array_equal(mh.predict(E, W_pv, W_kq), lsa.predict(E, *one))
    assert np.array_equal(mh.forward(E, W_pv, W_kq), lsa.forward(E, *one))
    got, want = mh.loss_and_grad(E, y_q, W_pv, W_kq), lsa.loss_and_grad(E, y_q, *one)
    assert got[0] == want[0]
    assert all(np.array_equal(g[0], w) for g, w in zip(got[1:], want[1:]))
    for got, want in ((mh.vjp(E, W_pv, W_kq, d_F), lsa.vjp(E, *one, d_F)),
                      (mh.predict_vjp(E, W_pv, W_kq, d_y), lsa.predict_vjp(E, *one, d_y))):
        assert np.array_equal(got[0][0], want[0]) and np.array_equal(got[1][0], want[1])
        assert np.array_equal(got[2], want[2])


def test_heads_add_up(rng):
    """The H-head prediction minus the label slot is the sum of the one-head predictions: no
    cross-head term (a power check of the reference too)."""
    B, d, N, H = 5, 3, 8, 4
    E, W_pv, W_kq = _draw(rng, B, d, N, H, label_slot=False)
    parts = sum(lsa.predict(E, W_pv[h], W_kq[h]) for h in range(H))
    np.testing.assert_allclose(mh.predict(E, W_pv, W_kq), parts, rtol=1e-12, atol=1e-12)


def _central(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        x0 = x[i]
        x[i] = x0 + eps
        fp = f()
        x[i] = x0 - eps
        fm = f()
        x[i] = x0
        g[i] = (fp - fm) / (2 * eps)
    return g


@pytest.mark.parametrize("separate", [False, True])
def test_loss_gradient_matches_central_differences(rng, separate):
    B, d, N, H, r = 4, 2, 5, 3, 1
    E = rng.standard_normal((B, d + 1, N + 1))
    E[:, d, N] = 0
    y_q = rng.standard_normal(B)
    W_pv = rng.standard_normal((H, d + 1, d + 1))
    if separate:
        W_k, W_q = rng.standard_normal((2, H, r, d + 1))
        kw = {"W_k": W_k, "W_q": W_q}
        params = {"W_pv": W_pv, "W_k": W_k, "W_q": W_q}
    else:
        W_kq = rng.standard_normal((H, d + 1, d + 1))
        kw = {"W_kq": W_kq}
        params = {"W_pv": W_pv, "W_kq": W_kq}
    loss = lambda: mh.loss_and_grad(E, y_q, W_pv, **kw)[0]  # noqa: E731
    grads = mh.loss_and_grad(E, y_q, W_pv, **kw)[1:]
    for (name, x), g in zip(params.items(), grads):
        fd = _central(loss, x)
        assert np.abs(g - fd).max() <= 1e-7 * max(1.0, np.abs(fd).max()), name


def test_input_gradients_match_central_differences(rng):
    B, d, N, H = 2, 2, 3, 3
    E, W_pv, W_kq = _draw(rng, B, d, N, H)
    d_F = rng.standard_normal(E.shape)
    d_y = rng.standard_normal(B)
    fd_F = _central(lambda: float(np.sum(d_F * mh.forward(E, W_pv, W_kq))), E)
    fd_y = _central(lambda: float(d_y @ mh.predict(E, W_pv, W_kq)), E)
    np.testing.assert_allclose(mh.vjp(E, W_pv, W_kq, d_F)[2], fd_F, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(mh.predict_vjp(E, W_pv, W_kq, d_y)[2], fd_y, rtol=1e-6, atol=1e-7)


def test_thread_count_independent(rng):
    B, d, N, H = 301, 4, 9, 3
    E, W_pv, W_kq = _draw(rng, B, d, N, H)
    y_q = rng.standard_normal(B)
    before = lsa_native.num_threads()
    try:
        lsa_native.set_num_threads(1)
        one = mh.loss_and_grad(E, y_q, W_pv, W_kq)
        lsa_native.set_num_threads(3)
        many = mh.loss_and_grad(E, y_q, W_pv, W_kq)
    finally:
        lsa_native.set_num_threads(before)
    assert one[0] == many[0]
    assert all(np.array_equal(a, b) for a, b in zip(one[1:], many[1:]))


def test_bad_input(rng):
    E, W_pv, W_kq = _draw(rng, 3, 2, 4, 2)
    with pytest.raises(ValueError, match="W_pv: expected at least one head"):
        mh.predict(E, W_pv[:0], W_kq[:0])
    with pytest.raises(ValueError, match="W_pv: expected shape"):
        mh.predict(E, W_pv[0], W_kq[0])
    with pytest.raises(ValueError, match="W_kq: expected shape"):
        mh.predict(E, W_pv, W_kq[:1])
    with pytest.raises(ValueError, match="W_kq: expected shape"):
        mh.predict(E, W_pv, W_kq[:, :2, :2])
    W_k = rng.standard_normal((2, 1, 3))
    with pytest.raises(ValueError, match=r"W_k: rank r = 4 out of range"):
        mh.predict(E, W_pv, W_k=np.zeros((2, 4, 3)), W_q=np.zeros((2, 4, 3)))
    with pytest.raises(ValueError, match=r"W_k: expected shape \(2, r, 3\)"):
        mh.predict(E, W_pv, W_k=W_k[:1], W_q=W_k[:1])
    with pytest.raises(ValueError, match="W_q: expected shape"):
        mh.predict(E, W_pv, W_k=W_k, W_q=np.zeros((2, 2, 3)))
    with pytest.raises(TypeError, match="either W_kq"):
        mh.predict(E, W_pv, W_kq, W_k=W_k, W_q=W_k)
    with pytest.raises(TypeError, match="either W_kq"):
        mh.predict(E, W_pv)
    with pytest.raises(TypeError, match="needs both"):
        mh.predict(E, W_pv, W_k=W_k)
    bad = W_kq.copy()
    bad[1, 0, 0] = np.nan
    with pytest.raises(ValueError, match="W_kq"):
        mh.predict(E, W_pv, bad)
    bad = W_pv.copy()
    bad[0, 2, 1] = np.inf
    with pytest.raises(ValueError, match="W_pv"):
        mh.loss_and_grad(E, np.zeros(3), bad, W_kq)
    E_bad = E.copy()
    E_bad[0, 0, 0] = np.nan
    with pytest.raises((ValueError, FloatingPointError), match="E"):
        mh.predict(E_bad, W_pv, W_kq)
    with pytest.raises(ValueError, match="E: expected a 3-d"):
        mh.predict(E[0], W_pv, W_kq)
    with pytest.raises(ValueError, match="y_q: expected shape"):
        mh.loss_and_grad(E, np.zeros(2), W_pv, W_kq)
    with pytest.raises(TypeError, match="E: expected dtype"):
        mh.predict(E.astype(np.int64), W_pv, W_kq)


# ---- the train objective ----------------------------------------------------------------------

def test_objective_fused_equals_batch_path(rng):
    """The fused path (native sampler into a reused buffer) trains on the very prompts of
    data.at(step): the same θ trajectory as the non-fused path, bitwise; its loss and gradient are
    multihead.loss_and_grad's on that batch."""
    from lsa_native import train
    from lsa_native.sampling import LinearPrompts

    d, N, H, r = 3, 7, 2, 1
    W_pv = 0.3 * rng.standard_normal((H, d + 1, d + 1))
    W_k, W_q = 0.3 * rng.standard_normal((2, H, r, d + 1))
    spec = LinearPrompts(d, N, seed=int(rng.integers(1000)))
    runs = []
    for fused in (True, False):
        obj = train.MultiHeadLSAObjective(W_pv, W_k=W_k, W_q=W_q, fused=fused, dtype=np.float64)
        res = train.fit(obj, "sgd", lr=0.05, steps=7, progress=False,
                        data=train.Prompts(spec, batch=33, resample_every=2, dtype=np.float64))
        runs.append(res.theta)
    np.testing.assert_array_equal(runs[0], runs[1])
    obj = train.MultiHeadLSAObjective(W_pv, W_k=W_k, W_q=W_q)
    src = train.Prompts(spec, batch=33, dtype=np.float64)
    loss, grad = obj.loss_and_grad(obj.theta0, 3, src)
    b = src.at(3)
    want = mh.loss_and_grad(b.E, b.y_q, W_pv, W_k=W_k, W_q=W_q)
    assert loss == want[0]
    np.testing.assert_array_equal(grad, np.concatenate([g.ravel() for g in want[1:]]))
    assert obj.evaluate(obj.theta0, b) == want[0]
    p = obj.unpack(obj.theta0)
    assert set(p) == {"W_pv", "W_k", "W_q"} and np.array_equal(p["W_k"], W_k)


def test_objective_draws_once_per_sample_index(rng):
    """With resample_every = 3 the fused path draws once per 3 steps, into one reused buffer."""
    from lsa_native import train
    from lsa_native.sampling import LinearPrompts

    class Counting:
        def __init__(self, spec):
            self.spec, self.calls = spec, []

        def sample(self, **kw):
            return self.spec.sample(**kw)

        def sample_embedding(self, batch, step, dtype, **buffers):
            self.calls.append((step, buffers.get("E") is not None))
            return self.spec.sample_embedding(batch, step, dtype, **buffers)

    spec = Counting(LinearPrompts(2, 5, seed=int(rng.integers(1000))))
    obj = train.MultiHeadLSAObjective(np.zeros((2, 3, 3)), np.zeros((2, 3, 3)))
    src = train.Prompts(spec, batch=8, resample_every=3)
    for step in range(7):
        obj.loss_and_grad(obj.theta0, step, src)
    assert spec.calls == [(0, False), (1, True), (2, True)]


def test_objective_merged_decreases_loss(rng):
    from lsa_native import train
    from lsa_native.sampling import LinearPrompts

    d, N, H = 2, 10, 3
    W_pv, W_kq = 0.1 * rng.standard_normal((2, H, d + 1, d + 1))
    obj = train.MultiHeadLSAObjective(W_pv, W_kq)
    res = train.fit(obj, "adam", lr=0.02, steps=150, progress=False,
                    data=train.Prompts(LinearPrompts(d, N, seed=3), batch=256))
    loss = res.history["loss"]
    assert np.mean(loss[-20:]) < 0.7 * np.mean(loss[:5])
    assert obj.config()["shapes"] == {"W_pv": [H, 3, 3], "W_kq": [H, 3, 3]}


def test_objective_bad_arguments(rng):
    from lsa_native import train

    W_pv = np.zeros((2, 3, 3))
    with pytest.raises(ValueError, match="method"):
        train.MultiHeadLSAObjective(W_pv, np.zeros((2, 3, 3)), method="gram")
    with pytest.raises(ValueError, match="W_kq"):
        train.MultiHeadLSAObjective(W_pv, np.zeros((3, 3, 3)))
    with pytest.raises(ValueError, match="rank"):
        train.MultiHeadLSAObjective(W_pv, W_k=np.zeros((2, 4, 3)), W_q=np.zeros((2, 4, 3)))
    with pytest.raises(ValueError, match="W_pv: expected at least one head"):
        train.MultiHeadLSAObjective(np.zeros((0, 3, 3)), np.zeros((0, 3, 3)))
    E = rng.standard_normal((2, 4, 5))
    with pytest.raises(ValueError, match=r"W_pv: expected shape \(2, 4, 4\)"):
        mh.predict(E, W_pv, np.zeros((2, 3, 3)))


# ---- the route of a call (LSA's: array views, one native validate(), the device from the views) --

class _HostBackedCudaArray:
    """Host memory presented through __cuda_array_interface__ (as tests/test_cuda.py)."""

    def __init__(self, a):
        self.a = np.ascontiguousarray(a)
        self.__cuda_array_interface__ = {"shape": self.a.shape, "typestr": self.a.dtype.str,
                                         "data": (self.a.ctypes.data, False), "strides": None,
                                         "version": 3}


def test_out_and_devices_on_the_native_route(rng, monkeypatch):
    """out= is validated natively and written in place; every H takes LSA's GPU route (an
    emulated GPU: CPU kernels where CUDA ones would launch: H = 1 the LSA ones, H >= 2 the H-head
    ones) and equals the CPU bitwise; without a usable GPU device='cuda' is use_cuda's error."""
    from lsa_native import _core, cuda

    E, W_pv, W_kq = _draw(rng, 4, 2, 5, 2)
    y = np.full(4, np.nan)
    assert mh.predict(E, W_pv, W_kq, out=y) is y
    np.testing.assert_array_equal(y, mh.predict(E, W_pv, W_kq))
    with pytest.raises(ValueError, match=r"out: expected shape \(4, 3, 6\)"):
        mh.forward(E, W_pv, W_kq, out=np.zeros(4))
    with pytest.raises(ValueError, match="out: overlaps the memory of E"):
        mh.forward(E, W_pv, W_kq, out=E)
    with pytest.raises(TypeError, match="out: expected dtype float64"):
        mh.predict(E, W_pv, W_kq, out=np.zeros(4, np.float32))
    if not cuda.available():
        with pytest.raises(ValueError, match="device='cuda'"):
            mh.predict(E, W_pv, W_kq, device="cuda")
    with pytest.raises(ValueError, match="device: expected one of"):
        mh.predict(E, W_pv, W_kq, device="gpu")

    g = _HostBackedCudaArray
    monkeypatch.setattr(cuda, "empty", lambda template, shape, dtype, device:
                        g(np.full(shape, np.nan, dtype)))
    for H in (1, 2):
        E1, W_pv1, W_kq1 = _draw(rng, 5, 3, 7, H)
        y_q = rng.standard_normal(5)
        want = mh.loss_and_grad(E1, y_q, W_pv1, W_kq1, return_predictions=True)
        want_vjp = mh.predict_vjp(E1, W_pv1, W_kq1, y_q)
        _core.emulate_cuda_on_cpu_for_tests(True)
        try:
            got = mh.loss_and_grad(g(E1), g(y_q), g(W_pv1), W_kq1, return_predictions=True)
            got_vjp = mh.predict_vjp(g(E1), W_pv1, W_kq1, y_q)
            host = mh.loss_and_grad(E1, y_q, W_pv1, W_kq1, device="cuda")
        finally:
            _core.emulate_cuda_on_cpu_for_tests(False)
        assert got[0] == want[0] == host[0]
        for a, b in zip(got[1:], want[1:]):
            assert isinstance(a, g) and a.a.shape == b.shape and np.array_equal(a.a, b)
        for a, b in zip(got_vjp, want_vjp):
            assert np.array_equal(a.a, b)
        assert all(isinstance(a, np.ndarray) for a in host[1:])


# ---- the objective's steps against the explicit merge → step → chain sequence -------------------

def _objective_problem(seed, heads, separate, method, dtype):
    """(objective, source) of an H-head model on LinearPrompts (N = 7 >= d + 1: Wishart applies)."""
    from lsa_native import train
    from lsa_native.sampling import LinearPrompts

    rng = np.random.default_rng(seed)
    d, r = 3, int(rng.integers(1, 5))
    W_pv = 0.3 * rng.standard_normal((heads, d + 1, d + 1))
    kq = ({"W_k": 0.4 * rng.standard_normal((heads, r, d + 1)),
           "W_q": 0.4 * rng.standard_normal((heads, r, d + 1))} if separate
          else {"W_kq": 0.3 * rng.standard_normal((heads, d + 1, d + 1))})
    obj = train.MultiHeadLSAObjective(W_pv, **kq, method=method, dtype=dtype)
    src = train.Prompts(LinearPrompts(d, 7, noise_std=0.1, seed=seed), batch=23, resample_every=2,
                        dtype=np.float64)
    return obj, src


def explicit_step(obj, theta, step, data, dtype):
    """(L, gradient [P] float64) by the public functions one after the other: W^KQ_h =
    multihead.merge_kq(W_k, W_q) (separate), the merged step (Wishart: the spec's
    multihead_fused_step; tokens: multihead.loss_and_grad on the step's sample_embedding), then
    multihead.chain_kq(W_k, W_q, dW^KQ) — the computation before the steps shared one helper."""
    p = {k: np.ascontiguousarray(v, dtype) for k, v in obj.unpack(theta).items()}
    W_kq = p["W_kq"] if "W_kq" in p else mh.merge_kq(p["W_k"], p["W_q"])
    index = data.sample_index(step)
    if obj._wishart(data):
        fn = data.spec.multihead_fused_step(batch=data.batch, method="wishart", dtype=dtype)
        d_pv, d_kq = np.empty_like(p["W_pv"]), np.empty_like(W_kq)
        loss = fn(p["W_pv"], W_kq, index, d_pv, d_kq)
    else:
        E, y_q = data.spec.sample_embedding(data.batch, index, dtype)
        loss, d_pv, d_kq = mh.loss_and_grad(E, y_q, p["W_pv"], W_kq)
    grads = (d_pv, d_kq) if "W_kq" in p else (d_pv, *mh.chain_kq(p["W_k"], p["W_q"], d_kq))
    return loss, np.concatenate([g.ravel() for g in grads]).astype(np.float64)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("method", ["tokens", "wishart"])
@pytest.mark.parametrize("separate", [False, True])
@pytest.mark.parametrize("heads", [1, 3])
def test_objective_steps_equal_the_explicit_sequence(rng, heads, separate, method, dtype):
    """The bound CPU step (checked merge / chain on its first step, the native calls after) and the
    unbound loss_and_grad give the bits of the explicit public merge → step → chain sequence, at
    every step of several, θ alternating between two buffers as fit's (float64: the unchecked
    calls on a θ buffer the first step did not see; float32 casts θ into one buffer)."""
    obj, src = _objective_problem(int(rng.integers(2**31)), heads, separate, method, dtype)
    step_fn = obj.bind(src)
    thetas = [obj.theta0.copy(), obj.theta0.copy()]
    for t in range(5):
        theta = thetas[t % 2]
        theta += 0.05 * rng.standard_normal(theta.size)
        want = explicit_step(obj, theta, t, src, dtype)
        for got in (step_fn(theta, t), obj.loss_and_grad(theta, t, src)):
            assert got[0] == want[0], t
            np.testing.assert_array_equal(got[1], want[1], err_msg=str(t))


def test_separate_step_checks_its_operands_on_the_first_call_only(rng, monkeypatch):
    """The separate parametrization's step runs the public merge_kq / chain_kq (every operand
    check) on its first call and the native calls after: a bad first call is the public function's
    error (a mixed host / CUDA operand named), and a 6-step bound loop calls each public function
    once."""
    from conftest import HostBackedCudaArray
    from lsa_native.train import objectives

    obj, src = _objective_problem(int(rng.integers(2**31)), 2, True, "wishart", np.float64)
    n = obj.parts["W_pv"]
    call = objectives._separate_kq(np.zeros(n), np.zeros(n))
    params = [np.zeros(obj.parts[k]) for k in ("W_pv", "W_k", "W_q")]
    grads = [np.zeros_like(a) for a in params]
    params[1] = HostBackedCudaArray(params[1])
    with pytest.raises(ValueError, match="one device.*W_k CUDA, W_q host"):
        call(lambda *args: 0.0, params, 0, grads)
    calls = {"merge_kq": 0, "chain_kq": 0}
    for name in calls:
        public = getattr(mh, name)

        def counted(*args, _public=public, _name=name, **kw):
            calls[_name] += 1
            return _public(*args, **kw)
        monkeypatch.setattr(mh, name, counted)
    step_fn, theta = obj.bind(src), obj.theta0.copy()
    for t in range(6):
        step_fn(theta, t)
    assert calls == {"merge_kq": 1, "chain_kq": 1}
