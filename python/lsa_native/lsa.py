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
dtype and on one device; results follow E: CUDA arrays of E's library when E is one (see
:mod:`lsa_native.cuda`), numpy arrays otherwise. The native core chooses the device from the
arrays (one array view per operand, validated once).
On the GPU the batch sums are reduced in a fixed order (two runs are bitwise equal).
"""
from __future__ import annotations

import numpy as np

from . import _core
from .cuda import native_operand, native_prompts

__all__ = ["predict", "loss_and_grad", "forward", "vjp", "predict_vjp", "split_shape"]


def split_shape(E: np.ndarray) -> tuple[int, int, int]:
    """(B, d, N) of an embedding batch [B, d+1, N+1]."""
    shape = np.shape(E)
    if len(shape) != 3:
        raise ValueError(f"E: expected a 3-d array [B, d+1, N+1], got shape {shape}")
    B, rows, cols = shape
    return B, rows - 1, cols - 1


# One route: Python converts (host arrays to E's dtype, C-contiguous, with the finiteness and
# overflow rules of the conversion; CUDA arrays pass as they are), the bindings make one array view
# per operand, and the native validate() of each entry point checks every operand (shapes, dtypes,
# layouts, out=, devices) and runs the backend the views ask for (dispatch.cpp).


def _parameters(E, W_pv, W_kq):
    E, dtype = native_prompts(E, "E")
    return E, native_operand(W_pv, dtype, "W_pv"), native_operand(W_kq, dtype, "W_kq"), dtype


def predict(E, W_pv, W_kq, *, out=None, device="auto") -> np.ndarray:
    """Predictions ŷ = [f_LSA(E)]_{d+1,N+1} = p^T G q for every prompt  [ZFB (3.6)].

    p is the last row of W^PV, K the first d columns of W^KQ, q = K x_q, G = E E^T / N.
    One pass over the tokens, O(N d) per prompt. Exact for any E: q = W^KQ e_q and the query's
    label slot E[b, d, N] is added (both reduce to (3.6) when the slot is 0).

    Returns ŷ [B] in E's dtype (written into ``out`` when given).
    """
    E, W_pv, W_kq, _ = _parameters(E, W_pv, W_kq)
    return _core.lsa_predict(E, W_pv, W_kq, out, device)


def loss_and_grad(E, y_q, W_pv, W_kq, *, return_predictions: bool = False, device="auto",
                  out=None, loss=None):
    """Empirical loss L = (1/(2B)) Σ_b (ŷ_b − y_q,b)^2 [ZFB (3.7)] and its gradients.

    Returns ``(L, dW_pv, dW_kq)`` (plus ŷ [B] when ``return_predictions``): L is a float (batch sum
    in float64), the gradients are full [d+1, d+1] arrays in E's dtype with exact zeros where a
    parameter does not affect ŷ: all of W^PV but its last row, and the last column of W^KQ when
    the query label slots E[:, d, N] are 0 (prompts of (3.4)).
    Forward and backward read each prompt once from memory.

    ``out``: ``(dW_pv, dW_kq)`` arrays (or None entries) written in place, on E's side. ``loss``:
    a float64 array of shape (1,) on E's side that receives L, returned in its place — with CUDA
    arrays the call then waits for nothing (a training loop keeps θ, gradients and losses on the
    GPU and reads them back when it records).
    """
    E, W_pv, W_kq, dtype = _parameters(E, W_pv, W_kq)
    y_q = native_operand(y_q, dtype, "y_q")
    return _core.lsa_loss_and_grad(E, y_q, W_pv, W_kq, bool(return_predictions), device,
                                   out=out, loss=loss)


def forward(E, W_pv, W_kq, *, out=None, device="auto") -> np.ndarray:
    """Full LSA output f(E) = E + W^PV E (E^T W^KQ E)/N  [ZFB (3.3)], computed Gram-first as
    E + (W^PV G W^KQ) E with G = E E^T / N: O(N d^2) per prompt, never the O(N^2 d) attention matrix.

    Returns F [B, d+1, N+1] in E's dtype (written into ``out`` when given).
    """
    E, W_pv, W_kq, _ = _parameters(E, W_pv, W_kq)
    return _core.lsa_forward(E, W_pv, W_kq, out, device)


def vjp(E, W_pv, W_kq, d_F, *, with_input_grad: bool = True, device="auto"):
    """Vector-Jacobian product of :func:`forward` for the upstream gradient ``d_F`` [B, d+1, N+1].

    With P = W^PV G W^KQ and dP = d_F E^T:  dW^PV = Σ_b dP (G W^KQ)^T,  dW^KQ = Σ_b (W^PV G)^T dP,
    dE = d_F + P^T d_F + (dG + dG^T) E / N with dG = W^PV^T dP W^KQ^T  (SPEC 3.2).

    Returns ``(dW_pv, dW_kq, dE)``; dE is None when ``with_input_grad`` is False.
    """
    E, W_pv, W_kq, dtype = _parameters(E, W_pv, W_kq)
    d_F = native_operand(d_F, dtype, "d_F", finite=False)
    return _core.lsa_vjp(E, W_pv, W_kq, d_F, bool(with_input_grad), device)


def predict_vjp(E, W_pv, W_kq, d_y, *, with_input_grad: bool = True, device="auto"):
    """(dW_pv, dW_kq, dE) of Σ_b d_y[b] ŷ_b for ŷ = ``lsa.predict(E, W_pv, W_kq)``:
    dW^PV's last row Σ_b dŷ_b G_b q_b (the rest 0), dW^KQ = Σ_b dŷ_b (G_b p) e_q,bᵀ (exact for any
    E), dE [B, d+1, N+1] = dŷ (s_j p + t_j q)/N per column j + dŷ W^KQᵀ G p on the query column
    + dŷ on the query-label slot (None without ``with_input_grad``). One pass over E per prompt,
    O(N d); parameter gradients are batch sums in float64, returned in E's dtype."""
    E, W_pv, W_kq, dtype = _parameters(E, W_pv, W_kq)
    d_y = native_operand(d_y, dtype, "d_y", finite=False)
    return _core.lsa_predict_vjp(E, W_pv, W_kq, d_y, bool(with_input_grad), device)
