"""Batched one-layer H-head linear self-attention in ZFB's embedding, computed by the native core.

The model (Zhang, Singh, Latham & Saxe, "Training Dynamics of In-Context Learning in Linear
Attention", ICML 2025, arXiv 2501.16265, in the notation of [ZFB (3.3)-(3.7)])::

    F = E + Σ_h W^PV_h E (Eᵀ W^KQ_h E) / N = E + P E,   P = Σ_h W^PV_h G W^KQ_h,   G = E Eᵀ / N,
    ŷ = F[d, N] = E[d, N] + Σ_h p_hᵀ G q_h,   p_h = last row of W^PV_h,  q_h = W^KQ_h e_q,

with two parametrizations of the key-query products:

- **merged**: ``W_kq`` [H, d+1, d+1], each W^KQ_h free;
- **separate**: ``W_k``, ``W_q`` [H, r, d+1] with 1 <= r <= d+1, W^KQ_h = W^K_hᵀ W^Q_h (rank <= r;
  r = 1 is the paper's rank-one case). Keys and queries see the whole token, label row included.

Layout: ``E`` [B, d+1, N+1] as in :mod:`lsa_native.lsa` (columns are tokens, the last the query),
``W_pv`` [H, d+1, d+1]. Pass either ``W_kq`` or both ``W_k=`` and ``W_q=``. Parameters are
converted to E's dtype; E is float32 or float64 (C-contiguous, else copied once).

The route of a call is LSA's (:mod:`lsa_native.lsa`): this module converts (host arrays to E's
dtype; CUDA arrays pass as they are) and forwards; the native validate() of each entry point checks
every operand (shapes, dtypes, layouts, ``out=``, devices). Only the separate parametrization's
rules (W_k, W_q against W_pv's H and d+1) and its chain rule live here. ``device="auto" | "cpu" |
"cuda"`` as in :mod:`lsa_native.lsa`: H = 1 runs the LSA kernels on either device, H >= 2 the
H-head CPU or CUDA kernels (outputs on the prompts' device; the separate parametrization's chained
gradients dW_k, dW_q are host arrays).

Cost: H = 1 runs the one-head LSA kernels (bitwise :mod:`lsa_native.lsa`); H >= 2 is computed
(on either device) Gram-first: G once per prompt, O(N d²), then each head from G and the query column, O(d²), never
an O(N²) attention matrix. The separate parametrization forms W^KQ_h = W^K_hᵀ W^Q_h (O(H r d²)) and
chains the gradients, ∂/∂W^K_h = W^Q_h dW^KQ_hᵀ, ∂/∂W^Q_h = W^K_h dW^KQ_h (host arrays).

Accuracy: per-prompt sums in E's dtype, batch sums of the loss and gradients in float64.
"""
from __future__ import annotations

import numpy as np

from . import _core
from ._validation import as_array, real_array
from .cuda import (empty, is_cuda_array, native_operand, native_prompts, pointer_device, to_host,
                   view)

__all__ = ["predict", "loss_and_grad", "forward", "vjp", "predict_vjp", "merge_kq", "chain_kq",
           "parameters"]


def _kq_operands(dtype, *arrays):
    """The separate parametrization's operands for the native merge / chain rule: CUDA arrays as
    they are (the native call checks their dtype and layout), host arrays C-contiguous in
    ``dtype``."""
    return [a if is_cuda_array(a) else np.ascontiguousarray(a, dtype) for a in arrays]


def _kq_result(like, shape, dtype):
    """An output of the merge / chain rule beside ``like``: a CUDA array for a CUDA ``like``."""
    if is_cuda_array(like):
        v = view(like, "W_k")
        return empty(like, shape, v.dtype, pointer_device(v.ptr))
    return np.empty(shape, dtype)


def _kq_shape(W_k) -> tuple:
    """W_k's shape (H, r, d+1), for the outputs made here (the native call checks the rest)."""
    shape = tuple(view(W_k, "W_k").shape if is_cuda_array(W_k) else np.shape(W_k))
    if len(shape) != 3:
        raise ValueError(f"W_k: expected shape (H, r, d+1), got {shape}")
    return shape


