"""The device='cuda' path of :mod:`lsa_native.lsa`: argument checks and addresses for the native
CUDA entry points. CUDA arrays are used in place (exact dtype, C-contiguous: no implicit device
copies); host arrays are converted like on the CPU path and copied in and out by the native call.
Results follow E: CUDA arrays when E is one (PyTorch/CuPy when E came from there), else numpy.
"""
from __future__ import annotations

import numpy as np

from . import _core, cuda
from ._validation import as_array, as_out, check_finite_result


class _Arg:
    """A native argument: its address and what keeps it alive."""

    def __init__(self, ptr: int, keep):
        self.ptr, self.keep = int(ptr), keep


class _Prompts:
    """E on either side: shape, dtype, address, whether it lives on a GPU (and which)."""

    def __init__(self, E):
        from .lsa import _as_prompts

        if cuda.is_cuda_array(E):
            v = cuda.view(E, "E")
            self.source, self.on_gpu, self.arg = E, True, _Arg(v.ptr, v)
            self.shape, self.dtype = v.shape, v.dtype
        else:
            E = _as_prompts(E)
            self.source, self.on_gpu, self.arg = E, False, _Arg(E.ctypes.data, E)
            self.shape, self.dtype = E.shape, E.dtype
        # E's shape rules (3-d, B, d, N >= 1) are checked natively, before anything is allocated.
        self.native_shape = _core.lsa_shape(self.shape)
        self.device = cuda.pointer_device(self.arg.ptr) if self.on_gpu else -1

    def operand(self, a, name: str, shape: tuple, *, finite: bool = True) -> _Arg:
        """An input: a CUDA array of E's dtype and `shape`, or a host array converted to them."""
        if cuda.is_cuda_array(a):
            v = cuda.view(a, name)
            if v.dtype != self.dtype:
                raise TypeError(
                    f"{name}: expected dtype {self.dtype} (E's dtype) for a CUDA array, got {v.dtype}"
                )
            if v.shape != tuple(shape):
                raise ValueError(f"{name}: expected shape {tuple(shape)}, got {v.shape}")
            return _Arg(v.ptr, v)
        a = as_array(a, shape, self.dtype, name, finite=finite)
        return _Arg(a.ctypes.data, a)

    def output(self, out, shape: tuple, name: str = "out"):
        """(argument, result): `out` when given (a CUDA array when E is one, else numpy), else a
        fresh array on E's side."""
        if self.on_gpu:
            if out is None:
                buf = cuda.empty(self.source, shape, self.dtype, self.device)
                return _Arg(cuda.view(buf, name).ptr, buf), buf
            if not cuda.is_cuda_array(out):
                raise TypeError(f"{name}: expected a CUDA array (E is one), got {type(out).__name__}")
            v = cuda.view(out, name)
            if v.dtype != self.dtype:
                raise TypeError(f"{name}: expected dtype {self.dtype}, got {v.dtype}")
            if v.shape != tuple(shape):
                raise ValueError(f"{name}: expected shape {tuple(shape)}, got {v.shape}")
            if v.readonly:
                raise ValueError(f"{name}: must be writeable")
            return _Arg(v.ptr, v), out
        if cuda.is_cuda_array(out):
            raise TypeError(f"{name}: expected a numpy.ndarray (E is a host array), got a CUDA array")
        arr = as_out(out, shape, self.dtype, name)
        return _Arg(arr.ctypes.data, arr), arr

    def check_host_result(self, result, inputs: dict):
        # Results on the device are not inspected (that would cost a copy to the host).
        if not self.on_gpu:
            check_finite_result(result, inputs)


def predict(E, W_pv, W_kq, out):
    e = _Prompts(E)
    B, n, _ = e.shape
    pv, kq = e.operand(W_pv, "W_pv", (n, n)), e.operand(W_kq, "W_kq", (n, n))
    y, result = e.output(out, (B,))
    _core.lsa_predict_cuda(e.dtype.name, e.native_shape, e.arg.ptr, pv.ptr, kq.ptr, y.ptr)
    e.check_host_result(result, {"E": e.source})
    return result


def loss_and_grad(E, y_q, W_pv, W_kq, return_predictions: bool):
    e = _Prompts(E)
    B, n, _ = e.shape
    y = e.operand(y_q, "y_q", (B,))
    pv, kq = e.operand(W_pv, "W_pv", (n, n)), e.operand(W_kq, "W_kq", (n, n))
    d_pv, d_pv_result = e.output(None, (n, n))
    d_kq, d_kq_result = e.output(None, (n, n))
    y_hat, y_hat_result = e.output(None, (B,)) if return_predictions else (_Arg(0, None), None)
    loss = _core.lsa_loss_and_grad_cuda(
        e.dtype.name, e.native_shape, e.arg.ptr, y.ptr, pv.ptr, kq.ptr, d_pv.ptr, d_kq.ptr, y_hat.ptr
    )
    if not np.isfinite(loss):
        e.check_host_result(loss, {"E": e.source})
    if return_predictions:
        return loss, d_pv_result, d_kq_result, y_hat_result
    return loss, d_pv_result, d_kq_result


def forward(E, W_pv, W_kq, out):
    e = _Prompts(E)
    n = e.shape[1]
    pv, kq = e.operand(W_pv, "W_pv", (n, n)), e.operand(W_kq, "W_kq", (n, n))
    F, result = e.output(out, e.shape)
    _core.lsa_forward_cuda(e.dtype.name, e.native_shape, e.arg.ptr, pv.ptr, kq.ptr, F.ptr)
    if not e.on_gpu:
        check_finite_result(result[:, -1, -1], {"E": e.source})
    return result


def _vjp(entry, E, W_pv, W_kq, upstream, name: str, upstream_shape, with_input_grad: bool):
    """The VJPs (full forward: d_F [B, d+1, N+1]; prediction: d_y [B]): (dW_pv, dW_kq, dE)."""
    e = _Prompts(E)
    n = e.shape[1]
    pv, kq = e.operand(W_pv, "W_pv", (n, n)), e.operand(W_kq, "W_kq", (n, n))
    up = e.operand(upstream, name, upstream_shape(e.shape), finite=False)
    d_pv, d_pv_result = e.output(None, (n, n))
    d_kq, d_kq_result = e.output(None, (n, n))
    d_E, d_E_result = e.output(None, e.shape) if with_input_grad else (_Arg(0, None), None)
    entry(e.dtype.name, e.native_shape, e.arg.ptr, pv.ptr, kq.ptr, up.ptr, d_pv.ptr, d_kq.ptr,
          d_E.ptr)
    host_inputs = {"E": e.source, name: up.keep}
    e.check_host_result(d_pv_result, {k: v for k, v in host_inputs.items() if isinstance(v, np.ndarray)})
    return d_pv_result, d_kq_result, d_E_result


def vjp(E, W_pv, W_kq, d_F, with_input_grad: bool):
    return _vjp(_core.lsa_vjp_cuda, E, W_pv, W_kq, d_F, "d_F", lambda s: s, with_input_grad)


def predict_vjp(E, W_pv, W_kq, d_y, with_input_grad: bool):
    return _vjp(_core.lsa_predict_vjp_cuda, E, W_pv, W_kq, d_y, "d_y", lambda s: (s[0],),
                with_input_grad)
