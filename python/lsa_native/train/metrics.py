"""Metrics the papers plot, for ``fit(metrics=...)`` or direct use.

- :func:`dist_to_identity`: dist(M, I) = min_α ‖M − αI‖_F / ‖M‖_F (CCS Figure 3, H.2); the
  minimizer is α = tr(M)/d, so dist² = (‖M‖_F² − tr(M)²/d) / ‖M‖_F².
- :func:`kernel_attention_identity_distances`: that distance for Σ^{1/2} B_ℓᵀ C_ℓ Σ^{1/2} and A_ℓ of
  every layer and head (CCS Theorems 4.5/4.6: both converge to multiples of I).
- :func:`relative_distance`: ‖θ − θ*‖ / ‖θ*‖ to a target (ZFB Theorem 4.1/4.5 limits).
- :func:`bayes_loss`: the Bayes estimator's loss on a held-out K-GP batch (CCS (13)), in the
  package's convention ½ · mean squared error — pass it as ``fit(bayes_loss=...)`` to record the
  gap eval_loss − bayes_loss.
"""
from __future__ import annotations

import numpy as np

from .._validation import finite_output, real_array

from ..data import check_covariance

__all__ = ["dist_to_identity", "kernel_attention_identity_distances", "relative_distance",
           "bayes_loss"]


def dist_to_identity(M) -> np.ndarray:
    """min_α ‖M − αI‖_F / ‖M‖_F over the last two axes of M [..., d, d] (square); 0 for M = 0."""
    M = real_array(M, "M")
    if M.ndim < 2 or M.shape[-1] != M.shape[-2] or M.shape[-1] < 1:
        raise ValueError(f"M: expected square matrices [..., d, d], got shape {M.shape}")
    d = M.shape[-1]
    scale = np.max(np.abs(M), axis=(-2, -1), keepdims=True)  # the ratio is scale-free; M² may overflow
    M = M / np.where(scale > 0, scale, 1.0)
    fro2 = np.sum(M * M, axis=(-2, -1))
    # ‖M − (tr M/d) I‖_F² summed directly: fro2 − tr²/d would cancel and floor the distance at
    # √ε ≈ 1e-8 for M near a multiple of I.
    R = M - (np.trace(M, axis1=-2, axis2=-1) / d)[..., None, None] * np.eye(d)
    num = np.sum(R * R, axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(fro2 > 0, np.sqrt(num / np.where(fro2 > 0, fro2, 1.0)), 0.0)
    return out if out.ndim else float(out)


def _sqrtm(Sigma, d):
    w, U = np.linalg.eigh(check_covariance(Sigma, "Sigma", d))
    return (U * np.sqrt(w)) @ U.T


def kernel_attention_identity_distances(params, Sigma=None) -> dict:
    """{"BC": dist(Σ^{1/2} B_ℓᵀ C_ℓ Σ^{1/2}, I) [L, H], "A": dist(A_ℓ, I) [L, H] (sparse V only)}
    for :class:`~lsa_native.kernel_attention.KernelAttentionParams` (CCS H.2; Σ defaults to I)."""
    from ..kernel_attention import KernelAttentionParams

    if not isinstance(params, KernelAttentionParams):
        raise TypeError(f"params: expected a KernelAttentionParams, got {type(params).__name__}")
    B = np.asarray(params.B, dtype=np.float64)
    C = np.asarray(params.C, dtype=np.float64)
    if B.ndim != 4 or B.shape != C.shape or B.shape[-1] != B.shape[-2]:
        raise ValueError(f"params: expected B, C of one shape [L, H, d, d], got {B.shape}, {C.shape}")
    d = B.shape[-1]
    S = np.eye(d) if Sigma is None else _sqrtm(Sigma, d)
    out = {"BC": dist_to_identity(S @ np.swapaxes(B, -1, -2) @ C @ S)}
    if getattr(params, "A", None) is not None:
        out["A"] = dist_to_identity(params.A)
    return out


def relative_distance(theta, target) -> float:
    """‖θ − θ*‖ / ‖θ*‖ (flattened; θ and θ* of one shape)."""
    theta = real_array(theta, "theta")
    target = real_array(target, "target")
    if theta.shape != target.shape:
        raise ValueError(f"target: expected shape {theta.shape} (the parameters'), got {target.shape}")
    denom = np.linalg.norm(target)
    if denom == 0:
        raise ValueError("target: must be non-zero (the distance is relative to its norm)")
    return finite_output(float(np.linalg.norm(theta - target) / denom), "relative_distance")


def bayes_loss(batch, jitter: float = 0.0) -> float:
    """½ mean_b (f^bayes(x_q,b) − y_q,b)² with f^bayes the posterior mean ν^T K̂_+^{-1} Ŷ of CCS
    (13), read from a K-GP :class:`~lsa_native.data.PromptBatch` (kernel, σ, Σ)."""
    from ..baselines import bayes_estimator

    pred = np.asarray(bayes_estimator(batch, jitter=jitter), dtype=np.float64)
    return float(0.5 * np.mean((pred - np.asarray(batch.y_q, dtype=np.float64)) ** 2))
