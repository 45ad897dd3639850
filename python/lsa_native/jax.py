"""JAX wrappers over the native kernels: ``jax.custom_vjp`` functions whose forward and backward
run the native CPU code through ``jax.pure_callback`` (so they work under ``jax.jit`` and
``jax.grad``; ``jax.vmap`` runs the callback once per mapped element). float32, or float64 with
``jax_enable_x64``; all inputs one dtype.

- :func:`lsa_forward` (E, W_pv, W_kq) → F [ZFB (3.3)]; backward: the native ``lsa.vjp``.
- :func:`lsa_predict` (E, W_pv, W_kq) → ŷ [B] [ZFB (3.6)]; backward: ``lsa.predict_vjp``.
- :func:`multihead_lsa_forward`, :func:`multihead_lsa_predict` (E, W_pv, W_kq [H, d+1, d+1]) → the
  H-head F = E + Σ_h W^PV_h E (Eᵀ W^KQ_h E)/N and its ŷ; backward: ``multihead.vjp`` /
  ``multihead.predict_vjp`` (separate key/query: pass W_kq = W_kᵀ W_q formed with jnp ops).
- :func:`kernel_attention` (Z0, V, B, C, activation) → Z_L of CCS (3); the backward runs the
  native VJP that recomputes the forward per prompt (a saved context would have to be copied
  into a JAX buffer and back, and is not faster on CPU: see ``lsa_native.torch``).
- :func:`kernel_attention_predict` (Z0, V, B, C, activation) → ŷ = −Z_L[:, d, n] [B] (CCS (4));
  backward: the native ``kernel_attention.predict_vjp`` (the last layer's query column alone).

The callbacks copy between JAX and numpy buffers where JAX requires it (outputs are handed to
JAX as new arrays). Higher-order derivatives are not supported (the VJPs are not differentiable:
JAX raises when differentiating the callback).

Argument errors: types, dtypes and shapes (static under ``jax.jit``) are checked before the
callback, as TypeError/ValueError naming the argument. Values (NaN/inf inputs, overflow) are only
known inside the callback: there the native ValueError/FloatingPointError reaches the caller
wrapped by JAX (``JaxRuntimeError``, the message naming the argument) under ``jax.jit``/
``jax.grad``; an eager call (concrete arrays) runs the native function directly and raises it
unwrapped.
"""
from __future__ import annotations

import jax
import numpy as np

from . import kernel_attention as _ka
from . import lsa as _lsa
from . import multihead as _mh
from .lsa import predict_vjp as _predict_vjp

__all__ = ["lsa_forward", "lsa_predict", "multihead_lsa_forward", "multihead_lsa_predict",
           "kernel_attention", "kernel_attention_predict"]


def _spec(shape, dtype):
    return jax.ShapeDtypeStruct(tuple(shape), dtype)


def _call(fn, out, *args):
    return jax.pure_callback(fn, out, *args, vmap_method="sequential")


def _check_dtypes(names, arrays):
    for n, a in zip(names, arrays):
        if not (hasattr(a, "dtype") and hasattr(a, "shape")):
            raise TypeError(f"{n}: expected a JAX or numpy array, got {type(a).__name__}")
    dt = arrays[0].dtype
    if dt not in (np.float32, np.float64):
        raise TypeError(f"{names[0]}: expected float32 or float64, got {dt}")
    for n, a in zip(names[1:], arrays[1:]):
        if a.dtype != dt:
            raise TypeError(f"{n}: expected dtype {dt} (the dtype of {names[0]}), got {a.dtype}")


def _check_shape(name: str, a, shape: tuple) -> None:
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(a.shape)}")


def _check_prompts(name: str, a) -> int:
    """d+1 of prompts [B, d+1, N+1] (B, d, N >= 1): the native shape rules, before the callback."""
    if len(a.shape) != 3 or a.shape[0] < 1 or a.shape[1] < 2 or a.shape[2] < 2:
        raise ValueError(f"{name}: expected a 3-d array [B, d+1, N+1] with B, d, N >= 1, got shape "
                         f"{tuple(a.shape)}")
    return a.shape[1]


