"""Closed forms of Zhang, Frei, Bartlett for the one-layer LSA (SPEC 3.5)."""
from __future__ import annotations

import numpy as np

from ._validation import (as_real, check_rng, finite_output, nonnegative_float, positive_float,
                          positive_int, real_array, real_float)
from .data import check_covariance, prompt_arrays

__all__ = ["gamma", "thm41_limits", "assumption33_init", "sigma_bound", "limit_prediction",
           "relative_distance", "pl_constant", "thm42_prediction_error", "cor43_thresholds",
           "thm45_limits", "random_cov_prediction_matrix", "thm42_error",
           "quadratic_task_moments", "limit_predictor_error", "query_shift_error",
           "covariate_shift_error", "random_cov_slopes", "random_diagonal_error", "pcr_risks"]


def diagonal_moments(mean, second, third) -> np.ndarray:
    """The law of a random diagonal covariance Λτ [ZFB 4.3, (4.9)] as the closed forms here and the
    exact losses of :mod:`lsa_native.population` (which re-exports this function) take it:
    moments [3, d] = (E λ_i, E λ_i², E λ_i³) of independent diagonal entries, validated as the
    moments of a positive random variable: means > 0, variances E λ² − (E λ)² >= 0, and
    E λ³ · E λ >= (E λ²)² (Cauchy–Schwarz on λ^{1/2}·λ^{3/2}), finite."""
    parts = [as_real(v, name) for v, name in ((mean, "mean"), (second, "second"), (third, "third"))]
    if not (parts[0].shape == parts[1].shape == parts[2].shape):
        raise ValueError(f"mean, second, third: expected vectors of one length d, got shapes "
                         f"{[p.shape for p in parts]}")
    m = np.ascontiguousarray(np.stack(parts))
    if m.ndim != 2 or m.shape[1] < 1:
        raise ValueError(f"moments: expected three vectors of length d >= 1, got shape {m.shape}")
    if not np.all(np.isfinite(m)):
        raise ValueError("moments: contain non-finite values")
    if np.any(m[0] <= 0):
        raise ValueError("moments: E[λ_i] must be > 0 (covariance entries are positive)")
    if np.any(m[1] - m[0] ** 2 < -1e-12 * np.maximum(1, m[1])):
        raise ValueError("moments: E[λ_i²] − E[λ_i]² must be >= 0 (a variance)")
    if np.any(m[2] * m[0] - m[1] ** 2 < -1e-12 * np.maximum(1, m[1] ** 2)):
        raise ValueError("moments: E[λ_i³]·E[λ_i] must be >= E[λ_i²]² (no positive random variable "
                         "has these moments)")
    return m


def gamma(Lambda, N: int) -> np.ndarray:
    """Γ = (1 + 1/N) Λ + tr(Λ)/N · I_d   [ZFB Theorem 4.1]."""
    L = check_covariance(Lambda)
    N = positive_int(N, "N")
    return finite_output((1 + 1 / N) * L + np.trace(L) / N * np.eye(L.shape[0]), "Gamma")


def thm41_limits(Lambda, N: int) -> tuple[np.ndarray, np.ndarray]:
    """(W*^PV, W*^KQ) of ZFB (4.1): W*^KQ = tr(Γ^{-2})^{-1/4} [[Γ^{-1}, 0],[0, 0]],
    W*^PV = tr(Γ^{-2})^{1/4} e_{d+1} e_{d+1}^T."""
    G = gamma(Lambda, N)
    d = G.shape[0]
    G_inv = np.linalg.inv(G)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # reported just below
        scale = np.trace(G_inv @ G_inv) ** 0.25
    W_pv = np.zeros((d + 1, d + 1))
    W_pv[d, d] = scale
    W_kq = np.zeros((d + 1, d + 1))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        W_kq[:d, :d] = G_inv / scale
    return finite_output((W_pv, W_kq), "W_pv, W_kq", "Lambda is too ill-scaled")


