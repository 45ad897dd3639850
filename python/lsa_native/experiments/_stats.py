"""Small statistics helpers of the reproductions: Monte Carlo means with standard errors and the
z threshold for a family of checks."""
from __future__ import annotations

from statistics import NormalDist

import numpy as np


def mean_se(samples) -> tuple[float, float]:
    """Sample mean and its standard error."""
    x = np.asarray(samples, dtype=np.float64).ravel()
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size))


def z_threshold(k: int, alpha: float = 0.005, floor: float = 3.0) -> float:
    """max(floor, Φ^{-1}(1 − α/(2k))): two-sided Bonferroni threshold for k z-scores, so that a
    correct formula passes all k with probability ≥ 1 − α whatever the seed."""
    return max(floor, NormalDist().inv_cdf(1 - alpha / (2 * max(int(k), 1))))


def t_threshold(k: int, df: int, alpha: float = 0.01, floor: float = 3.0) -> float:
    """max(floor, t_df^{-1}(1 − α/(2k))): the two-sided Bonferroni threshold for k Student-t
    statistics with ``df`` degrees of freedom (a mean over df + 1 replicates divided by its
    estimated standard error). The tail is integrated numerically (Simpson) from the density."""
    import math

    nu = int(df)
    if nu < 1:
        raise ValueError(f"df: expected >= 1 degree of freedom, got {df}")
    target = alpha / (2 * max(int(k), 1))
    c = math.exp(math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2)) / math.sqrt(nu * math.pi)

    def tail(x):  # P(T > x) = ∫_0^{atan x/√ν}... by the substitution t = √ν tan θ
        th = np.linspace(math.atan(x / math.sqrt(nu)), math.pi / 2, 4001)
        f = c * math.sqrt(nu) * np.cos(th) ** (nu - 1)  # density · dt/dθ
        h = th[1] - th[0]
        return h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())

    lo, hi = 0.0, 1.0
    while tail(hi) > target:
        hi *= 2
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tail(mid) > target else (lo, mid)
    return max(floor, hi)
