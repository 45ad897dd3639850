"""VJP of the LSA prediction ŷ = [f_LSA(E)]_{d+1,N+1} [ZFB (3.6)] for an upstream dŷ [B]: the
native ``lsa_predict_vjp`` (cpu/lsa_predict_vjp.cpp; numpy reference
``reference.lsa.predict_vjp_tokens``). Kept out of ``lsa.py`` while the CUDA backend reworks it;
the lead may fold it in as ``lsa.predict_vjp``.
"""
from __future__ import annotations

import numpy as np

from . import _core
from ._validation import as_array, check_finite_result
from .lsa import _params

__all__ = ["predict_vjp"]


def predict_vjp(E, W_pv, W_kq, d_y, *, with_input_grad: bool = True):
    """(dW_pv, dW_kq, dE) of Σ_b d_y[b] ŷ_b for ŷ = ``lsa.predict(E, W_pv, W_kq)``:
    dW^PV's last row Σ_b dŷ_b G_b q_b (the rest 0), dW^KQ = Σ_b dŷ_b (G_b p) e_q,bᵀ (exact for any
    E), dE [B, d+1, N+1] = dŷ (s_j p + t_j q)/N per column j + dŷ W^KQᵀ G p on the query column
    + dŷ on the query-label slot (None without ``with_input_grad``). One pass over E per prompt,
    O(N d); parameter gradients are batch sums in float64, returned in E's dtype."""
    E, W_pv, W_kq = _params(E, W_pv, W_kq)
    n = E.shape[1]
    d_y = as_array(d_y, (E.shape[0],), E.dtype, "d_y", finite=False)
    d_W_pv = np.empty((n, n), E.dtype)
    d_W_kq = np.empty((n, n), E.dtype)
    d_E = np.empty(E.shape, E.dtype) if with_input_grad else None
    _core.lsa_predict_vjp(E, W_pv, W_kq, d_y, d_W_pv, d_W_kq, d_E)
    check_finite_result(d_W_kq, {"E": E, "d_y": d_y})
    return d_W_pv, d_W_kq, d_E
