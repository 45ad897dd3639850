"""VJP of the LSA prediction (native lsa_predict_vjp via lsa_native.lsa.predict_vjp): vs the
naive full-output VJP of the numpy reference with the upstream gradient on [d, N] only (and the
token-form reference vs the same), vs central differences of the native prediction; thread-count
independence."""
from __future__ import annotations

import numpy as np
import pytest

from lsa_native import lsa
from lsa_native.lsa import predict_vjp
from lsa_native.reference import lsa as ref

from conftest import assert_within_probable_rounding, rounded


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
# N + 1 tokens: fewer than a vector (staged), whole vectors only (7, 15: no partial last chunk in
# float32 or float64), and a partial last chunk (the rest).
@pytest.mark.parametrize("B,d,N", [(1, 1, 1), (5, 1, 9), (4, 6, 13), (3, 20, 40), (3, 2, 7), (2, 3, 15)])
@pytest.mark.parametrize("label_slot", [False, True])
def test_predict_vjp_matches_reference(rng, B, d, N, dtype, label_slot):
    """Entrywise within the forward-error bound of the sums of products: the reference runs in
    float64 on the same (dtype-rounded) inputs, and the bound scales with the VJP evaluated on
    absolute values, so cancellation in an entry cannot fail it (a bound relative to the largest
    entry did, once in CI, at B = d = N = 1 in float32)."""
    E = rng.standard_normal((B, d + 1, N + 1))
    if not label_slot:
        E[:, d, N] = 0  # prompts of ZFB (3.4)
    W_pv, W_kq = rng.standard_normal((2, d + 1, d + 1))
    g = rng.standard_normal(B)
    low, (E, W_pv, W_kq, g) = rounded(dtype, E, W_pv, W_kq, g)
    d_F = np.zeros_like(E)
    d_F[:, d, N] = g
    want = ref.vjp_naive(E, W_pv, W_kq, d_F)
    magnitude = ref.vjp_naive(np.abs(E), np.abs(W_pv), np.abs(W_kq), np.abs(d_F))
    got = predict_vjp(*low)
    # Longest chain: dW^KQ sums B prompts of products through N + 1 tokens and two (d + 1)-sums.
    n_ops = B + N + 2 * d + 6
    for name, a, w, m in zip(("dW_pv", "dW_kq", "dE"), got, want, magnitude):
        assert a.dtype == dtype and a.shape == w.shape
        assert_within_probable_rounding(a, w, m, n_ops, dtype, name)
    for name, a, w in zip(("dW_pv", "dW_kq", "dE"), ref.predict_vjp_tokens(E, W_pv, W_kq, g), want):
        assert np.abs(a - w).max() <= 1e-12 * np.abs(w).max(), ("token reference", name)
    assert predict_vjp(E, W_pv, W_kq, g, with_input_grad=False)[2] is None


def test_predict_vjp_matches_central_differences(rng):
    B, d, N = 3, 2, 5
    E = rng.standard_normal((B, d + 1, N + 1))
    W_pv, W_kq = rng.standard_normal((2, d + 1, d + 1))
    g = rng.standard_normal(B)
    f = lambda E_, P_, K_: float(g @ lsa.predict(E_, P_, K_))
    grads = predict_vjp(E, W_pv, W_kq, g)
    h = 1e-6
    for which, X in enumerate((W_pv, W_kq, E)):
        for idx in np.ndindex(X.shape):
            args_p, args_m = [W_pv, W_kq, E], [W_pv, W_kq, E]
            Xp, Xm = X.copy(), X.copy()
            Xp[idx] += h
            Xm[idx] -= h
            args_p[which], args_m[which] = Xp, Xm
            fd = (f(args_p[2], args_p[0], args_p[1]) - f(args_m[2], args_m[0], args_m[1])) / (2 * h)
            assert abs(grads[which][idx] - fd) <= 1e-7 * (1 + abs(fd)), (which, idx)


def test_predict_vjp_checks_d_y(rng):
    E = rng.standard_normal((3, 2, 4))
    W = np.eye(2)
    with pytest.raises(ValueError, match="d_y"):
        predict_vjp(E, W, W, np.ones(4))


def test_predict_vjp_does_not_depend_on_the_thread_count(rng):
    import lsa_native as ln

    E = rng.standard_normal((1000, 4, 9)).astype(np.float32)  # several chunks of prompts
    W_pv, W_kq = rng.standard_normal((2, 4, 4)).astype(np.float32)
    g = rng.standard_normal(1000).astype(np.float32)
    before = ln.num_threads()
    try:
        ln.set_num_threads(1)
        one = predict_vjp(E, W_pv, W_kq, g)
        ln.set_num_threads(2)
        two = predict_vjp(E, W_pv, W_kq, g)
    finally:
        ln.set_num_threads(before)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
