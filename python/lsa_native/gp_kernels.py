"""The kernels K(u, w) of CCS (12), (14): the one table of kernel names, their check, and K on
pairs of points. Used by the label samplers (:func:`lsa_native.data.kernel_gp_prompts`,
:class:`lsa_native.sampling.KernelGPPrompts`) and the baselines (:mod:`lsa_native.baselines`
re-exports this module's names); the experiments' kernel choices derive from :data:`KERNELS`.
"""
from __future__ import annotations

import numpy as np

from ._validation import finite_output, positive_float, real_array

__all__ = ["KERNELS", "BANDWIDTH_CONVENTION", "check_kernel", "kernel_matrix"]

# Order = the codes of lsa_native::GPKernel (cpp/include/lsa_native/kernel_gp.hpp).
KERNELS = ("linear", "relu", "exp")

BANDWIDTH_CONVENTION = """Kernels and bandwidth [CCS (12), (14)]: K^linear(u, w) = <u, w>,
K^relu(u, w) = max(<u, w>, 0), K^exp_σ(u, w) = exp(<u, w>/σ²) with σ = ``bandwidth`` (only "exp"
uses it). K is evaluated on the whitened inputs ξ = Σ^{-1/2} x (CCS Definition 3.3), read from a
:class:`~lsa_native.data.PromptBatch` or from ``Sigma=``. The same σ makes
:meth:`lsa_native.kernel_attention.KernelAttentionParams.functional_gd` equal
:func:`lsa_native.baselines.functional_gd`."""


def check_kernel(kernel) -> str:
    """``kernel`` if it names a kernel of :data:`KERNELS`, else a ValueError."""
    if not isinstance(kernel, str) or kernel not in KERNELS:
        raise ValueError(f"kernel: expected one of {KERNELS}, got {kernel!r}")
    return kernel


def kernel_matrix(kernel: str, X1, X2, bandwidth: float = 1.0) -> np.ndarray:
    """K(u, w) for all pairs of rows: linear <u, w>, relu max(<u, w>, 0), exp exp(<u, w>/σ²) with
    σ = ``bandwidth`` (exp only)  [CCS (12), (14)]. Pass whitened points ξ = Σ^{-1/2} x for the
    kernel of CCS Definition 3.3. X1 [B, m, d], X2 [B, k, d] → [B, m, k]."""
    check_kernel(kernel)
    sigma = positive_float(bandwidth, "bandwidth")
    X1 = real_array(X1, "X1")
    X2 = real_array(X2, "X2")
    if X1.ndim < 2 or X2.ndim != X1.ndim or X1.shape[-1] != X2.shape[-1] \
            or X1.shape[:-2] != X2.shape[:-2]:
        raise ValueError(f"X1, X2: expected shapes [..., m, d] and [..., k, d] with the same batch "
                         f"and d, got {X1.shape} and {X2.shape}")
    G = X1 @ np.swapaxes(X2, -1, -2)
    if kernel == "linear":
        K = G
    elif kernel == "relu":
        K = np.maximum(G, 0)
    else:
        with np.errstate(over="ignore"):
            K = np.exp(G / sigma / sigma)  # (σ² itself may overflow a Python float)
    return finite_output(K, "K", "exp(<u, w>/σ²) overflows: use a larger bandwidth")