def _kq_dtype(*arrays):
    """The result dtype of host operands: float32 when all are float32, else float64."""
    host = [np.asarray(a).dtype for a in arrays if not is_cuda_array(a)]
    return np.dtype(np.float32) if host and all(d == np.float32 for d in host) else np.dtype(np.float64)


def merge_kq(W_k, W_q, *, out=None):
    """W^KQ_h = W^K_hᵀ W^Q_h for every head: [H, d+1, d+1] from W_k, W_q [H, r, d+1] (into
    ``out`` when given, as a training loop passes: a C-contiguous array of the operands' dtype,
    sharing no memory with them). Native (``multihead_recipe.hpp``: the same sums on the CPU and
    the GPU, equal to rounding). W_k, W_q and ``out`` are all host arrays (merged on the CPU; host
    operands are cast to ``out``'s dtype, else float32 when both are float32, float64 otherwise) or
    all CUDA arrays (merged on their GPU, the result a CUDA array; dtypes as given); mixed host and
    CUDA arrays are a ValueError."""
    dt = _kq_dtype(W_k, W_q) if out is None or is_cuda_array(out) else np.asarray(out).dtype
    W_k, W_q = _kq_operands(dt, W_k, W_q)
    if out is None:
        H, _, n = _kq_shape(W_k)
        out = _kq_result(W_k, (H, n, n), dt)
    _core.multihead_merge_kq(W_k, W_q, out)
    return out


def chain_kq(W_k, W_q, d_W_kq, *, out=(None, None)):
    """(∂ℓ/∂W^K_h, ∂ℓ/∂W^Q_h) = (W^Q_h dW^KQ_hᵀ, W^K_h dW^KQ_h) from ∂ℓ/∂W^KQ_h [H, d+1, d+1]
    (into the arrays of ``out`` when given, as a training loop passes: C-contiguous, of d_W_kq's
    dtype, sharing no memory with the operands or each other), computed in d_W_kq's dtype: host
    W_k, W_q are cast to it (float64 keys/queries with a float32 d_W_kq are rounded to float32).
    Native, as :func:`merge_kq`; W_k, W_q, d_W_kq and ``out`` all host or all CUDA arrays (then on
    their GPU), else a ValueError."""
    dt = (np.asarray(d_W_kq).dtype if not is_cuda_array(d_W_kq) else view(d_W_kq, "d_W_kq").dtype)
    W_k, W_q, d_W_kq = _kq_operands(dt, W_k, W_q, d_W_kq)
    d_W_k, d_W_q = (o if o is not None else _kq_result(W_k, _kq_shape(W_k), dt) for o in out)
    _core.multihead_chain_kq(W_k, W_q, d_W_kq, d_W_k, d_W_q)
    return d_W_k, d_W_q


def _is_separate(W_kq, W_k, W_q) -> bool:
    """Whether the call uses the separate parametrization (TypeError unless exactly one is given)."""
    separate = W_k is not None or W_q is not None
    if separate == (W_kq is not None):
        raise TypeError("expected either W_kq (merged) or both W_k= and W_q= (separate), not "
                        + ("both" if separate else "neither"))
    if separate and (W_k is None or W_q is None):
        raise TypeError("the separate parametrization needs both W_k= and W_q=")
    return separate


def _separate(W_k, W_q, heads, n, dtype):
    """(W_k, W_q) [H, r, d+1] as `dtype` arrays, 1 <= r <= d+1, W_q of W_k's shape; H and n = d+1
    are W_pv's (None when W_pv has no such shape: the native validate() names W_pv then)."""
    W_k = real_array(W_k, "W_k", dtype=dtype, nonempty=False)
    H = W_k.shape[0] if heads is None else heads
    n = W_k.shape[-1] if n is None else n
    if W_k.ndim != 3 or W_k.shape[0] != H or W_k.shape[2] != n:
        raise ValueError(f"W_k: expected shape ({H}, r, {n}) (H = {H} heads of rank r keys), got "
                         f"{W_k.shape}")
    r = W_k.shape[1]
    if not 1 <= r <= n:
        raise ValueError(f"W_k: rank r = {r} out of range, expected 1 <= r <= d+1 = {n}")
    return W_k, as_array(W_q, W_k.shape, dtype, "W_q")


