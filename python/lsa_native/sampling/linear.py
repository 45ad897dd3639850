"""Native linear-regression prompts [ZFB 3.3, 4.2, 4.3; CCS H.1] and fused sampled LSA steps.

``LinearPrompts`` is an immutable spec (the law and a seed). ``spec.sample(batch=B, step=k)`` draws
the prompts of step k — a pure function of (seed, step, prompt index), identical for any thread
count — and ``spec.lsa_loss_and_grad(W_pv, W_kq, batch=B, step=k)`` is the training step on them
without materializing E. The rng-based numpy samplers of ``lsa_native.data`` are the references.
"""
from __future__ import annotations

import dataclasses
import numbers
from typing import Callable, Optional

import numpy as np

from .. import _core
from .. import cuda as _cuda
from .._validation import (as_array, check_finite_result, check_flag, check_no_overlap, check_sampled, fits_dtype,
                           float_dtype, nonnegative_float, positive_int, real_array, rescale_hint)
from ..covariance_laws import COVARIANCE_LAWS, Z_MAX, lambda_max, parse_law
from ..data import PromptBatch, check_covariance
from .random import check_seed, check_step

__all__ = ["LinearPrompts", "COVARIANCE_LAWS"]

def _row_scale(chol) -> float:
    """max_k Σ_m |F_km|: |(F z)_k| <= it · max|z|."""
    return float(np.abs(chol).sum(axis=1).max())


def _factor(Lambda, d, name):
    if Lambda is None:
        return None
    return np.ascontiguousarray(np.linalg.cholesky(check_covariance(Lambda, name, d)))


