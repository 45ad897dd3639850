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
