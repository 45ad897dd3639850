"""The prompt laws of the CCS experiments (Appendix H.1 and D): the covariance Σ per seed, the
K♦ composite-kernel prompts of Figure 4, the law of a training cell and its Bayes estimator."""
from __future__ import annotations

import numpy as np

from .. import baselines, data, sampling

__all__ = ["ccs_sigma", "CompositeGPPrompts", "composite_gp_prompts", "FIG4_KERNELS", "COMPOSITE_SAMPLERS",
           "spec_of", "bayes_prediction"]

D_CCS = (1.0, 1.0, 0.25, 2.25, 1.0)


def ccs_sigma(seed: int, d: int = 5) -> np.ndarray:
    """Σ = UᵀDU of CCS H.1 with U Haar-uniform orthogonal from ``seed`` and D = diag(1, 1, 0.25,
    2.25, 1) (repeated cyclically when d ≠ 5)."""
    rng = np.random.default_rng([int(seed), 1729])
    Z = rng.standard_normal((d, d))
    Q, R = np.linalg.qr(Z)
    U = Q * np.sign(np.diag(R))  # Haar measure (Mezzadri's sign fix)
    D = np.diag([D_CCS[i % 5] for i in range(d)])
    S = U.T @ D @ U
    return 0.5 * (S + S.T)


# ------------------------------------------------------------------------------------------------
# Composite kernels of CCS Appendix D (Figure 4)

def _composite_kernel(xi1, xi2, alpha, g1, g2):
    """K♦(u, v) = α <G1u, G1v> + (1 − α) exp(<G2u, G2v>) with diagonal G1 = diag(g1), G2 = diag(g2)."""
    lin = np.einsum("bmd,bkd->bmk", xi1 * g1, xi2 * g1)
    ex = np.exp(np.einsum("bmd,bkd->bmk", xi1 * g2, xi2 * g2))
    return alpha * lin + (1 - alpha) * ex


class CompositeGPPrompts:
    """Prompts with K♦-GP labels (CCS Appendix D, Figure 4) on Σ^{1/2}·sphere covariates, from
    ``np.random.default_rng([seed, step])`` (duck type of ``sampling.KernelGPPrompts``): the numpy
    reference of the native :class:`lsa_native.sampling.CompositeKernelGPPrompts` (same law, other
    draws; CPU only)."""

    def __init__(self, dim, context, alpha, g1, g2, Sigma=None, seed=0):
        self.dim, self.context, self.alpha, self.seed = dim, context, float(alpha), int(seed)
        self.g1, self.g2 = np.asarray(g1, float), np.asarray(g2, float)
        self.Sigma = Sigma

    def sample(self, *, batch: int, step: int = 0, dtype=np.float32):
        rng = np.random.default_rng([self.seed, int(step)])
        return composite_gp_prompts(rng, batch, self.dim, self.context, self.alpha, self.g1,
                                    self.g2, Sigma=self.Sigma, dtype=dtype)

    def bayes(self, batch) -> np.ndarray:
        return composite_bayes(self, batch)


def composite_bayes(spec, batch) -> np.ndarray:
    """f^bayes = ν^T K̂_+^{+} Ŷ (CCS (13)) for the composite kernel of ``spec`` (α, g1, g2: either
    K♦ sampler) on the batch's ξ = Σ^{-1/2}x."""
    pts = np.concatenate([batch.xi, batch.xi_q[:, None, :]], axis=1)
    Kp = baselines.psd_part(_composite_kernel(pts, pts, spec.alpha, np.asarray(spec.g1, float),
                                              np.asarray(spec.g2, float)))
    n = batch.X.shape[1]
    coef = np.einsum("bij,bj->bi", np.linalg.pinv(Kp[:, :n, :n], hermitian=True), batch.y)
    return np.einsum("bi,bi->b", Kp[:, :n, n], coef)


