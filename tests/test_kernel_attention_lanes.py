"""Kernel attention's loss_and_grad with prompts in the vector lanes (kernel_attention_kernels.inl:
groups of 8 float / 4 double prompts, 16 / 8 on the AVX-512 table, the remainder on the per-prompt
path): native vs the numpy reference at batch sizes below, at and between whole groups, d = 1,
n = 1, L = 1..3, one and two heads, every activation, float32 and float64; the predictions output."""
from __future__ import annotations

import numpy as np
import pytest

from lsa_native import kernel_attention as ka
from lsa_native.reference import kernel_attention as ref

from conftest import conditioned_tolerance
from test_kernel_attention import ACTS, random_problem, rel_err, relative_conditions

# Batch sizes: fewer prompts than one group (per-prompt path only), whole groups of 4 / 8 / 16,
# whole groups and a remainder (both paths in one call).
SHAPES = [  # (B, d, n, L, H)
    (3, 2, 4, 2, 1), (8, 5, 30, 3, 1), (16, 1, 1, 1, 1), (21, 5, 7, 2, 2), (19, 1, 30, 3, 1),
    (13, 3, 1, 2, 2), (37, 5, 30, 1, 1),
]


# The rounding bound: per prompt the lane path sums the same terms as the per-prompt path in
# another order (each dot product left to right instead of the token tiles' lane tree), and the
# parameter gradients in double over prompts, so both stay within a few ulps of T per term of an
# n-term sum: float64 near 1e-15 relative, float32 near 1e-6; the tolerances leave room for the
# exp/softmax amplification, times each output's estimated condition number where above 1 (as in
# test_kernel_attention: a gradient entry at d = 1 can be a small sum of large terms).
@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-11), (np.float32, 2e-4)])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}_d{}_n{}_L{}_H{}".format(*s))
@pytest.mark.parametrize("act", ACTS)
def test_lane_groups_match_reference(rng, act, shape, dtype, tol):
    Bsz, d, n, L, H = shape
    Z0, y, V, B, C = random_problem(rng, Bsz, d, n, L, H, dtype)
    acts = [act] * H if H == 1 else [act, ACTS[(ACTS.index(act) + 1) % len(ACTS)]]
    args64 = [a.astype(np.float64) for a in (Z0, y, V, B, C)]
    reference = lambda *a: ref.loss_and_grad(*a, acts)  # noqa: E731
    want = reference(*args64)
    kappa = relative_conditions(reference, args64, want, rng)
    got = ka.loss_and_grad(Z0, y, V, B, C, acts, input_grad=True, return_predictions=True)
    for name, g, w, k in zip(("loss", "dV", "dB", "dC", "dZ0"), got, want, kappa):
        if name != "loss":  # the loss is a Python float
            assert g.dtype == dtype, name
        assert rel_err(g, w) < conditioned_tolerance(tol, k, dtype), (name, rel_err(g, w), k)
    _, preds_ref = ref.forward(*[args64[i] for i in (0, 2, 3, 4)], acts)
    preds = got[-1]
    assert preds.shape == (Bsz, L + 1)
    np.testing.assert_array_equal(preds[:, 0], Z0[:, d, n])  # TF_0 is the input's query label
    assert rel_err(preds, preds_ref) < tol


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lane_groups_report_non_finite_outputs(rng, dtype):
    """A prompt inside a whole group whose logits overflow exp: the error names the output."""
    Z0, y, V, B, C = random_problem(rng, 16, 3, 5, 2, 1, dtype)
    Z0[5, :3] *= 1e3
    with pytest.raises(Exception, match="non-finite|NaN|inf"):
        ka.loss_and_grad(Z0, y, V, B, C, "exp", input_grad=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}_d{}_n{}_L{}_H{}".format(*s))
def test_parameter_gradients_do_not_depend_on_input_grad(rng, shape, dtype):
    """Without input_grad, layer 0's backward skips the terms of dZ_0 (loss_and_grad and vjp, lanes
    and per-prompt paths): the loss and parameter gradients stay bitwise those with it."""
    Bsz, d, n, L, H = shape
    Z0, y, V, B, C = random_problem(rng, Bsz, d, n, L, H, dtype)
    dZ = rng.standard_normal(Z0.shape).astype(dtype)
    for act in ACTS:
        acts = [act] * H
        with_dz = ka.loss_and_grad(Z0, y, V, B, C, acts, input_grad=True)
        without = ka.loss_and_grad(Z0, y, V, B, C, acts)
        assert len(without) == 4 and len(with_dz) == 5
        for name, g, w in zip(("loss", "dV", "dB", "dC"), without, with_dz):
            np.testing.assert_array_equal(g, w, err_msg=f"{act} loss_and_grad {name}")
        vjp_with = ka.vjp(Z0, V, B, C, acts, dZ, input_grad=True)
        vjp_without = ka.vjp(Z0, V, B, C, acts, dZ, input_grad=False)
        assert vjp_without[3] is None
        for name, g, w in zip(("dV", "dB", "dC"), vjp_without[:3], vjp_with[:3]):
            np.testing.assert_array_equal(g, w, err_msg=f"{act} vjp {name}")
