"""The device='cuda' path of :mod:`lsa_native.kernel_attention`: argument checks and addresses for
the native CUDA entry points, with the helpers of :mod:`lsa_native._lsa_cuda` (CUDA arrays used in
place with Z0's exact dtype, C-contiguous; host arrays converted and copied in and out by the
native call). Results follow Z0: CUDA arrays when Z0 is one (PyTorch/CuPy when Z0 came from
there), else numpy (kernel_attention.py checks numpy results for overflow, as on the CPU).
"""
from __future__ import annotations

import numpy as np

from . import _core, cuda
from ._lsa_cuda import _Arg, _Prompts

_NONE = _Arg(0, None)


def shape_of(a, name: str = "V") -> tuple:
    """The shape of a host or CUDA array (read without copies)."""
    return tuple(cuda.view(a, name).shape) if cuda.is_cuda_array(a) else tuple(np.shape(a))


class _Call:
    """Z0, V, B, C and the activation codes of one call, as native arguments."""

    def __init__(self, Z0, V, B, C, codes_of):
        self.z = _Prompts(Z0, "Z0")
        Bsz, D, cols = self.z.shape
        v_shape = shape_of(V)
        if len(v_shape) != 4:
            raise ValueError(f"V: expected shape [L, H, d+1, d+1], got {tuple(v_shape)}")
        L, H = int(v_shape[0]), int(v_shape[1])
        d = D - 1
        self.L, self.H, self.d, self.n = L, H, d, cols - 1
        self.V = self.z.operand(V, "V", (L, H, D, D))
        self.B = self.z.operand(B, "B", (L, H, d, d))
        self.C = self.z.operand(C, "C", (L, H, d, d))
        self.codes = codes_of(H)
        self.shape = _core.KernelAttentionShape(Bsz, d, cols - 1, L, H)
        self.dtype = self.z.dtype.name

    def params(self) -> tuple:
        return self.z.arg.ptr, self.V.ptr, self.B.ptr, self.C.ptr

    def inputs(self, **extra) -> dict:
        """The call's inputs by name (host arrays are inspected when a host result is not finite)."""
        return dict(Z0=self.z.source, V=self.V.keep, B=self.B.keep, C=self.C.keep, **extra)


def forward(Z0, V, B, C, codes_of, return_predictions, return_context, context_type):
    c = _Call(Z0, V, B, C, codes_of)
    z = c.z
    Bsz = z.shape[0]
    Z, Z_result = z.output(None, z.shape)
    preds, preds_result = z.output(None, (Bsz, c.L + 1)) if return_predictions else (_NONE, None)
    ctx, ctx_result = _NONE, None
    if return_context:
        size = _core.kernel_attention_context_size(c.d, c.n, c.L, c.H, z.dtype == np.float64)
        ctx, ctx_result = z.output(None, (Bsz, size))
    _core.kernel_attention_forward_cuda(c.dtype, c.shape, *c.params(), c.codes, Z.ptr, preds.ptr,
                                        ctx.ptr)
    z.check_host_results({"Z_L": Z_result, "predictions": preds_result}, c.inputs())
    out = (Z_result,) + ((preds_result,) if return_predictions else ())
    if return_context:
        out += (context_type(ctx_result, (Bsz, c.d, c.n, c.L, c.H)),)
    return out


def vjp(Z0, V, B, C, codes_of, d_Z_out, context, input_grad):
    c = _Call(Z0, V, B, C, codes_of)
    z = c.z
    dZ = z.operand(d_Z_out, "d_Z_out", z.shape, finite=False)
    ctx = _NONE
    if context is not None:
        size = _core.kernel_attention_context_size(c.d, c.n, c.L, c.H, z.dtype == np.float64)
        ctx = z.operand(context.data, "context", (z.shape[0], size), finite=False)
    dV, dV_result = z.output(None, (c.L, c.H, c.d + 1, c.d + 1))
    dB, dB_result = z.output(None, (c.L, c.H, c.d, c.d))
    dC, dC_result = z.output(None, (c.L, c.H, c.d, c.d))
    dZ0, dZ0_result = z.output(None, z.shape) if input_grad else (_NONE, None)
    _core.kernel_attention_vjp_cuda(c.dtype, c.shape, *c.params(), c.codes, dZ.ptr, dV.ptr, dB.ptr,
                                    dC.ptr, dZ0.ptr, ctx.ptr)
    z.check_host_results({"d_V": dV_result, "d_B": dB_result, "d_C": dC_result, "d_Z0": dZ0_result},
                         c.inputs(d_Z_out=dZ.keep))
    return dV_result, dB_result, dC_result, dZ0_result


def loss_and_grad(Z0, y_q, V, B, C, codes_of, input_grad, return_predictions):
    """The core's loss ½·MSE and its gradients (kernel_attention.loss_and_grad's convention)."""
    c = _Call(Z0, V, B, C, codes_of)
    z = c.z
    Bsz = z.shape[0]
    y = z.operand(y_q, "y_q", (Bsz,))
    dV, dV_result = z.output(None, (c.L, c.H, c.d + 1, c.d + 1))
    dB, dB_result = z.output(None, (c.L, c.H, c.d, c.d))
    dC, dC_result = z.output(None, (c.L, c.H, c.d, c.d))
    dZ0, dZ0_result = z.output(None, z.shape) if input_grad else (_NONE, None)
    preds, preds_result = z.output(None, (Bsz, c.L + 1)) if return_predictions else (_NONE, None)
    loss = _core.kernel_attention_loss_and_grad_cuda(
        c.dtype, c.shape, z.arg.ptr, y.ptr, c.V.ptr, c.B.ptr, c.C.ptr, c.codes, dV.ptr, dB.ptr,
        dC.ptr, dZ0.ptr, preds.ptr)
    z.check_host_results({"loss": loss, "d_V": dV_result, "d_B": dB_result, "d_C": dC_result,
                          "d_Z0": dZ0_result, "predictions": preds_result}, c.inputs(y_q=y.keep))
    grads = (dV_result, dB_result, dC_result) + ((dZ0_result,) if input_grad else ())
    return (loss,) + grads + ((preds_result,) if return_predictions else ())
