"""Batched one-layer linear self-attention (LSA) [ZFB (3.3)-(3.7)], computed by the native core.

Layout: ``E`` is ``[B, d+1, N+1]`` in the paper's orientation (SPEC 3.1): column ``j`` of prompt
``b`` is the token ``e_j = (x_j; y_j)``, the last column is the query ``(x_q; 0)``. ``W_pv`` and
``W_kq`` are ``[d+1, d+1]`` (W^PV, W^KQ). The fast layout is C-contiguous float32 or float64; any
other layout is copied once (visibly, with ``np.ascontiguousarray``). Parameters are converted to
``E``'s dtype. Results do not depend on the thread count (``lsa_native.set_num_threads``).

Accuracy: per-prompt token sums run in ``E``'s dtype with SIMD partial sums; the batch sums of the
loss and the parameter gradients run in float64 for both dtypes.

Devices: every function takes ``device="auto" | "cpu" | "cuda"``. ``"auto"`` runs where the arrays
live: on the GPU when any argument is a CUDA array (CuPy, PyTorch CUDA tensors, anything with
``__cuda_array_interface__`` or a CUDA ``__dlpack__``), else on the CPU. ``"cuda"`` with numpy
arrays copies them to the GPU and the results back. CUDA arrays must be C-contiguous with E's
dtype; results for CUDA inputs are CUDA arrays of the same library (see :mod:`lsa_native.cuda`).
On the GPU the batch sums are reduced in a fixed order (two runs are bitwise equal).
"""
from __future__ import annotations

import numpy as np

from . import _core, _lsa_cuda
from .cuda import resolve_device
from ._validation import as_array, as_float_array, as_out

__all__ = ["predict", "loss_and_grad", "forward", "vjp", "predict_vjp", "split_shape"]


def split_shape(E: np.ndarray) -> tuple[int, int, int]:
    """(B, d, N) of an embedding batch [B, d+1, N+1]."""
    shape = np.shape(E)
    if len(shape) != 3:
        raise ValueError(f"E: expected a 3-d array [B, d+1, N+1], got shape {shape}")
    B, rows, cols = shape
    return B, rows - 1, cols - 1


# Argument rules live in one layer: the shape rules (E is [B, d+1, N+1] with B, d, N >= 1, every
# other array's shape) are checked natively (_core.lsa_shape, the bindings, the C++ dispatcher),
# with errors naming the argument. Python only converts: array types and dtypes (E's dtype for
# everything), C-contiguous layout, and the finiteness checks of the inputs and results.


def _as_operand(a, dtype, name: str, *, finite: bool = True) -> np.ndarray:
    """a converted to `dtype` (C-contiguous, real-valued; finite unless `finite` is False); its
    shape is checked natively."""
    a = np.asarray(a)
    return as_array(a, a.shape, dtype, name, finite=finite)


def _params(E, W_pv, W_kq):
    E = as_float_array(E, "E")  # its shape is checked natively
    _core.lsa_shape(E.shape)  # E's shape rules, before outputs are allocated from it
    W_pv = _as_operand(W_pv, E.dtype, "W_pv")
    W_kq = _as_operand(W_kq, E.dtype, "W_kq")
    return E, W_pv, W_kq


def predict(E, W_pv, W_kq, *, out=None, device="auto") -> np.ndarray:
    """Predictions ŷ = [f_LSA(E)]_{d+1,N+1} = p^T G q for every prompt  [ZFB (3.6)].

    p is the last row of W^PV, K the first d columns of W^KQ, q = K x_q, G = E E^T / N.
    One pass over the tokens, O(N d) per prompt. Exact for any E: q = W^KQ e_q and the query's
    label slot E[b, d, N] is added (both reduce to (3.6) when the slot is 0).

    Returns ŷ [B] in E's dtype (written into ``out`` when given).
    """
    if resolve_device(device, E=E, W_pv=W_pv, W_kq=W_kq, out=out) == "cuda":
        return _lsa_cuda.predict(E, W_pv, W_kq, out)
    E, W_pv, W_kq = _params(E, W_pv, W_kq)
    y_hat = as_out(out, (E.shape[0],), E.dtype, inputs={"E": E, "W_pv": W_pv, "W_kq": W_kq})
    _core.lsa_predict(E, W_pv, W_kq, y_hat)  # non-finite ŷ: flagged natively while written
    return y_hat


