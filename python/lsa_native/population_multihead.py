"""Exact population loss of H-head linear self-attention, its gradient, and gradient flow on it
[Zhang, Singh, Latham & Saxe, ICML 2025, in ZFB's embedding]. Derivation: docs/population.md,
"H heads".

Model: F = E + Σ_h W^PV_h E (Eᵀ W^KQ_h E)/N, ŷ = F[d, N], on ZFB's training prompts (w ~ N(0, I_d),
x_i, x_q ~ N(0, Λ), y = <w, x>, optional label noise). ŷ is linear in T = Σ_h p_h ⊗ K_h (p_h the
last row of W^PV_h, K_h the first d columns of W^KQ_h), so L = ½ E[(ŷ − y)²] is a quadratic in T,
computed in closed form for ANY parameters, O(H d³ + H² d²), float64, natively.

Parametrizations, chosen by what is passed as ``W_kq``:

- merged: an array [H, d+1, d+1] (W^KQ_h full);
- separate: a pair ``(W_k, W_q)`` of arrays [H, r, d+1], W^KQ_h = W^K_hᵀ W^Q_h, 1 <= r <= d+1
  (keys and queries see the whole token, label row included; r = 1 is the paper's rank-one case).

``W_pv`` is [H, d+1, d+1]. Gradients come back in the same structure as the parameters: an array
for merged heads, a pair (dW_k, dW_q) for separate ones; full-size, with exact zeros where a
parameter does not affect ŷ.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _core
from ._validation import as_real, positive_int
from .population import (FlowTrajectory, _as_moments, _covariance, _flow_counts, _flow_options,
                         _noise)

__all__ = ["multihead_loss", "multihead_loss_and_grad", "multihead_loss_and_grad_random_diagonal",
           "multihead_gradient_flow", "MultiheadFlowTrajectory", "effective_tensor"]


def _heads(W_pv, W_kq):
    """(W_pv, keys, d, separate): checked shapes; keys = [W_kq] or [W_k, W_q]. Finiteness, the
    rank range and the covariance are checked natively."""
    W_pv = as_real(W_pv, "W_pv")
    if W_pv.ndim != 3 or W_pv.shape[0] < 1 or W_pv.shape[1] != W_pv.shape[2] or W_pv.shape[1] < 2:
        raise ValueError(f"W_pv: expected shape (H, d+1, d+1) with H >= 1 heads and d >= 1, got "
                         f"{W_pv.shape}")
    H, n1 = W_pv.shape[0], W_pv.shape[1]
    if isinstance(W_kq, (tuple, list)):
        if len(W_kq) != 2:
            raise ValueError(f"W_kq: expected an array (merged) or a pair (W_k, W_q) (separate), "
                             f"got a sequence of length {len(W_kq)}")
        W_k, W_q = as_real(W_kq[0], "W_k"), as_real(W_kq[1], "W_q")
        if W_k.ndim != 3 or W_k.shape[0] != H or W_k.shape[2] != n1:
            raise ValueError(f"W_k: expected shape (H, r, d+1) = ({H}, r, {n1}) to match W_pv's "
                             f"heads, got {W_k.shape}")
        if not 1 <= W_k.shape[1] <= n1:
            raise ValueError(f"W_k: rank r = {W_k.shape[1]} out of range 1 <= r <= d+1 = {n1}")
        if W_q.shape != W_k.shape:
            raise ValueError(f"W_q: expected shape {W_k.shape} (that of W_k), got {W_q.shape}")
        return W_pv, [W_k, W_q], n1 - 1, True
    W_kq = as_real(W_kq, "W_kq")
    if W_kq.shape != W_pv.shape:
        raise ValueError(f"W_kq: expected shape {W_pv.shape} (that of W_pv), got {W_kq.shape}")
    return W_pv, [W_kq], n1 - 1, False


def _result(out, separate: bool):
    """(L, dW_pv, dW_kq) with dW_kq a pair (dW_k, dW_q) for separate heads (the core raises
    FloatingPointError when finite parameters overflowed)."""
    return (out[0], out[1], (out[2], out[3])) if separate else tuple(out)


def multihead_loss_and_grad(W_pv, W_kq, Lambda, N: int, *, noise_std: float = 0.0,
                            query_noise: bool = False):
    """(L, ∂L/∂W^PV, ∂L/∂W^KQ) of H heads for fixed Λ (symmetric positive definite [d, d]).

    ``W_kq``: [H, d+1, d+1] (merged) or (W_k, W_q) (separate; the gradient is then a pair too).
    ``noise_std``, ``query_noise``: label noise as in :func:`lsa_native.population.loss_and_grad`."""
    W_pv, keys, d, separate = _heads(W_pv, W_kq)
    out = _core.multihead_population_loss("fixed", W_pv, keys, _covariance(Lambda, d),
                                          positive_int(N, "N"), _noise(noise_std), bool(query_noise))
    return _result(out, separate)


def multihead_loss(W_pv, W_kq, Lambda, N: int, *, noise_std: float = 0.0,
                   query_noise: bool = False) -> float:
    """Population loss of H heads, fixed Λ (see :func:`multihead_loss_and_grad`)."""
    return multihead_loss_and_grad(W_pv, W_kq, Lambda, N, noise_std=noise_std,
                                   query_noise=query_noise)[0]


def multihead_loss_and_grad_random_diagonal(W_pv, W_kq, moments, N: int, *, noise_std: float = 0.0,
                                            query_noise: bool = False):
    """E_Λτ L and its gradient for Λτ = diag(λ) with independent entries given by moments [3, d]
    = (E λ, E λ², E λ³) [ZFB 4.3]: exact, L is cubic in the λ_i (as for one head)."""
    W_pv, keys, d, separate = _heads(W_pv, W_kq)
    out = _core.multihead_population_loss("random_diagonal", W_pv, keys, _as_moments(moments, d),
                                          positive_int(N, "N"), _noise(noise_std), bool(query_noise))
    return _result(out, separate)


def effective_tensor(W_pv, W_kq) -> np.ndarray:
    """T = Σ_h p_h ⊗ K_h [d+1, d+1, d]: ŷ = <T, G ⊗ x_q> with G = E Eᵀ/N, so L depends on the heads
    only through T (a quadratic in T). For separate heads K_h = (W^K_hᵀ W^Q_h)[:, :d]."""
    W_pv, keys, d, separate = _heads(W_pv, W_kq)
    W_kq_full = np.swapaxes(keys[0], 1, 2) @ keys[1] if separate else keys[0]
    return np.einsum("hi,hab->iab", W_pv[:, d, :], W_kq_full[:, :, :d])


@dataclass
class MultiheadFlowTrajectory(FlowTrajectory):
    """:class:`~lsa_native.population.FlowTrajectory` of H heads: ``W_pv`` [T, H, d+1, d+1] and
    ``W_kq`` [T, H, d+1, d+1] (merged) or ``W_k``, ``W_q`` [T, H, r, d+1] (separate), with their
    ``final_*`` values."""

    W_k: np.ndarray | None = None
    W_q: np.ndarray | None = None
    final_W_k: np.ndarray | None = None
    final_W_q: np.ndarray | None = None


def multihead_gradient_flow(W_pv, W_kq, N: int, *, Lambda=None, moments=None, times,
                            method: str = "auto", rtol: float = 1e-12, atol: float = 1e-14,
                            step: float = 1e-2, grad_tol: float = 0.0, gap_tol: float = 0.0,
                            loss_target: float = 0.0, max_steps: int = 10_000_000,
                            noise_std: float = 0.0,
                            query_noise: bool = False) -> MultiheadFlowTrajectory:
    """Gradient flow dθ/dt = −∇L(θ) on the exact H-head population loss, θ = (W_pv, W_kq) or
    (W_pv, W_k, W_q), integrated natively by the one-head flow's driver (the same DOPRI5 / RK4 /
    Rosenbrock / auto methods, tolerances and stopping rules as
    :func:`lsa_native.population.gradient_flow`; GIL released, Ctrl-C honoured). The flow runs on
    the entries that reach ŷ (p_h, K_h; or p_h, W^K_h, W^Q_h[:, :d]); the others have zero gradient
    and keep their values. The Rosenbrock phase needs n <= 6000 of them (n = H(d+1)² merged,
    H(d+1 + r(2d+1)) separate); ``"auto"`` stays with DOPRI5 above that. Pass exactly one of
    ``Lambda`` and ``moments``."""
    W_pv, keys, d, separate = _heads(W_pv, W_kq)
    if (Lambda is None) == (moments is None):
        raise ValueError("multihead_gradient_flow: pass exactly one of Lambda, moments")
    law, data = (("fixed", _covariance(Lambda, d)) if Lambda is not None
                 else ("random_diagonal", _as_moments(moments, d)))
    opts = _flow_options(times, method, rtol, atol, step, grad_tol, gap_tol, loss_target, max_steps)
    r = _core.gradient_flow_multihead(law, W_pv, keys, data, positive_int(N, "N"), **opts,
                                      noise_std=_noise(noise_std), query_noise=bool(query_noise))
    shapes = [W_pv.shape] + [k.shape for k in keys]
    cuts = np.cumsum([int(np.prod(s)) for s in shapes])[:-1]
    per_time = [part.reshape((-1, *s)) for part, s in zip(np.split(r["thetas"], cuts, axis=1), shapes)]
    final = [part.reshape(s) for part, s in zip(np.split(r["final_theta"], cuts), shapes)]
    fields = dict(W_pv=per_time[0], final_W_pv=final[0])
    if separate:
        fields.update(W_k=per_time[1], W_q=per_time[2], final_W_k=final[1], final_W_q=final[2])
    else:
        fields.update(W_kq=per_time[1], final_W_kq=final[1])
    return MultiheadFlowTrajectory(**_flow_counts(r), **fields)
