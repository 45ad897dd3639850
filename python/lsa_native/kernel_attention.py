"""Multi-layer, multi-head kernel attention of Cheng, Chen, Sra [CCS (2)-(5), (12), App. D].

    Z_{ℓ+1} = Z_ℓ + Σ_s V_ℓ^s Z_ℓ M h̃^s(B_ℓ^s X_ℓ, C_ℓ^s X_ℓ)                      (3)

with h̃ in {linear, relu, exp, softmax} per head [CCS (12)], M = diag(1, …, 1, 0). TF = Z_L[d, n]
predicts −y_q (CCS (4)); :func:`predict` returns −TF.

Conventions (the package's, shared with ``lsa`` and ``population``):

- loss: **½ · mean squared error**, f = (1/(2B)) Σ_b (TF_b + y_q,b)² — half of CCS (5), which has no
  ½; the ½ matches ZFB (3.7). The native core computes this loss and its gradients (one convention,
  ``cpp/src/common/ka_recipe.hpp``); :func:`predict`'s ŷ = −TF is written by the native forward.
- signs: ``r`` is the entry of V = [[A, 0], [0, r]] of CCS Assumption 4.4. The functional-GD
  construction of CCS Prop. 3.1 has V = [[0, 0], [0, −r_ℓ]] with step sizes r_ℓ > 0, i.e.
  ``r = −step_sizes`` (:meth:`KernelAttentionParams.functional_gd` takes the step sizes).

Array API: Z0 [B, d+1, n+1] (the layout of ``lsa``), V [L, H, d+1, d+1], B, C [L, H, d, d],
``activation`` one name or a list of H names (one per head, shared by the layers). float32 or
float64 (parameters are converted to Z0's dtype); parameter-gradient batch sums run in float64.
The sparse value matrices V = [[A, 0],[0, r]] of CCS Assumption 4.4 are :func:`sparse_value`
and :func:`loss_and_grad_sparse`. :class:`KernelAttentionParams` bundles parameters for training.

Devices: :func:`forward`, :func:`predict`, :func:`vjp`, :func:`loss_and_grad` and
:func:`loss_and_grad_sparse` take ``device="auto" | "cpu" | "cuda"`` as :mod:`lsa_native.lsa` does: ``"auto"`` runs on the GPU when any array argument is a
CUDA array (CuPy, PyTorch CUDA tensors, ``__cuda_array_interface__`` / CUDA ``__dlpack__``), else on
the CPU; ``"cuda"`` with numpy arrays copies them to the GPU and the results back. CUDA arrays must
be C-contiguous with Z0's dtype and on one device; results follow Z0 (CUDA arrays of Z0's library
when Z0 is one, else numpy). The native core checks every operand once and picks the device. The
GPU reduces the parameter-gradient batch sums in a fixed order (two runs are bitwise equal). A
:class:`ForwardContext` has one layout on both devices: one saved on the GPU serves a VJP on the
CPU and vice versa (copied where it is not).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _core, cuda
from .cuda import native_operand, native_prompts
from ._validation import as_array, check_rng, positive_float, positive_int, real_array

__all__ = [
    "ACTIVATIONS",
    "forward",
    "vjp",
    "ForwardContext",
    "context_size",
    "predict",
    "predict_vjp",
    "loss_and_grad",
    "sparse_value",
    "loss_and_grad_sparse",
    "KernelAttentionParams",
]

# name → code, from the native activation table (LSA_NATIVE_ACTIVATIONS in kernel_attention.hpp).
ACTIVATIONS = {name: code for code, name in enumerate(_core.ACTIVATION_NAMES)}


def _activation_codes(activation, heads: int, name: str = "activation") -> list[int]:
    """One code per head of `activation` (a name, or a list of one name per head): the native
    rule of every entry point (TypeError/ValueError naming `name`)."""
    return list(_core.activation_codes(activation, heads, name))


def _inputs(Z0, V, B, C, **more):
    """Z0 and the parameters (and `more` inputs: y_q, d_Z_out, d_y) as the native entry points read
    them: host arrays converted to Z0's dtype, CUDA arrays as they are. The native validate()
    checks every operand (kernel_attention_dispatch.cpp)."""
    Z0, dtype = native_prompts(Z0, "Z0")
    args = [Z0] + [native_operand(a, dtype, n) for a, n in ((V, "V"), (B, "B"), (C, "C"))]
    upstream = ("d_Z_out", "d_y")  # gradients flowing in: any values (named if they reach an output)
    return args + [native_operand(a, dtype, n, finite=n not in upstream) for n, a in more.items()]


@dataclass(frozen=True)
class ForwardContext:
    """The per-prompt state saved by ``forward(..., return_context=True)`` for :func:`vjp`: the
    padded Z_ℓ, U = B X, W = C X, h̃ and Y = Z_ℓ M h̃ of every layer and head, ``data``
    [B, context_size] in Z0's dtype (Tt·((L+1)(d+1) + L·H·(2d+n+d+1)) values per prompt, Tt =
    n+1 rounded up to 8 floats / 4 doubles: 20 KiB per prompt at d = 5, n = 30, L = 3, float32).
    Valid only with the same Z0, V, B, C and activations as the forward that made it. ``data``
    is a CUDA array (of Z0's library) when the forward ran on CUDA arrays."""

    data: np.ndarray
    shape: tuple  # (B, d, n, L, H)


def context_size(dim: int, context: int, layers: int, heads: int, dtype=np.float32) -> int:
    """Values per prompt of a :class:`ForwardContext` (multiply by the itemsize for bytes)."""
    from ._validation import float_dtype

    return _core.kernel_attention_context_size(
        positive_int(dim, "dim"), positive_int(context, "context"), positive_int(layers, "layers"),
        positive_int(heads, "heads"), float_dtype(dtype) == np.float64)


def forward(Z0, V, B, C, activation, *, return_predictions: bool = False,
            return_context: bool = False, device="auto"):
    """Z_L of (3) [B, d+1, n+1]; with ``return_predictions`` also TF_ℓ = Z_ℓ[d, n] for
    ℓ = 0..L [B, L+1] (CCS Figure 2's loss vs depth); with ``return_context`` also a
    :class:`ForwardContext` for :func:`vjp` (then the VJP skips the forward recomputation, at the
    price of the context's memory). O(L·H·n²·d) per prompt.
    Returns Z_L, or a tuple (Z_L, [predictions], [context]) in that order."""
    Z0, V, B, C = _inputs(Z0, V, B, C)
    Z, preds, ctx, shape = _core.kernel_attention_forward(
        Z0, V, B, C, activation, predictions=bool(return_predictions),
        context=bool(return_context), device=device)
    if not (return_predictions or return_context):
        return Z
    return ((Z,) + ((preds,) if return_predictions else ())
            + ((ForwardContext(ctx, shape),) if return_context else ()))


def vjp(Z0, V, B, C, activation, d_Z_out, *, context: ForwardContext | None = None,
        input_grad: bool = True, device="auto"):
    """Vector-Jacobian product of :func:`forward`'s Z_L for the upstream d_Z_out = ∂ℓ/∂Z_L
    [B, d+1, n+1]: (dV, dB, dC, dZ0) (dZ0 None without ``input_grad``); parameter gradients are
    batch sums in float64, fixed chunk order. With ``context`` (from ``forward(...,
    return_context=True)`` on the same inputs) only the backward runs; without it the forward is
    recomputed per prompt (≈ 1/3 more time, no extra memory). Both give bitwise equal results."""
    Z0, V, B, C, d_Z_out = _inputs(Z0, V, B, C, d_Z_out=d_Z_out)
    return _core.kernel_attention_vjp(Z0, V, B, C, activation, d_Z_out, context=context,
                                      input_grad=bool(input_grad), device=device)


def predict(Z0, V, B, C, activation, *, every_layer: bool = False, device="auto", out=None):
    """Prediction of y_q: ŷ = −TF [B] (or ŷ_ℓ = −TF_ℓ [B, L+1] for every layer)  [CCS (4)], written
    by the native forward (the last layer's query column alone: O(L·H·n²·d) per prompt with the
    last layer O(H·n·d)). ``device`` as in :func:`forward`: on CUDA arrays the result is a CUDA
    array of Z0's library. ``out``: a C-contiguous array of the result's shape and Z0's dtype (on
    the side the call runs on, or a host array staged through the GPU) written and returned."""
    _, y_hat, _, _ = _core.kernel_attention_forward(*_inputs(Z0, V, B, C), activation,
                                                    z_out=False, predictions=True, y_hat=True,
                                                    every_layer=bool(every_layer), device=device,
                                                    predictions_out=out)
    return y_hat


def predict_vjp(Z0, V, B, C, activation, d_y, *, input_grad: bool = True, device="auto"):
    """Vector-Jacobian product of :func:`predict`'s ŷ = −Z_L[:, d, n] [B] (CCS (4)) for the
    upstream d_y = ∂ℓ/∂ŷ [B]: (dV, dB, dC, dZ0), the gradients of Σ_b d_y[b] ŷ_b (dZ0 None
    without ``input_grad``; parameter gradients batch sums in float64, fixed chunk order). The
    forward is recomputed inside and the last layer runs its query column alone, as in
    :func:`loss_and_grad`: O(H·n·d) per prompt there, where :func:`vjp` with a d_Z_out that is zero
    but at [d, n] spends O(H·n²·d); the same values to rounding, and no saved context."""
    Z0, V, B, C, d_y = _inputs(Z0, V, B, C, d_y=d_y)
    return _core.kernel_attention_predict_vjp(Z0, V, B, C, activation, d_y,
                                              input_grad=bool(input_grad), device=device)


def loss_and_grad(Z0, y_q, V, B, C, activation, *, input_grad: bool = False,
                  return_predictions: bool = False, device="auto", out=None, loss=None):
    """In-context loss f = (1/(2B)) Σ (TF + y_q)² (½ × CCS (5), the package convention) and its
    gradients (dV, dB, dC) [+ dZ0] [+ TF_ℓ for every layer, B x (L+1)]. Backward ≈ 2-3x forward.
    ``out``: ``(dV, dB, dC)`` arrays (or None entries) written in place, on Z0's side; ``loss``: a
    float64 array of shape (1,) on Z0's side receiving f, returned in its place (with CUDA arrays
    the call then waits for nothing)."""
    Z0, V, B, C, y_q = _inputs(Z0, V, B, C, y_q=y_q)
    return _core.kernel_attention_loss_and_grad(Z0, y_q, V, B, C, activation,
                                                input_grad=bool(input_grad),
                                                return_predictions=bool(return_predictions),
                                                device=device, out=out, loss=loss)


def sparse_value(A, r):
    """V = [[A, 0],[0, r]] of CCS Assumption 4.4 from A [L, H, d, d] and r [L, H]."""
    A0, r0 = A, r
    A = real_array(A, "A", ndim=4)
    r = real_array(r, "r")
    dtype = np.result_type(np.asarray(A0).dtype, np.asarray(r0).dtype, np.float32)
    if A.shape[2] != A.shape[3]:
        raise ValueError(f"A: expected shape [L, H, d, d], got {A.shape}")
    if r.shape != A.shape[:2]:
        raise ValueError(f"r: expected shape {A.shape[:2]}, got {r.shape}")
    L, H, d, _ = A.shape
    V = np.zeros((L, H, d + 1, d + 1), dtype=dtype)
    V[:, :, :d, :d] = A
    V[:, :, d, d] = r
    return V


def loss_and_grad_sparse(Z0, y_q, A, r, B, C, activation, *, return_predictions: bool = False,
                         device="auto"):
    """Loss (1/(2B)) Σ (TF + y_q)² and gradients in the sparse parametrization V = [[A, 0],[0, r]]
    (CCS Assumption 4.4): (loss, dA, dr, dB, dC), the gradients as host arrays (A, r, B, C are host
    arrays; ``device`` as in :func:`loss_and_grad`). The gradient of a linear embedding V(A, r) is
    the matching block of dV, so this is exact."""
    V = sparse_value(A, r)
    out = loss_and_grad(Z0, y_q, V, B, C, activation, return_predictions=return_predictions,
                        device=device)
    loss = out[0]
    dV, dB, dC = (cuda.to_host(g) for g in out[1:4])  # host arrays: sliced below (tiny)
    d = V.shape[2] - 1
    res = (loss, dV[:, :, :d, :d].copy(), dV[:, :, d, d].copy(), dB, dC)
    return res + (out[4],) if return_predictions else res


@dataclass(eq=False)
class KernelAttentionParams:
    """Parameters of an L-layer, H-head kernel-attention model.

    ``V`` [L, H, d+1, d+1] (full) or ``A`` [L, H, d, d] and ``r`` [L, H] (sparse, CCS Assumption
    4.4: V = [[A, 0],[0, r]], so ``r`` is the paper's r of Assumption 4.4 and the *negative* of the
    step size r_ℓ of Prop. 3.1); ``B``, ``C`` [L, H, d, d]; ``activations``: H names.
    Losses are ½ · mean squared error, (1/(2B)) Σ (TF + y_q)² (the package convention).
    """

    B: np.ndarray
    C: np.ndarray
    activations: list
    V: np.ndarray | None = None
    A: np.ndarray | None = None
    r: np.ndarray | None = None

    @property
    def sparse(self) -> bool:
        return self.V is None

    def __eq__(self, other) -> bool:
        """Same parametrization, activations and array values (dtype-independent)."""
        if not isinstance(other, KernelAttentionParams):
            return NotImplemented
        arrays = lambda p: (p.V, p.A, p.r, p.B, p.C)
        return list(self.activations) == list(other.activations) and all(
            (a is None) == (b is None) and (a is None or np.array_equal(a, b))
            for a, b in zip(arrays(self), arrays(other)))

    __hash__ = None

    @property
    def layers(self) -> int:
        return self.B.shape[0]

    @property
    def heads(self) -> int:
        return self.B.shape[1]

    def value(self) -> np.ndarray:
        return sparse_value(self.A, self.r) if self.sparse else self.V

    @classmethod
    def gaussian(cls, rng: np.random.Generator, dim: int, layers: int, heads: int = 1,
                 activations="softmax", *, sparse: bool = True, scale: float = 0.1):
        """Gaussian initialization (entries N(0, scale²)), as in CCS H.1."""
        check_rng(rng)
        d, L, H = positive_int(dim, "dim"), positive_int(layers, "layers"), positive_int(heads, "heads")
        scale = positive_float(scale, "scale")
        _activation_codes(activations, H, "activations")
        names = [activations] * H if isinstance(activations, str) else list(activations)
        g = lambda *shape: scale * rng.standard_normal(shape)
        if sparse:
            return cls(B=g(L, H, d, d), C=g(L, H, d, d), activations=names, A=g(L, H, d, d), r=g(L, H))
        return cls(B=g(L, H, d, d), C=g(L, H, d, d), activations=names, V=g(L, H, d + 1, d + 1))

    @classmethod
    def functional_gd(cls, dim: int, step_sizes, activations="exp", *, bandwidth: float = 1.0,
                      Sigma=None):
        """The construction of CCS Prop. 3.1 / D.1: V_ℓ^s = [[0, 0],[0, −r_ℓ]] and B = C = Σ^{-1/2}
        for linear / relu heads, B = C = Σ^{-1/2}/σ for exp / softmax heads (CCS 3.1.2), so that
        −TF_ℓ is the ℓ-th iterate of functional GD f_{ℓ+1} = f_ℓ + r_ℓ Σ_i (y_i − f_ℓ(x_i)) K(·, x_i)
        with K the sum over heads of the kernels on the whitened inputs ξ = Σ^{-1/2} x.

        Bandwidth convention (one for the package, :data:`lsa_native.baselines.BANDWIDTH_CONVENTION`):
        K^exp_σ(u, w) = exp(<u, w>/σ²) [CCS (14)]; linear and relu kernels have no bandwidth. Then
        ``predict(E, every_layer=True)`` equals ``baselines.functional_gd(batch, step_sizes=r)``.
        step_sizes: [L] or [L, H]; Sigma [d, d] SPD (default I)."""
        from .data import inverse_sqrtm

        d = positive_int(dim, "dim")
        sigma = positive_float(bandwidth, "bandwidth")
        r = real_array(step_sizes, "step_sizes")
        if isinstance(activations, (list, tuple)) and not activations:
            raise ValueError("activations: expected at least one name")
        names = [activations] if isinstance(activations, str) else activations
        _activation_codes(names, len(names) if isinstance(names, (list, tuple)) else 1, "activations")
        names = list(names)
        H = len(names)
        if r.ndim == 1:
            r = np.broadcast_to(r[:, None], (len(r), H)).copy()
        elif r.ndim != 2 or r.shape[1] != H:
            raise ValueError(f"step_sizes: expected shape [L] or [L, {H}] (one per layer, or per "
                             f"layer and head), got {r.shape}")
        L = r.shape[0]
        root = np.eye(d) if Sigma is None else inverse_sqrtm(Sigma, "Sigma", d)
        scale = np.array([1 / sigma if name in ("exp", "softmax") else 1.0 for name in names])
        eye = np.broadcast_to(scale[:, None, None] * root, (L, H, d, d)).copy()
        return cls(B=eye, C=eye.copy(), activations=names, A=np.zeros((L, H, d, d)), r=-r)

    def forward(self, Z0, **kw):
        return forward(Z0, self.value(), self.B, self.C, self.activations, **kw)

    def predict(self, Z0, **kw):
        return predict(Z0, self.value(), self.B, self.C, self.activations, **kw)

    def loss(self, Z0, y_q, *, device="auto") -> float:
        """(1/(2B)) Σ (TF + y_q)² from the forward pass only (float64 sum, on the host; Z0, y_q
        may be CUDA arrays: the predictions run where :func:`predict` runs them)."""
        from ._validation import finite_output

        preds = cuda.to_host(self.predict(Z0, device=device)).astype(np.float64)
        y_q = as_array(cuda.to_host(y_q) if cuda.is_cuda_array(y_q) else y_q, preds.shape,
                       np.float64, "y_q")
        with np.errstate(over="ignore"):
            residual = y_q - preds  # y_q − (−TF) = TF + y_q
            return finite_output(float(0.5 * np.mean(residual**2)), "loss")

    def loss_and_grad(self, Z0, y_q):
        """(loss (1/(2B)) Σ (TF + y_q)², gradient as a flat host vector in the order of
        :meth:`to_vector`; Z0, y_q may be CUDA arrays)."""
        if self.sparse:
            loss, dA, dr, dB, dC = loss_and_grad_sparse(Z0, y_q, self.A, self.r, self.B, self.C,
                                                        self.activations)
            return loss, np.concatenate([dA.ravel(), dr.ravel(), dB.ravel(), dC.ravel()])
        loss, *grads = loss_and_grad(Z0, y_q, self.V, self.B, self.C, self.activations)
        return loss, np.concatenate([cuda.to_host(g).ravel() for g in grads])

    def to_vector(self) -> np.ndarray:
        parts = [self.A, self.r] if self.sparse else [self.V]
        return np.concatenate([np.asarray(p, dtype=np.float64).ravel() for p in parts + [self.B, self.C]])

    def from_vector(self, theta) -> "KernelAttentionParams":
        """A copy with parameters read from a flat vector (the layout of :meth:`to_vector`)."""
        theta = real_array(theta, "theta", ndim=1)
        shapes = ([self.A.shape, self.r.shape] if self.sparse else [self.V.shape]) + [self.B.shape, self.C.shape]
        sizes = [int(np.prod(s)) for s in shapes]
        if theta.size != sum(sizes):
            raise ValueError(f"theta: expected {sum(sizes)} values, got {theta.size}")
        pieces = np.split(theta, np.cumsum(sizes)[:-1])
        arrays = [p.reshape(s) for p, s in zip(pieces, shapes)]
        if self.sparse:
            A, r, B, C = arrays
            return KernelAttentionParams(B=B, C=C, activations=list(self.activations), A=A, r=r)
        V, B, C = arrays
        return KernelAttentionParams(B=B, C=C, activations=list(self.activations), V=V)
