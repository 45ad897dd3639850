"""numpy reference of the exact population loss of H-head linear self-attention and its gradient.

Model [Zhang, Singh, Latham & Saxe 2025, in ZFB's embedding]: F = E + Σ_h W^PV_h E (Eᵀ W^KQ_h E)/N,
ŷ = F[d, N] (the query column's label entry). Only p_h = W^PV_h[d, :] and K_h = W^KQ_h[:, :d]
reach ŷ, and ŷ = <T, G ⊗ x_q> is linear in T = Σ_h p_h ⊗ K_h (G = E Eᵀ/N), so 2L is a quadratic
in T: the one-head terms T1..F6 of docs/population.md made bilinear over pairs of heads.
A direct transcription of docs/population.md, section "H heads": linear aggregates over the heads
plus five H x H Gram matrices, O(H d³ + H² d²).

Parametrizations: merged (W^KQ_h full [d+1, d+1]) and separate (W^KQ_h = W^K_hᵀ W^Q_h with
W^K_h, W^Q_h [r, d+1]); gradients of the separate one by the chain rule from ∂L/∂K_h.
"""
from __future__ import annotations

import numpy as np

__all__ = ["split_heads", "twice_loss_heads", "loss_and_grad", "separate_loss_and_grad",
           "predict", "attention_output"]


def split_heads(W_pv, W_kq):
    """(p1 [H, d], p2 [H], K1 [H, d, d], k2 [H, d]) of each head: p_h = (p1; p2) the last row of
    W^PV_h, K_h = [K1; k2ᵀ] the first d columns of W^KQ_h."""
    d = W_pv.shape[-1] - 1
    return W_pv[:, d, :d], W_pv[:, d, d], W_kq[:, :d, :d], W_kq[:, d, :d]


