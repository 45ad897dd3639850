"""numpy reference of the exact population loss of the one-layer LSA and its gradient.

A direct transcription of docs/population.md: 2L = T1 + T2 + T3 + T4 + X + F6 with
p = (p1; p2) the last row of W^PV and K = [K1; k2^T] the first d columns of W^KQ.
"""
from __future__ import annotations

import numpy as np

__all__ = ["loss_and_grad", "noise_loss_and_grad", "reduced_loss_and_grad", "split_params"]


def split_params(W_pv, W_kq):
    """(p1, p2, K1, k2) of SPEC 3.2: the entries of W^PV, W^KQ that affect ŷ."""
    d = W_pv.shape[0] - 1
    return W_pv[d, :d], W_pv[d, d], W_kq[:d, :d], W_kq[d, :d]


def noise_loss_and_grad(W_pv, W_kq, Lambda, N, noise_std, query_noise=False):
    """(ΔL, dW_pv, dW_kq): the label-noise part of the loss (docs/population.md, "Label noise").

    With y_i = <w, x_i> + σ ε_i, ŷ gains σ (1/N) Σ ε_i c·x_i + p2 σ² β (1/N) Σ ε_i², where
    c = β a + p2 (K1 + w k2ᵀ) x_q, a = p1 + p2 w, β = k2ᵀx_q; the cross terms with the noiseless
    residual vanish except through E[ε²] = 1, and Var((1/N)Σ ε_i²) = 2/N."""
    p1, p2, K1, k2 = split_params(np.asarray(W_pv, float), np.asarray(W_kq, float))
    Lam = np.asarray(Lambda, float)
    d, n, s2 = Lam.shape[0], float(N), float(noise_std) ** 2
    t = np.trace(Lam)
    Lp1, Lk2 = Lam @ p1, Lam @ k2
    m = p1 @ Lam @ K1 @ Lam @ k2          # E[R0 β] part: p1ᵀΛK1Λk2
    kappa2 = k2 @ Lk2                      # E[β²]
    pi = p1 @ Lp1
    tau = np.trace(K1.T @ Lam @ K1 @ Lam)
    # ½E[(R0 + p2σ²β s)²] − ½E[R0²] = p2σ²E[R0β] + ½p2²σ⁴(1 + 2/N)E[β²]  (s = (1/N)Σε², E s² = 1 + 2/N)
    # ½σ²E[(1/N)Σ ε_i² (c·x_i)²]/N = σ²/(2N) E[cᵀΛc]
    #   E[cᵀΛc] = κ2(π + 4p2² t) + p2² τ + 2 p2 m
    # the query's own term of ŷ, (1/N)(p1ᵀx_q)(x_qᵀK1x_q), meets β in a 4th moment (Isserlis):
    # E[(p1ᵀx)(xᵀK1x)(k2ᵀx)] = ρθ + m + m' with ρ = p1ᵀΛk2, θ = tr(K1Λ), m' = p1ᵀΛK1ᵀΛk2
    rho, theta, m2 = p1 @ Lk2, np.trace(K1 @ Lam), p1 @ Lam @ K1.T @ Lk2
    X4 = rho * theta + m + m2
    dL = (s2 * p2 * (m + p2 * t * kappa2 + X4 / n) + 0.5 * p2**2 * s2**2 * (1 + 2 / n) * kappa2
          + s2 / (2 * n) * (kappa2 * (pi + 4 * p2**2 * t) + p2**2 * tau + 2 * p2 * m)
          + (0.5 * s2 if query_noise else 0.0))
    c1 = s2 * (1 + 1 / n)
    C = (1 + 2 / n) * p2**2 * (s2 * t + 0.5 * s2**2) + s2 * pi / (2 * n)
    e = s2 * p2 / n  # coefficient of X4
    g_p2 = (c1 * m + 2 * (1 + 2 / n) * p2 * (s2 * t + 0.5 * s2**2) * kappa2 + s2 * p2 * tau / n
            + s2 * X4 / n)
    g_p1 = (c1 * p2 * Lam @ K1 @ Lk2 + s2 * kappa2 / n * Lp1
            + e * (theta * Lk2 + Lam @ K1 @ Lk2 + Lam @ K1.T @ Lk2))
    g_K1 = (c1 * p2 * np.outer(Lp1, Lk2) + s2 * p2**2 / n * Lam @ K1 @ Lam
            + e * (rho * Lam + np.outer(Lp1, Lk2) + np.outer(Lk2, Lp1)))
    g_k2 = (c1 * p2 * Lam @ K1.T @ Lp1 + 2 * C * Lk2
            + e * (theta * Lp1 + Lam @ K1.T @ Lp1 + Lam @ K1 @ Lp1))
    d_W_pv = np.zeros((d + 1, d + 1))
    d_W_kq = np.zeros((d + 1, d + 1))
    d_W_pv[d, :d], d_W_pv[d, d] = g_p1, g_p2
    d_W_kq[:d, :d], d_W_kq[d, :d] = g_K1, g_k2
    return dL, d_W_pv, d_W_kq


