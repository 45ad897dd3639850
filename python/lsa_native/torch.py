"""PyTorch autograd wrappers over the native kernels: keep a PyTorch training loop (optimizer,
schedulers, mixed models) and swap its attention block for the native one.

Functions (``torch.autograd.Function`` s, float32 or float64 CPU tensors, all inputs one dtype):

- :func:`lsa_forward` (E, W_pv, W_kq) → F = E + W^PV E (Eᵀ W^KQ E)/N [ZFB (3.3)]; backward: the
  native ``lsa.vjp`` (gradients for W_pv, W_kq and E).
- :func:`lsa_predict` (E, W_pv, W_kq) → ŷ = F[:, d, N] [ZFB (3.6)], O(N d) per prompt; backward:
  the native ``lsa_predict_vjp`` (``lsa.predict_vjp``), O(N d) per prompt.
- :func:`multihead_lsa_forward`, :func:`multihead_lsa_predict` (E, W_pv, W_kq [H, d+1, d+1]): the
  H-head model F = E + Σ_h W^PV_h E (Eᵀ W^KQ_h E)/N and its ŷ (:mod:`lsa_native.multihead`, CPU
  tensors); backward: the native ``multihead.vjp`` / ``multihead.predict_vjp``.
- :func:`kernel_attention` (Z0, V, B, C, activation) → Z_L of CCS (3) (all activations, layers,
  heads). With ``save_context=True`` the forward saves the native per-prompt context (≈ 20 KiB
  per prompt at d = 5, n = 30, L = 3, float32: 0.6 GB at B = 30000) and the backward runs only
  the native VJP; by default (``save_context=False``) the backward recomputes the forward per
  prompt, in cache. Measured on our 2-core machine at CCS size, writing and re-reading the context
  from memory costs more than the recomputation it saves (forward 2x slower, VJP ≈ 10 % faster:
  the step is ≈ 10 % slower with the context), so recomputation is the default; the context pays
  off where memory bandwidth is plentiful relative to compute.
  Gradients for V, B, C and Z0. The sparse V = [[A, 0], [0, r]] of CCS Assumption 4.4 goes
  through the full V (:func:`sparse_value`, differentiable torch ops).
- :func:`kernel_attention_predict` (Z0, V, B, C, activation) → CCS's prediction ŷ = −Z_L[:, d, n]
  [B] (4): the native forward of the query column alone in the last layer, and the native
  ``kernel_attention.predict_vjp`` (the forward recomputed, the last layer's query column alone:
  O(H·n·d) there instead of O(H·n²·d); nothing saved between forward and backward).

Modules: :class:`LinearSelfAttention` (ZFB's W^PV, W^KQ with the Assumption 3.3 initialization),
:class:`MultiHeadLinearSelfAttention` (H heads, merged W^KQ_h or separate W^K_hᵀ W^Q_h of rank r)
and :class:`KernelAttention` (CCS's A, r or V, and B, C with the Gaussian initialization of
``KernelAttentionParams.gaussian``).

Memory: contiguous CPU tensors are shared with the core without copies (``Tensor.numpy()`` views;
outputs are ``torch.from_numpy`` of the core's arrays); a non-contiguous input is copied once
(``Tensor.contiguous()``). CUDA tensors run on the native CUDA backend in place (read through
``__cuda_array_interface__``, results allocated by PyTorch on the same device; all tensors of a
call on one device, on the default stream); without CUDA kernels or a GPU they raise a clear
``ValueError``.
Double backward is refused (``once_differentiable``): the native VJPs are not differentiable.
"""
from __future__ import annotations

import functools

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from . import _core
from . import kernel_attention as _ka
from . import lsa as _lsa
from . import multihead as _mh
from . import theory as _theory
from ._validation import check_flag, positive_float, positive_int
from .lsa import predict_vjp as _predict_vjp

__all__ = [
    "lsa_forward",
    "lsa_predict",
    "multihead_lsa_forward",
    "multihead_lsa_predict",
    "kernel_attention",
    "kernel_attention_predict",
    "sparse_value",
    "LinearSelfAttention",
    "MultiHeadLinearSelfAttention",
    "KernelAttention",
]