def sigma_bound(Lambda, N: int) -> float:
    """Largest admissible initialization scale: σ² < 2 / (√d ‖Γ‖_op)  [ZFB Theorem 4.1]."""
    G = gamma(Lambda, N)
    return finite_output(float(np.sqrt(2.0 / (np.sqrt(G.shape[0]) * np.linalg.norm(G, 2)))), "sigma_bound")


def assumption33_init(dim: int, sigma: float, *, rng: np.random.Generator | None = None,
                      Theta=None) -> tuple[np.ndarray, np.ndarray]:
    """Initialization (3.10) of ZFB Assumption 3.3: W^PV(0) = σ e_{d+1} e_{d+1}^T,
    W^KQ(0) = σ [[ΘΘ^T, 0],[0, 0]] with ‖ΘΘ^T‖_F = 1. Θ is given, or drawn as M M^T/‖M M^T‖_F
    with M Gaussian from ``rng``."""
    d = positive_int(dim, "dim")
    sigma = positive_float(sigma, "sigma")
    if Theta is None:
        if rng is None:
            raise ValueError("rng, Theta: pass rng (to draw Θ) or Theta")
        M = check_rng(rng).standard_normal((d, d))
        TT = M @ M.T
    else:
        Theta = real_array(Theta, "Theta", (d, d))
        TT = Theta @ Theta.T
    norm = np.linalg.norm(TT)
    if norm == 0:
        raise ValueError("Theta: ΘΘ^T must be nonzero")
    W_pv = np.zeros((d + 1, d + 1))
    W_pv[d, d] = sigma
    W_kq = np.zeros((d + 1, d + 1))
    W_kq[:d, :d] = sigma * TT / norm
    return finite_output((W_pv, W_kq), "W_pv, W_kq")


def limit_prediction(X, y, x_q, Lambda, N: int) -> np.ndarray:
    """Prediction of the trained LSA at the Theorem 4.1 limit, ZFB (4.3):
    ŷ = x_q^T Γ^{-1} ((1/M) Σ_i y_i x_i) for test prompts X [B, M, d], y [B, M], x_q [B, d]."""
    G_inv = np.linalg.inv(gamma(Lambda, N))
    X, y, x_q = prompt_arrays(X, y, x_q)
    if X.shape[2] != G_inv.shape[0]:
        raise ValueError(f"X: expected d = {G_inv.shape[0]} (the size of Lambda), got shape {X.shape}")
    moment = np.einsum("bm,bmd->bd", y, X) / X.shape[1]
    return finite_output(np.einsum("bd,de,be->b", x_q, G_inv, moment), "limit_prediction")


def relative_distance(W_pv, W_kq, W_pv_ref, W_kq_ref) -> float:
    """‖θ − θ*‖ / ‖θ*‖ over θ = (W^PV, W^KQ) (Frobenius)."""
    W_pv_ref = real_array(W_pv_ref, "W_pv_ref", ndim=2)
    W_kq_ref = real_array(W_kq_ref, "W_kq_ref", W_pv_ref.shape)
    W_pv = real_array(W_pv, "W_pv", W_pv_ref.shape)
    W_kq = real_array(W_kq, "W_kq", W_pv_ref.shape)
    num = np.sqrt(np.sum((W_pv - W_pv_ref) ** 2) + np.sum((W_kq - W_kq_ref) ** 2))
    den = np.sqrt(np.sum(W_pv_ref**2) + np.sum(W_kq_ref**2))
    if den == 0:
        raise ValueError("W_pv_ref, W_kq_ref: the reference θ* is zero (relative distance undefined)")
    return finite_output(float(num / den), "relative_distance")


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
    TT = real_array(ThetaThetaT, "ThetaThetaT", (d, d))
    if np.linalg.eigvalsh(0.5 * (TT + TT.T))[0] < -1e-12 * max(1.0, np.abs(TT).max()):
        raise ValueError("ThetaThetaT: expected ΘΘ^T, a positive semi-definite matrix")
    theta_norm2 = float(np.trace(L @ L @ TT))  # ‖ΛΘ‖_F² = tr(Λ² ΘΘ^T)
    L_inv = np.linalg.inv(L)
    denom = np.sqrt(d) * np.linalg.norm(L, 2) ** 2 * np.trace(np.linalg.inv(G) @ L_inv) * np.trace(L_inv)
    mu = float(sigma**2 * theta_norm2 * (2 - np.sqrt(d) * sigma**2 * np.linalg.norm(G, 2)) / denom)
    return finite_output(mu, "mu")


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
    if w is not None:
        w = real_array(w, "w", (L.shape[0],))
    norm = (lambda A: float(np.trace(A))) if w is None else (lambda A: float(w @ A @ w))
    test = (norm(G2 @ L @ L @ L) + np.trace(G2 @ L @ L) * norm(L)) / M
    train = (norm(G2 @ L @ L @ L) + 2 * trL * norm(G2 @ L @ L) + trL**2 * norm(G2 @ L)) / N**2
    return finite_output(float(test + train), "thm42_prediction_error")