def composite_gp_prompts(rng, batch, dim, context, alpha, g1, g2, *, Sigma=None, dtype=np.float64):
    """Y | X ~ N(0, K♦_+(ξ)) with K♦ = α K^linear(G1·, G1·) + (1 − α) K^exp(G2·, G2·) on the
    whitened inputs ξ uniform on the sphere, x = Σ^{1/2}ξ [CCS Appendix D, Definition 3.3]."""
    B, d, n = batch, dim, context
    xi = data.unit_sphere(rng, (B, n + 1), d)
    root = np.eye(d) if Sigma is None else data.sqrtm(Sigma, "Sigma", d)
    X_all = xi @ root
    K = _composite_kernel(xi, xi, alpha, np.asarray(g1, float), np.asarray(g2, float))
    w, U = np.linalg.eigh(0.5 * (K + np.swapaxes(K, 1, 2)))
    Y = np.einsum("bij,bj->bi", U * np.sqrt(np.abs(w))[:, None, :], rng.standard_normal((B, n + 1)))
    X, x_q = X_all[:, :n], X_all[:, n]
    return data.PromptBatch(X=X, y=Y[:, :n], x_q=x_q, y_q=Y[:, n].astype(dtype), w=None,
                            E=data.embed(X, Y[:, :n], x_q, dtype), Sigma=Sigma, xi=xi[:, :n],
                            xi_q=xi[:, n])


FIG4_KERNELS = {
    # name: (alpha, G1 diagonal, G2 diagonal)   [CCS Figure 4 (a), (b), (c)]
    "linear": (1.0, (1, 1, 1, 1, 1), (1, 1, 1, 1, 1)),
    "exp": (0.0, (1, 1, 1, 1, 1), (1, 1, 1, 1, 1)),
    # ½(u1v1 + u2v2) + ½ exp(½(u3v3 + u4v4 + u5v5)): the paper's explicit formula (its G2 =
    # diag(0, 0, 1, 1, 1) would drop the ½ inside exp; we follow the formula).
    "composite": (0.5, (1, 1, 0, 0, 0), (0, 0, np.sqrt(0.5), np.sqrt(0.5), np.sqrt(0.5))),
}


# The samplers of a Figure 4 cell's K♦ prompts, by the cell's ``sampler`` field: "native" (what
# ccs-fig4 runs: the Philox streams of sampling.KernelGPPrompts, on the CPU or the GPU) or "numpy"
# (cells without the field: the draws before the native sampler existed; CPU only).
COMPOSITE_SAMPLERS = {"native": sampling.CompositeKernelGPPrompts, "numpy": CompositeGPPrompts}


def spec_of(cfg: dict, Sigma, seed: int):
    """The prompt law of a cell: K-GP labels of ``cfg["kernel"]`` (or a Figure 4 composite,
    ``fig4-<target>`` with ``cfg["kernel_params"]``, drawn by ``COMPOSITE_SAMPLERS[cfg["sampler"]]``)
    on Σ^{1/2}·sphere covariates."""
    kernel, d, n = cfg["kernel"], cfg["dim"], cfg["context"]
    if kernel.startswith("fig4-"):
        kp = cfg.get("kernel_params")
        alpha, g1, g2 = kp if kp is not None else FIG4_KERNELS[kernel[5:]]
        sampler = cfg.get("sampler", "numpy")
        if sampler not in COMPOSITE_SAMPLERS:
            raise ValueError(f"sampler: expected one of {sorted(COMPOSITE_SAMPLERS)}, got {sampler!r}")
        return COMPOSITE_SAMPLERS[sampler](d, n, alpha, g1[:d], g2[:d], Sigma=Sigma, seed=seed)
    return sampling.KernelGPPrompts(d, n, kernel, Sigma=Sigma, seed=seed)


def bayes_prediction(spec, batch):
    """f^bayes (CCS (13)) on ``batch`` for the law ``spec``."""
    if isinstance(spec, tuple(COMPOSITE_SAMPLERS.values())):
        return composite_bayes(spec, batch)
    return baselines.bayes_estimator(batch)
