"""VJP of the LSA prediction ŷ = [f_LSA(E)]_{d+1,N+1} [ZFB (3.6)] for an upstream dŷ [B].

A composition of numpy expressions over E, O(B N d) like the native forward (one pass over E per
token scalar, plus the dE write), kept out of the native LSA files while the CUDA backend reworks
them. With p the last row of W^PV, e_q = E[:, :, N] the query column, q = W^KQ e_q,
t_j = p·e_j, s_j = q·e_j (j = 0..N) and G = E Eᵀ / N (3.6), ŷ = E[d, N] + pᵀ G q, so
  ∂ŷ/∂p       = G q = (1/N) Σ_j s_j e_j            → last row of dW^PV (the rest is 0),
  ∂ŷ/∂W^KQ    = (G p) e_qᵀ                         (exact for any E: q = W^KQ e_q),
  ∂ŷ/∂e_j     = (1/N)(s_j p + t_j q)  for every column j,
  + W^KQᵀ G p on the query column (through q), + 1 on the query-label slot [d, N].
Parameter gradients are batch sums in float64, returned in E's dtype.
"""
from __future__ import annotations

import numpy as np

from ._validation import as_array
from .lsa import _params

__all__ = ["predict_vjp"]


def predict_vjp(E, W_pv, W_kq, d_y, *, with_input_grad: bool = True):
    """(dW_pv, dW_kq, dE) of Σ_b d_y[b] ŷ_b for ŷ = ``lsa.predict(E, W_pv, W_kq)``; dE [B, d+1, N+1]
    is None without ``with_input_grad``."""
    E, W_pv, W_kq = _params(E, W_pv, W_kq)
    Bsz, D, cols = E.shape
    N = cols - 1
    g = as_array(d_y, (Bsz,), E.dtype, "d_y", finite=False)
    p = W_pv[-1]
    q = E[:, :, -1] @ W_kq.T                      # [B, D]
    t = np.matmul(p, E)                           # [B, N+1]  t_j = p·e_j
    s = np.matmul(q[:, None, :], E)[:, 0, :]      # [B, N+1]  s_j = q·e_j
    Gq = np.matmul(E, s[:, :, None])[:, :, 0] / N  # [B, D]
    Gp = np.matmul(E, t[:, :, None])[:, :, 0] / N  # [B, D]
    g64 = g.astype(np.float64)
    d_W_pv = np.zeros((D, D), E.dtype)
    d_W_pv[-1] = g64 @ Gq.astype(np.float64)
    d_W_kq = ((g64[:, None] * Gp).T @ E[:, :, -1].astype(np.float64)).astype(E.dtype)
    if not with_input_grad:
        return d_W_pv, d_W_kq, None
    gs = (g / N)[:, None, None]
    d_E = gs * (p[None, :, None] * s[:, None, :])
    d_E += gs * (q[:, :, None] * t[:, None, :])
    d_E[:, :, -1] += g[:, None] * (Gp @ W_kq)
    d_E[:, -1, -1] += g
    return d_W_pv, d_W_kq, d_E
