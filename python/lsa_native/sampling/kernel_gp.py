"""Native K Gaussian-process prompts [CCS Definition 3.3, Appendix H.1], addressed by (seed, step).

Covariates x = Σ^{1/2} ξ with ξ uniform on the unit sphere; labels Y | X ~ N(0, K_+(X)) with
K_ij = K(ξ_i, ξ_j) on the whitened inputs ξ = Σ^{-1/2} x and K_+ = U|D|Uᵀ. Kernels [CCS (12), (14)]:
linear <u, w>, relu max(<u, w>, 0), exp exp(<u, w>/σ²) with σ = ``bandwidth`` (exp only; the
convention of :data:`lsa_native.baselines.BANDWIDTH_CONVENTION`). The numpy reference with the same
law is :func:`lsa_native.data.kernel_gp_prompts`. :class:`CompositeKernelGPPrompts` draws the
labels of CCS Figure 4's composite kernel K♦ the same way (numpy reference:
:func:`lsa_native.experiments.ccs_prompts.composite_gp_prompts`).
"""
from __future__ import annotations

import numpy as np

from .. import _core, cuda
from .._validation import (as_out, check_flag, check_sampled, float_dtype, positive_float, positive_int,
                           real_array, real_float, rescale_hint)
from ..gp_kernels import KERNELS, check_kernel
from ..data import PromptBatch, check_covariance
from ..data import kernel_gp_prompts as data_kernel_gp_prompts

__all__ = ["KernelGPPrompts", "CompositeKernelGPPrompts", "NumpyKernelGPPrompts", "GP_KERNELS"]

# Codes of lsa_native::GPKernel (cpp/include/lsa_native/kernel_gp.hpp): positions in KERNELS, then
# the composite K♦ (CompositeKernelGPPrompts; not in KERNELS: it has parameters).
GP_KERNELS = {**{name: code for code, name in enumerate(KERNELS)}, "composite": len(KERNELS)}


def _counter(value, name: str, bits: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__}")
    if not 0 <= int(value) < 2**bits:
        raise ValueError(f"{name}: expected 0 <= {name} < 2^{bits}, got {value}")
    return int(value)