_DTYPES = (torch.float32, torch.float64)


@functools.lru_cache(maxsize=None)
def _cuda_missing() -> str | None:
    """Why the native CUDA backend cannot take CUDA tensors (None: it can). Asked once per
    process: a build's kernels and a machine's GPUs do not change while it runs."""
    if not _core.cuda_compiled():
        return ("a CUDA tensor, but this build of lsa_native has no CUDA kernels (built without "
                "nvcc or with LSA_NATIVE_CUDA=OFF); move the tensors to the CPU with .cpu()")
    if not _core.cuda_available():
        return "a CUDA tensor, but lsa_native sees no usable GPU (no NVIDIA driver or no device)"
    return None


def _cuda_ready(t: torch.Tensor, name: str) -> None:
    """Refuse a CUDA tensor the native CUDA backend cannot take, with the reason. Per call only
    the stream is asked (one query; the default stream's handle is 0)."""
    missing = _cuda_missing()
    if missing is not None:
        _cuda_missing.cache_clear()  # a later call asks again (and says it again)
        raise ValueError(f"{name}: {missing}")
    # The native kernels run on the legacy default stream; a side stream would not be ordered.
    if torch.cuda.current_stream(t.device).cuda_stream != 0:
        raise ValueError(f"{name}: lsa_native's CUDA kernels run on the default stream; call them "
                         "outside `with torch.cuda.stream(...)` (or synchronize the streams)")