def _check_lsa(E, W_pv, W_kq) -> None:
    _check_dtypes(("E", "W_pv", "W_kq"), (E, W_pv, W_kq))
    r = _check_prompts("E", E)
    _check_shape("W_pv", W_pv, (r, r))
    _check_shape("W_kq", W_kq, (r, r))


def _concrete(*arrays) -> bool:
    """True outside tracing (no jit / grad / vmap): the native call then runs directly, so its
    errors reach the caller as themselves, not wrapped by the callback."""
    return not any(isinstance(a, jax.core.Tracer) for a in arrays)


# --- LSA ---------------------------------------------------------------------------------------

def _native_vjp_function(name, forward, vjp, out_shape):
    """A custom_vjp `name`(E, W_pv, W_kq) running `forward` and, for the upstream u, `vjp`(E, W_pv,
    W_kq, u) → (dW_pv, dW_kq, dE) in callbacks; out_shape(E) is the output's shape."""

    def f(E, W_pv, W_kq):
        return _call(forward, _spec(out_shape(E), E.dtype), E, W_pv, W_kq)

    f.__name__ = f.__qualname__ = name  # the name jaxprs show
    f = jax.custom_vjp(f)

    def bwd(res, up):
        E, W_pv, W_kq = res
        out = (_spec(W_pv.shape, E.dtype), _spec(W_kq.shape, E.dtype), _spec(E.shape, E.dtype))
        d_W_pv, d_W_kq, d_E = _call(vjp, out, E, W_pv, W_kq, up)
        return d_E, d_W_pv, d_W_kq

    f.defvjp(lambda E, W_pv, W_kq: (f(E, W_pv, W_kq), (E, W_pv, W_kq)), bwd)
    return f


def _run(check, native, traced, E, W_pv, W_kq):
    """check(E, W_pv, W_kq) once; then the native call directly on concrete arrays (its errors
    reach the caller as themselves), or the custom_vjp `traced` under jit / grad / vmap."""
    check(E, W_pv, W_kq)
    if _concrete(E, W_pv, W_kq):
        return jax.numpy.asarray(native(*map(np.asarray, (E, W_pv, W_kq))))
    return traced(E, W_pv, W_kq)


_lsa_forward = _native_vjp_function("_lsa_forward", _lsa.forward, _lsa.vjp, lambda E: E.shape)
_lsa_predict = _native_vjp_function("_lsa_predict", _lsa.predict, _predict_vjp,
                                    lambda E: E.shape[:1])


def lsa_forward(E, W_pv, W_kq):
    """F = E + W^PV E (Eᵀ W^KQ E)/N [ZFB (3.3)] for E [B, d+1, N+1], W [d+1, d+1]."""
    return _run(_check_lsa, _lsa.forward, _lsa_forward, E, W_pv, W_kq)


def lsa_predict(E, W_pv, W_kq):
    """ŷ = F[:, d, N] [ZFB (3.6)], shape [B]."""
    return _run(_check_lsa, _lsa.predict, _lsa_predict, E, W_pv, W_kq)


# --- multi-head LSA ---------------------------------------------------------------------------

def _check_multihead(E, W_pv, W_kq) -> None:
    _check_dtypes(("E", "W_pv", "W_kq"), (E, W_pv, W_kq))
    r = _check_prompts("E", E)
    if len(W_pv.shape) != 3 or W_pv.shape[0] < 1:
        raise ValueError(f"W_pv: expected shape (H, {r}, {r}) with H >= 1, got {tuple(W_pv.shape)}")
    _check_shape("W_pv", W_pv, (W_pv.shape[0], r, r))
    _check_shape("W_kq", W_kq, W_pv.shape)


_multihead_forward = _native_vjp_function("_multihead_forward", _mh.forward, _mh.vjp,
                                          lambda E: E.shape)
_multihead_predict = _native_vjp_function("_multihead_predict", _mh.predict, _mh.predict_vjp,
                                          lambda E: E.shape[:1])


def multihead_lsa_forward(E, W_pv, W_kq):
    """F = E + Σ_h W^PV_h E (Eᵀ W^KQ_h E)/N for E [B, d+1, N+1], W_pv, W_kq [H, d+1, d+1]."""
    return _run(_check_multihead, _mh.forward, _multihead_forward, E, W_pv, W_kq)


