"""The device='cuda' path of :mod:`lsa_native.lsa`: argument checks and addresses for the native
CUDA entry points. CUDA arrays are used in place (exact dtype, C-contiguous: no implicit device
copies); host arrays are converted like on the CPU path and copied in and out by the native call.
Results follow E: CUDA arrays when E is one (PyTorch/CuPy when E came from there), else numpy.
"""
from __future__ import annotations

import numpy as np

from . import _core, cuda
from ._validation import as_array, as_out, as_prompts, check_finite_result


class _Arg:
    """A native argument: its address and what keeps it alive."""

    def __init__(self, ptr: int, keep):
        self.ptr, self.keep = int(ptr), keep


class _Prompts:
    """The prompts (E of lsa, Z0 of kernel_attention: [B, d+1, N+1]) on either side: shape, dtype,
    address, whether they live on a GPU (and which). Other arrays follow them (operand, output)."""

    def __init__(self, E, name: str = "E"):
        self.name = name
        if cuda.is_cuda_array(E):
            v = cuda.view(E, name)
            if len(v.shape) != 3:
                raise ValueError(f"{name}: expected a 3-d array [B, d+1, N+1], got shape {v.shape}")
            B, rows, cols = v.shape
            if B < 1 or rows < 2 or cols < 2:
                raise ValueError(
                    f"{name}: expected shape [B, d+1, N+1] with B >= 1, d >= 1 and N >= 1, got {v.shape}"
                )
            self.source, self.on_gpu, self.arg = E, True, _Arg(v.ptr, v)
            self.shape, self.dtype, self.device = v.shape, v.dtype, cuda.pointer_device(v.ptr)
        else:
            E = as_prompts(E, name)
            self.source, self.on_gpu, self.arg = E, False, _Arg(E.ctypes.data, E)
            self.shape, self.dtype, self.device = E.shape, E.dtype, -1
        B, rows, cols = self.shape
        self.native_shape = _core.LsaShape(B, rows - 1, cols - 1)

    def operand(self, a, name: str, shape: tuple, *, finite: bool = True) -> _Arg:
        """An input: a CUDA array of E's dtype and `shape`, or a host array converted to them."""
        if cuda.is_cuda_array(a):
            v = cuda.view(a, name)
            if v.dtype != self.dtype:
                raise TypeError(
                    f"{name}: expected dtype {self.dtype} ({self.name}'s dtype) for a CUDA array, got {v.dtype}"
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
                raise TypeError(f"{name}: expected a CUDA array ({self.name} is one), got {type(out).__name__}")
            v = cuda.view(out, name)
            if v.dtype != self.dtype:
                raise TypeError(f"{name}: expected dtype {self.dtype}, got {v.dtype}")
            if v.shape != tuple(shape):
                raise ValueError(f"{name}: expected shape {tuple(shape)}, got {v.shape}")
            if v.readonly:
                raise ValueError(f"{name}: must be writeable")
            return _Arg(v.ptr, v), out
        if cuda.is_cuda_array(out):
            raise TypeError(f"{name}: expected a numpy.ndarray ({self.name} is a host array), got a CUDA array")
        arr = as_out(out, shape, self.dtype, name)
        return _Arg(arr.ctypes.data, arr), arr

    def check_host_results(self, results: dict, inputs: dict):
        """check_finite_result for every result (name → array, None: absent) when they are host
        arrays, with the host arrays among `inputs` (name → array) named when they hold NaN/inf.
        The CPU kernels raise the same errors natively; results on the device are not inspected
        (that would cost a copy to the host)."""
        if self.on_gpu:
            return
        host = {k: v for k, v in inputs.items() if isinstance(v, np.ndarray)}
        for name, result in results.items():
            if result is not None:
                check_finite_result(result, host, name)


def predict(E, W_pv, W_kq, out):
    e = _Prompts(E)
    B, n, _ = e.shape
    pv, kq = e.operand(W_pv, "W_pv", (n, n)), e.operand(W_kq, "W_kq", (n, n))
    y, result = e.output(out, (B,))
    _core.lsa_predict_cuda(e.dtype.name, e.native_shape, e.arg.ptr, pv.ptr, kq.ptr, y.ptr)
    e.check_host_results({"y_hat": result}, {"E": e.source})
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
    e.check_host_results({"loss": loss, "dW_pv": d_pv_result, "dW_kq": d_kq_result},
                         {"E": e.source, "y_q": y.keep})
    if return_predictions:
        return loss, d_pv_result, d_kq_result, y_hat_result
    return loss, d_pv_result, d_kq_result


def forward(E, W_pv, W_kq, out):
    e = _Prompts(E)
    n = e.shape[1]
    pv, kq = e.operand(W_pv, "W_pv", (n, n)), e.operand(W_kq, "W_kq", (n, n))
    F, result = e.output(out, e.shape)
    _core.lsa_forward_cuda(e.dtype.name, e.native_shape, e.arg.ptr, pv.ptr, kq.ptr, F.ptr)
    e.check_host_results({"F": result}, {"E": e.source})
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
    e.check_host_results({"dW_pv": d_pv_result, "dW_kq": d_kq_result, "dE": d_E_result},
                         {"E": e.source, name: up.keep})
    return d_pv_result, d_kq_result, d_E_result


def vjp(E, W_pv, W_kq, d_F, with_input_grad: bool):
    return _vjp(_core.lsa_vjp_cuda, E, W_pv, W_kq, d_F, "d_F", lambda s: s, with_input_grad)


def predict_vjp(E, W_pv, W_kq, d_y, with_input_grad: bool):
    return _vjp(_core.lsa_predict_vjp_cuda, E, W_pv, W_kq, d_y, "d_y", lambda s: (s[0],),
                with_input_grad)
