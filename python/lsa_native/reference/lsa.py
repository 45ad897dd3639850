"""numpy reference of the one-layer LSA [ZFB (3.3)-(3.7)] and its gradients.

Three forms of the same model, each with hand-written gradients:
- naive: f(E) = E + W^PV E (E^T W^KQ E)/N with the (N+1)x(N+1) attention matrix, O(N^2 d);
- Gram-first: f(E) = E + (W^PV G W^KQ) E with G = E E^T/N, O(N d^2);
- token form of the prediction: ŷ = (1/N) Σ_j (p·e_j)(e_j·q), O(N d) — the best vectorized numpy
  formulation, used as the benchmark baseline.
Arrays: E [B, d+1, N+1], W_pv and W_kq [d+1, d+1].
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "forward_naive",
    "vjp_naive",
    "forward_gram",
    "vjp_gram",
    "predict_naive",
    "predict_tokens",
    "loss_and_grad_tokens",
    "quadratic_form",
    "predict_vjp_tokens",
]


def _n_context(E):
    return E.shape[-1] - 1


def forward_naive(E, W_pv, W_kq):
    """f(E) = E + W^PV E (E^T W^KQ E)/N  [ZFB (3.3)], materializing the attention matrix."""
    N = _n_context(E)
    A = np.swapaxes(E, -1, -2) @ W_kq @ E  # [B, N+1, N+1] = E^T W^KQ E
    return E + W_pv @ E @ A / N


def vjp_naive(E, W_pv, W_kq, d_F):
    """Hand-written VJP of :func:`forward_naive`: returns (dW_pv, dW_kq, dE).

    F = E + W^PV Y, Y = E A / N, A = E^T M, M = W^KQ E.
    """
    N = _n_context(E)
    M = W_kq @ E
    A = np.swapaxes(E, -1, -2) @ M
    Y = E @ A / N
    d_W_pv = np.sum(d_F @ np.swapaxes(Y, -1, -2), axis=0)
    d_Y = W_pv.T @ d_F
    d_A = np.swapaxes(E, -1, -2) @ d_Y / N
    d_E = d_F + d_Y @ np.swapaxes(A, -1, -2) / N + M @ np.swapaxes(d_A, -1, -2)
    d_M = E @ d_A
    d_W_kq = np.sum(d_M @ np.swapaxes(E, -1, -2), axis=0)
    d_E = d_E + W_kq.T @ d_M
    return d_W_pv, d_W_kq, d_E


def forward_gram(E, W_pv, W_kq):
    """f(E) = E + (W^PV G W^KQ) E with G = E E^T / N: the O(N d^2) Gram-first form (SPEC 3.2)."""
    N = _n_context(E)
    G = E @ np.swapaxes(E, -1, -2) / N
    return E + (W_pv @ G @ W_kq) @ E


def vjp_gram(E, W_pv, W_kq, d_F):
    """VJP of :func:`forward_gram` (SPEC 3.2): returns (dW_pv, dW_kq, dE).

    dP = d_F E^T, dW^PV = Σ dP (G W^KQ)^T, dW^KQ = Σ (W^PV G)^T dP, dG = W^PV^T dP W^KQ^T,
    dE = d_F + P^T d_F + (dG + dG^T) E / N.
    """
    N = _n_context(E)
    Et = np.swapaxes(E, -1, -2)
    G = E @ Et / N
    P = W_pv @ G @ W_kq
    d_P = d_F @ Et
    d_W_pv = np.sum(d_P @ np.swapaxes(G @ W_kq, -1, -2), axis=0)
    d_W_kq = np.sum(np.swapaxes(W_pv @ G, -1, -2) @ d_P, axis=0)
    d_G = W_pv.T @ d_P @ W_kq.T
    d_E = d_F + np.swapaxes(P, -1, -2) @ d_F + (d_G + np.swapaxes(d_G, -1, -2)) @ E / N
    return d_W_pv, d_W_kq, d_E


def predict_naive(E, W_pv, W_kq):
    """ŷ = [f(E)]_{d+1, N+1} from the naive full output."""
    return forward_naive(E, W_pv, W_kq)[:, -1, -1]


def _token_scalars(E, W_pv, W_kq):
    p = W_pv[-1]  # last row of W^PV
    e_q = E[:, :, -1]  # query token (x_q; 0)
    q = e_q @ W_kq.T  # q = W^KQ e_q = K x_q when the label slot is 0, [B, d+1]
    t = np.einsum("r,brj->bj", p, E)  # t_j = p·e_j
    s = np.einsum("br,brj->bj", q, E)  # s_j = e_j·q
    return e_q, t, s


def predict_tokens(E, W_pv, W_kq):
    """ŷ = (1/N) Σ_j (p·e_j)(e_j·q) = p^T G q  [ZFB (3.6)], O(N d) per prompt.

    q = W^KQ e_q and the query's label slot is added, so that ŷ = [f(E)]_{d+1,N+1} for any E (both
    reduce to (3.6) for prompts of (3.4), whose slot is 0)."""
    _, t, s = _token_scalars(E, W_pv, W_kq)
    return np.einsum("bj,bj->b", t, s) / _n_context(E)


def loss_and_grad_tokens(E, y_q, W_pv, W_kq):
    """L = (1/(2B)) Σ (ŷ − y_q)^2 [ZFB (3.7)] with ∂ŷ/∂p = (1/N) Σ_j s_j e_j and
    ∂ŷ/∂W^KQ = ((1/N) Σ_j t_j e_j) e_q^T (SPEC 3.2). Returns (L, dW_pv, dW_kq)."""
    B, rows, _ = E.shape
    N = _n_context(E)
    e_q, t, s = _token_scalars(E, W_pv, W_kq)
    residual = E[:, -1, -1] + np.einsum("bj,bj->b", t, s) / N - y_q
    g_p = np.einsum("bj,brj->br", s, E) / N
    g_k = np.einsum("bj,brj->br", t, E) / N
    d_W_pv = np.zeros((rows, rows), dtype=np.result_type(E, W_pv))
    d_W_kq = np.zeros_like(d_W_pv)
    d_W_pv[-1] = residual @ g_p / B
    d_W_kq[:] = (g_k * residual[:, None]).T @ e_q / B
    return 0.5 * float(np.mean(residual**2)), d_W_pv, d_W_kq


def quadratic_form(E, W_pv, W_kq):
    """ŷ = u^T H u of ZFB Lemma 5.1: u = Vec(U) (column-stacked), U = [[U11, u12],[u21^T, u_{-1}]]
    — i.e. U's first d columns are those of W^KQ and its last column is W^PV's last row —
    H = ½ X ⊗ (E E^T / N), X = [[0, x_q],[x_q^T, 0]]  (5.1). Returns ŷ [B]."""
    B, rows, _ = E.shape
    d, N = rows - 1, _n_context(E)
    U = np.concatenate([W_kq[:, :d], W_pv[-1][:, None]], axis=1)
    u = U.reshape(-1, order="F")
    out = np.empty(B, dtype=np.result_type(E, W_pv))
    for b in range(B):
        X = np.zeros((rows, rows))
        X[:d, d] = X[d, :d] = E[b, :d, -1]
        H = 0.5 * np.kron(X, E[b] @ E[b].T / N)
        out[b] = u @ H @ u
    return out


def predict_vjp_tokens(E, W_pv, W_kq, d_y):
    """VJP of the prediction ŷ = E[d, N] + (1/N) Σ_j t_j s_j for an upstream d_y [B], in the token
    form (t_j = p·e_j, s_j = q·e_j, q = W^KQ e_q; G = E Eᵀ/N): dW^PV's last row Σ_b dŷ G q,
    dW^KQ = Σ_b dŷ (G p) e_qᵀ, dE[:, j] = dŷ (s_j p + t_j q)/N + dŷ W^KQᵀ G p on the query column
    + dŷ on the query-label slot. Returns (dW_pv, dW_kq, dE)."""
    B, D, cols = E.shape
    N = cols - 1
    p = W_pv[-1]
    q = E[:, :, -1] @ W_kq.T
    t = np.einsum("r,brj->bj", p, E)
    s = np.einsum("br,brj->bj", q, E)
    Gq = np.einsum("brj,bj->br", E, s) / N
    Gp = np.einsum("brj,bj->br", E, t) / N
    d_W_pv = np.zeros((D, D), dtype=np.result_type(E, W_pv))
    d_W_pv[-1] = d_y @ Gq
    d_W_kq = (d_y[:, None] * Gp).T @ E[:, :, -1]
    d_E = (d_y / N)[:, None, None] * (p[None, :, None] * s[:, None, :] + q[:, :, None] * t[:, None, :])
    d_E[:, :, -1] += d_y[:, None] * (Gp @ W_kq)
    d_E[:, -1, -1] += d_y
    return d_W_pv, d_W_kq, d_E