def parameters(W_pv, W_kq=None, *, W_k=None, W_q=None, dtype=np.float64):
    """(W_pv, W_kq merged, (W_k, W_q) or None) as C-contiguous `dtype` arrays after the shape
    rules, with messages naming the argument: W_pv [H, d+1, d+1] with H >= 1; either W_kq of
    W_pv's shape or both W_k and W_q [H, r, d+1] with 1 <= r <= d+1; all finite. For callers that
    hold parameters without prompts (``train.MultiHeadLSAObjective``): W_pv and W_kq are checked
    by the native validate() of the entry points (on one zero prompt), W_k and W_q here."""
    W_pv = np.ascontiguousarray(real_array(W_pv, "W_pv", dtype=dtype, nonempty=False))
    shape = W_pv.shape
    heads, n = (shape[0], shape[2]) if len(shape) == 3 else (None, None)
    if _is_separate(W_kq, W_k, W_q):
        sep = _separate(W_k, W_q, heads, n, dtype)
        W_kq = merge_kq(*sep)
    else:
        sep = None
    W_kq = np.ascontiguousarray(real_array(W_kq, "W_kq", dtype=dtype, nonempty=False))
    rows = max(shape[-1], 2) if shape else 2  # d+1 >= 2 of the probe prompt
    _core.multihead_lsa_predict(np.zeros((1, rows, 2), dtype), W_pv, W_kq, None, "cpu")
    return W_pv, W_kq, sep


# One route, LSA's: Python converts and forwards; the native validate() of each entry point
# (multihead_dispatch.cpp) checks every operand and picks the backend.

def _operands(E, W_pv, W_kq, W_k, W_q):
    """(E, W_pv, W_kq merged, (W_k, W_q) or None, dtype) as the native entry points read them."""
    E, dtype = native_prompts(E, "E")
    W_pv = native_operand(W_pv, dtype, "W_pv")
    if not _is_separate(W_kq, W_k, W_q):
        return E, W_pv, native_operand(W_kq, dtype, "W_kq"), None, dtype
    shape = np.shape(W_pv)
    heads, n = (shape[0], shape[2]) if len(shape) == 3 else (None, None)
    sep = _separate(W_k, W_q, heads, n, dtype)
    return E, W_pv, merge_kq(*sep).astype(dtype, copy=False), sep, dtype


def _key_query_grads(sep, d_W_kq):
    """(dW_kq,) merged, or (dW_k, dW_q) separate (host arrays, chained from a host copy of a
    CUDA dW_kq)."""
    if sep is None:
        return (d_W_kq,)
    if not isinstance(d_W_kq, np.ndarray):
        d_W_kq = to_host(d_W_kq)
    return chain_kq(sep[0], sep[1], d_W_kq)


def predict(E, W_pv, W_kq=None, *, W_k=None, W_q=None, out=None, device="auto") -> np.ndarray:
    """Predictions ŷ_b = E_b[d, N] + Σ_h p_hᵀ G_b q_h (the query's label entry of F) for every
    prompt, p_h = last row of W^PV_h, q_h = W^KQ_h e_q, G = E Eᵀ/N  [ZFB (3.6) per head].

    Returns ŷ [B] in E's dtype (written into ``out`` when given)."""
    E, W_pv, W_kq, _, _ = _operands(E, W_pv, W_kq, W_k, W_q)
    return _core.multihead_lsa_predict(E, W_pv, W_kq, out, device)