def twice_loss_heads(p1, p2, K1, k2, Lam, N, noise_std=0.0, query_noise=False):
    """2L and its gradient (g_p1, g_p2, g_K1, g_k2) for heads given by their parts
    (docs/population.md, "H heads": 2L = T1 + T2 + T3 + T4 + X + F6 (+ noise))."""
    H, d = p1.shape
    n, s2 = float(N), float(noise_std) ** 2
    t, L2 = np.trace(Lam), Lam @ Lam
    Phi = (1 + 1 / n) * L2 + t / n * Lam           # E[Λ̂²] = ΛΓ
    M4 = t * Lam + 2 / n * L2
    c3 = (1 + 2 / n) * (t**2 + 2 * np.trace(L2))
    a = p1 @ Lam                                    # a_h = Λ p1_h   [H, d]
    KtT = np.swapaxes(K1, 1, 2)
    S = 0.5 * (K1 + KtT)
    LKL = Lam @ K1 @ Lam                            # Λ K1_h Λ       [H, d, d]
    tau = np.einsum("hij,ji->h", K1, Lam)           # tr(K1_h Λ)
    # linear aggregates over the heads
    z = np.einsum("hab,ha->b", K1, a)               # Σ K1_hᵀ a_h
    R = np.einsum("h,hba->ab", p2, K1) + np.einsum("ha,hb->ab", k2, p1)  # Σ p2_h K1_hᵀ + k2_h p1_hᵀ
    u = p2 @ k2                                     # Σ p2_h k2_h
    e4 = np.einsum("hab,ha->b", K1, p1 @ M4)        # Σ K1_hᵀ M4 p1_h
    m = tau @ a + np.einsum("ij,hjk,hk->i", Lam, K1 + KtT, a)  # Σ τ_h a_h + Λ(K1_h + K1_hᵀ) a_h
    mbar = z + t * u                                # E v
    s = np.einsum("hij,hj->i", S, a)                # Σ S_h a_h
    tv = tau @ a                                    # Σ τ_h a_h
    C = np.einsum("ha,hb->ab", p1, k2) + np.einsum("h,hab->ab", p2, K1)  # Σ p1_h k2_hᵀ + p2_h K1_h
    # pairwise (H x H)
    pi = p1 @ a.T                                   # p1_hᵀ Λ p1_g
    gam = np.einsum("hij,gij->hg", K1, LKL)         # tr(K1_h Λ K1_gᵀ Λ)
    sig = np.einsum("hij,gij->hg", S, LKL)          # tr(S_h Λ S_g Λ)
    Y = np.einsum("gab,ha->ghb", K1, a)             # Y[g, h] = K1_gᵀ a_h
    LY = Y @ Lam
    nu = np.einsum("ghb,hgb->hg", Y, LY)            # (K1_gᵀ a_h)ᵀ Λ (K1_hᵀ a_g)
    V = np.einsum("gab,hb->gha", S, a)              # V[g, h] = S_g a_h
    LV = V @ Lam
    om = np.einsum("gha,hga->hg", V, LV)            # (S_g a_h)ᵀ Λ (S_h a_g)
    A6 = np.outer(tau, tau) + 2 * sig

    T1 = z @ Lam @ z + (nu.sum() + (pi * gam).sum()) / n
    T2 = np.trace(R.T @ Lam @ R @ Phi) - 2 * np.trace(R @ L2) + t
    T3 = c3 * u @ Lam @ u
    T4 = 2 * e4 @ Lam @ u
    X = 2 / n * mbar @ m
    F6 = ((pi * A6).sum() + 4 * tv @ s + 4 * s @ Lam @ s + 4 * om.sum()) / n**2
    noise = (2 * s2 * (mbar @ Lam @ u + m @ u / n) + s2**2 * (1 + 2 / n) * u @ Lam @ u
             + s2 / n * (np.trace(C.T @ Lam @ C @ Lam) + 4 * t * u @ Lam @ u)
             + (s2 if query_noise else 0.0))
    twice = T1 + T2 + T3 + T4 + X + F6 + noise

    # gradients of 2L with respect to the aggregates ...
    G_mbar = 2 / n * m + 2 * s2 * Lam @ u
    G_z = 2 * Lam @ z + G_mbar
    G_R = 2 * (Lam @ R @ Phi - L2)
    G_u = (2 * c3 * Lam @ u + 2 * Lam @ e4 + t * G_mbar + 2 * s2 * Lam @ mbar + 2 * s2 * m / n
           + 2 * s2**2 * (1 + 2 / n) * Lam @ u + 8 * s2 * t / n * Lam @ u)
    G_e4 = 2 * Lam @ u
    G_m = 2 / n * mbar + 2 * s2 / n * u
    G_s = (4 * tv + 8 * Lam @ s) / n**2
    G_tv = 4 * s / n**2
    G_C = 2 * s2 / n * Lam @ C @ Lam
    # ... then through each head's aggregate terms
    LGm, LGtv = Lam @ G_m, Lam @ G_tv
    g_p1 = (np.einsum("ij,hjk,k->hi", Lam, K1, G_z) + k2 @ G_R
            + np.einsum("ij,hjk,k->hi", M4, K1, G_e4)
            + np.outer(tau, LGm) + np.einsum("ij,hkj,k->hi", Lam, K1, LGm)
            + np.einsum("ij,hjk,k->hi", Lam, K1, LGm)
            + np.einsum("ij,hjk,k->hi", Lam, S, G_s) + np.outer(tau, LGtv) + k2 @ G_C.T)
    g_p2 = np.einsum("ab,hba->h", G_R, K1) + k2 @ G_u + np.einsum("ab,hab->h", G_C, K1)
    g_k2 = p1 @ G_R.T + np.outer(p2, G_u) + p1 @ G_C
    g_K1 = (np.einsum("ha,b->hab", a, G_z) + p2[:, None, None] * G_R.T
            + np.einsum("ha,b->hab", p1 @ M4, G_e4)
            + (a @ G_m)[:, None, None] * Lam + np.einsum("a,hb->hab", LGm, a)
            + np.einsum("ha,b->hab", a, LGm)
            + 0.5 * (np.einsum("a,hb->hab", G_s, a) + np.einsum("ha,b->hab", a, G_s))
            + (a @ G_tv)[:, None, None] * Lam + p2[:, None, None] * G_C)
    # pairwise terms
    g_a = (2 / n * np.einsum("gij,hgj->hi", K1, LY)                  # ν: 2 Σ_g K1_g Λ K1_hᵀ a_g
           + 8 / n**2 * np.einsum("gij,hgj->hi", S, LV))             # ω: 2 Σ_g S_g Λ S_h a_g
    g_p1 = g_p1 + g_a @ Lam + 2 / n * gam @ a + 2 / n**2 * A6 @ a    # ∂a_h, then π γ and π A6
    g_K1 = (g_K1 + 2 / n * np.einsum("ga,ghb->hab", a, LY)           # ν: 2 Σ_g a_g (Λ K1_gᵀ a_h)ᵀ
            + 2 / n * np.einsum("hg,gij->hij", pi, LKL)
            + 2 / n**2 * ((pi @ tau)[:, None, None] * Lam
                          + 2 * np.einsum("hg,gij->hij", pi, 0.5 * (LKL + np.swapaxes(LKL, 1, 2)))))
    Wom = 2 * np.einsum("ghi,gj->hij", LV, a)                        # ω: ∂S_h = 2 Σ_g Λ S_g a_h a_gᵀ
    g_K1 = g_K1 + 4 / n**2 * 0.5 * (Wom + np.swapaxes(Wom, 1, 2))
    return twice, (g_p1, g_p2, g_K1, g_k2)


