"""numpy reference of the one-layer H-head linear self-attention in ZFB's embedding (Zhang, Singh,
Latham & Saxe, ICML 2025, arXiv 2501.16265, in the notation of [ZFB (3.3)-(3.7)]):

    F = E + Σ_h W^PV_h E (Eᵀ W^KQ_h E) / N,

merged (W^KQ_h [d+1, d+1] free) or separate (W^KQ_h = W^K_hᵀ W^Q_h, W^K_h and W^Q_h [r, d+1]).
Written naively, with each head's (N+1)x(N+1) attention matrix and the hand-written one-head VJP
of :mod:`lsa_native.reference.lsa` summed over heads, independent of the native Gram-first
kernels. Arrays: E [B, d+1, N+1], W_pv and W_kq [H, d+1, d+1], W_k and W_q [H, r, d+1].
"""
from __future__ import annotations

import numpy as np

from . import lsa as _lsa

__all__ = ["merge_kq", "chain_kq", "forward", "vjp", "predict", "predict_vjp", "loss_and_grad"]


def merge_kq(W_k, W_q):
    """W^KQ_h = W^K_hᵀ W^Q_h for every head: [H, d+1, d+1]."""
    return np.einsum("hri,hrj->hij", W_k, W_q)


def chain_kq(W_k, W_q, d_W_kq):
    """(∂ℓ/∂W^K_h, ∂ℓ/∂W^Q_h) = (W^Q_h dW^KQ_hᵀ, W^K_h dW^KQ_h) from ∂ℓ/∂W^KQ_h."""
    return (np.einsum("hrj,hij->hri", W_q, d_W_kq), np.einsum("hri,hij->hrj", W_k, d_W_kq))


def forward(E, W_pv, W_kq):
    """F = E + Σ_h W^PV_h E (Eᵀ W^KQ_h E)/N, each head with its attention matrix."""
    return E + sum(_lsa.forward_naive(E, W_pv[h], W_kq[h]) - E for h in range(W_pv.shape[0]))


def vjp(E, W_pv, W_kq, d_F):
    """(dW_pv [H, ..], dW_kq [H, ..], dE) of Σ ⟨d_F, F⟩: the one-head VJPs summed over heads."""
    parts = [_lsa.vjp_naive(E, W_pv[h], W_kq[h], d_F) for h in range(W_pv.shape[0])]
    d_E = d_F + sum(p[2] - d_F for p in parts)
    return np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts]), d_E


def predict(E, W_pv, W_kq):
    """ŷ_b = F_b[d, N], the query's label entry."""
    return forward(E, W_pv, W_kq)[:, -1, -1]


def predict_vjp(E, W_pv, W_kq, d_y):
    """:func:`vjp` with d_F zero but d_F[b, d, N] = d_y[b]."""
    d_F = np.zeros_like(E)
    d_F[:, -1, -1] = d_y
    return vjp(E, W_pv, W_kq, d_F)


def loss_and_grad(E, y_q, W_pv, W_kq):
    """(L, dW_pv, dW_kq) of L = (1/(2B)) Σ_b (ŷ_b − y_q,b)²  [ZFB (3.7)]."""
    res = predict(E, W_pv, W_kq) - y_q
    B = E.shape[0]
    d_W_pv, d_W_kq, _ = predict_vjp(E, W_pv, W_kq, res / B)
    return 0.5 * float(np.mean(res * res)), d_W_pv, d_W_kq
