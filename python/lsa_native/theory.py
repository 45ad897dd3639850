"""Closed forms of Zhang, Frei, Bartlett for the one-layer LSA (SPEC 3.5)."""
from __future__ import annotations

import numpy as np

from ._validation import positive_int
from .data import check_covariance

__all__ = ["gamma", "thm41_limits", "assumption33_init", "sigma_bound", "limit_prediction",
           "relative_distance"]


def gamma(Lambda, N: int) -> np.ndarray:
    """Γ = (1 + 1/N) Λ + tr(Λ)/N · I_d   [ZFB Theorem 4.1]."""
    L = check_covariance(Lambda)
    N = positive_int(N, "N")
    return (1 + 1 / N) * L + np.trace(L) / N * np.eye(L.shape[0])


def thm41_limits(Lambda, N: int) -> tuple[np.ndarray, np.ndarray]:
    """(W*^PV, W*^KQ) of ZFB (4.1): W*^KQ = tr(Γ^{-2})^{-1/4} [[Γ^{-1}, 0],[0, 0]],
    W*^PV = tr(Γ^{-2})^{1/4} e_{d+1} e_{d+1}^T."""
    G = gamma(Lambda, N)
    d = G.shape[0]
    G_inv = np.linalg.inv(G)
    scale = np.trace(G_inv @ G_inv) ** 0.25
    W_pv = np.zeros((d + 1, d + 1))
    W_pv[d, d] = scale
    W_kq = np.zeros((d + 1, d + 1))
    W_kq[:d, :d] = G_inv / scale
    return W_pv, W_kq


def sigma_bound(Lambda, N: int) -> float:
    """Largest admissible initialization scale: σ² < 2 / (√d ‖Γ‖_op)  [ZFB Theorem 4.1]."""
    G = gamma(Lambda, N)
    return float(np.sqrt(2.0 / (np.sqrt(G.shape[0]) * np.linalg.norm(G, 2))))


def assumption33_init(dim: int, sigma: float, *, rng: np.random.Generator | None = None,
                      Theta=None) -> tuple[np.ndarray, np.ndarray]:
    """Initialization (3.10) of ZFB Assumption 3.3: W^PV(0) = σ e_{d+1} e_{d+1}^T,
    W^KQ(0) = σ [[ΘΘ^T, 0],[0, 0]] with ‖ΘΘ^T‖_F = 1. Θ is given, or drawn as M M^T/‖M M^T‖_F
    with M Gaussian from ``rng``."""
    d = positive_int(dim, "dim")
    if Theta is None:
        if rng is None:
            raise ValueError("assumption33_init: pass rng (to draw Θ) or Theta")
        M = rng.standard_normal((d, d))
        TT = M @ M.T
    else:
        Theta = np.asarray(Theta, dtype=np.float64)
        if Theta.shape != (d, d):
            raise ValueError(f"Theta: expected shape {(d, d)}, got {Theta.shape}")
        TT = Theta @ Theta.T
    norm = np.linalg.norm(TT)
    if norm == 0:
        raise ValueError("Theta: ΘΘ^T must be nonzero")
    W_pv = np.zeros((d + 1, d + 1))
    W_pv[d, d] = sigma
    W_kq = np.zeros((d + 1, d + 1))
    W_kq[:d, :d] = sigma * TT / norm
    return W_pv, W_kq


def limit_prediction(X, y, x_q, Lambda, N: int) -> np.ndarray:
    """Prediction of the trained LSA at the Theorem 4.1 limit, ZFB (4.3):
    ŷ = x_q^T Γ^{-1} ((1/M) Σ_i y_i x_i) for test prompts X [B, M, d], y [B, M], x_q [B, d]."""
    G_inv = np.linalg.inv(gamma(Lambda, N))
    X, y, x_q = np.asarray(X), np.asarray(y), np.asarray(x_q)
    moment = np.einsum("bm,bmd->bd", y, X) / X.shape[1]
    return np.einsum("bd,de,be->b", x_q, G_inv, moment)


def relative_distance(W_pv, W_kq, W_pv_ref, W_kq_ref) -> float:
    """‖θ − θ*‖ / ‖θ*‖ over θ = (W^PV, W^KQ) (Frobenius)."""
    num = np.sqrt(np.sum((W_pv - W_pv_ref) ** 2) + np.sum((W_kq - W_kq_ref) ** 2))
    den = np.sqrt(np.sum(W_pv_ref**2) + np.sum(W_kq_ref**2))
    return float(num / den)