def _full_grads(W_pv, W_kq, grads):
    g_p1, g_p2, g_K1, g_k2 = grads
    d = W_pv.shape[-1] - 1
    d_W_pv, d_W_kq = np.zeros_like(W_pv), np.zeros_like(W_kq)
    d_W_pv[:, d, :d], d_W_pv[:, d, d] = 0.5 * g_p1, 0.5 * g_p2
    d_W_kq[:, :d, :d], d_W_kq[:, d, :d] = 0.5 * g_K1, 0.5 * g_k2
    return d_W_pv, d_W_kq


def loss_and_grad(W_pv, W_kq, Lambda, N, noise_std=0.0, query_noise=False):
    """(L, dW_pv [H, d+1, d+1], dW_kq [H, d+1, d+1]) for merged heads, fixed Λ."""
    W_pv, W_kq = np.asarray(W_pv, float), np.asarray(W_kq, float)
    twice, grads = twice_loss_heads(*split_heads(W_pv, W_kq), np.asarray(Lambda, float), N,
                                    noise_std, query_noise)
    return (0.5 * twice, *_full_grads(W_pv, W_kq, grads))


def separate_loss_and_grad(W_pv, W_k, W_q, Lambda, N, noise_std=0.0, query_noise=False):
    """(L, dW_pv, dW_k [H, r, d+1], dW_q [H, r, d+1]) for W^KQ_h = W^K_hᵀ W^Q_h: with
    G_h = ∂L/∂K_h [d+1, d], K_h = W^K_hᵀ W^Q_h[:, :d]: ∂W^K_h = W^Q_h[:, :d] G_hᵀ,
    ∂W^Q_h[:, :d] = W^K_h G_h, and ∂W^Q_h[:, d] = 0."""
    W_pv, W_k, W_q = (np.asarray(x, float) for x in (W_pv, W_k, W_q))
    W_kq = np.swapaxes(W_k, 1, 2) @ W_q
    L, d_pv, d_kq = loss_and_grad(W_pv, W_kq, Lambda, N, noise_std, query_noise)
    d = W_pv.shape[-1] - 1
    G = d_kq[:, :, :d]
    d_k = W_q[:, :, :d] @ np.swapaxes(G, 1, 2)
    d_q = np.zeros_like(W_q)
    d_q[:, :, :d] = W_k @ G
    return L, d_pv, d_k, d_q


def attention_output(E, W_pv, W_kq, N):
    """F = E + Σ_h W^PV_h E (Eᵀ W^KQ_h E)/N for prompts E [B, d+1, N+1] (the model itself)."""
    F = E.copy()
    for P, Q in zip(W_pv, W_kq):
        F = F + P @ E @ (np.swapaxes(E, 1, 2) @ Q @ E) / N
    return F


def predict(E, W_pv, W_kq, N):
    """ŷ = F[d, N]: the label entry of the query column."""
    return attention_output(E, W_pv, W_kq, N)[:, -1, -1]