def loss_and_grad(W_pv, W_kq, Lambda, N, noise_std=0.0, query_noise=False):
    """(L, dW_pv, dW_kq) of L = ½ E[(ŷ − y_q)^2] under w ~ N(0, I), x ~ N(0, Λ), labels with noise
    σ = noise_std (target y_q = <w, x_q>, + σ ε_q with query_noise)."""
    if noise_std:
        L0, g0, h0 = loss_and_grad(W_pv, W_kq, Lambda, N)
        L1, g1, h1 = noise_loss_and_grad(W_pv, W_kq, Lambda, N, noise_std, query_noise)
        return L0 + L1, g0 + g1, h0 + h1
    p1, p2, K1, k2 = split_params(np.asarray(W_pv, float), np.asarray(W_kq, float))
    Lam = np.asarray(Lambda, float)
    d, n = Lam.shape[0], float(N)
    trL, L2 = np.trace(Lam), Lam @ Lam
    Phi = (1 + 1 / n) * L2 + trL / n * Lam  # ΛΓ = E[Λ̂²]
    a = Lam @ p1
    alpha = p1 @ a
    tau = np.trace(K1 @ Lam)
    u1 = K1.T @ a
    beta = np.trace(K1 @ Lam @ K1.T @ Lam)
    T1 = (1 + 1 / n) * u1 @ Lam @ u1 + alpha * beta / n
    R = p2 * K1.T + np.outer(k2, p1)
    T2 = np.trace(R.T @ Lam @ R @ Phi) - 2 * np.trace(R @ L2) + trL
    c3 = (1 + 2 / n) * (trL**2 + 2 * np.trace(L2))
    T3 = p2**2 * (k2 @ Lam @ k2) * c3
    M4 = trL * Lam + 2 / n * L2
    T4 = 2 * p2 * p1 @ M4 @ K1 @ Lam @ k2
    mbar = u1 + p2 * trL * k2
    m = tau * a + Lam @ (K1 + K1.T) @ a
    X = 2 / n * mbar @ m
    S = 0.5 * (K1 + K1.T)
    tSLSL = np.trace(S @ Lam @ S @ Lam)
    F6 = (alpha * (tau**2 + 2 * tSLSL) + 4 * tau * a @ S @ a + 8 * a @ S @ Lam @ S @ a) / n**2

    g_p1 = (2 * (1 + 1 / n) * Lam @ K1 @ Lam @ u1 + 2 * beta / n * a)
    g_K1 = 2 * (1 + 1 / n) * np.outer(a, Lam @ u1) + 2 * alpha / n * Lam @ K1 @ Lam
    D = 2 * (Lam @ R @ Phi - L2)
    g_p2 = np.sum(D * K1.T)
    g_K1 = g_K1 + p2 * D.T
    g_k2 = D @ p1
    g_p1 = g_p1 + D.T @ k2
    g_p2 += 2 * p2 * (k2 @ Lam @ k2) * c3
    g_k2 = g_k2 + 2 * p2**2 * c3 * Lam @ k2
    z, w4 = K1 @ Lam @ k2, M4 @ p1
    g_p2 += 2 * w4 @ z
    g_p1 = g_p1 + 2 * p2 * M4 @ z
    g_k2 = g_k2 + 2 * p2 * Lam @ K1.T @ w4
    g_K1 = g_K1 + 2 * p2 * np.outer(w4, Lam @ k2)
    v = Lam @ mbar
    g_p2 += 2 / n * trL * k2 @ m
    g_k2 = g_k2 + 2 / n * p2 * trL * m
    g_p1 = g_p1 + 2 / n * (Lam @ K1 @ m + tau * v + Lam @ K1.T @ v + Lam @ K1 @ v)
    g_K1 = g_K1 + 2 / n * (np.outer(a, m) + (mbar @ a) * Lam + np.outer(v, a) + np.outer(a, v))
    LSa = Lam @ S @ a
    g_p1 = g_p1 + (2 * (tau**2 + 2 * tSLSL) * a + 8 * tau * LSa + 16 * Lam @ S @ LSa) / n**2
    g_K1 = g_K1 + ((2 * alpha * tau + 4 * a @ S @ a) * Lam + 4 * alpha * Lam @ S @ Lam
                   + 4 * tau * np.outer(a, a) + 8 * (np.outer(a, LSa) + np.outer(LSa, a))) / n**2

    d_W_pv = np.zeros((d + 1, d + 1))
    d_W_kq = np.zeros((d + 1, d + 1))
    d_W_pv[d, :d], d_W_pv[d, d] = 0.5 * g_p1, 0.5 * g_p2
    d_W_kq[:d, :d], d_W_kq[d, :d] = 0.5 * g_K1, 0.5 * g_k2
    return 0.5 * (T1 + T2 + T3 + T4 + X + F6), d_W_pv, d_W_kq


def reduced_loss_and_grad(U11, u, Lambda, N):
    """ℓ̃ = tr[½u² ΓΛU11ΛU11^T − uΛ²U11^T]  [ZFB Lemma A.1] and (∂ℓ̃/∂U11, ∂ℓ̃/∂u)."""
    Lam = np.asarray(Lambda, float)
    n = float(N)
    Gamma = (1 + 1 / n) * Lam + np.trace(Lam) / n * np.eye(Lam.shape[0])
    L2 = Lam @ Lam
    quad = np.trace(Gamma @ Lam @ U11 @ Lam @ U11.T)
    lin = np.trace(L2 @ U11.T)
    return 0.5 * u**2 * quad - u * lin, u**2 * Gamma @ Lam @ U11 @ Lam - u * L2, u * quad - lin
