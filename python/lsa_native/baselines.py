"""Baseline predictors for in-context regression, batched over prompts (SPEC 3.4).

Arrays: X [B, n, d] context inputs, y [B, n] labels, x_q [B, d] queries; each returns ŷ [B]
(or [B, L+1] for iterative methods). The kernel baselines also take a
:class:`~lsa_native.data.PromptBatch` and then evaluate the kernel on its whitened inputs
ξ = Σ^{-1/2} x (CCS Definition 3.3); see :data:`BANDWIDTH_CONVENTION`. The kernels themselves
(:data:`KERNELS`, :func:`check_kernel`, :func:`kernel_matrix`) live in :mod:`lsa_native.gp_kernels`
and are re-exported here.
"""
from __future__ import annotations

import numpy as np

from ._validation import finite_output, nonnegative_float, positive_float, real_array
from .data import PromptBatch, inverse_sqrtm, prompt_arrays
from .gp_kernels import BANDWIDTH_CONVENTION, KERNELS, check_kernel, kernel_matrix

__all__ = ["KERNELS", "BANDWIDTH_CONVENTION", "check_kernel", "kernel_matrix", "psd_part",
           "bayes_estimator", "functional_gd", "zero_estimator", "ols", "ridge"]

def psd_part(K) -> np.ndarray:
    """K_+ = U |D| U^T from K = U D U^T (eigenvalues made absolute)  [CCS Definition 3.3]."""
    K = real_array(K, "K")
    if K.ndim < 2 or K.shape[-1] != K.shape[-2]:
        raise ValueError(f"K: expected square matrices [..., n, n], got shape {K.shape}")
    K = 0.5 * (K + np.swapaxes(K, -1, -2))
    w, U = np.linalg.eigh(K)
    return (U * np.abs(w)[..., None, :]) @ np.swapaxes(U, -1, -2)


def _kernel_problem(X, y, x_q, kernel, bandwidth, Sigma):
    """(ξ [B, n, d], y [B, n], ξ_q [B, d], kernel, bandwidth): whitened inputs and the kernel, from
    a PromptBatch (its law; explicit arguments override it) or from arrays and ``Sigma``."""
    if isinstance(X, PromptBatch):
        b = X
        if y is not None or x_q is not None:
            raise TypeError("y, x_q: pass either a PromptBatch or the arrays X, y, x_q, not both")
        if Sigma is not None:
            raise TypeError("Sigma: a PromptBatch carries its own law; pass arrays to override it")
        xi, xi_q = b.whitened()
        kernel = b.kernel if kernel is None else kernel
        if bandwidth is None:
            bandwidth = b.bandwidth if (b.bandwidth is not None and kernel == b.kernel) else 1.0
        y = b.y
    else:
        if y is None or x_q is None:
            raise TypeError("y, x_q: required when X is an array (or pass a PromptBatch as X)")
        xi, y, xi_q = prompt_arrays(X, y, x_q)
        if Sigma is not None:
            W = inverse_sqrtm(Sigma, "Sigma", xi.shape[-1])
            xi, xi_q = xi @ W, xi_q @ W
        bandwidth = 1.0 if bandwidth is None else bandwidth
    if kernel is None:
        raise ValueError("kernel: required (the batch does not say which kernel made its labels)")
    return xi, y, xi_q, check_kernel(kernel), positive_float(bandwidth, "bandwidth")


def bayes_estimator(X, y=None, x_q=None, kernel: str | None = None, bandwidth: float | None = None,
                    jitter: float = 0.0, *, Sigma=None):
    """f^bayes(x_q) = ν^T K̂^{-1} Ŷ with [[K̂, ν],[ν^T, μ]] = K_+ of the n+1 whitened points
    ξ = Σ^{-1/2} x  [CCS (13), Definition 3.3]: the posterior mean of the K Gaussian process.

    ``bayes_estimator(batch)`` reads the kernel, σ and Σ from a PromptBatch (the safe call);
    ``bayes_estimator(X, y, x_q, kernel, bandwidth, Sigma=Σ)`` takes arrays (Σ = I when omitted).
    K_+ (eigenvalues made absolute), not K: they differ for relu. ``jitter`` adds ε·I to K̂ for
    ill-conditioned kernels (e.g. linear with n > d). Bandwidth: exp(<u, w>/σ²) [CCS (14)]."""
    xi, y, xi_q, kernel, bandwidth = _kernel_problem(X, y, x_q, kernel, bandwidth, Sigma)
    jitter = nonnegative_float(jitter, "jitter")
    pts = np.concatenate([xi, xi_q[:, None, :]], axis=1)
    Kp = psd_part(kernel_matrix(kernel, pts, pts, bandwidth))
    n = xi.shape[1]
    K_hat = Kp[:, :n, :n] + jitter * np.eye(n)
    nu = Kp[:, :n, n]
    # Minimum-norm solve: K̂ may be singular (linear kernel with n > d); pinv gives ν^T K̂^+ Ŷ.
    coef = np.einsum("bij,bj->bi", np.linalg.pinv(K_hat, hermitian=True), y)
    return finite_output(np.einsum("bi,bi->b", nu, coef), "bayes_estimator")


