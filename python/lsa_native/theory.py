"""Closed forms of Zhang, Frei, Bartlett for the one-layer LSA (SPEC 3.5)."""
from __future__ import annotations

import numpy as np

from ._validation import as_real, positive_float, positive_int
from .data import check_covariance

__all__ = ["gamma", "thm41_limits", "assumption33_init", "sigma_bound", "limit_prediction",
           "relative_distance", "pl_constant", "thm42_prediction_error", "cor43_thresholds",
           "thm45_limits", "random_cov_prediction_matrix"]


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


def pl_constant(Lambda, N: int, sigma: float, ThetaThetaT) -> float:
    """PL constant μ of ZFB Lemma 5.4 (5.7):
    μ = σ² ‖ΛΘ‖_F² [2 − √d σ² ‖Γ‖_op] / (√d ‖Λ‖_op² tr(Γ^{-1}Λ^{-1}) tr(Λ^{-1})),
    so that ℓ̃(t) − min ℓ̃ <= e^{−μt} (ℓ̃(0) − min ℓ̃) along gradient flow from Assumption 3.3.
    ``ThetaThetaT`` is ΘΘ^T (‖ΘΘ^T‖_F = 1), i.e. W^KQ(0)[:d, :d] / σ."""
    L = check_covariance(Lambda)
    d = L.shape[0]
    G = gamma(L, N)
    sigma = positive_float(sigma, "sigma")
    bound = sigma_bound(L, N)
    if sigma >= bound:
        raise ValueError(f"sigma: Lemma 5.4 needs σ < {bound:.6g} (Assumption 3.3's bound "
                         f"σ² < 2/(√d ‖Γ‖_op)); μ is not a PL constant for σ = {sigma}")
    TT = as_real(ThetaThetaT, "ThetaThetaT")
    if TT.shape != (d, d) or not np.all(np.isfinite(TT)):
        raise ValueError(f"ThetaThetaT: expected a finite ({d}, {d}) array, got shape {TT.shape}")
    theta_norm2 = float(np.trace(L @ L @ TT))  # ‖ΛΘ‖_F² = tr(Λ² ΘΘ^T)
    L_inv = np.linalg.inv(L)
    denom = np.sqrt(d) * np.linalg.norm(L, 2) ** 2 * np.trace(np.linalg.inv(G) @ L_inv) * np.trace(L_inv)
    return float(sigma**2 * theta_norm2 * (2 - np.sqrt(d) * sigma**2 * np.linalg.norm(G, 2)) / denom)


def thm42_prediction_error(Lambda, N: int, M: int, w=None) -> float:
    """E(ŷ − y)² of the Theorem 4.1 limit on test prompts of length M with linear labels, ZFB
    Theorem 4.2 (4.6) with a = w, Σ = ‖w‖_Λ² Λ + Λww^TΛ (and no best-linear-predictor error):
    (1/M){‖w‖²_{Γ^{-2}Λ³} + tr(Γ^{-2}Λ²)‖w‖²_Λ} + (1/N²){‖w‖²_{Γ^{-2}Λ³} + 2 tr(Λ)‖w‖²_{Γ^{-2}Λ²}
    + tr(Λ)² ‖w‖²_{Γ^{-2}Λ}}. With w=None, averaged over w ~ N(0, I_d) (‖w‖²_A → tr A)."""
    L = check_covariance(Lambda)
    M = positive_int(M, "M")
    Gi = np.linalg.inv(gamma(L, N))
    G2 = Gi @ Gi
    trL = np.trace(L)
    norm = (lambda A: float(np.trace(A))) if w is None else (
        lambda A: float(np.asarray(w) @ A @ np.asarray(w)))
    test = (norm(G2 @ L @ L @ L) + np.trace(G2 @ L @ L) * norm(L)) / M
    train = (norm(G2 @ L @ L @ L) + 2 * trL * norm(G2 @ L @ L) + trL**2 * norm(G2 @ L)) / N**2
    return float(test + train)


def cor43_thresholds(Lambda, eps: float) -> tuple[float, float]:
    """(M, N) thresholds of ZFB Corollary 4.3 for prediction error ε:
    M >= 2(d+1) tr(Λ)/ε and N >= sqrt(2(1+2d) tr(Λ) + d² κ) / √ε, κ the condition number of Λ."""
    L = check_covariance(Lambda)
    d = L.shape[0]
    ev = np.linalg.eigvalsh(L)
    kappa = ev[-1] / ev[0]
    trL = np.trace(L)
    return float(2 * (d + 1) * trL / eps), float(np.sqrt(2 * (1 + 2 * d) * trL + d**2 * kappa) / np.sqrt(eps))


def _diagonal_random_cov_matrices(moments, N: int):
    """(E Λτ², E Γτ Λτ²) for diagonal Λτ with independent entries, moments [3, d]."""
    from .population import diagonal_moments

    m = as_real(moments, "moments")
    if m.ndim != 2 or m.shape[0] != 3:
        raise ValueError(f"moments: expected shape (3, d), got {m.shape}")
    m1, m2, m3 = diagonal_moments(*m)
    n = positive_int(N, "N")
    # E[Γτ Λτ²]_ii = (1 + 1/N) E λ_i³ + (1/N) E[tr(Λτ) λ_i²] with E[tr(Λτ) λ_i²] = E λ_i³ + Σ_{j≠i} E λ_j E λ_i²
    E_GL2 = (1 + 1 / n) * m3 + (m3 + (m1.sum() - m1) * m2) / n
    return np.diag(m2), np.diag(E_GL2)


def thm45_limits(moments, N: int) -> tuple[np.ndarray, np.ndarray]:
    """(W*^PV, W*^KQ) of ZFB Theorem 4.5 (4.11) for diagonal Λτ with independent entries
    (moments [3, d] = E λ, E λ², E λ³): with A = [E Γτ Λτ²]^{-1} E[Λτ²],
    W*^KQ = ‖A‖_F^{-1/2} [[A, 0],[0, 0]], W*^PV = ‖A‖_F^{1/2} e_{d+1} e_{d+1}^T."""
    EL2, EGL2 = _diagonal_random_cov_matrices(moments, N)
    A = np.linalg.solve(EGL2, EL2)
    d = A.shape[0]
    s = np.linalg.norm(A)
    W_pv = np.zeros((d + 1, d + 1))
    W_pv[d, d] = np.sqrt(s)
    W_kq = np.zeros((d + 1, d + 1))
    W_kq[:d, :d] = A / np.sqrt(s)
    return W_pv, W_kq


def random_cov_prediction_matrix(moments, N: int) -> np.ndarray:
    """B = [E Λτ²][E Γτ Λτ²]^{-1} of ZFB (4.12): at the Theorem 4.5 limit and M → ∞,
    ŷ → x_q^T B Λ_new w. Averaged over Λ_new with N → ∞ too, E ŷ → x_q^T [EΛ²][EΛ³]^{-1}[EΛ] w,
    which is ⅓ <w, x_q> for Exponential(1) entries."""
    EL2, EGL2 = _diagonal_random_cov_matrices(moments, N)
    return EL2 @ np.linalg.inv(EGL2)
