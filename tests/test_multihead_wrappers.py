"""The torch and JAX wrappers of the H-head LSA (lsa_native.torch / lsa_native.jax): gradients vs
the numpy reference's hand-written VJPs and vs autograd's finite differences (float64), the
separate parametrization chained by autograd, bad input."""
from __future__ import annotations

import numpy as np
import pytest

from lsa_native.reference import multihead as ref

torch = pytest.importorskip("torch")
lt = pytest.importorskip("lsa_native.torch")


def _draw(rng, B=4, d=3, N=6, H=3):
    E = rng.standard_normal((B, d + 1, N + 1))
    W_pv, W_kq = rng.standard_normal((2, H, d + 1, d + 1))
    return E, W_pv, W_kq


@pytest.mark.parametrize("output", ["prediction", "full"])
def test_torch_matches_reference(rng, output):
    E, W_pv, W_kq = _draw(rng)
    up = rng.standard_normal(E.shape[:1] if output == "prediction" else E.shape)
    Et, Wp, Wk = (torch.tensor(a, requires_grad=True) for a in (E, W_pv, W_kq))
    fn = lt.multihead_lsa_predict if output == "prediction" else lt.multihead_lsa_forward
    out = fn(Et, Wp, Wk)
    want_out = ref.predict(E, W_pv, W_kq) if output == "prediction" else ref.forward(E, W_pv, W_kq)
    np.testing.assert_allclose(out.detach().numpy(), want_out, rtol=1e-12, atol=1e-12)
    (out * torch.tensor(up)).sum().backward()
    want = (ref.predict_vjp if output == "prediction" else ref.vjp)(E, W_pv, W_kq, up)
    for got, w in zip((Wp.grad, Wk.grad, Et.grad), want):
        np.testing.assert_allclose(got.numpy(), w, rtol=1e-11, atol=1e-11)
    assert torch.autograd.gradcheck(fn, (Et, Wp, Wk))


def test_torch_module_separate(rng):
    m = lt.MultiHeadLinearSelfAttention(3, 2, rank=1, dtype=torch.float64, seed=int(rng.integers(100)))
    assert m.W_k.shape == (2, 1, 4) and m.W_q.shape == (2, 1, 4) and m.W_pv.shape == (2, 4, 4)
    E = torch.tensor(rng.standard_normal((5, 4, 8)))
    np.testing.assert_allclose(
        m(E).detach().numpy(),
        ref.predict(E.numpy(), m.W_pv.detach().numpy(),
                    ref.merge_kq(m.W_k.detach().numpy(), m.W_q.detach().numpy())), rtol=1e-12)
    (m(E) ** 2).sum().backward()
    assert m.W_k.grad is not None and m.W_q.grad is not None
    merged = lt.MultiHeadLinearSelfAttention(3, 2, output="full", dtype=torch.float64)
    assert merged.W_kq.shape == (2, 4, 4) and merged(E).shape == E.shape
    with pytest.raises(ValueError, match="rank"):
        lt.MultiHeadLinearSelfAttention(3, 2, rank=5)
    with pytest.raises(ValueError, match="heads"):
        lt.MultiHeadLinearSelfAttention(3, 0)


def test_jax_matches_reference(rng):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import lsa_native.jax as lj

    E, W_pv, W_kq = _draw(rng)
    d_y = rng.standard_normal(E.shape[0])
    d_F = rng.standard_normal(E.shape)
    jax.config.update("jax_enable_x64", True)  # as tests/test_jax.py
    grads = jax.grad(lambda *a: jnp.dot(lj.multihead_lsa_predict(*a), d_y), argnums=(1, 2, 0))(
        E, W_pv, W_kq)
    for got, w in zip(grads, ref.predict_vjp(E, W_pv, W_kq, d_y)):
        np.testing.assert_allclose(np.asarray(got), w, rtol=1e-11, atol=1e-11)
    loss = jax.jit(lambda *a: jnp.sum(lj.multihead_lsa_forward(*a) * d_F))
    grads = jax.grad(loss, argnums=(1, 2, 0))(E, W_pv, W_kq)
    for got, w in zip(grads, ref.vjp(E, W_pv, W_kq, d_F)):
        np.testing.assert_allclose(np.asarray(got), w, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(np.asarray(lj.multihead_lsa_forward(E, W_pv, W_kq)),
                               ref.forward(E, W_pv, W_kq), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="W_kq: expected shape"):
        lj.multihead_lsa_predict(E, W_pv, W_kq[:2])
    with pytest.raises(ValueError, match="W_pv: expected shape"):
        lj.multihead_lsa_predict(E, W_pv[0], W_kq)