class KernelGPPrompts:
    """Immutable spec of the K-GP prompt law plus a seed; :meth:`sample` draws batches natively.

    ``spec = KernelGPPrompts(dim, context, kernel="exp", bandwidth=σ, Sigma=Σ, seed=s)``;
    ``batch = spec.sample(batch=B, step=k, dtype=np.float32)`` returns a
    :class:`~lsa_native.data.PromptBatch` whose ``E`` is the kernel-attention input Z0
    [B, d+1, n+1] (columns (x_j; y_j), last column (x_q; 0)), ``y_q`` [B] the query labels, and
    which carries its law (Σ, ξ, kernel, σ). Prompt b of step k is a pure function of
    (seed, k, b): bitwise the same for any thread count or batch chunking, and float32 and
    float64 batches are the same draws (computed in double, rounded once).

    Labels: Gram root Y = Ξθ for linear, Cholesky of K for exp (the eigendecomposition when the
    Cholesky fails at rounding level), K = UDUᵀ by Householder tridiagonalisation + implicit QL,
    Y = U|D|^{1/2}z for relu. (Until issue 23 a cyclic Jacobi did this: the eigenvectors' signs,
    hence the relu labels, and the exp labels of failed Choleskys, of a given (seed, step)
    changed with the solver; the law did not.)

    Cost per prompt O(n³) in the context n: ~n³/3 flops for a Cholesky (exp), ~7n³ for an
    eigendecomposition (relu): on one core about 0.5 s at n = 600 and 10 s at n = 1500 (relu),
    spread over ``lsa_native.set_num_threads`` threads across prompts. Ctrl-C interrupts a CPU call
    (contexts of 63 points or more poll inside each prompt); see :meth:`sample` for the GPU.
    """

    __slots__ = ("_dim", "_context", "_kernel", "_bandwidth", "_Sigma", "_seed")

    def __init__(self, dim: int, context: int, kernel: str = "exp", *, bandwidth: float = 1.0,
                 Sigma=None, seed: int = 0):
        self._set_covariates(dim, context, Sigma, seed)
        object.__setattr__(self, "_kernel", check_kernel(kernel))
        bw = positive_float(bandwidth, "bandwidth")
        if kernel == "exp" and 1 / bw / bw > _core.kernel_gp_max_exp_scale:
            raise ValueError(f"bandwidth: the exp kernel needs 1/bandwidth² <= "
                             f"{_core.kernel_gp_max_exp_scale:g} (exp overflows), got {bandwidth}")
        object.__setattr__(self, "_bandwidth", bw)

    def _set_covariates(self, dim, context, Sigma, seed) -> None:
        """d, n, Σ (checked, read-only) and the seed: the fields every K-GP law has."""
        d = positive_int(dim, "dim")
        object.__setattr__(self, "_dim", d)
        object.__setattr__(self, "_context", positive_int(context, "context"))
        S = None if Sigma is None else check_covariance(Sigma, "Sigma", d)
        if S is not None:
            S.setflags(write=False)
        object.__setattr__(self, "_Sigma", S)
        object.__setattr__(self, "_seed", _counter(seed, "seed", 64))

    def _native_kernel(self) -> dict:
        """The kernel arguments of ``_core.kernel_gp_sample`` / ``kernel_gp_sample_cuda``."""
        return {"kernel": GP_KERNELS[self._kernel], "bandwidth": self._bandwidth}

    def _batch_law(self) -> dict:
        """The kernel fields of the PromptBatch (what the baselines read)."""
        return {"kernel": self._kernel, "bandwidth": self._bandwidth}

    def __setattr__(self, name, value):
        raise AttributeError("KernelGPPrompts is immutable")

    dim = property(lambda self: self._dim, doc="d")
    context = property(lambda self: self._context, doc="n (context points per prompt)")
    kernel = property(lambda self: self._kernel, doc="'linear' | 'relu' | 'exp' ('composite': K♦)")
    bandwidth = property(lambda self: self._bandwidth, doc="σ of exp(<u, w>/σ²) (None for K♦)")
    Sigma = property(lambda self: self._Sigma, doc="Σ [d, d] (None: identity)")
    seed = property(lambda self: self._seed, doc="the 64-bit Philox seed")

    def __repr__(self) -> str:
        return (f"KernelGPPrompts(dim={self._dim}, context={self._context}, kernel={self._kernel!r}, "
                f"bandwidth={self._bandwidth}, Sigma={'None' if self._Sigma is None else '<array>'}, "
                f"seed={self._seed})")

    def sample(self, batch: int, step: int = 0, dtype=np.float32, *, out=None,
               return_xi: bool = True, device: str = "cpu") -> PromptBatch:
        """Prompts b = 0..batch−1 of training step ``step`` (0 <= step < 2^32).

        ``out=(Z0, y_q)``: preallocated C-contiguous arrays [B, d+1, n+1] and [B] of ``dtype`` to
        write into (no allocation in training loops). ``return_xi=False`` skips storing ξ (the
        batch then recomputes it from Σ when a baseline asks).

        ``device="cuda"``: drawn on the GPU, one thread per prompt running the CPU's per-prompt
        code on the same Philox streams, so each prompt equals the CPU's up to the rounding of the
        device's exp/log/sqrt/sin/cos (an eigen route, relu's, can amplify that rounding where two
        eigenvalues of K are close). ``out`` then holds CUDA arrays (any library with
        ``__cuda_array_interface__``); ``y_q`` is checked for overflow (one copy of B numbers).
        One GPU thread draws a whole prompt, so the device pays off for CCS-size contexts (n ≲ 100);
        a GPU call is not interrupted by Ctrl-C. The batch's ``E`` and ``y_q`` are CUDA arrays
        (:class:`lsa_native.cuda.DeviceArray` unless given); ``X``, ``y``, ``x_q`` and ξ are not
        kept (None: slice ``E`` on the device, or sample on the CPU for baselines)."""
        B = positive_int(batch, "batch")
        k = _counter(step, "step", 32)
        dt = float_dtype(dtype)
        return_xi = check_flag(return_xi, "return_xi")
        if cuda.check_device(device) == "cuda":
            return self._sample_cuda(B, k, dt, out)
        d, n = self._dim, self._context
        Z0, y_q = (None, None) if out is None else out
        Z0 = as_out(Z0, (B, d + 1, n + 1), dt, "out[0] (Z0)")
        y_q = as_out(y_q, (B,), dt, "out[1] (y_q)", inputs={"out[0] (Z0)": Z0})
        xi = np.empty((B, n + 1, d), dt) if return_xi else None
        _core.kernel_gp_sample(seed=self._seed, step=k, Sigma=self._Sigma, Z0=Z0, y_q=y_q, xi=xi,
                               **self._native_kernel())
        # One pass over the draws: negligible next to the O(n³) factorization per prompt.
        check_sampled(("E (covariates)", Z0[:, :d], self._covariates_hint(dt)),
                      ("E (labels)", Z0[:, d], self._labels_hint(dt)),
                      ("y_q", y_q, self._labels_hint(dt)))
        Sigma = np.eye(d) if self._Sigma is None else self._Sigma
        return PromptBatch(X=np.swapaxes(Z0[:, :d, :n], 1, 2), y=Z0[:, d, :n], x_q=Z0[:, :d, n],
                           y_q=y_q, w=None, E=Z0, Sigma=Sigma,
                           xi=None if xi is None else xi[:, :n], xi_q=None if xi is None else xi[:, n],
                           **self._batch_law())


    def _covariates_hint(self, dt: np.dtype) -> str:
        return f"Sigma is too large for {dt}: {rescale_hint('Sigma', dt)}"

    def _labels_hint(self, dt: np.dtype) -> str:
        if self._kernel == "exp":
            return (f"bandwidth {self._bandwidth} makes exp(<u, w>/σ²) too large for {dt}: use a "
                    "larger bandwidth" + (" or dtype=float64" if dt != np.float64 else ""))
        return self._covariates_hint(dt)

    def _sample_cuda(self, B: int, k: int, dt: np.dtype, out) -> PromptBatch:
        d, n = self._dim, self._context
        shapes = {"out[0] (Z0)": (B, d + 1, n + 1), "out[1] (y_q)": (B,)}
        if out is None:
            arrays = [cuda.DeviceArray(list(shape), dt) for shape in shapes.values()]
        else:
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise TypeError("out: expected a pair (Z0, y_q) of CUDA arrays")
            arrays = list(out)
            for a, (name, shape) in zip(arrays, shapes.items()):
                if not cuda.is_cuda_array(a):
                    raise TypeError(f"{name}: expected a CUDA array with device='cuda', got "
                                    f"{type(a).__name__}")
                v = cuda.view(a, name)
                if v.shape != shape or v.dtype != dt or v.readonly:
                    raise ValueError(f"{name}: expected a writable {dt} CUDA array of shape "
                                     f"{shape}, got {v.dtype} {v.shape}")
        Z0, y_q = arrays
        _core.kernel_gp_sample_cuda(dtype=dt.name, seed=self._seed, step=k, Sigma=self._Sigma,
                                    batch=B, d=d, n=n, Z0=cuda.view(Z0, "Z0").ptr,
                                    y_q=cuda.view(y_q, "y_q").ptr, xi=0, **self._native_kernel())
        # The query labels come back (B numbers, once per resample): an overflow of the labels
        # shows there; the covariates are bounded by Σ's check at construction.
        check_sampled(("y_q", cuda.to_host(y_q), self._labels_hint(dt)))
        Sigma = np.eye(d) if self._Sigma is None else self._Sigma
        return PromptBatch(X=None, y=None, x_q=None, y_q=y_q, w=None, E=Z0, Sigma=Sigma,
                           **self._batch_law())


