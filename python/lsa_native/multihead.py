"""Batched one-layer H-head linear self-attention in ZFB's embedding, computed by the native core.

The model (Zhang, Singh, Latham & Saxe, "Training Dynamics of In-Context Learning in Linear
Attention", ICML 2025, arXiv 2501.16265, in the notation of [ZFB (3.3)-(3.7)])::

    F = E + Σ_h W^PV_h E (Eᵀ W^KQ_h E) / N = E + P E,   P = Σ_h W^PV_h G W^KQ_h,   G = E Eᵀ / N,
    ŷ = F[d, N] = E[d, N] + Σ_h p_hᵀ G q_h,   p_h = last row of W^PV_h,  q_h = W^KQ_h e_q,

with two parametrizations of the key-query products:

- **merged**: ``W_kq`` [H, d+1, d+1], each W^KQ_h free;
- **separate**: ``W_k``, ``W_q`` [H, r, d+1] with 1 <= r <= d+1, W^KQ_h = W^K_hᵀ W^Q_h (rank <= r;
  r = 1 is the paper's rank-one case). Keys and queries see the whole token, label row included.

Layout: ``E`` [B, d+1, N+1] as in :mod:`lsa_native.lsa` (columns are tokens, the last the query),
``W_pv`` [H, d+1, d+1]. Pass either ``W_kq`` or both ``W_k=`` and ``W_q=``. Parameters are
converted to E's dtype; E is float32 or float64 (C-contiguous, else copied once).

Cost: H = 1 runs the one-head LSA kernels (bitwise :mod:`lsa_native.lsa`); H >= 2 is computed
Gram-first: G once per prompt, O(N d²), then each head from G and the query column, O(d²), never
an O(N²) attention matrix. The separate parametrization forms W^KQ_h = W^K_hᵀ W^Q_h (O(H r d²)) and
chains the gradients, ∂/∂W^K_h = W^Q_h dW^KQ_hᵀ, ∂/∂W^Q_h = W^K_h dW^KQ_h. CPU only for H >= 2.

Accuracy: per-prompt sums in E's dtype, batch sums of the loss and gradients in float64.
"""
from __future__ import annotations

import numpy as np

from . import _core
from ._validation import as_array, as_float_array, as_out, real_array

__all__ = ["predict", "loss_and_grad", "forward", "vjp", "predict_vjp", "merge_kq", "chain_kq",
           "parameters"]


def merge_kq(W_k, W_q) -> np.ndarray:
    """W^KQ_h = W^K_hᵀ W^Q_h for every head: [H, d+1, d+1] from W_k, W_q [H, r, d+1]."""
    return np.einsum("hri,hrj->hij", W_k, W_q)


def chain_kq(W_k, W_q, d_W_kq):
    """(∂ℓ/∂W^K_h, ∂ℓ/∂W^Q_h) = (W^Q_h dW^KQ_hᵀ, W^K_h dW^KQ_h) from ∂ℓ/∂W^KQ_h [H, d+1, d+1]."""
    d_W_k = np.einsum("hrj,hij->hri", W_q, d_W_kq)
    d_W_q = np.einsum("hri,hij->hrj", W_k, d_W_kq)
    return d_W_k.astype(d_W_kq.dtype, copy=False), d_W_q.astype(d_W_kq.dtype, copy=False)


