"""Shared fixtures: a fresh, reported seed per test run; per-dtype rounding units."""
from __future__ import annotations

import hashlib
import os
import secrets

import numpy as np
import pytest

# Fresh seeds each run (tests must hold for any seed); set LSA_TEST_SEED to replay a failure.
SEED = int(os.environ.get("LSA_TEST_SEED", secrets.randbits(32)))


def pytest_report_header(config):
    return f"lsa_native test seed: LSA_TEST_SEED={SEED}"


@pytest.fixture
def rng(request):
    """A Generator seeded from the run seed and the test's full node id (independent streams per
    test and parametrization; the first 32 bytes of the id, as before, are "tests/test_x.py::" and
    little more, so every test of a file shared one stream)."""
    name_hash = int.from_bytes(hashlib.sha256(request.node.nodeid.encode()).digest()[:8], "little")
    return np.random.default_rng([SEED, name_hash])


def unit_roundoff(dtype) -> float:
    return float(np.finfo(dtype).eps) / 2


# c of conditioned_tolerance: an output with relative condition number κ evaluated backward-stably
# in two orders differs by about κ·u; the kernel-attention gradients' measured worst error/(κ·u)
# (κ >= 1) is 4.8 in float32 and 7.2 in float64 (tests/test_kernel_attention.py
# relative_conditions): c = 100 leaves a factor >= 14.
CONDITION_FACTOR = 100.0


def rounded(dtype, *arrays):
    """The arrays rounded to dtype (the native inputs) and the same values in float64 (the
    reference's inputs, so that input rounding is not counted as error)."""
    low = [np.asarray(a).astype(dtype) for a in arrays]
    return low, [a.astype(np.float64) for a in low]


def conditioned_tolerance(base: float, kappa: float, dtype) -> float:
    """Relative tolerance max(base, c·κ·u) (c = CONDITION_FACTOR, u of `dtype`) of an output whose
    estimated relative condition number is κ: `base` covers the well-conditioned outputs, c·κ·u
    the small sums of large terms (the two are not multiplied: base already has ~3400 u of slack
    in float32)."""
    return max(base, CONDITION_FACTOR * kappa * unit_roundoff(dtype))


ROUNDING_FACTOR = 4.0  # assert_within_rounding's factor (both sides' rounding, 2·n·u each)


def assert_within_rounding(actual, expected, magnitude, n_ops: int, dtype, what: str,
                           factor=ROUNDING_FACTOR):
    """|actual − expected| ≤ factor · n_ops · u · magnitude entrywise, where `magnitude` is the
    expression evaluated on absolute values (the standard forward-error bound of a sum of
    products), and u the unit roundoff of `dtype`. Fails for any error beyond rounding."""
    actual, expected, magnitude = (np.asarray(a, dtype=np.float64) for a in (actual, expected, magnitude))
    bound = factor * n_ops * unit_roundoff(dtype) * magnitude + np.finfo(np.float64).tiny
    excess = np.abs(actual - expected) / bound
    worst = np.unravel_index(np.argmax(excess), excess.shape) if excess.ndim else ()
    assert np.all(excess <= 1.0), (
        f"{what}: error {np.abs(actual - expected)[worst]:.3e} exceeds the rounding bound "
        f"{bound[worst]:.3e} at {worst} (ratio {excess[worst]:.2f}, dtype {np.dtype(dtype)})"
    )


# The probabilistic rounding bound (Higham & Mary, SIAM J. Sci. Comput. 41(5), 2019, Thm 3.1):
# λ = 10, used from PROBABLE_MIN_OPS rounded terms on (below, 2λ√n >= 4n nearly: no gain).
PROBABLE_LAMBDA = 10.0
PROBABLE_MIN_OPS = 50


def assert_within_probable_rounding(actual, expected, magnitude, n_ops: int, dtype, what: str):
    """assert_within_rounding with the probabilistic bound 2·λ·√n_ops·u·magnitude (both sides'
    rounding, λ√n·u each) where n_ops >= PROBABLE_MIN_OPS, the deterministic 4·n_ops·u·magnitude
    below. Under Higham–Mary's model (rounding errors independent, mean zero) a correct evaluation
    exceeds it with probability <= 2·2n·exp(−λ²/2) ≈ 7.7e-22·n_ops per entry (λ = 10); the model
    can fail for structured inputs (repeated or integer values, stagnating sums): use it only on
    random continuous inputs whose entries are sums of many rounded terms. In float32 at n_ops ~
    100-1000 it is 2-6x tighter than the deterministic bound (√n_ops/5). Measured (40 seeds, every
    shape of test_lsa, test_lsa_lanes, test_lsa_predict_vjp, test_multihead, both dtypes): worst
    null ratio 0.036 (0.024 with the deterministic bound at that shape), up to 3.2x tighter at
    B, d, N = 130, 20, 100; a float32 dW_kq that drops one prompt (or one token) at that shape is
    caught in 20/20 draws (15/20, 17/20 with the deterministic bound)."""
    factor = ROUNDING_FACTOR
    if n_ops >= PROBABLE_MIN_OPS:
        factor = min(factor, 2 * PROBABLE_LAMBDA / np.sqrt(n_ops))
    assert_within_rounding(actual, expected, magnitude, n_ops, dtype, what, factor=factor)


def z_scores(samples, exact):
    """(mean − exact) / standard error, entrywise; entries with zero spread must match exactly."""
    mean = samples.mean(axis=0)
    se = samples.std(axis=0, ddof=1) / np.sqrt(samples.shape[0])
    z = np.zeros_like(mean)
    nz = se > 0
    z[nz] = (mean[nz] - exact[nz]) / se[nz]
    assert np.all(np.abs(mean[~nz] - exact[~nz]) <= 1e-12 * (1 + np.abs(exact[~nz])))
    return z


class HostBackedCudaArray:
    """Host memory presented as a CUDA array (parsed as one; never launched on): the emulated-GPU
    route's operands in tests/test_cuda.py and tests/test_device_loop.py."""

    def __init__(self, a):
        self.a = np.ascontiguousarray(a)
        self.__cuda_array_interface__ = {"shape": self.a.shape, "typestr": self.a.dtype.str,
                                         "data": (self.a.ctypes.data, False), "strides": None,
                                         "version": 3}
        self.dtype = self.a.dtype

    def __array__(self, dtype=None, copy=None):  # cuda.to_host's fallback: np.asarray
        return self.a