def loss_and_grad(E, y_q, W_pv, W_kq=None, *, W_k=None, W_q=None,
                  return_predictions: bool = False, device="auto", out=None, loss=None):
    """L = (1/(2B)) Σ_b (ŷ_b − y_q,b)² [ZFB (3.7)] and its gradients.

    Merged: ``(L, dW_pv, dW_kq)``; separate: ``(L, dW_pv, dW_k, dW_q)`` (plus ŷ [B] when
    ``return_predictions``). dW_pv [H, d+1, d+1] is zero but the last row of each head
    (Σ_b r_b G_b q_h / B); dW^KQ_h = Σ_b r_b (G_b p_h) e_q,bᵀ / B, chained to W^K_h, W^Q_h.

    Merged only, as :func:`lsa_native.lsa.loss_and_grad`'s: ``out`` = ``(dW_pv, dW_kq)`` arrays
    (or None entries) written in place, on E's side; ``loss`` a float64 array of shape (1,) on
    E's side that receives L, returned in its place — with CUDA arrays the call then waits for
    nothing (``train.fit``'s device loop keeps θ, gradients and losses on the GPU). The separate
    parametrization chains its gradients on the host: out= and loss= are a TypeError there.
    """
    E, W_pv, W_kq, sep, dtype = _operands(E, W_pv, W_kq, W_k, W_q)
    if sep is not None and (out is not None or loss is not None):
        raise TypeError("out=, loss=: only with the merged parametrization (W_kq); the separate "
                        "one (W_k=, W_q=) chains its gradients on the host")
    y_q = native_operand(y_q, dtype, "y_q")
    L, d_W_pv, d_W_kq, *y_hat = _core.multihead_lsa_loss_and_grad(
        E, y_q, W_pv, W_kq, bool(return_predictions), device, out=out, loss=loss)
    return (L, d_W_pv, *_key_query_grads(sep, d_W_kq), *y_hat)


def forward(E, W_pv, W_kq=None, *, W_k=None, W_q=None, out=None, device="auto") -> np.ndarray:
    """Full output F = E + Σ_h W^PV_h E (Eᵀ W^KQ_h E)/N, computed as E + P E with
    P = Σ_h W^PV_h G W^KQ_h (O(N d² + H d³) per prompt). Returns F [B, d+1, N+1]."""
    E, W_pv, W_kq, _, _ = _operands(E, W_pv, W_kq, W_k, W_q)
    return _core.multihead_lsa_forward(E, W_pv, W_kq, out, device)


def vjp(E, W_pv, W_kq=None, d_F=None, *, W_k=None, W_q=None, with_input_grad: bool = True,
        device="auto"):
    """Vector-Jacobian product of :func:`forward` for ``d_F`` [B, d+1, N+1], with dP = d_F Eᵀ:
    dW^PV_h = Σ_b dP (G W^KQ_h)ᵀ, dW^KQ_h = Σ_b (W^PV_h G)ᵀ dP,
    dE = d_F + Pᵀ d_F + (dG + dGᵀ) E / N, dG = Σ_h W^PV_hᵀ dP W^KQ_hᵀ.

    Returns ``(dW_pv, dW_kq, dE)`` or, separate, ``(dW_pv, dW_k, dW_q, dE)``; dE is None without
    ``with_input_grad``."""
    if d_F is None:
        raise TypeError("vjp: missing the upstream gradient d_F")
    E, W_pv, W_kq, sep, dtype = _operands(E, W_pv, W_kq, W_k, W_q)
    d_F = native_operand(d_F, dtype, "d_F", finite=False)
    d_W_pv, d_W_kq, d_E = _core.multihead_lsa_vjp(E, W_pv, W_kq, d_F, bool(with_input_grad), device)
    return (d_W_pv, *_key_query_grads(sep, d_W_kq), d_E)


def predict_vjp(E, W_pv, W_kq=None, d_y=None, *, W_k=None, W_q=None,
                with_input_grad: bool = True, device="auto"):
    """(dW_pv, dW_kq, dE) of Σ_b d_y[b] ŷ_b (separate: (dW_pv, dW_k, dW_q, dE)):
    dW^PV_h's last row Σ_b dŷ_b G_b q_h, dW^KQ_h = Σ_b dŷ_b (G_b p_h) e_q,bᵀ, and
    dE_b = (dŷ_b/N) Σ_h (p_h q_hᵀ + q_h p_hᵀ) E_b + dŷ_b Σ_h W^KQ_hᵀ G_b p_h on the query column
    + dŷ_b on the query-label slot (None without ``with_input_grad``)."""
    if d_y is None:
        raise TypeError("predict_vjp: missing the upstream gradient d_y")
    E, W_pv, W_kq, sep, dtype = _operands(E, W_pv, W_kq, W_k, W_q)
    d_y = native_operand(d_y, dtype, "d_y", finite=False)
    d_W_pv, d_W_kq, d_E = _core.multihead_lsa_predict_vjp(E, W_pv, W_kq, d_y,
                                                          bool(with_input_grad), device)
    return (d_W_pv, *_key_query_grads(sep, d_W_kq), d_E)