def parameters(W_pv, W_kq=None, *, W_k=None, W_q=None, dtype=np.float64):
    """(W_pv, W_kq merged, (W_k, W_q) or None) as C-contiguous `dtype` arrays after the shape
    rules, with messages naming the argument: W_pv [H, d+1, d+1] with H >= 1; either W_kq of
    W_pv's shape or both W_k and W_q [H, r, d+1] with 1 <= r <= d+1; all finite."""
    W_pv = real_array(W_pv, "W_pv", dtype=dtype, nonempty=False)
    if W_pv.ndim != 3 or W_pv.shape[1] != W_pv.shape[2] or W_pv.shape[1] < 2:
        raise ValueError(f"W_pv: expected shape (H, d+1, d+1) (H heads, d >= 1), got {W_pv.shape}")
    H, n = W_pv.shape[:2]
    if H < 1:
        raise ValueError(f"W_pv: expected at least one head (H >= 1), got shape {W_pv.shape}")
    separate = W_k is not None or W_q is not None
    if separate == (W_kq is not None):
        raise TypeError("expected either W_kq (merged) or both W_k= and W_q= (separate), not "
                        + ("both" if separate else "neither"))
    if not separate:
        return W_pv, as_array(W_kq, (H, n, n), dtype, "W_kq"), None
    if W_k is None or W_q is None:
        raise TypeError("the separate parametrization needs both W_k= and W_q=")
    W_k = real_array(W_k, "W_k", dtype=dtype, nonempty=False)
    if W_k.ndim != 3 or W_k.shape[0] != H or W_k.shape[2] != n:
        raise ValueError(f"W_k: expected shape ({H}, r, {n}) (H = {H} heads of rank r keys), got "
                         f"{W_k.shape}")
    r = W_k.shape[1]
    if not 1 <= r <= n:
        raise ValueError(f"W_k: rank r = {r} out of range, expected 1 <= r <= d+1 = {n}")
    W_q = as_array(W_q, W_k.shape, dtype, "W_q")
    return W_pv, merge_kq(W_k, W_q).astype(dtype, copy=False), (W_k, W_q)


def _weights(E, W_pv, W_kq, W_k, W_q):
    """(E, W_pv, W_kq merged, (W_k, W_q) or None) in E's dtype, every shape checked."""
    E = as_float_array(E, "E")
    _core.lsa_shape(E.shape)  # E's rules (3-d, B, d, N >= 1), before anything is allocated
    W_pv, W_kq, sep = parameters(W_pv, W_kq, W_k=W_k, W_q=W_q, dtype=E.dtype)
    n = E.shape[1]
    if W_pv.shape[1] != n:
        raise ValueError(f"W_pv: expected shape ({W_pv.shape[0]}, {n}, {n}) (E has d+1 = {n} "
                         f"rows), got {W_pv.shape}")
    return E, W_pv, W_kq, sep


def _key_query_grads(sep, d_W_kq):
    """(dW_kq,) merged, or (dW_k, dW_q) separate."""
    return (d_W_kq,) if sep is None else chain_kq(sep[0], sep[1], d_W_kq)


def predict(E, W_pv, W_kq=None, *, W_k=None, W_q=None, out=None) -> np.ndarray:
    """Predictions ŷ_b = E_b[d, N] + Σ_h p_hᵀ G_b q_h (the query's label entry of F) for every
    prompt, p_h = last row of W^PV_h, q_h = W^KQ_h e_q, G = E Eᵀ/N  [ZFB (3.6) per head].

    Returns ŷ [B] in E's dtype (written into ``out`` when given)."""
    E, W_pv, W_kq, _ = _weights(E, W_pv, W_kq, W_k, W_q)
    y_hat = as_out(out, (E.shape[0],), E.dtype, inputs={"E": E, "W_pv": W_pv, "W_kq": W_kq})
    _core.multihead_lsa_predict(E, W_pv, W_kq, y_hat)  # non-finite ŷ flagged natively
    return y_hat


def loss_and_grad(E, y_q, W_pv, W_kq=None, *, W_k=None, W_q=None,
                  return_predictions: bool = False):
    """L = (1/(2B)) Σ_b (ŷ_b − y_q,b)² [ZFB (3.7)] and its gradients.

    Merged: ``(L, dW_pv, dW_kq)``; separate: ``(L, dW_pv, dW_k, dW_q)`` (plus ŷ [B] when
    ``return_predictions``). dW_pv [H, d+1, d+1] is zero but the last row of each head
    (Σ_b r_b G_b q_h / B); dW^KQ_h = Σ_b r_b (G_b p_h) e_q,bᵀ / B, chained to W^K_h, W^Q_h.
    """
    E, W_pv, W_kq, sep = _weights(E, W_pv, W_kq, W_k, W_q)
    y_q = as_array(np.asarray(y_q), (E.shape[0],), E.dtype, "y_q")
    d_W_pv = np.empty(W_pv.shape, E.dtype)
    d_W_kq = np.empty(W_pv.shape, E.dtype)
    y_hat = np.empty(E.shape[0], E.dtype) if return_predictions else None
    loss = _core.multihead_lsa_loss_and_grad(E, y_q, W_pv, W_kq, d_W_pv, d_W_kq, y_hat)
    result = (loss, d_W_pv, *_key_query_grads(sep, d_W_kq))
    return result + (y_hat,) if return_predictions else result