def _operand(t, name: str, like: torch.Tensor | None = None):
    """The native view of a float tensor: a numpy view for a CPU tensor (no copy when contiguous),
    the detached tensor itself for a CUDA tensor (the CUDA backend reads it in place through
    ``__cuda_array_interface__``). ``like``: the call's first tensor, whose dtype and device every
    other operand must share."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in _DTYPES:
        raise TypeError(f"{name}: expected dtype torch.float32 or torch.float64, got {t.dtype}")
    if like is not None and t.dtype != like.dtype:
        raise TypeError(f"{name}: expected dtype {like.dtype} (the dtype of the input prompts), "
                        f"got {t.dtype}")
    if like is not None and t.device != like.device:
        raise ValueError(f"{name}: expected a tensor on {like.device} (the device of the input "
                         f"prompts), got {t.device}")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name}: expected a CPU or CUDA tensor, got device {t.device}")
    if t.device.type == "cuda" and like is None:
        _cuda_ready(t, name)
    t = t.detach().resolve_conj().resolve_neg()
    if not t.is_contiguous():
        t = t.contiguous()  # the one visible copy for a non-contiguous input
    return t.numpy() if t.device.type == "cpu" else t


def _torch_dtype(dtype, name: str = "dtype") -> torch.dtype:
    if dtype not in _DTYPES:
        raise TypeError(f"{name}: expected torch.float32 or torch.float64, got {dtype!r}")
    return dtype


def _seed(seed):
    """None or an integer >= 0 for np.random.default_rng (its own errors are not about `seed`)."""
    return None if seed is None else positive_int(seed, "seed", minimum=0)


def _output(output) -> str:
    if output not in ("prediction", "full"):
        raise ValueError(f"output: expected 'prediction' or 'full', got {output!r}")
    return output


def _device(t: torch.Tensor) -> str:
    return "cuda" if t.device.type == "cuda" else "cpu"


def _first_order(backward):
    """Refuse double backward with a clear message: backward under create_graph=True runs with
    grad mode on, and the native VJPs have no derivative of their own."""
    inner = once_differentiable(backward)

    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        if torch.is_grad_enabled():
            raise RuntimeError(
                "lsa_native.torch: double backward (create_graph=True, gradgradcheck, Hessian-"
                "vector products) is not supported: the native VJPs are first-order only. Use a "
                "pure-PyTorch implementation for higher derivatives.")
        return inner(ctx, *grads)

    return wrapper


def _tensor(a) -> torch.Tensor | None:
    """A native result as a tensor: numpy arrays are wrapped without a copy; results of the CUDA
    backend are already tensors (allocated by PyTorch on the inputs' device)."""
    return a if a is None or isinstance(a, torch.Tensor) else torch.from_numpy(a)


def _lsa_args(E, W_pv, W_kq):
    return _operand(E, "E"), _operand(W_pv, "W_pv", E), _operand(W_kq, "W_kq", E)


def _native_lsa_function(name: str, forward, vjp, grad_name: str):
    """A torch.autograd.Function over a native (E, W_pv, W_kq) operation and its VJP (the one-head
    ``lsa`` and the H-head ``multihead`` modules share this signature): forward(E, W_pv, W_kq,
    device=) and vjp(E, W_pv, W_kq, d_out, with_input_grad=, device=) -> (d_W_pv, d_W_kq, d_E).
    Inputs are kept with save_for_backward (autograd then refuses a backward after an in-place
    change of an input) and viewed as numpy again in backward; `grad_name` names the incoming
    gradient in error messages."""

    def forward_(ctx, E, W_pv, W_kq):
        ctx.save_for_backward(E, W_pv, W_kq)
        return _tensor(forward(*_lsa_args(E, W_pv, W_kq), device=_device(E)))

    forward_.__name__ = forward_.__qualname__ = "forward"  # as tracebacks name a Function's forward

    @_first_order
    def backward(ctx, d_out):
        E = ctx.saved_tensors[0]
        d_W_pv, d_W_kq, d_E = vjp(*_lsa_args(*ctx.saved_tensors), _operand(d_out, grad_name, E),
                                  with_input_grad=ctx.needs_input_grad[0], device=_device(E))
        return _tensor(d_E), _tensor(d_W_pv), _tensor(d_W_kq)

    return type(name, (torch.autograd.Function,),
                {"forward": staticmethod(forward_), "backward": staticmethod(backward)})


_LSAForward = _native_lsa_function("_LSAForward", _lsa.forward, _lsa.vjp, "d_F")
_LSAPredict = _native_lsa_function("_LSAPredict", _lsa.predict, _predict_vjp, "d_y")
_MultiHeadForward = _native_lsa_function("_MultiHeadForward", _mh.forward, _mh.vjp, "d_F")
_MultiHeadPredict = _native_lsa_function("_MultiHeadPredict", _mh.predict, _mh.predict_vjp, "d_y")


def _ka_args(Z0, V, B, C):
    return _operand(Z0, "Z0"), _operand(V, "V", Z0), _operand(B, "B", Z0), _operand(C, "C", Z0)


class _KernelAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, Z0, V, B, C, activations, save_context):
        ctx.save_for_backward(Z0, V, B, C)
        args = _ka_args(Z0, V, B, C)
        ctx.activations = activations
        if save_context:
            Z_L, ctx.context = _ka.forward(*args, activations, return_context=True,
                                           device=_device(Z0))
        else:
            Z_L, ctx.context = _ka.forward(*args, activations, device=_device(Z0)), None
        return _tensor(Z_L)

    @staticmethod
    @_first_order
    def backward(ctx, d_Z):
        Z0 = ctx.saved_tensors[0]
        dV, dB, dC, dZ0 = _ka.vjp(*_ka_args(*ctx.saved_tensors), ctx.activations,
                                  _operand(d_Z, "d_Z_out", Z0), context=ctx.context,
                                  input_grad=ctx.needs_input_grad[0], device=_device(Z0))
        return _tensor(dZ0), _tensor(dV), _tensor(dB), _tensor(dC), None, None


class _KernelAttentionPredict(torch.autograd.Function):
    @staticmethod
    def forward(ctx, Z0, V, B, C, activations):
        ctx.save_for_backward(Z0, V, B, C)
        ctx.activations = activations
        return _tensor(_ka.predict(*_ka_args(Z0, V, B, C), activations, device=_device(Z0)))

    @staticmethod
    @_first_order
    def backward(ctx, d_y):
        Z0 = ctx.saved_tensors[0]
        dV, dB, dC, dZ0 = _ka.predict_vjp(*_ka_args(*ctx.saved_tensors), ctx.activations,
                                          _operand(d_y, "d_y", Z0),
                                          input_grad=ctx.needs_input_grad[0], device=_device(Z0))
        return _tensor(dZ0), _tensor(dV), _tensor(dB), _tensor(dC), None