class CompositeKernelGPPrompts(KernelGPPrompts):
    """K♦-GP prompts of CCS Appendix D (Figure 4): Y | X ~ N(0, K♦_+(ξ)) with
    K♦(u, v) = α<G₁u, G₁v> + (1 − α)exp<G₂u, G₂v>, G₁ = diag(g1), G₂ = diag(g2), on the
    covariates of :class:`KernelGPPrompts` (x = Σ^{1/2}ξ, ξ uniform on the sphere).

    ``CompositeKernelGPPrompts(dim, context, alpha, g1, g2, Sigma=Σ, seed=s)``: α in [0, 1], g1, g2
    [dim] finite, max g2ₖ² <= ``_core.kernel_gp_max_exp_scale`` (exp<G₂u, G₂v> <= e^{max g2ₖ²} on
    the sphere). :meth:`sample` (CPU or ``device="cuda"``) is :class:`KernelGPPrompts`'s, on the same
    Philox streams and per-prompt code: K♦ with α < 1 is positive definite (its exp part is), so
    its labels take the exp kernel's route, Y = L z by Cholesky (the eigendecomposition when the
    Cholesky fails at rounding level); with α = 1, K♦ = (ΞG₁)(ΞG₁)ᵀ and Y = ΞG₁θ (the linear
    kernel's Gram route, θ ~ N(0, I_d)). So α = 0 with g2 = 1/σ is the exp kernel (up to rounding)
    and α = 1 with g1 = 1 the linear kernel (bitwise). The numpy sampler of the same law is
    :class:`lsa_native.experiments.ccs_prompts.CompositeGPPrompts` (other draws). The batch's
    ``kernel`` is None: the baselines know K♦ only through
    :func:`lsa_native.experiments.ccs_prompts.bayes_prediction`."""

    __slots__ = ("_alpha", "_g1", "_g2")

    def __init__(self, dim: int, context: int, alpha: float, g1, g2, *, Sigma=None, seed: int = 0):
        self._set_covariates(dim, context, Sigma, seed)
        d = self._dim
        a = real_float(alpha, "alpha")
        if not 0 <= a <= 1:
            raise ValueError(f"alpha: expected a number in [0, 1], got {alpha}")
        g1 = real_array(g1, "g1", (d,)).copy()
        g2 = real_array(g2, "g2", (d,)).copy()
        if np.max(g2 * g2) > _core.kernel_gp_max_exp_scale:
            raise ValueError(f"g2: the composite kernel needs max g2² <= "
                             f"{_core.kernel_gp_max_exp_scale:g} (exp overflows), got "
                             f"{np.max(g2 * g2):g}")
        for g in (g1, g2):
            g.setflags(write=False)
        object.__setattr__(self, "_kernel", "composite")
        object.__setattr__(self, "_bandwidth", None)
        object.__setattr__(self, "_alpha", a)
        object.__setattr__(self, "_g1", g1)
        object.__setattr__(self, "_g2", g2)

    alpha = property(lambda self: self._alpha, doc="α of K♦")
    g1 = property(lambda self: self._g1, doc="the diagonal of G₁ [d] (read-only)")
    g2 = property(lambda self: self._g2, doc="the diagonal of G₂ [d] (read-only)")

    def __repr__(self) -> str:
        return (f"CompositeKernelGPPrompts(dim={self._dim}, context={self._context}, "
                f"alpha={self._alpha}, g1={self._g1.tolist()}, g2={self._g2.tolist()}, "
                f"Sigma={'None' if self._Sigma is None else '<array>'}, seed={self._seed})")

    def _native_kernel(self) -> dict:
        return {"kernel": GP_KERNELS["composite"], "bandwidth": 1.0, "alpha": self._alpha,
                "g1": self._g1, "g2": self._g2}

    def _batch_law(self) -> dict:
        return {"kernel": None, "bandwidth": None}

    def _labels_hint(self, dt: np.dtype) -> str:
        return (f"g2 makes exp<G2u, G2v> too large for {dt}: use a smaller g2"
                + (" or dtype=float64" if dt != np.float64 else ""))


class NumpyKernelGPPrompts(KernelGPPrompts):
    """The same spec drawn by the numpy reference :func:`lsa_native.data.kernel_gp_prompts` with
    ``np.random.default_rng([seed, step])`` (batched eigh): same law, other draws; for comparisons
    and machines without the native module's speed needs."""

    __slots__ = ()

    def sample(self, batch: int, step: int = 0, dtype=np.float32, *, out=None,
               return_xi: bool = True, device: str = "cpu") -> PromptBatch:
        if device != "cpu":
            raise ValueError(f"device: the numpy sampler runs on the CPU only, got {device!r}")
        if out is not None:
            raise TypeError("out: not supported by the numpy sampler")
        rng = np.random.default_rng([self._seed, _counter(step, "step", 32)])
        return data_kernel_gp_prompts(rng, batch, self._dim, self._context, self._kernel,
                                      bandwidth=self._bandwidth, Sigma=self._Sigma, dtype=dtype)