def functional_gd(X, y=None, x_q=None, kernel: str | None = None, step_sizes=None,
                  bandwidth: float | None = None, *, Sigma=None) -> np.ndarray:
    """Kernel functional gradient descent f_{ℓ+1} = f_ℓ + r_ℓ Σ_i (y_i − f_ℓ(x_i)) K(·, x_i),
    f_0 = 0  [CCS (9)], with K evaluated on ξ = Σ^{-1/2} x and exp(<u, w>/σ²) [CCS (14)].
    Returns f_ℓ(x_q) for ℓ = 0..L [B, L+1].

    ``functional_gd(batch, step_sizes=r)`` reads Σ, the kernel and σ from a PromptBatch (``kernel=``
    or ``bandwidth=`` override them); with arrays, Σ = I unless ``Sigma=`` is given. Equals
    ``KernelAttentionParams.functional_gd(d, r, kernel, bandwidth=σ, Sigma=Σ).predict(E,
    every_layer=True)`` (CCS Prop. 3.1)."""
    if step_sizes is None:
        raise TypeError("step_sizes: required (one step size r_ℓ per iteration)")
    steps = real_array(step_sizes, "step_sizes", ndim=1)
    xi, y, xi_q, kernel, bandwidth = _kernel_problem(X, y, x_q, kernel, bandwidth, Sigma)
    K_ctx = kernel_matrix(kernel, xi, xi, bandwidth)  # [B, n, n]
    K_q = kernel_matrix(kernel, xi_q[:, None, :], xi, bandwidth)[:, 0, :]  # [B, n]
    f_ctx = np.zeros_like(y, dtype=np.float64)
    f_q = np.zeros(xi.shape[0])
    out = [f_q.copy()]
    with np.errstate(over="ignore", invalid="ignore"):
        for r in steps:
            resid = y - f_ctx
            f_q = f_q + r * np.einsum("bi,bi->b", K_q, resid)
            f_ctx = f_ctx + r * np.einsum("bji,bi->bj", K_ctx, resid)
            out.append(f_q.copy())
    return finite_output(np.stack(out, axis=1), "functional_gd", "the iteration diverged: use "
                         "smaller step_sizes")


def zero_estimator(X, y, x_q) -> np.ndarray:
    """ŷ = 0."""
    X, y, x_q = prompt_arrays(X, y, x_q)
    return np.zeros(x_q.shape[0])


def ols(X, y, x_q) -> np.ndarray:
    """Least squares (minimum-norm when n < d): ŷ = x_q^T X^+ y."""
    X, y, x_q = prompt_arrays(X, y, x_q)
    w = np.einsum("bij,bj->bi", np.linalg.pinv(X), y)
    return finite_output(np.einsum("bi,bi->b", x_q, w), "ols")


def ridge(X, y, x_q, lam: float) -> np.ndarray:
    """Ridge regression ŷ = x_q^T (X^T X + λ I)^{-1} X^T y."""
    X, y, x_q = prompt_arrays(X, y, x_q)
    lam = positive_float(lam, "lam")
    d = X.shape[2]
    A = np.swapaxes(X, 1, 2) @ X + lam * np.eye(d)
    try:
        w = np.linalg.solve(A, np.einsum("bnd,bn->bd", X, y)[..., None])[..., 0]
    except np.linalg.LinAlgError:
        raise ValueError("X, lam: XᵀX + λI is numerically singular (λ negligible against the "
                         "scale of X); rescale X or raise lam") from None
    return finite_output(np.einsum("bi,bi->b", x_q, w), "ridge")
