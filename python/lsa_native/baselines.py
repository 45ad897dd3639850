"""Baseline predictors for in-context regression, batched over prompts (SPEC 3.4).

Arrays: X [B, n, d] context inputs, y [B, n] labels, x_q [B, d] queries; each returns ŷ [B]
(or [B, L+1] for iterative methods).
"""
from __future__ import annotations

import numpy as np

__all__ = ["KERNELS", "kernel_matrix", "psd_part", "bayes_estimator", "functional_gd",
           "zero_estimator", "ols", "ridge"]

KERNELS = ("linear", "relu", "exp")


def kernel_matrix(kernel: str, X1, X2, bandwidth: float = 1.0) -> np.ndarray:
    """K(x, x') for all pairs: linear <x, x'>, relu max(<x, x'>, 0), exp exp(<x, x'>/σ²)  [CCS (12)].
    X1 [B, m, d], X2 [B, k, d] → [B, m, k]."""
    G = np.asarray(X1) @ np.swapaxes(np.asarray(X2), -1, -2)
    if kernel == "linear":
        return G
    if kernel == "relu":
        return np.maximum(G, 0)
    if kernel == "exp":
        return np.exp(G / bandwidth**2)
    raise ValueError(f"kernel: expected one of {KERNELS}, got {kernel!r}")


def psd_part(K) -> np.ndarray:
    """K_+ = U |D| U^T from K = U D U^T (eigenvalues made absolute)  [CCS Definition 3.3]."""
    K = 0.5 * (K + np.swapaxes(K, -1, -2))
    w, U = np.linalg.eigh(K)
    return (U * np.abs(w)[..., None, :]) @ np.swapaxes(U, -1, -2)


def bayes_estimator(X, y, x_q, kernel: str, bandwidth: float = 1.0, jitter: float = 0.0):
    """f^bayes(x_q) = ν^T K̂^{-1} Ŷ with [[K̂, ν],[ν^T, μ]] = K_+ of the n+1 points  [CCS (13)]:
    the posterior mean of the K Gaussian process. ``jitter`` adds ε·I to K̂ for ill-conditioned
    kernels (e.g. linear with n > d)."""
    X, y, x_q = np.asarray(X), np.asarray(y), np.asarray(x_q)
    pts = np.concatenate([X, x_q[:, None, :]], axis=1)
    Kp = psd_part(kernel_matrix(kernel, pts, pts, bandwidth))
    n = X.shape[1]
    K_hat = Kp[:, :n, :n] + jitter * np.eye(n)
    nu = Kp[:, :n, n]
    # Minimum-norm solve: K̂ may be singular (linear kernel with n > d); pinv gives ν^T K̂^+ Ŷ.
    coef = np.einsum("bij,bj->bi", np.linalg.pinv(K_hat, hermitian=True), y)
    return np.einsum("bi,bi->b", nu, coef)


def functional_gd(X, y, x_q, kernel: str, step_sizes, bandwidth: float = 1.0) -> np.ndarray:
    """Kernel functional gradient descent f_{ℓ+1} = f_ℓ + r_ℓ Σ_i (y_i − f_ℓ(x_i)) K(·, x_i),
    f_0 = 0  [CCS (9)]. Returns f_ℓ(x_q) for ℓ = 0..L [B, L+1]."""
    X, y, x_q = np.asarray(X), np.asarray(y), np.asarray(x_q)
    K_ctx = kernel_matrix(kernel, X, X, bandwidth)  # [B, n, n]
    K_q = kernel_matrix(kernel, x_q[:, None, :], X, bandwidth)[:, 0, :]  # [B, n]
    f_ctx = np.zeros_like(y, dtype=np.float64)
    f_q = np.zeros(X.shape[0])
    out = [f_q.copy()]
    for r in np.asarray(step_sizes, dtype=np.float64):
        resid = y - f_ctx
        f_q = f_q + r * np.einsum("bi,bi->b", K_q, resid)
        f_ctx = f_ctx + r * np.einsum("bji,bi->bj", K_ctx, resid)
        out.append(f_q.copy())
    return np.stack(out, axis=1)


def zero_estimator(X, y, x_q) -> np.ndarray:
    """ŷ = 0."""
    return np.zeros(np.asarray(x_q).shape[0])


def ols(X, y, x_q) -> np.ndarray:
    """Least squares (minimum-norm when n < d): ŷ = x_q^T X^+ y."""
    w = np.einsum("bij,bj->bi", np.linalg.pinv(np.asarray(X)), np.asarray(y))
    return np.einsum("bi,bi->b", np.asarray(x_q), w)


def ridge(X, y, x_q, lam: float) -> np.ndarray:
    """Ridge regression ŷ = x_q^T (X^T X + λ I)^{-1} X^T y."""
    X, y, x_q = np.asarray(X), np.asarray(y), np.asarray(x_q)
    d = X.shape[2]
    A = np.swapaxes(X, 1, 2) @ X + lam * np.eye(d)
    w = np.linalg.solve(A, np.einsum("bnd,bn->bd", X, y)[..., None])[..., 0]
    return np.einsum("bi,bi->b", x_q, w)