@dataclasses.dataclass(frozen=True, eq=False)
class LinearPrompts:
    """Law of ZFB 3.3 training prompts, with the options of ZFB 4.2-4.3 and CCS H.1.

    w ~ N(0, I_d) (or uniform over ``tasks`` = κ fixed tasks drawn from the seed), x_i, x_q iid
    N(0, Λ) (``covariates="sphere"``: Λ^{1/2} ξ with ξ uniform on the unit sphere, CCS H.1),
    y_i = <w, x_i> + σ ε_i with σ = ``noise_std``, target y_q = <w, x_q> (+ σ ε_q only with
    ``query_noise=True``: off by default, the noiseless target of ZFB 3.3).
    ``covariance_law``: a random diagonal Λ_τ per prompt [ZFB 4.3], e.g. ``("exponential", c)``;
    then ``Lambda`` must be None. ``query_Lambda``: the query's own covariance (query shift, ZFB 4.2).
    Immutable; ``replace(**changes)`` returns a modified copy (covariate shift: another Λ; test
    length M ≠ N: ``context=M``).
    """

    dim: int
    context: int
    Lambda: Optional[np.ndarray] = None
    noise_std: float = 0.0
    tasks: Optional[int] = None
    covariance_law: object = None
    covariates: str = "gaussian"
    seed: int = 0
    query_noise: bool = False
    query_Lambda: Optional[np.ndarray] = None

    def __init__(self, dim, context, Lambda=None, *, noise_std=0.0, tasks=None, covariance_law=None,
                 covariates="gaussian", seed=0, query_noise=False, query_Lambda=None):
        d = positive_int(dim, "dim")
        n = positive_int(context, "context")
        noise = nonnegative_float(noise_std, "noise_std")
        if tasks is not None:
            if isinstance(tasks, bool) or not isinstance(tasks, numbers.Integral):
                raise TypeError(f"tasks: expected an integer kappa >= 1 or None, got {tasks!r}")
            if not 1 <= int(tasks) <= 2**32:
                raise ValueError(f"tasks: expected 1 <= kappa <= 2**32 (None: fresh tasks), got {tasks}")
        if covariates not in ("gaussian", "sphere"):
            raise ValueError(f"covariates: expected 'gaussian' or 'sphere', got {covariates!r}")
        law = parse_law(covariance_law)
        if law[0] != "fixed" and Lambda is not None:
            raise ValueError("Lambda: a random covariance law replaces Lambda; pass one or the other")
        chol = _factor(Lambda, d, "Lambda")
        qchol = _factor(query_Lambda, d, "query_Lambda")
        set_ = object.__setattr__
        set_(self, "dim", d)
        set_(self, "context", n)
        set_(self, "Lambda", None if Lambda is None else check_covariance(Lambda, "Lambda", d))
        set_(self, "noise_std", noise)
        set_(self, "tasks", None if tasks is None else int(tasks))
        set_(self, "covariance_law", covariance_law)
        set_(self, "covariates", covariates)
        set_(self, "seed", check_seed(seed))
        set_(self, "query_noise", check_flag(query_noise, "query_noise"))
        set_(self, "query_Lambda", None if query_Lambda is None else check_covariance(query_Lambda, "query_Lambda", d))
        spec = {"dim": d, "context": n, "seed": self.seed, "chol": chol, "query_chol": qchol,
                "noise_std": noise, "query_noise": self.query_noise, "tasks": self.tasks or 0,
                "law": law[0], "law_a": law[1], "law_b": law[2], "law_p": law[3],
                "covariates": covariates}
        set_(self, "_spec", spec)
        set_(self, "_law_tuple", law)
        _core.sample_linear_prompts(spec, 1, 0)  # native validation of the whole spec, once
        # What scales the covariates, {argument: s} with |x_k| <= s · max|z| (for the output check)
        scales = {k: _row_scale(F) for k, F in (("Lambda", chol), ("query_Lambda", qchol)) if F is not None}
        if law[0] != "fixed":
            scales["covariance_law"] = float(np.sqrt(lambda_max(law)))
        set_(self, "_x_scales", scales)

    def replace(self, **changes) -> "LinearPrompts":
        """A copy with some fields changed (e.g. ``Lambda=c * Lambda``, ``context=M``, ``seed=``)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields.update(changes)
        return LinearPrompts(fields.pop("dim"), fields.pop("context"), **fields)

    # ---- sampling ------------------------------------------------------------------------------

    def sample(self, batch: int, step: int = 0, dtype=np.float32, *,
               label_fn: Optional[Callable[[np.ndarray], np.ndarray]] = None,
               query: str = "iid", device: str = "cpu") -> PromptBatch:
        """The B prompts of training step ``step`` as a PromptBatch (X, y, x_q, y_q, w, E).

        The draws are checked once: a law whose parameters do not fit ``dtype`` is refused up
        front (ValueError naming it); draws that overflow raise FloatingPointError naming the
        output and the argument (no pass over the output when the law's bounds rule it out).

        Evaluation shifts [ZFB 4.2] (Python compositions of the native draws):
        ``label_fn``: nonlinear labels y = f(<w, x>) + σ ε (task shift), applied to context and
        query targets; f is called on <w, x> [B, N] and on <w, x_q> [B] and must return real,
        finite labels of the same shape (elementwise f, e.g. ``np.tanh``); ``query="orthogonal"``: x_q replaced by its projection onto the orthogonal
        complement of span(x_1..x_N) (needs N < d), y_q = <w, x_q> recomputed (query shift).

        ``device="cuda"``: the arrays (X, y, x_q, y_q, w, E) as CUDA ``DeviceArray``s (the law
        stays host arrays; ξ is left out), generated on the GPU by the fused step's generator
        (one warp per prompt, from the same Philox streams and per-prompt recipe as the CPU):
        equal to the CPU's up to the rounding of the device's log/sin/cos and FMA contraction
        (float64 ~1e-13 relative per entry, float32 a few ulps through sums of d terms); the
        uniform-derived choices (the pool task of each prompt, the two-point law's λ) are the
        CPU's exactly. With ``label_fn`` or ``query="orthogonal"`` (numpy compositions) the batch is
        drawn on the CPU and copied (one copy per array; then bitwise the CPU's). A prompt must fit
        in the GPU's shared memory (else a ValueError naming the shape: sample on the CPU). Without
        CUDA kernels or a GPU: ValueError naming ``device``.
        """
        on_gpu = _cuda.check_device(device) == "cuda"
        B = _batch(batch, self.dim, self.context)
        dt = self._dtype(dtype)
        if query not in ("iid", "orthogonal"):
            raise ValueError(f"query: expected 'iid' or 'orthogonal', got {query!r}")
        d, N = self.dim, self.context
        if query == "orthogonal" and N >= d:
            raise ValueError(f"query='orthogonal' needs context N < dim d, got N={N}, d={d}")
        if label_fn is not None and not callable(label_fn):
            raise TypeError(f"label_fn: expected a callable mapping <w, x> [B, N] to labels, got "
                            f"{type(label_fn).__name__}")
        if on_gpu and label_fn is None and query == "iid":
            return self._sample_on_device(B, check_step(step), dt)
        E = np.empty((B, d + 1, N + 1), dt)
        y_q = np.empty(B, dt)
        X = np.empty((B, N, d), dt)
        y = np.empty((B, N), dt)
        w = np.empty((B, d), dt)
        x_q = np.empty((B, d), dt)
        _core.sample_linear_prompts(self._spec, B, check_step(step), E=E, y_q=y_q, X=X, y=y, w=w, x_q=x_q)
        if query == "orthogonal":  # |P x_q| <= |x_q|: the bounds of the draws still hold
            Q, _ = np.linalg.qr(np.swapaxes(X, 1, 2).astype(np.float64))  # [B, d, N] orthonormal span
            xq = x_q.astype(np.float64)
            xq = xq - np.einsum("bdn,bn->bd", Q, np.einsum("bdn,bd->bn", Q, xq))
            x_q[...] = xq
            E[:, :d, N] = x_q
            with np.errstate(over="ignore"):  # checked below
                y_q[...] = np.einsum("bd,bd->b", xq, w)
        self._check_draws(E, y_q)
        if label_fn is not None:
            noise = y.astype(np.float64) - np.einsum("bnd,bd->bn", X.astype(np.float64), w.astype(np.float64))
            lin_q = np.einsum("bd,bd->b", x_q.astype(np.float64), w.astype(np.float64))
            q_noise = y_q.astype(np.float64) - lin_q
            with np.errstate(over="ignore"):  # checked below
                y[...] = _labels(label_fn, y.astype(np.float64) - noise) + noise
                y_q[...] = _labels(label_fn, lin_q) + q_noise
            check_sampled(("y", y, "label_fn: its labels plus the noise overflow; rescale them"),
                          ("y_q", y_q, "label_fn: its labels plus the noise overflow; rescale them"))
            E[:, d, :N] = y
        arrays = {"X": X, "y": y, "x_q": x_q, "y_q": y_q, "w": w, "E": E}
        if on_gpu:
            out = self._batch(**arrays)
            return dataclasses.replace(out, xi=None, xi_q=None,
                                       **{k: _cuda.to_device(a) for k, a in arrays.items()})
        return self._batch(**arrays)

    def _sample_on_device(self, B: int, step: int, dt) -> PromptBatch:
        """sample(device="cuda") without label_fn / query shift: every array generated on the GPU."""
        d, N = self.dim, self.context
        shapes = {"X": (B, N, d), "y": (B, N), "x_q": (B, d), "y_q": (B,), "w": (B, d),
                  "E": (B, d + 1, N + 1)}
        arrays = {k: _cuda.empty(None, shape, dt, -1) for k, shape in shapes.items()}
        _core.sample_linear_prompts_cuda(self._spec, B, step, dt, **arrays)
        self._check_device_draws(arrays["E"], arrays["y_q"])
        return self._batch(with_xi=False, **arrays)

    def _batch(self, with_xi: bool = True, **arrays) -> PromptBatch:
        """A PromptBatch carrying the law where PromptBatch has the fields for it (Λ or Σ, the
        whitened inputs ξ = M^{-1/2} x with the symmetric root unless ``with_xi`` is False, the
        noise)."""
        names = {f.name for f in dataclasses.fields(PromptBatch)}
        law = {"noise_std": self.noise_std, "query_noise": self.query_noise}
        if self.covariance_law is None:  # one covariance for all prompts
            M = np.eye(self.dim) if self.Lambda is None else self.Lambda
            law["Sigma" if self.covariates == "sphere" else "Lambda"] = M
            if "xi" in names and with_xi:
                w_, U = np.linalg.eigh(M)
                inv_root = (U / np.sqrt(w_)) @ U.T  # M^{-1/2}
                law["xi"] = arrays["X"].astype(np.float64) @ inv_root
                if self.query_Lambda is None:
                    law["xi_q"] = arrays["x_q"].astype(np.float64) @ inv_root
        return PromptBatch(**arrays, **{k: v for k, v in law.items() if k in names})

    def sample_embedding(self, batch: int, step: int = 0, dtype=np.float32, *, E=None, y_q=None,
                         device: str = "auto"):
        """(E [B, d+1, N+1], y_q [B]) of step ``step`` only: the training fast path (optional
        preallocated ``E``/``y_q`` of the exact dtype are filled in place).

        ``device="cuda"``: generated on the GPU (as :meth:`sample`'s: the CPU's values up to the
        rounding of the device's log/sin/cos, the uniform-derived choices exactly), into ``E``/``y_q``
        when given (C-contiguous CUDA arrays of any library with ``__cuda_array_interface__``, of
        ``dtype``'s dtype and the shapes above: no allocation in a training loop), else into new
        :class:`lsa_native.cuda.DeviceArray`s. The call only queues the kernel (nothing waits) for
        every usual law: the draws' bounds prove them finite; otherwise (a huge Λ or σ) they are
        read back once and checked. ``"auto"`` (the default): "cuda" when ``E`` or ``y_q`` is a CUDA
        array, else "cpu".
        Without CUDA kernels or a GPU: ValueError naming ``device``."""
        B = positive_int(batch, "batch")
        dt = self._dtype(dtype)
        d, N = self.dim, self.context
        if _cuda.resolve_device(device, E=E, y_q=y_q) == "cuda":
            _cuda.check_device("cuda")
            E = _device_out(E, (B, d + 1, N + 1), dt)
            y_q = _device_out(y_q, (B,), dt)
            _check_device_overlap(E, y_q)  # the native call checks each output (naming it)
            _core.sample_linear_prompts_cuda(self._spec, B, check_step(step), dt, E=E, y_q=y_q)
            self._check_device_draws(E, y_q)
            return E, y_q
        E = _out(E, (B, d + 1, N + 1), dt, "E")
        y_q = _out(y_q, (B,), dt, "y_q")
        check_no_overlap("y_q", y_q, {"E": E})
        _core.sample_linear_prompts(self._spec, B, check_step(step), E=E, y_q=y_q)
        self._check_draws(E, y_q)
        return E, y_q

    def sample_lambdas(self, batch: int, step: int = 0, dtype=np.float64) -> np.ndarray:
        """Diagonals [B, d] of the per-prompt Λ_τ of step ``step`` (the diagonal of Λ when fixed)."""
        B = positive_int(batch, "batch")
        lam = np.empty((B, self.dim), self._dtype(dtype))
        _core.sample_linear_prompts(self._spec, B, check_step(step), lam=lam)
        check_sampled(("lambdas", lam, self._cause(self._x_cause(), lam.dtype)))  # [B, d]: cheap
        return lam

    # ---- the output check: proven finite up front, else one pass over the draws ----------------

    def _factors(self) -> dict:
        """{argument: its Cholesky factor} of the fixed covariances."""
        out = {"Lambda": self._spec["chol"], "query_Lambda": self._spec["query_chol"]}
        return {k: v for k, v in out.items() if v is not None}

    def _dtype(self, dtype) -> np.dtype:
        """The sampling dtype, with the law's parameters representable in it (the native plan
        converts them to it): overflow, or a scale rounding to 0, refused up front."""
        dt = _float_dtype(dtype)
        for name, F in self._factors().items():
            fits_dtype(F, name, dt)
            fits_dtype(np.diag(F), name, dt, nonzero=True)
        fits_dtype(self.noise_std, "noise_std", dt, nonzero=True)
        if self._law_tuple[0] != "fixed":
            fits_dtype(self._law_tuple[1:], "covariance_law", dt, nonzero=True)
        return dt

    def _x_cause(self) -> str:
        """The argument that scales the covariates (the largest factor)."""
        scales = self._x_scales
        return max(scales, key=scales.get) if scales else "Lambda"

    def _bounds(self) -> tuple[float, float, float]:
        """Bounds of |x|, |y| and λ over every draw: |x_k| <= max_k Σ_m |F_km| · z_max (or
        √λ_max · z_max), |y| <= d · z_max · |x|_max + σ z_max, λ <= λ_max (random laws; 0 else)."""
        x = max(self._x_scales.values(), default=1.0) * Z_MAX
        lam = lambda_max(self._law_tuple) if self._law_tuple[0] != "fixed" else 0.0
        return x, self.dim * Z_MAX * x + self.noise_std * Z_MAX, lam

    def _cause(self, name: str, dt) -> str:
        return f"{name} is too large for {np.dtype(dt)}: {rescale_hint(name, dt)}"

    def _draws_proven_finite(self, dtype, bounds=None) -> bool:
        """Whether the law's bounds (``bounds``: :meth:`_bounds` when the caller has them) prove
        every draw finite in ``dtype`` (every usual law)."""
        _, y_max, lam_max = self._bounds() if bounds is None else bounds
        return max(y_max, lam_max) < float(np.finfo(dtype).max) / 4  # room for the sums' rounding

    def _check_device_draws(self, E, y_q) -> None:
        """:meth:`_check_draws` for CUDA arrays: nothing to read when the bounds prove the draws
        finite, else one copy to the host and the pass there."""
        dt = np.dtype(_core.array_info(E, "E")["dtype"])
        if not self._draws_proven_finite(dt):
            self._check_draws(_cuda.to_host(E), _cuda.to_host(y_q))

    def _check_draws(self, E, y_q) -> None:
        """E's covariates and labels and y_q finite: free when the law's bounds prove it (every
        usual law), else one pass over them naming the argument that overflowed."""
        bounds = self._bounds()
        if self._draws_proven_finite(E.dtype, bounds):
            return
        y_max = bounds[1]
        d = self.dim
        noise_part = self.noise_std * Z_MAX
        y_cause = "noise_std" if noise_part >= y_max - noise_part else self._x_cause()
        check_sampled(("E (covariates)", E[:, :d], self._cause(self._x_cause(), E.dtype)),
                      ("E (labels)", E[:, d], self._cause(y_cause, E.dtype)),
                      ("y_q", y_q, self._cause(y_cause, E.dtype)))

    # ---- fused training step -------------------------------------------------------------------

    def lsa_loss_and_grad(self, W_pv, W_kq, *, batch: int, step: int = 0, method: str = "tokens",
                          dtype=np.float32, device: str = "auto"):
        """(L, ∂L/∂W^PV, ∂L/∂W^KQ) of L = (1/(2B)) Σ_b (ŷ_b − y_q,b)² [ZFB (3.7)] on the prompts of
        ``step``, as ``lsa.loss_and_grad`` would give on ``sample_embedding(batch, step)``.

        ``method="tokens"``: each prompt is generated in a per-thread scratch and consumed by the
        LSA kernel, E never written to memory (the same prompts as ``sample``). ``"wishart"``: the
        prompt enters only through G = A S Aᵀ + e_q e_qᵀ/N with S drawn by the Bartlett
        decomposition, O(d²) per prompt whatever N (same law, other draws; Gaussian covariates,
        N >= d, or d + 1 with label noise). ``"auto"``: wishart where it applies, else tokens.

        ``device``: ``"cpu"``, ``"cuda"`` (the prompts are generated and consumed on the GPU from the
        same Philox stream, so the step equals the CPU step up to rounding: about 1e-12 relative in
        float64), or ``"auto"`` (``"cuda"`` when W_pv or W_kq is a CUDA array, else ``"cpu"``). The
        parameters may be numpy or CUDA arrays (they are tiny and copied); the gradients are numpy
        arrays. ``"cuda"`` without CUDA kernels in the build, or without a GPU, raises ValueError.
        """
        device = _cuda.resolve_device(device, W_pv=W_pv, W_kq=W_kq)
        step_fn = self.fused_step(batch=batch, method=method, dtype=dtype, device=device)
        if device == "cuda":
            W_pv = W_pv if isinstance(W_pv, np.ndarray) else _cuda.to_host(W_pv)
            W_kq = W_kq if isinstance(W_kq, np.ndarray) else _cuda.to_host(W_kq)
        r, dt = self.dim + 1, step_fn.dtype
        W_pv = as_array(W_pv, (r, r), dt, "W_pv")
        W_kq = as_array(W_kq, (r, r), dt, "W_kq")
        d_pv = np.empty((r, r), dt)
        d_kq = np.empty((r, r), dt)
        loss = step_fn(W_pv, W_kq, check_step(step), d_pv, d_kq)
        # The fused sampler + LSA kernel raises no native flag: check the (small) outputs here.
        for name, out in (("loss", loss), ("dW_pv", d_pv), ("dW_kq", d_kq)):
            check_finite_result(out, {}, name)
        return float(loss), d_pv, d_kq

    def _fused_step_fn(self, native, batch, method, dtype, device):
        """fused_step's and multihead_fused_step's closure over the checked arguments."""
        B = positive_int(batch, "batch")
        dt = self._dtype(dtype)
        method = self._fused_method(method)
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device: expected 'cpu' or 'cuda', got {device!r}")
        spec = self._spec

        def step_fn(W_pv, W_kq, step, d_W_pv, d_W_kq, loss=None):
            return native(spec, B, step, method, W_pv, W_kq, d_W_pv, d_W_kq, device, loss)

        step_fn.dtype, step_fn.method = dt, method
        return step_fn

    def fused_step(self, *, batch: int, method: str = "tokens", dtype=np.float32, device: str = "cpu"):
        """The step of :meth:`lsa_loss_and_grad` with its arguments checked once, for a training
        loop: ``step_fn(W_pv, W_kq, step, d_W_pv, d_W_kq) -> loss`` writes the gradients into the
        last two and returns L. The caller passes C-contiguous ``step_fn.dtype`` arrays [d+1, d+1]
        (host arrays; the native call still refuses others) and a step in [0, 2^32); the result is
        not checked for finiteness (the loop does). ``device``: "cpu" or "cuda" (then the
        parameters and gradients may be CUDA arrays, read and written in place). ``loss=``: a
        float64 array of shape (1,) (a CUDA array with CUDA parameters) receiving L (NaN is
        returned): with CUDA arrays the step then waits for nothing."""
        return self._fused_step_fn(_core.linear_prompts_lsa_loss_and_grad, batch, method, dtype, device)

    def multihead_fused_step(self, *, batch: int, method: str = "tokens", dtype=np.float32,
                             device: str = "cpu"):
        """The fused H-head step (:mod:`lsa_native.multihead`, merged W^KQ) with its arguments checked
        once, as :meth:`fused_step`: ``step_fn(W_pv, W_kq, step, d_W_pv, d_W_kq, loss=None) -> loss``
        on C-contiguous ``step_fn.dtype`` arrays [H, d+1, d+1] (H from W_pv; H = 1 is the one-head
        step, bitwise), L = (1/(2B)) Σ_b (ŷ_b − y_q,b)² on the prompts of ``step``, the gradients
        written into the last two. ``method="tokens"``: the prompts of ``sample_embedding`` (on the
        CPU drawn a few at a time in cache; on the GPU drawn into a scratch and consumed by the
        H-head kernel); ``"wishart"``: the Gram route, G = A S Aᵀ + e_q e_qᵀ/N with S drawn by the
        Bartlett decomposition, O(H d²) per prompt whatever N (same law, other draws); ``"auto"``
        as :meth:`fused_step`. ``device``: "cpu" or "cuda" (one GPU thread per Wishart prompt on
        the CPU step's Philox streams: the CPU step to rounding, about 1e-12 relative in float64;
        the parameters and gradients may then be CUDA arrays, read and written in place).
        ``loss=``: a float64 array of shape (1,) (a CUDA array with CUDA parameters) receiving L
        (NaN is returned): on the GPU the step then waits for nothing. The result is not checked
        for finiteness."""
        return self._fused_step_fn(_core.linear_prompts_multihead_loss_and_grad, batch, method, dtype, device)

    def embedding_step(self, *, batch: int, dtype=np.float32):
        """:meth:`sample_embedding` on the CPU with its arguments checked once, for a training loop:
        ``draw(step, E, y_q)`` writes the prompts of ``step`` into ``E`` [B, d+1, N+1] and ``y_q``
        [B], C-contiguous, separate host arrays of ``draw.dtype`` that the caller allocates once
        (the native call checks their shapes). The draws are checked as sample_embedding's (free
        when the law's bounds prove them finite, every usual law)."""
        B = positive_int(batch, "batch")
        dt = self._dtype(dtype)
        spec, native = self._spec, _core.sample_linear_prompts
        check = None if self._draws_proven_finite(dt) else self._check_draws

        def draw(step, E, y_q):
            native(spec, B, check_step(step), E=E, y_q=y_q)
            if check is not None:
                check(E, y_q)

        draw.dtype = dt
        return draw

    def _fused_method(self, method: str) -> str:
        """"tokens" or "wishart" ("auto": wishart where it applies)."""
        if method not in ("tokens", "wishart", "auto"):
            raise ValueError(f"method: expected 'tokens', 'wishart' or 'auto', got {method!r}")
        if method == "auto":
            return "wishart" if self.wishart_applies else "tokens"
        return method

    @property
    def wishart_applies(self) -> bool:
        """True when method="wishart" is exact for this law: Gaussian covariates and N >= d (d + 1
        with label noise), so that the Bartlett decomposition exists."""
        need = self.dim + (1 if self.noise_std > 0 else 0)
        return self.covariates == "gaussian" and self.context >= need

    def __repr__(self) -> str:
        opts = [f"noise_std={self.noise_std}"] if self.noise_std else []
        for name in ("tasks", "covariance_law", "query_Lambda"):
            if getattr(self, name) is not None:
                opts.append(f"{name}={getattr(self, name)!r}")
        if self.covariates != "gaussian":
            opts.append(f"covariates={self.covariates!r}")
        if self.query_noise:
            opts.append("query_noise=True")
        lam = "" if self.Lambda is None else ", Lambda=..."
        return f"LinearPrompts({self.dim}, {self.context}{lam}, {', '.join(opts + [f'seed={self.seed}'])})"


def _labels(label_fn, z: np.ndarray) -> np.ndarray:
    """label_fn(z) checked: real, finite, one label per input (z's shape [B, N] or [B])."""
    return real_array(label_fn(z), f"label_fn output (labels for inputs of shape {z.shape})",
                      shape=z.shape, nonempty=False)


def _batch(batch, d: int, n: int) -> int:
    """The prompt count, refused when the batch could never be allocated (over 2**50 values)."""
    B = positive_int(batch, "batch")
    if B * (d + 1) * (n + 1) > 2**50:
        raise ValueError(f"batch: {B} prompts of {(d + 1) * (n + 1)} values exceed any memory")
    return B


def _float_dtype(dtype) -> np.dtype:
    return float_dtype(dtype, "dtype")


def _device_out(a, shape, dt):
    """A CUDA output of ``shape`` and dtype ``dt``: a new DeviceArray for None, else ``a`` as given
    (``sample_linear_prompts_cuda`` checks it: a writeable C-contiguous CUDA array of that dtype
    and shape)."""
    return _cuda.empty(None, shape, dt, -1) if a is None else a


def _check_device_overlap(E, y_q) -> None:
    """ValueError when the CUDA outputs E and y_q share memory (the kernel writes both; the native
    output checks look at each array alone)."""
    spans = []
    for name, a in (("E", E), ("y_q", y_q)):
        info = _core.array_info(a, name)
        size = int(np.prod(info["shape"], dtype=np.int64)) * np.dtype(info["dtype"]).itemsize
        spans.append((int(info["ptr"]), int(info["ptr"]) + size))
    (a0, a1), (b0, b1) = spans
    if a0 < b1 and b0 < a1:
        raise ValueError("y_q: overlaps the memory of E; pass a separate output array (or None)")


def _out(a, shape, dt, name):
    if a is None:
        return np.empty(shape, dt)
    if not isinstance(a, np.ndarray) or a.dtype != dt or a.shape != shape or not a.flags.c_contiguous:
        raise ValueError(f"{name}: expected a C-contiguous {dt} array of shape {shape}")
    return a