def cor43_thresholds(Lambda, eps: float) -> tuple[float, float]:
    """(M, N) thresholds of ZFB Corollary 4.3 for prediction error ε:
    M >= 2(d+1) tr(Λ)/ε and N >= sqrt(2(1+2d) tr(Λ) + d² κ) / √ε, κ the condition number of Λ."""
    L = check_covariance(Lambda)
    eps = positive_float(eps, "eps")
    d = L.shape[0]
    ev = np.linalg.eigvalsh(L)
    kappa = ev[-1] / ev[0]
    trL = np.trace(L)
    return finite_output((float(2 * (d + 1) * trL / eps),
                          float(np.sqrt(2 * (1 + 2 * d) * trL + d**2 * kappa) / np.sqrt(eps))), "M, N")


def _diagonal_random_cov_matrices(moments, N: int):
    """(E Λτ², E Γτ Λτ²) for diagonal Λτ with independent entries, moments [3, d]."""
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
    A = finite_output(np.linalg.solve(EGL2, EL2), "A")
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
    return finite_output(EL2 @ np.linalg.inv(EGL2), "B")


def thm42_error(Lambda, N: int, M: int, a, Sigma, best_linear_error: float = 0.0) -> float:
    """E(ŷ − y_q)² of the Theorem 4.1 limit on test prompts of length M drawn iid from any D with
    x ~ N(0, Λ), ZFB Theorem 4.2 (4.6): best-linear error + (1/M) tr[Σ Γ^{-2} Λ]
    + (1/N²)[‖a‖²_{Γ^{-2}Λ³} + 2 tr(Λ)‖a‖²_{Γ^{-2}Λ²} + tr(Λ)²‖a‖²_{Γ^{-2}Λ}],
    with a = Λ^{-1}E[xy] and Σ = Cov(xy) of (4.5). For linear labels a = w and
    Σ = ‖w‖²_Λ Λ + Λww^TΛ (:func:`thm42_prediction_error`); :func:`quadratic_task_moments` gives
    (a, Σ, best-linear error) of a nonlinear task."""
    L = check_covariance(Lambda)
    d = L.shape[0]
    M = positive_int(M, "M")
    a = real_array(a, "a", (d,))
    S = _psd(Sigma, "Sigma", d)
    best_linear_error = nonnegative_float(best_linear_error, "best_linear_error")
    Gi = np.linalg.inv(gamma(L, N))
    G2 = Gi @ Gi
    trL = np.trace(L)
    q = lambda A: float(a @ A @ a)
    train = (q(G2 @ L @ L @ L) + 2 * trL * q(G2 @ L @ L) + trL**2 * q(G2 @ L)) / N**2
    return finite_output(best_linear_error + float(np.trace(S @ G2 @ L)) / M + train, "thm42_error")


