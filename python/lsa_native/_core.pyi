"""
Compiled core of lsa_native (private; use the lsa_native package).
"""
from __future__ import annotations
import collections.abc
import numpy
import numpy.typing
import typing
__all__: list[str] = ['cpu_kernel_isa', 'cuda_available', 'cuda_compiled', 'gradient_flow_population', 'gradient_flow_reduced', 'kernel_attention_context_size', 'kernel_attention_forward', 'kernel_attention_loss_and_grad', 'kernel_attention_vjp', 'lsa_forward', 'lsa_loss_and_grad', 'lsa_predict', 'lsa_predict_vjp', 'lsa_vjp', 'num_threads', 'population_loss', 'reduced_loss', 'set_num_threads', 'stream_sum']
def cpu_kernel_isa() -> str:
    """
    Instruction set the CPU kernels dispatched to.
    """
def cuda_available() -> bool:
    """
    True when CUDA kernels were compiled in and a GPU is visible.
    """
def cuda_compiled() -> bool:
    """
    True when CUDA kernels were compiled in.
    """
def gradient_flow_population(kind: str, W_pv: numpy.typing.NDArray[numpy.float64], W_kq: numpy.typing.NDArray[numpy.float64], data: numpy.typing.NDArray[numpy.float64], N: typing.SupportsInt | typing.SupportsIndex, times: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], method: str, rtol: typing.SupportsFloat | typing.SupportsIndex, atol: typing.SupportsFloat | typing.SupportsIndex, step: typing.SupportsFloat | typing.SupportsIndex, grad_tol: typing.SupportsFloat | typing.SupportsIndex, loss_target: typing.SupportsFloat | typing.SupportsIndex, gap_tol: typing.SupportsFloat | typing.SupportsIndex, max_steps: typing.SupportsInt | typing.SupportsIndex) -> dict:
    ...
def gradient_flow_reduced(U11: numpy.typing.NDArray[numpy.float64], u: typing.SupportsFloat | typing.SupportsIndex, Lambda: numpy.typing.NDArray[numpy.float64], N: typing.SupportsInt | typing.SupportsIndex, times: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], method: str, rtol: typing.SupportsFloat | typing.SupportsIndex, atol: typing.SupportsFloat | typing.SupportsIndex, step: typing.SupportsFloat | typing.SupportsIndex, grad_tol: typing.SupportsFloat | typing.SupportsIndex, loss_target: typing.SupportsFloat | typing.SupportsIndex, gap_tol: typing.SupportsFloat | typing.SupportsIndex, max_steps: typing.SupportsInt | typing.SupportsIndex) -> dict:
    ...
def kernel_attention_context_size(dim: typing.SupportsInt | typing.SupportsIndex, context: typing.SupportsInt | typing.SupportsIndex, layers: typing.SupportsInt | typing.SupportsIndex, heads: typing.SupportsInt | typing.SupportsIndex, float64: bool) -> int:
    """
    Values per prompt of the saved forward context (see kernel_attention.hpp).
    """
@typing.overload
def kernel_attention_forward(Z0: numpy.typing.NDArray[numpy.float32], V: numpy.typing.NDArray[numpy.float32], B: numpy.typing.NDArray[numpy.float32], C: numpy.typing.NDArray[numpy.float32], activations: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], Z_out: numpy.typing.NDArray[numpy.float32] | None = None, predictions: numpy.typing.NDArray[numpy.float32] | None = None, context: numpy.typing.NDArray[numpy.float32] | None = None) -> None:
    ...
@typing.overload
def kernel_attention_forward(Z0: numpy.typing.NDArray[numpy.float64], V: numpy.typing.NDArray[numpy.float64], B: numpy.typing.NDArray[numpy.float64], C: numpy.typing.NDArray[numpy.float64], activations: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], Z_out: numpy.typing.NDArray[numpy.float64] | None = None, predictions: numpy.typing.NDArray[numpy.float64] | None = None, context: numpy.typing.NDArray[numpy.float64] | None = None) -> None:
    ...