def forward(E, W_pv, W_kq=None, *, W_k=None, W_q=None, out=None) -> np.ndarray:
    """Full output F = E + Σ_h W^PV_h E (Eᵀ W^KQ_h E)/N, computed as E + P E with
    P = Σ_h W^PV_h G W^KQ_h (O(N d² + H d³) per prompt). Returns F [B, d+1, N+1]."""
    E, W_pv, W_kq, _ = _weights(E, W_pv, W_kq, W_k, W_q)
    F = as_out(out, E.shape, E.dtype, inputs={"E": E, "W_pv": W_pv, "W_kq": W_kq})
    _core.multihead_lsa_forward(E, W_pv, W_kq, F)
    return F


def vjp(E, W_pv, W_kq=None, d_F=None, *, W_k=None, W_q=None, with_input_grad: bool = True):
    """Vector-Jacobian product of :func:`forward` for ``d_F`` [B, d+1, N+1], with dP = d_F Eᵀ:
    dW^PV_h = Σ_b dP (G W^KQ_h)ᵀ, dW^KQ_h = Σ_b (W^PV_h G)ᵀ dP,
    dE = d_F + Pᵀ d_F + (dG + dGᵀ) E / N, dG = Σ_h W^PV_hᵀ dP W^KQ_hᵀ.

    Returns ``(dW_pv, dW_kq, dE)`` or, separate, ``(dW_pv, dW_k, dW_q, dE)``; dE is None without
    ``with_input_grad``."""
    if d_F is None:
        raise TypeError("vjp: missing the upstream gradient d_F")
    E, W_pv, W_kq, sep = _weights(E, W_pv, W_kq, W_k, W_q)
    d_F = as_array(np.asarray(d_F), E.shape, E.dtype, "d_F", finite=False)
    d_W_pv = np.empty(W_pv.shape, E.dtype)
    d_W_kq = np.empty(W_pv.shape, E.dtype)
    d_E = np.empty(E.shape, E.dtype) if with_input_grad else None
    _core.multihead_lsa_vjp(E, W_pv, W_kq, d_F, d_W_pv, d_W_kq, d_E)
    return (d_W_pv, *_key_query_grads(sep, d_W_kq), d_E)


def predict_vjp(E, W_pv, W_kq=None, d_y=None, *, W_k=None, W_q=None,
                with_input_grad: bool = True):
    """(dW_pv, dW_kq, dE) of Σ_b d_y[b] ŷ_b (separate: (dW_pv, dW_k, dW_q, dE)):
    dW^PV_h's last row Σ_b dŷ_b G_b q_h, dW^KQ_h = Σ_b dŷ_b (G_b p_h) e_q,bᵀ, and
    dE_b = (dŷ_b/N) Σ_h (p_h q_hᵀ + q_h p_hᵀ) E_b + dŷ_b Σ_h W^KQ_hᵀ G_b p_h on the query column
    + dŷ_b on the query-label slot (None without ``with_input_grad``)."""
    if d_y is None:
        raise TypeError("predict_vjp: missing the upstream gradient d_y")
    E, W_pv, W_kq, sep = _weights(E, W_pv, W_kq, W_k, W_q)
    d_y = as_array(np.asarray(d_y), (E.shape[0],), E.dtype, "d_y", finite=False)
    d_W_pv = np.empty(W_pv.shape, E.dtype)
    d_W_kq = np.empty(W_pv.shape, E.dtype)
    d_E = np.empty(E.shape, E.dtype) if with_input_grad else None
    _core.multihead_lsa_predict_vjp(E, W_pv, W_kq, d_y, d_W_pv, d_W_kq, d_E)
    return (d_W_pv, *_key_query_grads(sep, d_W_kq), d_E)