def _psd(S, name: str, d: int) -> np.ndarray:
    """A finite symmetric positive semi-definite [d, d] matrix (a covariance that may be singular)."""
    S = real_array(S, name, (d, d))
    if not np.allclose(S, S.T, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(S).max())):
        raise ValueError(f"{name}: must be symmetric")
    if np.linalg.eigvalsh(0.5 * (S + S.T))[0] < -1e-10 * max(1.0, np.abs(S).max()):
        raise ValueError(f"{name}: must be positive semi-definite")
    return S


def quadratic_task_moments(Lambda, w, v, beta: float):
    """(a, Σ, best-linear error) of (4.5) for the nonlinear task y = <w, x> + β((v^Tx)² − s),
    x ~ N(0, Λ), s = v^TΛv (a task shift of ZFB 4.2). By Gaussian moments (x = (Λv/s)u + z with
    u = v^Tx independent of z): a = w, best-linear error β² Var(u²) = 2β²s², and
    Σ = ‖w‖²_Λ Λ + Λww^TΛ + β²(2s²Λ + 8sΛvv^TΛ)."""
    L = check_covariance(Lambda)
    d = L.shape[0]
    w = real_array(w, "w", (d,))
    v = real_array(v, "v", (d,))
    beta = np.float64(real_float(beta, "beta"))
    Lw, Lv = L @ w, L @ v
    s = np.float64(v @ Lv)  # numpy floats overflow to inf (then reported), Python floats raise
    with np.errstate(over="ignore", invalid="ignore"):
        Sigma = (w @ Lw) * L + np.outer(Lw, Lw) + beta**2 * (2 * s**2 * L + 8 * s * np.outer(Lv, Lv))
        err = 2 * beta**2 * s**2
    return finite_output((w.copy(), Sigma, err), "Sigma, best_linear_error")


def _psd_stack(Lambdas, d, name):
    arr = as_real(Lambdas, name)
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3 or arr.shape[1:] != (d, d):
        raise ValueError(f"{name}: expected shape ({d}, {d}) or (S, {d}, {d}), got {arr.shape}")
    return [check_covariance(x, name) for x in arr]


def limit_predictor_error(A, M: int, Lambda_test, *, Lambda_query=None, w=None,
                          noise_std: float = 0.0) -> float:
    """Exact E(ŷ − y_q)² of a trained one-layer LSA ŷ = x_q^T A ((1/M) Σ_i y_i x_i) — the form of
    every limit of ZFB: A = Γ^{-1} (4.3), A = [EΛτ²][EΓτΛτ²]^{-1} (4.12) — on test prompts with
    x_i ~ N(0, Λ_test), y_i = <w, x_i> + ε_i (ε ~ N(0, noise_std²)), a query x_q ~ N(0, Λ_query)
    independent of the x_i (Λ_query = Λ_test when None) and target y_q = <w, x_q> + ε_q.

    With m = (1/M)Σ y_i x_i (E m = Λ_t w, Cov m = Σ/M, Σ = ‖w‖²_{Λt}Λ_t + Λ_t ww^TΛ_t + σ²Λ_t):
      E(ŷ − y_q)² = (AΛ_t w − w)^T Λ_q (AΛ_t w − w) + (1/M) tr(A^TΛ_q A Σ) + σ²,
    which is Theorem 4.2 for Λ_t = Λ_q = Λ and A = Γ^{-1}, the query shift of ZFB 4.2 for
    Λ_q ≠ Λ_t, and the covariate shift for Λ_t ≠ Λ. w=None averages over w ~ N(0, I_d)
    (ww^T → I). Λ_test may be a stack [S, d, d] (with Λ_query None): the error is averaged over
    it, e.g. over samples of a random Λ_new."""
    return _limit_predictor_error(A, M, Lambda_test, Lambda_query, w, noise_std,
                                  "limit_predictor_error")