@typing.overload
def kernel_attention_loss_and_grad(Z0: numpy.typing.NDArray[numpy.float32], y_q: numpy.typing.NDArray[numpy.float32], V: numpy.typing.NDArray[numpy.float32], B: numpy.typing.NDArray[numpy.float32], C: numpy.typing.NDArray[numpy.float32], activations: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], d_V: numpy.typing.NDArray[numpy.float32], d_B: numpy.typing.NDArray[numpy.float32], d_C: numpy.typing.NDArray[numpy.float32], d_Z0: numpy.typing.NDArray[numpy.float32] | None = None, predictions: numpy.typing.NDArray[numpy.float32] | None = None) -> float:
    ...
@typing.overload
def kernel_attention_loss_and_grad(Z0: numpy.typing.NDArray[numpy.float64], y_q: numpy.typing.NDArray[numpy.float64], V: numpy.typing.NDArray[numpy.float64], B: numpy.typing.NDArray[numpy.float64], C: numpy.typing.NDArray[numpy.float64], activations: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], d_V: numpy.typing.NDArray[numpy.float64], d_B: numpy.typing.NDArray[numpy.float64], d_C: numpy.typing.NDArray[numpy.float64], d_Z0: numpy.typing.NDArray[numpy.float64] | None = None, predictions: numpy.typing.NDArray[numpy.float64] | None = None) -> float:
    ...
@typing.overload
def kernel_attention_vjp(Z0: numpy.typing.NDArray[numpy.float32], V: numpy.typing.NDArray[numpy.float32], B: numpy.typing.NDArray[numpy.float32], C: numpy.typing.NDArray[numpy.float32], activations: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], d_Z_out: numpy.typing.NDArray[numpy.float32], d_V: numpy.typing.NDArray[numpy.float32], d_B: numpy.typing.NDArray[numpy.float32], d_C: numpy.typing.NDArray[numpy.float32], d_Z0: numpy.typing.NDArray[numpy.float32] | None = None, context: numpy.typing.NDArray[numpy.float32] | None = None) -> None:
    ...
@typing.overload
def kernel_attention_vjp(Z0: numpy.typing.NDArray[numpy.float64], V: numpy.typing.NDArray[numpy.float64], B: numpy.typing.NDArray[numpy.float64], C: numpy.typing.NDArray[numpy.float64], activations: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], d_Z_out: numpy.typing.NDArray[numpy.float64], d_V: numpy.typing.NDArray[numpy.float64], d_B: numpy.typing.NDArray[numpy.float64], d_C: numpy.typing.NDArray[numpy.float64], d_Z0: numpy.typing.NDArray[numpy.float64] | None = None, context: numpy.typing.NDArray[numpy.float64] | None = None) -> None:
    ...
@typing.overload
def lsa_forward(E: numpy.typing.NDArray[numpy.float32], W_pv: numpy.typing.NDArray[numpy.float32], W_kq: numpy.typing.NDArray[numpy.float32], out: numpy.typing.NDArray[numpy.float32]) -> None:
    ...
@typing.overload
def lsa_forward(E: numpy.typing.NDArray[numpy.float64], W_pv: numpy.typing.NDArray[numpy.float64], W_kq: numpy.typing.NDArray[numpy.float64], out: numpy.typing.NDArray[numpy.float64]) -> None:
    ...
@typing.overload
def lsa_loss_and_grad(E: numpy.typing.NDArray[numpy.float32], y_q: numpy.typing.NDArray[numpy.float32], W_pv: numpy.typing.NDArray[numpy.float32], W_kq: numpy.typing.NDArray[numpy.float32], d_W_pv: numpy.typing.NDArray[numpy.float32], d_W_kq: numpy.typing.NDArray[numpy.float32], y_hat: numpy.typing.NDArray[numpy.float32] | None = None) -> float:
    ...
@typing.overload
def lsa_loss_and_grad(E: numpy.typing.NDArray[numpy.float64], y_q: numpy.typing.NDArray[numpy.float64], W_pv: numpy.typing.NDArray[numpy.float64], W_kq: numpy.typing.NDArray[numpy.float64], d_W_pv: numpy.typing.NDArray[numpy.float64], d_W_kq: numpy.typing.NDArray[numpy.float64], y_hat: numpy.typing.NDArray[numpy.float64] | None = None) -> float:
    ...
