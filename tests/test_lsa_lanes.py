"""The small-d LSA kernels with the prompts in SIMD lanes (d ≤ 8: predict, loss_and_grad and
predict_vjp, cpu/lsa_kernels.inl `prompts_in_lanes`; the backward Gram-first at the smallest d)
vs the numpy reference: every tail
of a lane group (B mod 8 and B mod 4: float32 and float64 groups), batches of one chunk and more, d
= 1, N = 1 and N + 1 below, at and above a vector, d = 8 (the largest in lanes) and d = 9 (the first
on the token-lane path), both sides of each kernel's limit on N. Same rounding bounds as tests/test_lsa.py."""
from __future__ import annotations

import numpy as np
import pytest

from lsa_native import lsa
from lsa_native.reference import lsa as ref
from conftest import assert_within_probable_rounding
from test_lsa import DTYPES, n_ops, random_problem

# B: 1 .. 9 (every tail of a float32 group of 8 and a float64 group of 4), 17, 129 (a chunk of 128
# and one more prompt), 263.
BATCHES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 129, 263)
SHAPES = [(B, d, N) for B in BATCHES for d, N in ((5, 20),)] + [
    (3, 1, 1), (11, 1, 2), (13, 2, 7), (6, 3, 8), (21, 4, 15), (10, 7, 1), (19, 8, 33), (12, 9, 20),
    # the Gram-first backward (d + 1 <= kGramMaxRows = 6) and the token pass just above it: group
    # tails at d = 2, and d = 4, 6
    (1, 2, 20), (5, 2, 20), (9, 2, 20), (7, 4, 20), (3, 4, 1), (14, 6, 12), (5, 6, 20),
    # both sides of each kernel's token limit (N + 1 = 24, 48: kLanesMaxTokens*)
    (13, 5, 23), (13, 5, 24), (13, 5, 47), (13, 5, 48),
]


def _magnitudes(E64, y64, P64, K64):
    return ref.loss_and_grad_tokens(np.abs(E64), -np.abs(y64), np.abs(P64), np.abs(K64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,d,N", SHAPES)
def test_lane_kernels_match_reference(rng, B, d, N, dtype):
    slot_zero = B % 2 == 0  # the query's label slot 0 (ZFB (3.4)) or not
    (E, W_pv, W_kq, y_q), (E64, P64, K64, y64) = random_problem(rng, B, d, N, dtype, slot_zero)
    ops = n_ops(d, N)
    y_abs = ref.predict_tokens(np.abs(E64), np.abs(P64), np.abs(K64))
    assert_within_probable_rounding(lsa.predict(E, W_pv, W_kq), ref.predict_naive(E64, P64, K64), y_abs,
                                    ops, dtype, "predict")
    loss, g_pv, g_kq, y_hat = lsa.loss_and_grad(E, y_q, W_pv, W_kq, return_predictions=True)
    want = ref.loss_and_grad_tokens(E64, y64, P64, K64)
    for name, got, w, m in zip(("loss", "dW_pv", "dW_kq"), (loss, g_pv, g_kq), want,
                               _magnitudes(E64, y64, P64, K64)):
        assert_within_probable_rounding(got, w, m, ops, dtype, name)
    assert_within_probable_rounding(y_hat, ref.predict_naive(E64, P64, K64), y_abs, ops, dtype, "y_hat")
    # predict_vjp with and without dE: the upstream gradient y_q in place of the residual.
    d_W = lsa.predict_vjp(E, W_pv, W_kq, y_q, with_input_grad=False)
    with_dE = lsa.predict_vjp(E, W_pv, W_kq, y_q)
    want = ref.predict_vjp_tokens(E64, P64, K64, y64)
    mags = ref.predict_vjp_tokens(np.abs(E64), np.abs(P64), np.abs(K64), np.abs(y64))
    for name, got, other, w, m in zip(("dW_pv", "dW_kq"), d_W, with_dE, want, mags):
        assert got.dtype == dtype
        assert_within_probable_rounding(got, w, m, ops, dtype, name)
        assert_within_probable_rounding(other, w, m, ops, dtype, name + " (with dE)")
    assert d_W[2] is None and with_dE[2].shape == E.shape
    assert_within_probable_rounding(with_dE[2], want[2], mags[2], ops, dtype, "dE")
    assert np.all(g_pv[:d] == 0) and np.all(d_W[0][:d] == 0)
    if slot_zero:  # exact zeros where the parameters do not affect ŷ (SPEC 3.2)
        assert np.all(g_kq[:, d] == 0) and np.all(d_W[1][:, d] == 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lane_kernels_read_only_their_prompts(rng, dtype):
    """A non-finite value in a prompt is reported once it enters an output, and only for the calls
    that read that prompt: the lanes past a group's last prompt never read beyond the batch."""
    (E, W_pv, W_kq, y_q), _ = random_problem(rng, 11, 5, 20, dtype)
    full = lsa.predict(E, W_pv, W_kq)
    E_bad = E.copy()
    E_bad[10, 2, 3] = np.nan
    np.testing.assert_array_equal(lsa.predict(E_bad[:10], W_pv, W_kq), full[:10])
    with pytest.raises(ValueError, match="non-finite"):
        lsa.predict(E_bad, W_pv, W_kq)
    with pytest.raises(ValueError, match="non-finite"):
        lsa.loss_and_grad(E_bad, y_q, W_pv, W_kq)