def _limit_predictor_error(A, M, Lambda_test, Lambda_query, w, noise_std, output: str) -> float:
    """:func:`limit_predictor_error`; a non-finite result is reported as `output`."""
    A = real_array(A, "A", ndim=2)
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"A: expected a square (d, d) array, got shape {A.shape}")
    d = A.shape[0]
    M = positive_int(M, "M")
    s2 = np.float64(nonnegative_float(noise_std, "noise_std")) ** 2
    if w is not None:
        w = real_array(w, "w", (d,))
    tests = _psd_stack(Lambda_test, d, "Lambda_test")
    if Lambda_query is not None and len(tests) > 1:
        raise ValueError("Lambda_query: only with a single Lambda_test")
    WW = np.eye(d) if w is None else np.outer(w, w)
    total = 0.0
    for Lt in tests:
        Lq = Lt if Lambda_query is None else check_covariance(Lambda_query, "Lambda_query", d)
        R = A @ Lt - np.eye(d)
        bias = np.trace(R.T @ Lq @ R @ WW)
        Sigma = np.trace(WW @ Lt) * Lt + Lt @ WW @ Lt + s2 * Lt
        total += bias + np.trace(A.T @ Lq @ A @ Sigma) / M + s2
    return finite_output(float(total / len(tests)), output)


def random_diagonal_error(a, M: int, moments, *, noise_std: float = 0.0) -> float:
    """:func:`limit_predictor_error` for a diagonal A = diag(a), averaged exactly over a random
    diagonal test covariance Λ_new = diag(λ) with independent entries of moments [3, d]
    (E λ, E λ², E λ³), the query drawn with the context, w ~ N(0, I_d). Per coordinate
    (AΛ − I)Λ(AΛ − I) → a_i² Eλ_i³ − 2a_i Eλ_i² + Eλ_i, and tr(AΛAΣ) with
    Σ = tr(Λ)Λ + Λ² + σ²Λ → Σ_i a_i² (2Eλ_i³ + Eλ_i² Σ_{j≠i} Eλ_j + σ² Eλ_i²): the error is
    cubic in the λ_i, so three moments make it exact (e.g. JMLR Figure 1's curves)."""
    a = real_array(a, "a", ndim=1)
    m = as_real(moments, "moments")
    if m.shape != (3, a.shape[0]):
        raise ValueError(f"moments: expected shape (3, {a.shape[0]}) (matching a), got {m.shape}")
    m1, m2, m3 = diagonal_moments(*m)
    M = positive_int(M, "M")
    s2 = np.float64(nonnegative_float(noise_std, "noise_std")) ** 2
    bias = np.sum(a**2 * m3 - 2 * a * m2 + m1)
    var = np.sum(a**2 * (2 * m3 + m2 * (m1.sum() - m1) + s2 * m2)) / M
    return finite_output(float(bias + var + s2), "random_diagonal_error")


def query_shift_error(Lambda, N: int, M: int, Lambda_query, *, w=None, noise_std: float = 0.0):
    """Query shift of ZFB 4.2: the Theorem 4.1 limit (trained on N(0, Λ), length N) on test prompts
    x_i ~ N(0, Λ) with an independent query x_q ~ N(0, Λ_query). Exact, any M
    (:func:`limit_predictor_error` with A = Γ^{-1}); relative to E y_q² it does not grow with
    the shift: tolerated."""
    A = finite_output(np.linalg.inv(gamma(Lambda, N)), "query_shift_error")
    return _limit_predictor_error(A, M, Lambda, Lambda_query, w, noise_std, "query_shift_error")


def covariate_shift_error(Lambda, N: int, M: int, Lambda_test, *, w=None, noise_std: float = 0.0):
    """Covariate shift of ZFB 4.2: the Theorem 4.1 limit trained on N(0, Λ), tested on prompts with
    x_i, x_q ~ N(0, Λ_test) (e.g. cΛ: ŷ → c<w, x_q> as M, N → ∞, not tolerated). Λ_test may be a
    stack of samples of a random Λ_new (averaged). Exact, any M."""
    A = finite_output(np.linalg.inv(gamma(Lambda, N)), "covariate_shift_error")
    return _limit_predictor_error(A, M, Lambda_test, None, w, noise_std, "covariate_shift_error")