@typing.overload
def lsa_predict(E: numpy.typing.NDArray[numpy.float32], W_pv: numpy.typing.NDArray[numpy.float32], W_kq: numpy.typing.NDArray[numpy.float32], out: numpy.typing.NDArray[numpy.float32]) -> None:
    ...
@typing.overload
def lsa_predict(E: numpy.typing.NDArray[numpy.float64], W_pv: numpy.typing.NDArray[numpy.float64], W_kq: numpy.typing.NDArray[numpy.float64], out: numpy.typing.NDArray[numpy.float64]) -> None:
    ...
@typing.overload
def lsa_predict_vjp(E: numpy.typing.NDArray[numpy.float32], W_pv: numpy.typing.NDArray[numpy.float32], W_kq: numpy.typing.NDArray[numpy.float32], d_y: numpy.typing.NDArray[numpy.float32], d_W_pv: numpy.typing.NDArray[numpy.float32], d_W_kq: numpy.typing.NDArray[numpy.float32], d_E: numpy.typing.NDArray[numpy.float32] | None = None) -> None:
    ...
@typing.overload
def lsa_predict_vjp(E: numpy.typing.NDArray[numpy.float64], W_pv: numpy.typing.NDArray[numpy.float64], W_kq: numpy.typing.NDArray[numpy.float64], d_y: numpy.typing.NDArray[numpy.float64], d_W_pv: numpy.typing.NDArray[numpy.float64], d_W_kq: numpy.typing.NDArray[numpy.float64], d_E: numpy.typing.NDArray[numpy.float64] | None = None) -> None:
    ...
@typing.overload
def lsa_vjp(E: numpy.typing.NDArray[numpy.float32], W_pv: numpy.typing.NDArray[numpy.float32], W_kq: numpy.typing.NDArray[numpy.float32], d_F: numpy.typing.NDArray[numpy.float32], d_W_pv: numpy.typing.NDArray[numpy.float32], d_W_kq: numpy.typing.NDArray[numpy.float32], d_E: numpy.typing.NDArray[numpy.float32] | None = None) -> None:
    ...
@typing.overload
def lsa_vjp(E: numpy.typing.NDArray[numpy.float64], W_pv: numpy.typing.NDArray[numpy.float64], W_kq: numpy.typing.NDArray[numpy.float64], d_F: numpy.typing.NDArray[numpy.float64], d_W_pv: numpy.typing.NDArray[numpy.float64], d_W_kq: numpy.typing.NDArray[numpy.float64], d_E: numpy.typing.NDArray[numpy.float64] | None = None) -> None:
    ...
def num_threads() -> int:
    """
    CPU threads used by batched kernels.
    """
def population_loss(kind: str, W_pv: numpy.typing.NDArray[numpy.float64], W_kq: numpy.typing.NDArray[numpy.float64], data: numpy.typing.NDArray[numpy.float64], N: typing.SupportsInt | typing.SupportsIndex) -> tuple[float, numpy.typing.NDArray[numpy.float64], numpy.typing.NDArray[numpy.float64]]:
    ...
def reduced_loss(U11: numpy.typing.NDArray[numpy.float64], u: typing.SupportsFloat | typing.SupportsIndex, Lambda: numpy.typing.NDArray[numpy.float64], N: typing.SupportsInt | typing.SupportsIndex) -> tuple[float, numpy.typing.NDArray[numpy.float64], float]:
    ...
def set_num_threads(n: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Set the CPU thread count (n < 1 restores the default). Results do not depend on it.
    """
@typing.overload
def stream_sum(x: numpy.typing.NDArray[numpy.float32]) -> float:
    """
    Sum of an array read once on all threads: the read-bandwidth probe of the benchmarks.
    """
@typing.overload
def stream_sum(x: numpy.typing.NDArray[numpy.float64]) -> float:
    """
    Sum of an array read once on all threads: the read-bandwidth probe of the benchmarks.
    """
__version__: str = '0.1.0'
