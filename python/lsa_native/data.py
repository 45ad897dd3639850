"""Prompt samplers (SPEC 3.1, 3.4). Randomness always comes in as ``rng: np.random.Generator``."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._validation import positive_int

__all__ = ["PromptBatch", "embed", "linear_regression_prompts", "kernel_gp_prompts",
           "unit_sphere", "check_covariance"]


@dataclass(frozen=True)
class PromptBatch:
    """A batch of in-context regression prompts.

    X [B, N, d] context inputs, y [B, N] labels, x_q [B, d] queries, y_q [B] query targets,
    w [B, d] task weights (None when labels are not linear), E [B, d+1, N+1] the embedding (3.4).
    """

    X: np.ndarray
    y: np.ndarray
    x_q: np.ndarray
    y_q: np.ndarray
    w: np.ndarray | None
    E: np.ndarray

    @property
    def batch(self) -> int:
        return self.X.shape[0]

    @property
    def dim(self) -> int:
        return self.X.shape[2]

    @property
    def context(self) -> int:
        return self.X.shape[1]


def embed(X, y, x_q, dtype=np.float64) -> np.ndarray:
    """E = [[x_1 … x_N x_q],[y_1 … y_N 0]] ∈ R^{(d+1)x(N+1)} per prompt  [ZFB (3.4)].

    X [B, N, d], y [B, N], x_q [B, d] → E [B, d+1, N+1] (C-contiguous, the fast layout)."""
    X, y, x_q = np.asarray(X), np.asarray(y), np.asarray(x_q)
    B, N, d = X.shape
    if y.shape != (B, N):
        raise ValueError(f"y: expected shape {(B, N)}, got {y.shape}")
    if x_q.shape != (B, d):
        raise ValueError(f"x_q: expected shape {(B, d)}, got {x_q.shape}")
    E = np.zeros((B, d + 1, N + 1), dtype=dtype)
    E[:, :d, :N] = np.swapaxes(X, 1, 2)
    E[:, d, :N] = y
    E[:, :d, N] = x_q
    return E


def check_covariance(Lambda, name: str = "Lambda", d: int | None = None) -> np.ndarray:
    """Λ as a float64 symmetric positive-definite [d, d] array, or a ValueError saying why not."""
    L = np.asarray(Lambda, dtype=np.float64)
    if L.ndim != 2 or L.shape[0] != L.shape[1]:
        raise ValueError(f"{name}: expected a square [d, d] matrix, got shape {L.shape}")
    if d is not None and L.shape[0] != d:
        raise ValueError(f"{name}: expected shape {(d, d)}, got {L.shape}")
    if not np.all(np.isfinite(L)):
        raise ValueError(f"{name}: contains non-finite values")
    if not np.allclose(L, L.T, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(L).max())):
        raise ValueError(f"{name}: must be symmetric")
    try:
        np.linalg.cholesky(L)
    except np.linalg.LinAlgError:
        raise ValueError(f"{name}: must be positive definite") from None
    return 0.5 * (L + L.T)


def linear_regression_prompts(
    rng: np.random.Generator,
    batch: int,
    dim: int,
    context: int,
    Lambda=None,
    *,
    noise_std: float = 0.0,
    dtype=np.float64,
) -> PromptBatch:
    """Training prompts of ZFB 3.3: w ~ N(0, I_d), x_i, x_q iid N(0, Λ), y_i = <w, x_i> (+ noise),
    target y_q = <w, x_q> (noiseless). Λ defaults to I_d."""
    B, d, N = (positive_int(batch, "batch"), positive_int(dim, "dim"),
               positive_int(context, "context"))
    chol = np.eye(d) if Lambda is None else np.linalg.cholesky(check_covariance(Lambda, d=d))
    w = rng.standard_normal((B, d))
    X = rng.standard_normal((B, N, d)) @ chol.T
    x_q = rng.standard_normal((B, d)) @ chol.T
    y = np.einsum("bnd,bd->bn", X, w)
    if noise_std > 0:
        y = y + noise_std * rng.standard_normal((B, N))
    y_q = np.einsum("bd,bd->b", x_q, w)
    return PromptBatch(X=X, y=y, x_q=x_q, y_q=y_q.astype(dtype), w=w, E=embed(X, y, x_q, dtype))


def unit_sphere(rng: np.random.Generator, shape: tuple, dim: int, Sigma=None) -> np.ndarray:
    """Σ^{1/2} ξ with ξ uniform on the unit sphere in R^dim (CCS H.1); shape + (dim,)."""
    xi = rng.standard_normal(tuple(shape) + (dim,))
    xi /= np.linalg.norm(xi, axis=-1, keepdims=True)
    return xi if Sigma is None else xi @ _sqrtm(Sigma, dim)


def kernel_gp_prompts(
    rng: np.random.Generator,
    batch: int,
    dim: int,
    context: int,
    kernel: str = "exp",
    *,
    bandwidth: float = 1.0,
    Sigma=None,
    dtype=np.float64,
) -> PromptBatch:
    """Prompts with labels from the K Gaussian process Y | X ~ N(0, K_+(X)) of CCS Definition 3.3,
    K_ij = K(Σ^{-1/2} x_i, Σ^{-1/2} x_j), covariates x = Σ^{1/2} ξ with ξ uniform on the sphere."""
    from .baselines import kernel_matrix

    B, d, n = positive_int(batch, "batch"), positive_int(dim, "dim"), positive_int(context, "context")
    xi = unit_sphere(rng, (B, n + 1), d)  # Σ^{-1/2} x
    X_all = xi if Sigma is None else xi @ _sqrtm(Sigma, d)
    K = kernel_matrix(kernel, xi, xi, bandwidth)
    w, U = np.linalg.eigh(0.5 * (K + np.swapaxes(K, 1, 2)))
    Y = np.einsum("bij,bj->bi", U * np.sqrt(np.abs(w))[:, None, :], rng.standard_normal((B, n + 1)))
    X, x_q = X_all[:, :n], X_all[:, n]
    return PromptBatch(X=X, y=Y[:, :n], x_q=x_q, y_q=Y[:, n].astype(dtype), w=None,
                       E=embed(X, Y[:, :n], x_q, dtype))


def _sqrtm(Sigma, d: int) -> np.ndarray:
    w, U = np.linalg.eigh(check_covariance(Sigma, "Sigma", d))
    return (U * np.sqrt(w)) @ U.T