def multihead_lsa_predict(E, W_pv, W_kq):
    """ŷ = F[:, d, N] = E[:, d, N] + Σ_h p_hᵀ G q_h, shape [B]."""
    return _run(_check_multihead, _mh.predict, _multihead_predict, E, W_pv, W_kq)


# --- kernel attention ----------------------------------------------------------------------------

def _ka_vjp_function(name, forward, vjp, out_shape):
    """A custom_vjp `name`(names, Z0, V, B, C) (names: the activations, static) running
    `forward`(Z0, V, B, C, names) and, for the upstream u, `vjp`(Z0, V, B, C, names, u) →
    (dV, dB, dC, dZ0) in callbacks; out_shape(Z0) is the output's shape."""

    def f(names, Z0, V, B, C):
        return _call(lambda *a: forward(*a, list(names)), _spec(out_shape(Z0), Z0.dtype),
                     Z0, V, B, C)

    f.__name__ = f.__qualname__ = name  # the name jaxprs show
    f = jax.custom_vjp(f, nondiff_argnums=(0,))

    def bwd(names, res, up):
        Z0, V, B, C = res

        def run(Z0, V, B, C, up):
            dV, dB, dC, dZ0 = vjp(Z0, V, B, C, list(names), up)
            return dZ0, dV, dB, dC

        return _call(run, tuple(_spec(a.shape, Z0.dtype) for a in res), Z0, V, B, C, up)

    f.defvjp(lambda names, Z0, V, B, C: (f(names, Z0, V, B, C), (Z0, V, B, C)), bwd)
    return f


_kernel_attention = _ka_vjp_function("_kernel_attention", _ka.forward, _ka.vjp,
                                     lambda Z0: Z0.shape)
_kernel_attention_predict = _ka_vjp_function("_kernel_attention_predict", _ka.predict,
                                             _ka.predict_vjp, lambda Z0: Z0.shape[:1])


def _ka_run(native, traced, Z0, V, B, C, activation):
    """The shape, dtype and activation checks once; then the native call directly on concrete
    arrays, or the custom_vjp `traced` under jit / grad / vmap (as _run)."""
    _check_dtypes(("Z0", "V", "B", "C"), (Z0, V, B, C))
    r = _check_prompts("Z0", Z0)
    if len(V.shape) != 4:
        raise ValueError(f"V: expected shape [L, H, d+1, d+1], got {tuple(V.shape)}")
    L, H = V.shape[:2]
    _check_shape("V", V, (L, H, r, r))
    _check_shape("B", B, (L, H, r - 1, r - 1))
    _check_shape("C", C, (L, H, r - 1, r - 1))
    _ka._activation_codes(activation, H)  # TypeError/ValueError naming it
    names = (activation,) * H if isinstance(activation, str) else tuple(activation)
    if _concrete(Z0, V, B, C):
        return jax.numpy.asarray(native(*map(np.asarray, (Z0, V, B, C)), list(names)))
    return traced(names, Z0, V, B, C)


def kernel_attention(Z0, V, B, C, activation="softmax"):
    """Z_L of CCS (3) for Z0 [B, d+1, n+1], V [L, H, d+1, d+1], B, C [L, H, d, d]; ``activation``
    one name or H names (static). Differentiable in Z0, V, B, C. CCS's prediction is −Z_L[:, d, n]
    (:func:`kernel_attention_predict` computes it alone)."""
    return _ka_run(_ka.forward, _kernel_attention, Z0, V, B, C, activation)


def kernel_attention_predict(Z0, V, B, C, activation="softmax"):
    """CCS's prediction ŷ = −Z_L[:, d, n] [B] (4) of the model of :func:`kernel_attention`;
    differentiable in Z0, V, B, C. The native ``predict`` and ``predict_vjp`` compute the last
    layer's query column alone, so it is cheaper than ``-kernel_attention(...)[:, -1, -1]``."""
    return _ka_run(_ka.predict, _kernel_attention_predict, Z0, V, B, C, activation)
