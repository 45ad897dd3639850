"""Issue 23, family 7: the torch and JAX wrappers refuse bad arguments with TypeError/ValueError
naming them (numpy scalars accepted), before any native call."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
from lsa_native import torch as lt  # noqa: E402


def _ka_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, 4, 5, generator=g), 0.2 * torch.randn(1, 1, 4, 4, generator=g),
            0.2 * torch.randn(1, 1, 3, 3, generator=g), 0.2 * torch.randn(1, 1, 3, 3, generator=g))


@pytest.mark.parametrize("sigma", [np.float32(0.1), np.float64(0.1), 0.1, 1])
def test_sigma_accepts_numpy_scalars(sigma):
    m = lt.LinearSelfAttention(3, sigma=sigma, seed=0)
    assert float(m.W_pv.detach()[-1, -1]) == pytest.approx(float(sigma), rel=1e-6)


@pytest.mark.parametrize("kwargs, error, name", [
    (dict(sigma="a"), TypeError, "sigma"), (dict(sigma=True), TypeError, "sigma"),
    (dict(sigma=-1.0), ValueError, "sigma"), (dict(seed="a"), TypeError, "seed"),
    (dict(dtype=torch.int32), TypeError, "dtype"), (dict(output="x"), ValueError, "output"),
])
def test_linear_self_attention_arguments(kwargs, error, name):
    with pytest.raises(error, match=f"^{name}:"):
        lt.LinearSelfAttention(3, **kwargs)


@pytest.mark.parametrize("activation", [None, 3, ["exp", 1]])
def test_kernel_attention_activation_named(activation):
    with pytest.raises((TypeError, ValueError), match="^activation:"):
        lt.kernel_attention(*_ka_inputs(), activation)


@pytest.mark.parametrize("k, name", [(0, "Z0"), (1, "V"), (2, "B"), (3, "C")])
def test_kernel_attention_numpy_operand_named(k, name):
    args = list(_ka_inputs())
    args[k] = args[k].numpy()
    with pytest.raises(TypeError, match=f"^{name}: expected a torch.Tensor"):
        lt.kernel_attention(*args)


def test_sparse_value_arguments():
    A, r = torch.zeros(1, 1, 3, 3), torch.zeros(1, 1)
    with pytest.raises(TypeError, match="^A: expected a torch.Tensor"):
        lt.sparse_value(A.numpy(), r.numpy())
    with pytest.raises(TypeError, match="^r:"):
        lt.sparse_value(A, r.double())
    with pytest.raises(ValueError, match="^r: contains non-finite"):
        lt.sparse_value(A, r * float("nan"))
    V = lt.sparse_value(A + 1, r + 2)
    assert V.shape == (1, 1, 4, 4) and float(V[0, 0, 3, 3]) == 2 and float(V[0, 0, 3, 0]) == 0


def test_kernel_attention_module_flags():
    with pytest.raises(TypeError, match="^sparse:"):
        lt.KernelAttention(3, 1, sparse="yes")
    with pytest.raises(TypeError, match="^save_context:"):
        lt.KernelAttention(3, 1, save_context=None)


def test_jax_wrapper_checks_before_the_callback():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from lsa_native import jax as lj

    E = jnp.asarray(np.random.default_rng(0).standard_normal((2, 3, 4)), jnp.float32)
    W = jnp.eye(3, dtype=jnp.float32)
    with pytest.raises(TypeError, match="^E: expected a JAX or numpy array"):
        lj.lsa_predict("abc", W, W)
    with pytest.raises(ValueError, match=r"^W_pv: expected shape \(3, 3\)"):
        lj.lsa_predict(E, jnp.eye(4, dtype=jnp.float32), W)
    with pytest.raises(ValueError, match="^E: contains non-finite"):  # eager: the native error itself
        lj.lsa_predict(E * jnp.nan, W, W)
    Z0 = jnp.ones((2, 4, 5), jnp.float32)
    V, B = jnp.zeros((1, 1, 4, 4), jnp.float32), jnp.zeros((1, 1, 3, 3), jnp.float32)
    with pytest.raises(TypeError, match="^activation:"):
        lj.kernel_attention(Z0, V, B, B, None)
    # eager and traced calls agree
    eager = lj.lsa_predict(E, W, W)
    np.testing.assert_allclose(jax.jit(lj.lsa_predict)(E, W, W), eager, rtol=1e-6)
    g = jax.grad(lambda w: lj.lsa_predict(E, w, W).sum())(W)
    assert g.shape == (3, 3)
