"""Prompt samplers (SPEC 3.1, 3.4). Randomness always comes in as ``rng: np.random.Generator``."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._validation import (as_real, check_rng, check_sampled, finite_output, float_dtype,
                          nonnegative_float, positive_float, positive_int, real_array, rescale_hint)
from .gp_kernels import check_kernel, kernel_matrix

__all__ = ["PromptBatch", "embed", "linear_regression_prompts", "kernel_gp_prompts",
           "unit_sphere", "check_covariance", "sqrtm", "inverse_sqrtm"]


@dataclass(frozen=True)
class PromptBatch:
    """A batch of in-context regression prompts and the law that made it.

    Arrays: X [B, N, d] context inputs, y [B, N] labels, x_q [B, d] queries, y_q [B] query targets,
    w [B, d] task weights (None when labels are not linear), E [B, d+1, N+1] the embedding (3.4).

    The law (all optional, None when unknown; existing constructor calls keep working):

    - ``Lambda`` [d, d]: covariance of Gaussian covariates x ~ N(0, Λ) [ZFB 3.3];
    - ``Sigma`` [d, d]: shape matrix of sphere covariates x = Σ^{1/2} ξ, ξ uniform on the unit sphere
      [CCS H.1] (then Cov x = Σ/d);
    - ``xi`` [B, N, d], ``xi_q`` [B, d]: the whitened inputs ξ = M^{-1/2} x with M = Σ or Λ (the
      symmetric root): the points a kernel of CCS Definition 3.3 is evaluated on;
    - ``kernel`` ("linear" | "relu" | "exp") and ``bandwidth`` σ: the kernel K whose Gaussian process
      made the labels, K(ξ_i, ξ_j), exp(<u, w>/σ²) for "exp" [CCS (12), (14)];
    - ``noise_std``: label noise y_i = f(x_i) + noise_std·ε_i; ``query_noise``: whether the query
      target y_q carries the same noise (False: y_q is the noiseless f(x_q)).

    Baselines that take a batch (:mod:`lsa_native.baselines`) read the law from it.
    """

    X: np.ndarray
    y: np.ndarray
    x_q: np.ndarray
    y_q: np.ndarray
    w: np.ndarray | None
    E: np.ndarray
    Lambda: np.ndarray | None = None
    Sigma: np.ndarray | None = None
    xi: np.ndarray | None = None
    xi_q: np.ndarray | None = None
    kernel: str | None = None
    bandwidth: float | None = None
    noise_std: float = 0.0
    query_noise: bool = False

    @property
    def batch(self) -> int:
        return self.X.shape[0]

    @property
    def dim(self) -> int:
        return self.X.shape[2]

    @property
    def context(self) -> int:
        return self.X.shape[1]

    @property
    def shape_matrix(self) -> np.ndarray | None:
        """The matrix M whose inverse root whitens the inputs (Σ for sphere covariates, else Λ)."""
        return self.Sigma if self.Sigma is not None else self.Lambda

    def whitened(self) -> tuple[np.ndarray, np.ndarray]:
        """(ξ [B, N, d], ξ_q [B, d]) = M^{-1/2}(X, x_q): the stored ``xi``, or computed from the law
        (the raw inputs when the batch carries no covariance, i.e. M = I)."""
        if self.xi is not None and self.xi_q is not None:
            return self.xi, self.xi_q
        M = self.shape_matrix
        if M is None:
            return self.X, self.x_q
        W = inverse_sqrtm(M, "Sigma" if self.Sigma is not None else "Lambda", self.dim)
        return self.X @ W, self.x_q @ W


def embed(X, y, x_q, dtype=np.float64) -> np.ndarray:
    """E = [[x_1 … x_N x_q],[y_1 … y_N 0]] ∈ R^{(d+1)x(N+1)} per prompt  [ZFB (3.4)].

    X [B, N, d], y [B, N], x_q [B, d] → E [B, d+1, N+1] (C-contiguous, the fast layout)."""
    X, y, x_q = prompt_arrays(X, y, x_q)
    B, N, d = X.shape
    dt = float_dtype(dtype)
    E = np.zeros((B, d + 1, N + 1), dtype=dt)
    E[:, :d, :N] = np.swapaxes(real_array(X, "X", dtype=dt), 1, 2)  # values beyond dt refused
    E[:, d, :N] = real_array(y, "y", dtype=dt)
    E[:, :d, N] = real_array(x_q, "x_q", dtype=dt)
    return E


def prompt_arrays(X, y, x_q):
    """(X [B, n, d], y [B, n], x_q [B, d]) as finite float64 arrays with matching sizes >= 1."""
    X = real_array(X, "X", ndim=3)
    B, n, d = X.shape
    return X, real_array(y, "y", (B, n)), real_array(x_q, "x_q", (B, d))


def check_covariance(Lambda, name: str = "Lambda", d: int | None = None) -> np.ndarray:
    """Λ as a float64 symmetric positive-definite [d, d] array, or a ValueError saying why not."""
    L = as_real(Lambda, name)
    if L.ndim != 2 or L.shape[0] != L.shape[1]:
        raise ValueError(f"{name}: expected a square [d, d] matrix, got shape {L.shape}")
    if d is not None and L.shape[0] != d:
        raise ValueError(f"{name}: expected shape {(d, d)}, got {L.shape}")
    if L.shape[0] == 0:
        raise ValueError(f"{name}: expected a non-empty [d, d] matrix (d >= 1), got shape {L.shape}")
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
    query_noise: bool = False,
    dtype=np.float64,
) -> PromptBatch:
    """Training prompts of ZFB 3.3: w ~ N(0, I_d), x_i, x_q iid N(0, Λ), y_i = <w, x_i> + σ ε_i
    with σ = ``noise_std``; the target y_q = <w, x_q> is noiseless unless ``query_noise`` (then
    y_q = <w, x_q> + σ ε_q, the target of the noisy population loss). Λ defaults to I_d."""
    check_rng(rng)
    B, d, N = (positive_int(batch, "batch"), positive_int(dim, "dim"),
               positive_int(context, "context"))
    noise_std = nonnegative_float(noise_std, "noise_std")
    dtype = float_dtype(dtype)
    Lam = np.eye(d) if Lambda is None else check_covariance(Lambda, d=d)
    chol = np.linalg.cholesky(Lam)
    w = rng.standard_normal((B, d))
    X = rng.standard_normal((B, N, d)) @ chol.T
    x_q = rng.standard_normal((B, d)) @ chol.T
    y = np.einsum("bnd,bd->bn", X, w)
    y_q = np.einsum("bd,bd->b", x_q, w)
    noise = noise_std * rng.standard_normal((B, N)) if noise_std > 0 else None
    label_cause = "noise_std" if noise is not None and np.abs(noise).max() >= np.abs(y).max() else "Lambda"
    if noise is not None:
        y = y + noise
    if query_noise and noise_std > 0:
        y_q = y_q + noise_std * rng.standard_normal(B)
    check_sampled(("X", X, _too_large("Lambda", dtype)), ("x_q", x_q, _too_large("Lambda", dtype)),
                  ("y", y, _too_large(label_cause, dtype)), ("y_q", y_q, _too_large(label_cause, dtype)),
                  dtype=dtype)
    return PromptBatch(X=X, y=y, x_q=x_q, y_q=y_q.astype(dtype), w=w, E=embed(X, y, x_q, dtype),
                       Lambda=Lam, noise_std=noise_std, query_noise=bool(query_noise))


def unit_sphere(rng: np.random.Generator, shape: tuple, dim: int, Sigma=None) -> np.ndarray:
    """Σ^{1/2} ξ with ξ uniform on the unit sphere in R^dim (CCS H.1); shape + (dim,)."""
    check_rng(rng)
    dim = positive_int(dim, "dim")
    try:
        shape = tuple(positive_int(n, "shape", minimum=0) for n in
                      ((shape,) if isinstance(shape, (int, np.integer)) else shape))
    except TypeError:
        raise TypeError(f"shape: expected a tuple of integers >= 0, got {shape!r}") from None
    xi = rng.standard_normal(shape + (dim,))
    xi /= np.linalg.norm(xi, axis=-1, keepdims=True)
    return xi if Sigma is None else xi @ sqrtm(Sigma, "Sigma", dim)


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
    K_ij = K(ξ_i, ξ_j) on the whitened inputs ξ = Σ^{-1/2} x, covariates x = Σ^{1/2} ξ with ξ
    uniform on the sphere (CCS H.1). K is linear <u, w>, relu max(<u, w>, 0) or exp exp(<u, w>/σ²)
    with σ = ``bandwidth`` (used by "exp" only) [CCS (12), (14)]. K_+ = U|D|Uᵀ by a batched eigh.
    This is the numpy reference of :class:`lsa_native.sampling.KernelGPPrompts`."""
    check_rng(rng)
    B, d, n = positive_int(batch, "batch"), positive_int(dim, "dim"), positive_int(context, "context")
    kernel = check_kernel(kernel)
    dtype = float_dtype(dtype)
    bandwidth = positive_float(bandwidth, "bandwidth")
    S = None if Sigma is None else check_covariance(Sigma, "Sigma", d)
    xi = unit_sphere(rng, (B, n + 1), d)  # ξ = Σ^{-1/2} x
    X_all = xi if S is None else xi @ sqrtm(S, "Sigma", d)
    K = kernel_matrix(kernel, xi, xi, bandwidth)
    w, U = np.linalg.eigh(0.5 * (K + np.swapaxes(K, 1, 2)))
    Y = np.einsum("bij,bj->bi", U * np.sqrt(np.abs(w))[:, None, :], rng.standard_normal((B, n + 1)))
    check_sampled(("X", X_all, _too_large("Sigma", dtype)),
                  ("y", Y, f"the kernel matrix overflowed {dtype}: use a larger bandwidth"
                              + (" or dtype=float64" if dtype != np.float64 else "")), dtype=dtype)
    X, x_q = X_all[:, :n], X_all[:, n]
    return PromptBatch(X=X, y=Y[:, :n], x_q=x_q, y_q=Y[:, n].astype(dtype), w=None,
                       E=embed(X, Y[:, :n], x_q, dtype), Sigma=np.eye(d) if S is None else S,
                       xi=xi[:, :n], xi_q=xi[:, n], kernel=kernel, bandwidth=bandwidth)


def _too_large(name: str, dtype) -> str:
    return f"{name} is too large for {np.dtype(dtype)}: {rescale_hint(name, dtype)}"


def sqrtm(M, name: str = "Sigma", d: int | None = None) -> np.ndarray:
    """The symmetric root M^{1/2} of an SPD matrix (checked by :func:`check_covariance`)."""
    w, U = np.linalg.eigh(check_covariance(M, name, d))
    return finite_output((U * np.sqrt(w)) @ U.T, f"sqrtm({name})")


def inverse_sqrtm(M, name: str = "Sigma", d: int | None = None) -> np.ndarray:
    """The symmetric inverse root M^{-1/2}: ξ = M^{-1/2} x whitens x (row vectors: x @ M^{-1/2})."""
    w, U = np.linalg.eigh(check_covariance(M, name, d))
    return finite_output((U / np.sqrt(w)) @ U.T, f"inverse_sqrtm({name})")
