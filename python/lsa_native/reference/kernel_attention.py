"""numpy reference of multi-layer multi-head kernel attention [CCS (3), (5), (12)] with a
hand-written backward pass. Batched over prompts; float64 recommended.

Z0 [B, d+1, n+1]; V [L, H, d+1, d+1]; B, C [L, H, d, d]; activations: H names.

Conventions (the package's, SPEC 3.3, the same as the native core's, cpp/src/common/ka_recipe.hpp):
TF = Z_L[d, n] predicts −y_q [CCS (4)], so the prediction of y_q is ŷ = −TF (``forward`` returns
the TF_ℓ; ``lsa_native.kernel_attention.predict`` returns ŷ_ℓ = −TF_ℓ); the loss is ½·MSE,
f = (1/(2B)) Σ_b (TF_b + y_q,b)² — half of CCS (5), as ZFB (3.7) — with ∂f/∂TF_b = (TF_b + y_q,b)/B.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

__all__ = ["ACTIVATIONS", "activation_forward", "forward", "vjp", "predict_vjp", "loss_and_grad"]


def _softmax(S, n):
    """Column-wise softmax over the sources i < n (row n stays 0)."""
    Sm = S[:, :n, :]
    E = np.exp(Sm - Sm.max(axis=1, keepdims=True))
    H = np.zeros_like(S)
    H[:, :n, :] = E / E.sum(axis=1, keepdims=True)
    return H


class _Activation(NamedTuple):
    """h̃ [CCS (12)] on S [B, n+1, n+1] and its backward dS from (S, H = h̃(S), dH); row n (the
    query as a source) of either is overwritten with 0 by the caller."""
    forward: Callable[[np.ndarray, int], np.ndarray]
    backward: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


#: The activations by name, one entry per name of the native table (``_core.ACTIVATION_NAMES``,
#: cpp/include/lsa_native/kernel_attention.hpp; tests/test_kernel_attention.py checks the keys).
ACTIVATIONS = {
    "linear": _Activation(lambda S, n: S.copy(), lambda S, H, dH: dH.copy()),
    "relu": _Activation(lambda S, n: np.maximum(S, 0), lambda S, H, dH: dH * (S > 0)),
    "exp": _Activation(lambda S, n: np.exp(S), lambda S, H, dH: dH * H),
    # column-wise over sources: dS = H ∘ (dH − Σ_i H ∘ dH)
    "softmax": _Activation(_softmax, lambda S, H, dH: H * (dH - np.sum(H * dH, axis=1, keepdims=True))),
}


def _activation(name) -> _Activation:
    try:
        return ACTIVATIONS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown activation {name!r}") from None


def activation_forward(name, S, n):
    """h̃ on S [B, n+1, n+1] (rows: sources i, columns: targets j); row n (the query as a source)
    is zeroed, as the mask M discards it."""
    H = _activation(name).forward(S, n)
    H[:, n, :] = 0
    return H


def _activation_backward(name, S, H, dH, n):
    dS = _activation(name).backward(S, H, dH)
    dS[:, n, :] = 0
    return dS


def forward(Z0, V, B, C, activations, *, keep=False):
    """Z_L of (3) and the predictions TF_ℓ = Z_ℓ[d, n] for ℓ = 0..L [B, L+1]."""
    L, Hh = V.shape[:2]
    d = Z0.shape[1] - 1
    n = Z0.shape[2] - 1
    Z = Z0.copy()
    preds = [Z[:, d, n].copy()]
    saved = []
    for l in range(L):
        X = Z[:, :d, :]
        Znext = Z.copy()
        layer = []
        for s in range(Hh):
            U = B[l, s] @ X
            W = C[l, s] @ X
            S = np.swapaxes(U, 1, 2) @ W  # S_ij = u_i · w_j
            Hm = activation_forward(activations[s], S, n)
            Y = Z @ Hm  # Z M h̃ (row n of h̃ is 0)
            Znext = Znext + V[l, s] @ Y
            layer.append((U, W, S, Hm, Y))
        saved.append((Z, layer))
        Z = Znext
        preds.append(Z[:, d, n].copy())
    preds = np.stack(preds, axis=1)
    return (Z, preds, saved) if keep else (Z, preds)


def vjp(Z0, V, B, C, activations, d_Z_out):
    """VJP of Z_L = :func:`forward` for an arbitrary upstream d_Z_out = ∂ℓ/∂Z_L [B, d+1, n+1]:
    (dV, dB, dC, dZ0)."""
    _, _, saved = forward(Z0, V, B, C, activations, keep=True)
    return _backward(saved, V, B, C, activations, np.array(d_Z_out, dtype=np.result_type(Z0, d_Z_out)))


def predict_vjp(Z0, V, B, C, activations, d_y):
    """VJP of the predictions ŷ = −TF_L = −Z_L[:, d, n] [B] (4) for the upstream d_y = ∂ℓ/∂ŷ [B]:
    :func:`vjp` with d_Z_out = −d_y at [d, n] and 0 elsewhere; (dV, dB, dC, dZ0)."""
    d, n = Z0.shape[1] - 1, Z0.shape[2] - 1
    d_Z_out = np.zeros(Z0.shape, dtype=np.result_type(Z0, d_y))
    d_Z_out[:, d, n] = -np.asarray(d_y)
    return vjp(Z0, V, B, C, activations, d_Z_out)


def loss_and_grad(Z0, y_q, V, B, C, activations):
    """f = (1/(2B)) Σ (TF + y_q)² (½ × CCS (5): the package's loss convention, as ZFB (3.7)) and
    (dV, dB, dC, dZ0)."""
    Bsz = Z0.shape[0]
    d = Z0.shape[1] - 1
    n = Z0.shape[2] - 1
    Z, _, saved = forward(Z0, V, B, C, activations, keep=True)
    residual = Z[:, d, n] + y_q
    loss = float(0.5 * np.mean(residual**2))
    dZ = np.zeros_like(Z)
    dZ[:, d, n] = residual / Bsz
    return (loss,) + _backward(saved, V, B, C, activations, dZ)


def _backward(saved, V, B, C, activations, dZ):
    """Reverse pass of :func:`forward` (``keep=True``'s ``saved``) from dZ = ∂ℓ/∂Z_L:
    (dV, dB, dC, dZ0)."""
    d = B.shape[2]
    n = dZ.shape[2] - 1
    dV, dB, dC = np.zeros_like(V), np.zeros_like(B), np.zeros_like(C)
    for l in reversed(range(V.shape[0])):
        Zl, layer = saved[l]
        X = Zl[:, :d, :]
        dZprev = dZ.copy()
        for s, (U, W, S, Hm, Y) in enumerate(layer):
            dV[l, s] = np.sum(dZ @ np.swapaxes(Y, 1, 2), axis=0)
            dY = V[l, s].T @ dZ
            dZprev += dY @ np.swapaxes(Hm, 1, 2)
            dH = np.swapaxes(Zl, 1, 2) @ dY
            dS = _activation_backward(activations[s], S, Hm, dH, n)
            dU = W @ np.swapaxes(dS, 1, 2)
            dW = U @ dS
            dB[l, s] = np.sum(dU @ np.swapaxes(X, 1, 2), axis=0)
            dC[l, s] = np.sum(dW @ np.swapaxes(X, 1, 2), axis=0)
            dZprev[:, :d, :] += B[l, s].T @ dU + C[l, s].T @ dW
        dZ = dZprev
    return dV, dB, dC, dZ