def random_cov_slopes(moments, N: int, new_moments=None) -> dict:
    """Slopes of E ŷ on <w, x_q> for the Theorem 4.5 limit as M → ∞ (ZFB (4.12)), ŷ → x_q^T B Λ_new w
    with B = [EΛτ²][EΓτΛτ²]^{-1}, Λ_new diagonal with independent entries of moments
    ``new_moments`` [3, d] (default: the training law ``moments``):

    - ``"fixed_query"``: w and x_q fixed, expectation over Λ_new (and the context):
      E[ŷ | w, x_q] = x_q^T B [EΛ_new] w; for isotropic laws a scalar times <w, x_q>. With N → ∞
      and Exponential(1) entries it is ⅓ (the paper's display after (4.12)). Returned as the
      scalar tr(B EΛ_new)/d, exact when B EΛ_new is a multiple of I (iid entries).
    - ``"in_distribution"``: x_q ~ N(0, Λ_new) drawn with the context, w ~ N(0, I):
      the regression slope E[ŷ <w,x_q>] / E[<w,x_q>²] = tr(B EΛ_new²) / tr(EΛ_new); ⅔ for
      Exponential(1) as N → ∞ (the query shares the covariance, so Λ_new enters twice).

    Also returns the N → ∞ values (``*_limit``)."""
    B = random_cov_prediction_matrix(moments, N)
    m = diagonal_moments(*as_real(moments, "moments"))
    d = m.shape[1]
    if new_moments is None:
        nm = m
    else:
        nm = as_real(new_moments, "new_moments")
        if nm.shape != (3, d):
            raise ValueError(f"new_moments: expected shape (3, {d}), got {nm.shape}")
        try:
            nm = diagonal_moments(*nm)
        except ValueError as e:
            raise ValueError(f"new_moments: {e}") from None
    B_inf = np.diag(m[1] / m[2])  # Γτ → Λτ
    out = {}
    for key, BB in (("", B), ("_limit", B_inf)):
        out["fixed_query" + key] = float(np.trace(BB @ np.diag(nm[0])) / d)
        out["in_distribution" + key] = float(np.trace(BB @ np.diag(nm[1])) / nm[0].sum())
    finite_output(tuple(out.values()), "random_cov_slopes")
    return out


def pcr_risks(Lambda, N: int) -> np.ndarray:
    """L_r for r = 0..d: the least population loss of linear attention whose value reads the label
    only (p1 = 0, k2 = 0, ZFB's invariant manifold) and whose K1 = Σ_h p2_h K1_h has rank <= r —
    in-context principal-component regression of rank r [Zhang, Singh, Latham & Saxe 2025; Li,
    Rawat & Oymak 2024]. With λ_i the eigenvalues of Λ (Γ = (1 + 1/N)Λ + tr(Λ)/N·I shares Λ's
    eigenvectors) and ℓ̃ of ZFB Lemma A.1 written as ½‖V − M‖² − ½‖M‖² in V = (ΓΛ)^½ U Λ^½,
    M = diag(λ_i/√Γ_i), Eckart–Young keeps the r largest λ_i/√Γ_i (the r largest λ_i):

        L_r = ½ tr Λ − ½ Σ_{i <= r} λ_(i)² / Γ_(i),

    L_0 = ½ tr Λ (zero attention) and L_d = min L (ZFB Lemma A.1). These are the plateaus of
    separate rank-one heads' saddle-to-saddle dynamics (experiments ``la-separate``)."""
    L = check_covariance(Lambda)
    N = positive_int(N, "N")
    lam = np.sort(np.linalg.eigvalsh(L))[::-1]
    g = (1 + 1 / N) * lam + lam.sum() / N
    gains = np.concatenate([[0.0], np.cumsum(lam**2 / g)])
    return finite_output(0.5 * lam.sum() - 0.5 * gains, "pcr_risks")