def lsa_forward(E: torch.Tensor, W_pv: torch.Tensor, W_kq: torch.Tensor) -> torch.Tensor:
    """F = E + W^PV E (Eᵀ W^KQ E)/N [ZFB (3.3)] for E [B, d+1, N+1], W [d+1, d+1]; differentiable
    in all three (native forward and VJP, O(N d²) per prompt)."""
    return _LSAForward.apply(E, W_pv, W_kq)


def lsa_predict(E: torch.Tensor, W_pv: torch.Tensor, W_kq: torch.Tensor) -> torch.Tensor:
    """ŷ = F[:, d, N] = E[:, d, N] + pᵀ G q [ZFB (3.6)], shape [B]; differentiable in all three."""
    return _LSAPredict.apply(E, W_pv, W_kq)


def multihead_lsa_forward(E: torch.Tensor, W_pv: torch.Tensor, W_kq: torch.Tensor) -> torch.Tensor:
    """F = E + Σ_h W^PV_h E (Eᵀ W^KQ_h E)/N for E [B, d+1, N+1], W_pv, W_kq [H, d+1, d+1] (CPU);
    differentiable in all three (native Gram-first forward and VJP). The separate parametrization:
    pass W_kq = W_k.transpose(1, 2) @ W_q (torch ops; autograd chains to W_k, W_q)."""
    return _MultiHeadForward.apply(E, W_pv, W_kq)


def multihead_lsa_predict(E: torch.Tensor, W_pv: torch.Tensor, W_kq: torch.Tensor) -> torch.Tensor:
    """ŷ = F[:, d, N] = E[:, d, N] + Σ_h p_hᵀ G q_h, q_h = W^KQ_h e_q, shape [B] (CPU);
    differentiable in all three (native ``multihead.predict_vjp``)."""
    return _MultiHeadPredict.apply(E, W_pv, W_kq)


def kernel_attention(Z0: torch.Tensor, V: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                     activation="softmax", *, save_context: bool = False) -> torch.Tensor:
    """Z_L of CCS (3) for Z0 [B, d+1, n+1], V [L, H, d+1, d+1], B, C [L, H, d, d] and one
    activation name or H names (linear, relu, exp, softmax); differentiable in Z0, V, B, C.
    CCS's prediction of y_q is −Z_L[:, d, n] (4) (:func:`kernel_attention_predict` computes it
    alone)."""
    names = _ka_activation_names(Z0, V, B, C, activation)
    return _KernelAttention.apply(Z0, V, B, C, names, check_flag(save_context, "save_context"))


def kernel_attention_predict(Z0: torch.Tensor, V: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                             activation="softmax") -> torch.Tensor:
    """CCS's prediction ŷ = −Z_L[:, d, n] [B] (4) of the model of :func:`kernel_attention`;
    differentiable in Z0, V, B, C. Forward and backward compute the last layer's query column
    alone (native ``predict`` and ``predict_vjp``), so it is cheaper than
    ``-kernel_attention(...)[:, -1, -1]``, which it equals to rounding."""
    names = _ka_activation_names(Z0, V, B, C, activation)
    return _KernelAttentionPredict.apply(Z0, V, B, C, names)


