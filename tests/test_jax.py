"""lsa_native.jax: jax.grad (under jax.jit) of the custom_vjp wrappers equals the numpy reference
gradients, float32 and float64, every activation; vmap; argument errors."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="JAX is not installed")
jax.config.update("jax_enable_x64", True)  # float64 tests; float32 inputs stay float32

import jax.numpy as jnp  # noqa: E402

import lsa_native.jax as lj  # noqa: E402
from lsa_native import kernel_attention as ka  # noqa: E402
from lsa_native.reference import kernel_attention as ka_ref  # noqa: E402
from lsa_native.reference import lsa as lsa_ref  # noqa: E402

from conftest import assert_within_probable_rounding, conditioned_tolerance, rounded  # noqa: E402
from test_kernel_attention import bounded, relative_conditions  # noqa: E402
from test_lsa import n_ops as lsa_ops  # noqa: E402

ACTS = list(ka.ACTIVATIONS)
TOL = {np.float64: 1e-11, np.float32: 2e-4}  # relative to the largest entry


def rel_err(a, b):
    return np.abs(np.asarray(a, np.float64) - b).max() / max(np.abs(b).max(), 1e-30)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("B,d,N", [(1, 1, 1), (4, 5, 17)])
def test_lsa_grad_matches_reference(rng, dtype, B, d, N):
    """Entrywise within the forward-error bound of the sums of products (conftest), as
    tests/test_lsa.py: the references run in float64 on the same dtype-rounded inputs, the bound
    scales with each expression evaluated on absolute values. (The former bound relative to the
    largest entry failed when an output was a small sum of large terms: ŷ at B = d = N = 1 in
    float32, at LSA_TEST_SEED = 959, 15061, 16237 of 0…16237 and in 4 of 20000 draws, ~2e-4 per
    run; test_lsa_predict_vjp's did once in CI.) Measured: worst error/bound 0.044 over 20000 draws
    of each small case, 0.036 over 5000 of each large; dW_pv and dW_kq swapped, or dW_kq
    transposed, exceed it in every draw (ratio >= 1e4 in the worst of 2000)."""
    low, (E, W_pv, W_kq, G, g_y) = rounded(
        dtype, rng.standard_normal((B, d + 1, N + 1)), *rng.standard_normal((2, d + 1, d + 1)),
        rng.standard_normal((B, d + 1, N + 1)), rng.standard_normal(B))
    args = [jnp.asarray(a) for a in low[:3]]
    absolute = [np.abs(a) for a in (E, W_pv, W_kq)]
    # Longest rounding chain: test_lsa's vjp chain plus the batch sum of dW.
    ops = lsa_ops(d, N) + 4 * d + 10 + B

    def check(got, want, magnitude, what):
        assert got.dtype == dtype
        assert_within_probable_rounding(got, want, magnitude, ops, dtype, what)

    def check_vjp(grads, upstream, what):  # jax's (dE, dW_pv, dW_kq) against vjp_naive's order
        want = lsa_ref.vjp_naive(E, W_pv, W_kq, upstream)
        magnitude = lsa_ref.vjp_naive(*absolute, np.abs(upstream))
        for g, k, name in zip(grads, (2, 0, 1), ("dE", "dW_pv", "dW_kq")):
            check(g, want[k], magnitude[k], what + name)

    F = jax.jit(lj.lsa_forward)(*args)
    check(F, lsa_ref.forward_naive(E, W_pv, W_kq), lsa_ref.forward_naive(*absolute), "F")
    f = jax.jit(jax.grad(lambda *a: jnp.sum(jnp.asarray(low[3]) * lj.lsa_forward(*a)),
                         argnums=(0, 1, 2)))
    check_vjp(f(*args), G, "")
    p = jax.jit(jax.grad(lambda *a: jnp.sum(jnp.asarray(low[4]) * lj.lsa_predict(*a)),
                         argnums=(0, 1, 2)))
    d_F = np.zeros_like(E)
    d_F[:, d, N] = g_y
    check_vjp(p(*args), d_F, "predict ")
    check(lj.lsa_predict(*args), lsa_ref.predict_naive(E, W_pv, W_kq),
          lsa_ref.predict_naive(*absolute), "predict")


@pytest.mark.parametrize("output", ["full", "prediction"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(3, 1, 1, 1, 1), (3, 3, 6, 2, 2), (9, 2, 5, 2, 1)])
@pytest.mark.parametrize("act", ACTS)
def test_kernel_attention_grad_matches_reference(rng, act, shape, dtype, output):
    """kernel_attention (Z_L) or kernel_attention_predict (ŷ = −Z_L[:, d, n], CCS (4)) and its
    gradient under jit(grad) vs the reference forward and VJP (for the prediction: its
    predict_vjp); 9 prompts run the native lane path's whole groups and remainder."""
    Bsz, d, n, L, H = shape
    acts = [act] if H == 1 else [act, ACTS[(ACTS.index(act) + 2) % 4]]
    # Redraw while the float64 output is large (test_kernel_attention.bounded): two exp layers
    # occasionally reach 1e100+ (about 1 draw in 200 overflowed float32 and raised), where a float32
    # comparison says nothing; rarer draws overflow float64 itself (a CI-type failure at
    # LSA_TEST_SEED=828501689), which bounded reads as "large".
    Z0, V, B, C = bounded(lambda: (rng.standard_normal((Bsz, d + 1, n + 1)),
                                   0.3 / n * rng.standard_normal((L, H, d + 1, d + 1)),
                                   *(0.3 * rng.standard_normal((2, L, H, d, d)))), acts)
    fn, want, ref_vjp = lj.kernel_attention, ka_ref.forward(Z0, V, B, C, acts)[0], ka_ref.vjp
    if output == "prediction":
        fn, want, ref_vjp = lj.kernel_attention_predict, -want[:, d, n], ka_ref.predict_vjp
    u = rng.standard_normal(want.shape)  # the upstream of the output
    args = [jnp.asarray(a, dtype) for a in (Z0, V, B, C)]
    out = fn(*args, acts)
    assert out.dtype == dtype and out.shape == want.shape and rel_err(out, want) < TOL[dtype]
    loss = lambda *a: jnp.sum(jnp.asarray(u, dtype) * fn(*a, acts))
    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(*args)
    dV, dB, dC, dZ0 = ref_vjp(Z0, V, B, C, acts, u)
    # max(TOL, 100·κ·u) for a gradient with relative condition κ (conftest.conditioned_tolerance):
    # the same native float32 core and problem law as tests/test_torch.py's
    # test_kernel_attention_matches_references, where the fixed TOL failed 1 of 5000 seeds.
    kappa_V, kappa_B, kappa_C, kappa_Z0 = relative_conditions(
        lambda *a: ref_vjp(*a, acts, u), (Z0, V, B, C), (dV, dB, dC, dZ0), rng)
    for name, g, w, kappa in zip("Z0 V B C".split(), grads, (dZ0, dV, dB, dC),
                                 (kappa_Z0, kappa_V, kappa_B, kappa_C)):
        if np.abs(w).max() == 0:  # softmax over one source is constant
            assert np.abs(np.asarray(g)).max() == 0, name
        else:
            tol = conditioned_tolerance(TOL[dtype], kappa, dtype)
            assert rel_err(g, w) < tol, (name, rel_err(g, w), kappa)


def test_vmap_and_errors(rng):
    E = jnp.asarray(rng.standard_normal((2, 3, 3, 5)))
    W = jnp.asarray(rng.standard_normal((3, 3)))
    y = jax.vmap(lambda e: lj.lsa_predict(e, W, W))(E)
    np.testing.assert_allclose(y[1], lj.lsa_predict(E[1], W, W), rtol=1e-14)
    with pytest.raises(TypeError, match="W_pv"):
        lj.lsa_predict(E[0], W.astype(jnp.float32), W)
    with pytest.raises(ValueError, match="activation"):
        lj.kernel_attention(E[0], jnp.zeros((1, 2, 3, 3)), jnp.zeros((1, 2, 2, 2)),
                            jnp.zeros((1, 2, 2, 2)), ["exp"])