def loss_and_grad(E, y_q, W_pv, W_kq, *, return_predictions: bool = False, device="auto"):
    """Empirical loss L = (1/(2B)) Σ_b (ŷ_b − y_q,b)^2 [ZFB (3.7)] and its gradients.

    Returns ``(L, dW_pv, dW_kq)`` (plus ŷ [B] when ``return_predictions``): L is a float (batch sum
    in float64), the gradients are full [d+1, d+1] arrays in E's dtype with exact zeros where a
    parameter does not affect ŷ: all of W^PV but its last row, and the last column of W^KQ when
    the query label slots E[:, d, N] are 0 (prompts of (3.4)).
    Forward and backward read each prompt once from memory.
    """
    if resolve_device(device, E=E, y_q=y_q, W_pv=W_pv, W_kq=W_kq) == "cuda":
        return _lsa_cuda.loss_and_grad(E, y_q, W_pv, W_kq, return_predictions)
    E, W_pv, W_kq = _params(E, W_pv, W_kq)
    B, n = E.shape[0], E.shape[1]
    y_q = _as_operand(y_q, E.dtype, "y_q")
    d_W_pv = np.empty((n, n), E.dtype)
    d_W_kq = np.empty((n, n), E.dtype)
    y_hat = np.empty(B, E.dtype) if return_predictions else None
    loss = _core.lsa_loss_and_grad(E, y_q, W_pv, W_kq, d_W_pv, d_W_kq, y_hat)  # checked natively
    if return_predictions:
        return loss, d_W_pv, d_W_kq, y_hat
    return loss, d_W_pv, d_W_kq


def forward(E, W_pv, W_kq, *, out=None, device="auto") -> np.ndarray:
    """Full LSA output f(E) = E + W^PV E (E^T W^KQ E)/N  [ZFB (3.3)], computed Gram-first as
    E + (W^PV G W^KQ) E with G = E E^T / N: O(N d^2) per prompt, never the O(N^2 d) attention matrix.

    Returns F [B, d+1, N+1] in E's dtype (written into ``out`` when given).
    """
    if resolve_device(device, E=E, W_pv=W_pv, W_kq=W_kq, out=out) == "cuda":
        return _lsa_cuda.forward(E, W_pv, W_kq, out)
    E, W_pv, W_kq = _params(E, W_pv, W_kq)
    F = as_out(out, E.shape, E.dtype, inputs={"E": E, "W_pv": W_pv, "W_kq": W_kq})
    _core.lsa_forward(E, W_pv, W_kq, F)  # every value of F is tested natively as it is written
    return F


def vjp(E, W_pv, W_kq, d_F, *, with_input_grad: bool = True, device="auto"):
    """Vector-Jacobian product of :func:`forward` for the upstream gradient ``d_F`` [B, d+1, N+1].

    With P = W^PV G W^KQ and dP = d_F E^T:  dW^PV = Σ_b dP (G W^KQ)^T,  dW^KQ = Σ_b (W^PV G)^T dP,
    dE = d_F + P^T d_F + (dG + dG^T) E / N with dG = W^PV^T dP W^KQ^T  (SPEC 3.2).

    Returns ``(dW_pv, dW_kq, dE)``; dE is None when ``with_input_grad`` is False.
    """
    if resolve_device(device, E=E, W_pv=W_pv, W_kq=W_kq, d_F=d_F) == "cuda":
        return _lsa_cuda.vjp(E, W_pv, W_kq, d_F, with_input_grad)
    E, W_pv, W_kq = _params(E, W_pv, W_kq)
    d_F = _as_operand(d_F, E.dtype, "d_F", finite=False)
    n = E.shape[1]
    d_W_pv = np.empty((n, n), E.dtype)
    d_W_kq = np.empty((n, n), E.dtype)
    d_E = np.empty(E.shape, E.dtype) if with_input_grad else None
    _core.lsa_vjp(E, W_pv, W_kq, d_F, d_W_pv, d_W_kq, d_E)  # dW_pv, dW_kq, dE checked natively
    return d_W_pv, d_W_kq, d_E


def predict_vjp(E, W_pv, W_kq, d_y, *, with_input_grad: bool = True, device="auto"):
    """(dW_pv, dW_kq, dE) of Σ_b d_y[b] ŷ_b for ŷ = ``lsa.predict(E, W_pv, W_kq)``:
    dW^PV's last row Σ_b dŷ_b G_b q_b (the rest 0), dW^KQ = Σ_b dŷ_b (G_b p) e_q,bᵀ (exact for any
    E), dE [B, d+1, N+1] = dŷ (s_j p + t_j q)/N per column j + dŷ W^KQᵀ G p on the query column
    + dŷ on the query-label slot (None without ``with_input_grad``). One pass over E per prompt,
    O(N d); parameter gradients are batch sums in float64, returned in E's dtype."""
    if resolve_device(device, E=E, W_pv=W_pv, W_kq=W_kq, d_y=d_y) == "cuda":
        return _lsa_cuda.predict_vjp(E, W_pv, W_kq, d_y, with_input_grad)
    E, W_pv, W_kq = _params(E, W_pv, W_kq)
    n = E.shape[1]
    d_y = _as_operand(d_y, E.dtype, "d_y", finite=False)
    d_W_pv = np.empty((n, n), E.dtype)
    d_W_kq = np.empty((n, n), E.dtype)
    d_E = np.empty(E.shape, E.dtype) if with_input_grad else None
    # Non-finite outputs are flagged natively while written (FloatingPointError / ValueError).
    _core.lsa_predict_vjp(E, W_pv, W_kq, d_y, d_W_pv, d_W_kq, d_E)
    return d_W_pv, d_W_kq, d_E