def _ka_activation_names(Z0, V, B, C, activation) -> list:
    """The checks of the kernel-attention functions before autograd sees the tensors (types, V's
    rank, the activation names: TypeError/ValueError naming them); one name per head."""
    for name, t in (("Z0", Z0), ("V", V), ("B", B), ("C", C)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if V.ndim != 4:
        raise ValueError(f"V: expected a tensor [L, H, d+1, d+1], got shape {tuple(V.shape)}")
    _ka._activation_codes(activation, V.shape[1])  # validates (TypeError/ValueError naming it)
    return [activation] * V.shape[1] if isinstance(activation, str) else list(activation)


def sparse_value(A: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """V = [[A, 0], [0, r]] of CCS Assumption 4.4 from A [L, H, d, d] and r [L, H], with torch
    ops (gradients flow back to A and r as the matching blocks of dV)."""
    for name, t in (("A", A), ("r", r)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in _DTYPES:
            raise TypeError(f"{name}: expected dtype torch.float32 or torch.float64, got {t.dtype}")
        if not bool(torch.isfinite(t).all()):  # [L, H, d, d]: a cheap check
            raise ValueError(f"{name}: contains non-finite values (NaN or inf)")
    if r.dtype != A.dtype or r.device != A.device:
        raise TypeError(f"r: expected dtype {A.dtype} on {A.device} (those of A), got {r.dtype} "
                        f"on {r.device}")
    if A.ndim != 4 or A.shape[2] != A.shape[3] or r.shape != A.shape[:2]:
        raise ValueError(f"A, r: expected shapes [L, H, d, d] and [L, H], got {tuple(A.shape)} "
                         f"and {tuple(r.shape)}")
    d = A.shape[2]
    pad = torch.nn.functional.pad
    return pad(A, (0, 1, 0, 1)) + pad(r[..., None, None], (d, 0, d, 0))


class LinearSelfAttention(torch.nn.Module):
    """One-layer linear self-attention of ZFB (3.3) with parameters W_pv, W_kq [d+1, d+1].

    Initialization: ZFB Assumption 3.3 (3.10) via ``theory.assumption33_init``:
    W^PV(0) = σ [[0, 0], [0, 1]], W^KQ(0) = σ [[ΘΘᵀ, 0], [0, 0]], ‖ΘΘᵀ‖_F = 1, with the given
    ``Theta`` or ΘΘᵀ = MMᵀ/‖MMᵀ‖_F for M i.i.d. N(0, 1) from ``np.random.default_rng(seed)``. ``output="prediction"`` returns ŷ [B] (3.6),
    ``output="full"`` the full F [B, d+1, N+1] (3.3).
    """

    def __init__(self, dim: int, *, sigma: float = 0.1, output: str = "prediction",
                 dtype: torch.dtype = torch.float32, seed=None, Theta=None):
        super().__init__()
        self.output = _output(output)
        dtype = _torch_dtype(dtype)
        sigma = positive_float(sigma, "sigma")  # numpy scalars too
        W_pv, W_kq = _theory.assumption33_init(dim, sigma, rng=np.random.default_rng(_seed(seed)),
                                               Theta=Theta)
        self.W_pv = torch.nn.Parameter(torch.from_numpy(W_pv).to(dtype))
        self.W_kq = torch.nn.Parameter(torch.from_numpy(W_kq).to(dtype))

    def forward(self, E: torch.Tensor) -> torch.Tensor:
        if self.output == "prediction":
            return lsa_predict(E, self.W_pv, self.W_kq)
        return lsa_forward(E, self.W_pv, self.W_kq)


class MultiHeadLinearSelfAttention(torch.nn.Module):
    """One-layer H-head linear self-attention F = E + Σ_h W^PV_h E (Eᵀ W^KQ_h E)/N (Zhang, Singh,
    Latham & Saxe 2025 in ZFB's embedding), CPU tensors.

    Parameters ``W_pv`` [H, d+1, d+1] and, with ``rank=None`` (merged), ``W_kq`` [H, d+1, d+1]; with
    ``rank=r`` (1 <= r <= d+1, separate), ``W_k``, ``W_q`` [H, r, d+1] and W^KQ_h = W^K_hᵀ W^Q_h.
    Initialization: i.i.d. N(0, init_scale²) entries from ``np.random.default_rng(seed)`` (the
    paper's small initialization, e.g. 0.01). ``output="prediction"`` returns ŷ [B],
    ``output="full"`` F [B, d+1, N+1].
    """

    def __init__(self, dim: int, heads: int, *, rank: int | None = None, init_scale: float = 0.01,
                 output: str = "prediction", dtype: torch.dtype = torch.float32, seed=None):
        super().__init__()
        self.output = _output(output)
        dtype = _torch_dtype(dtype)
        n = positive_int(dim, "dim") + 1
        H = positive_int(heads, "heads")
        scale = positive_float(init_scale, "init_scale")
        if rank is not None:
            rank = positive_int(rank, "rank")
            if rank > n:
                raise ValueError(f"rank: expected 1 <= r <= d+1 = {n}, got {rank}")
        self.rank = rank
        rng = np.random.default_rng(_seed(seed))
        draw = lambda *shape: torch.nn.Parameter(  # noqa: E731
            torch.from_numpy(scale * rng.standard_normal(shape)).to(dtype))
        self.W_pv = draw(H, n, n)
        if rank is None:
            self.W_kq = draw(H, n, n)
        else:
            self.W_k, self.W_q = draw(H, rank, n), draw(H, rank, n)

    def key_query(self) -> torch.Tensor:
        """W^KQ [H, d+1, d+1] (merged: the parameter; separate: W^K_hᵀ W^Q_h, differentiable)."""
        return self.W_kq if self.rank is None else self.W_k.transpose(1, 2) @ self.W_q

    def forward(self, E: torch.Tensor) -> torch.Tensor:
        if self.output == "prediction":
            return multihead_lsa_predict(E, self.W_pv, self.key_query())
        return multihead_lsa_forward(E, self.W_pv, self.key_query())


class KernelAttention(torch.nn.Module):
    """L-layer, H-head kernel attention of CCS (3) with per-head activations (CCS (12)).

    Parameters: ``A`` [L, H, d, d] and ``r`` [L, H] (``sparse=True``, V = [[A, 0], [0, r]] of CCS
    Assumption 4.4) or ``V`` [L, H, d+1, d+1]; ``B``, ``C`` [L, H, d, d]. Initialization:
    ``KernelAttentionParams.gaussian`` (i.i.d. N(0, scale²) entries, CCS H.1) with
    ``np.random.default_rng(seed)``.
    ``output="prediction"`` returns CCS's prediction −TF = −Z_L[:, d, n] [B] (4) through
    :func:`kernel_attention_predict` (the last layer's query column alone, forward and backward);
    ``"full"`` Z_L through :func:`kernel_attention` (``save_context=True`` is for it alone: a
    ValueError with ``"prediction"``).
    """

    def __init__(self, dim: int, layers: int, heads: int = 1, activations="softmax", *,
                 sparse: bool = True, scale: float = 0.1, output: str = "prediction",
                 save_context: bool = False, dtype: torch.dtype = torch.float32,
                 seed: int | None = None):
        super().__init__()
        output = _output(output)
        dtype = _torch_dtype(dtype)
        sparse = check_flag(sparse, "sparse")
        save_context = check_flag(save_context, "save_context")
        if save_context and output == "prediction":
            raise ValueError("save_context: applies to output='full' alone (output='prediction' "
                             "runs kernel_attention_predict, which saves no context)")
        p = _ka.KernelAttentionParams.gaussian(np.random.default_rng(_seed(seed)), dim, layers,
                                               heads, activations, sparse=sparse, scale=scale)
        as_param = lambda a: torch.nn.Parameter(torch.from_numpy(a).to(dtype))
        if sparse:
            self.A, self.r = as_param(p.A), as_param(p.r)
        else:
            self.V = as_param(p.V)
        self.B, self.C = as_param(p.B), as_param(p.C)
        self.activations, self.sparse, self.output = list(p.activations), sparse, output
        self.save_context = save_context

    def value(self) -> torch.Tensor:
        return sparse_value(self.A, self.r) if self.sparse else self.V

    def forward(self, Z0: torch.Tensor) -> torch.Tensor:
        if self.output == "prediction":
            return kernel_attention_predict(Z0, self.value(), self.B, self.C, self.activations)
        return kernel_attention(Z0, self.value(), self.B, self.C, self.activations,
                                save_context=self.save_context)
