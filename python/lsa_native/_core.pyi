"""
Compiled core of lsa_native (private; use the lsa_native package).
"""
from __future__ import annotations
import collections.abc
import numpy
import numpy.typing
import typing
__all__: list[str] = ['ACTIVATION_NAMES', 'COVARIANCE_LAWS', 'DeviceArray', 'activation_codes', 'array_info', 'batched_cholesky', 'batched_symmetric_eigen', 'cpu_kernel_isa', 'cuda_available', 'cuda_compiled', 'cuda_philox4x32', 'cuda_pointer_device', 'cuda_random_variates', 'cuda_release_memory', 'cuda_synchronize', 'emulate_cuda_on_cpu_for_tests', 'gradient_flow_multihead', 'gradient_flow_population', 'gradient_flow_reduced', 'kernel_attention_context_size', 'kernel_attention_forward', 'kernel_attention_loss_and_grad', 'kernel_attention_predict_vjp', 'kernel_attention_vjp', 'kernel_gp_max_exp_scale', 'kernel_gp_sample', 'kernel_gp_sample_cuda', 'linear_prompts_lsa_loss_and_grad', 'linear_prompts_multihead_loss_and_grad', 'lsa_forward', 'lsa_loss_and_grad', 'lsa_predict', 'lsa_predict_vjp', 'lsa_vjp', 'multihead_chain_kq', 'multihead_lsa_forward', 'multihead_lsa_loss_and_grad', 'multihead_lsa_predict', 'multihead_lsa_predict_vjp', 'multihead_lsa_vjp', 'multihead_merge_kq', 'multihead_population_loss', 'num_threads', 'optimizer_step', 'optimizer_step_fields', 'philox4x32', 'population_loss', 'random_gammas', 'random_normals', 'random_uniforms', 'reduced_loss', 'sample_linear_prompts', 'sample_linear_prompts_cuda', 'set_num_threads', 'simd_log', 'simd_sincos_2pi', 'stream_sum']
class DeviceArray:
    """
    Owning C-contiguous CUDA device array (float32/float64). CuPy (cupy.asarray) and PyTorch (torch.as_tensor, torch.from_dlpack) wrap it without copies.
    """
    def __dlpack__(self, *, stream: typing.Any = None, max_version: typing.Any = None, dl_device: typing.Any = None, copy: typing.Any = None) -> typing.Any:
        """
        DLPack export (an unversioned 'dltensor' capsule, which every consumer accepts).
        """
    def __dlpack_device__(self) -> tuple[int, int]:
        ...
    def __init__(self, shape: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], dtype: numpy.dtype[typing.Any], device: typing.SupportsInt | typing.SupportsIndex = -1) -> None:
        ...
    def __repr__(self) -> str:
        ...
    def copy_from_host(self, src: numpy.ndarray) -> None:
        """
        Overwrite with a C-contiguous numpy array of the same dtype and size.
        """
    def copy_to_host(self) -> numpy.ndarray:
        """
        A numpy copy of the array.
        """
    @property
    def __cuda_array_interface__(self) -> dict:
        ...
    @property
    def device(self) -> int:
        ...
    @property
    def dtype(self) -> numpy.dtype[typing.Any]:
        ...
    @property
    def nbytes(self) -> int:
        ...
    @property
    def ptr(self) -> int:
        ...
    @property
    def shape(self) -> tuple:
        ...
def activation_codes(activation: typing.Any, heads: typing.SupportsInt | typing.SupportsIndex, name: str = 'activation') -> list[int]:
    """
    One code per head of `activation` (a name, or a list of one name per head), checked.
    """
def array_info(a: typing.Any, name: str = 'a') -> typing.Any:
    """
    The array view the native entry points make of `a` (numpy, __cuda_array_interface__ or __dlpack__): ptr, shape, byte strides, dtype name, device (-1: host), readonly.
    """
@typing.overload
def batched_cholesky(a: numpy.typing.NDArray[numpy.float32], ok: numpy.typing.NDArray[numpy.int32]) -> None:
    ...
@typing.overload
def batched_cholesky(a: numpy.typing.NDArray[numpy.float64], ok: numpy.typing.NDArray[numpy.int32]) -> None:
    ...
@typing.overload
def batched_symmetric_eigen(a: numpy.typing.NDArray[numpy.float32], w: numpy.typing.NDArray[numpy.float32], v: numpy.typing.NDArray[numpy.float32], sweeps: numpy.typing.NDArray[numpy.int32], max_sweeps: typing.SupportsInt | typing.SupportsIndex = 30) -> None:
    ...
@typing.overload
def batched_symmetric_eigen(a: numpy.typing.NDArray[numpy.float64], w: numpy.typing.NDArray[numpy.float64], v: numpy.typing.NDArray[numpy.float64], sweeps: numpy.typing.NDArray[numpy.int32], max_sweeps: typing.SupportsInt | typing.SupportsIndex = 30) -> None:
    ...
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
def cuda_philox4x32(counters: numpy.typing.NDArray[numpy.uint32], seed: typing.SupportsInt | typing.SupportsIndex, out: numpy.typing.NDArray[numpy.uint32]) -> None:
    """
    Philox4x32-10 words computed on the GPU (host arrays, copied in and out).
    """
def cuda_pointer_device(ptr: typing.SupportsInt | typing.SupportsIndex) -> int:
    """
    CUDA device owning the pointer (device or managed memory), else -1.
    """
def cuda_random_variates(dtype: str, normal: bool, seed: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, prompt: typing.SupportsInt | typing.SupportsIndex, stream: typing.SupportsInt | typing.SupportsIndex, start: typing.SupportsInt | typing.SupportsIndex, n: typing.SupportsInt | typing.SupportsIndex, out: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Normals or uniforms of a stream computed on the GPU into the address `out` (device or host).
    """
def cuda_release_memory() -> None:
    """
    Return the scratch memory lsa_native keeps for reuse to the CUDA driver (waits for the devices first); a no-op without CUDA kernels.
    """
def cuda_synchronize() -> None:
    """
    Wait for all work on the current CUDA device.
    """
def emulate_cuda_on_cpu_for_tests(on: bool) -> None:
    """
    Tests only: calls routed to CUDA run the CPU kernels on the same pointers (host memory presented as CUDA arrays), so the GPU route is tested without a GPU.
    """
def gradient_flow_multihead(law: str, W_pv: numpy.typing.NDArray[numpy.float64], keys: collections.abc.Sequence[typing.Annotated[numpy.typing.ArrayLike, numpy.float64]], data: numpy.typing.NDArray[numpy.float64], N: typing.SupportsInt | typing.SupportsIndex, times: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], method: str, rtol: typing.SupportsFloat | typing.SupportsIndex, atol: typing.SupportsFloat | typing.SupportsIndex, step: typing.SupportsFloat | typing.SupportsIndex, grad_tol: typing.SupportsFloat | typing.SupportsIndex, loss_target: typing.SupportsFloat | typing.SupportsIndex, gap_tol: typing.SupportsFloat | typing.SupportsIndex, max_steps: typing.SupportsInt | typing.SupportsIndex, noise_std: typing.SupportsFloat | typing.SupportsIndex = 0.0, query_noise: bool = False) -> dict:
    ...
def gradient_flow_population(kind: str, W_pv: numpy.typing.NDArray[numpy.float64], W_kq: numpy.typing.NDArray[numpy.float64], data: numpy.typing.NDArray[numpy.float64], N: typing.SupportsInt | typing.SupportsIndex, times: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], method: str, rtol: typing.SupportsFloat | typing.SupportsIndex, atol: typing.SupportsFloat | typing.SupportsIndex, step: typing.SupportsFloat | typing.SupportsIndex, grad_tol: typing.SupportsFloat | typing.SupportsIndex, loss_target: typing.SupportsFloat | typing.SupportsIndex, gap_tol: typing.SupportsFloat | typing.SupportsIndex, max_steps: typing.SupportsInt | typing.SupportsIndex, noise_std: typing.SupportsFloat | typing.SupportsIndex = 0.0, query_noise: bool = False) -> dict:
    ...
def gradient_flow_reduced(U11: numpy.typing.NDArray[numpy.float64], u: typing.SupportsFloat | typing.SupportsIndex, Lambda: numpy.typing.NDArray[numpy.float64], N: typing.SupportsInt | typing.SupportsIndex, times: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], method: str, rtol: typing.SupportsFloat | typing.SupportsIndex, atol: typing.SupportsFloat | typing.SupportsIndex, step: typing.SupportsFloat | typing.SupportsIndex, grad_tol: typing.SupportsFloat | typing.SupportsIndex, loss_target: typing.SupportsFloat | typing.SupportsIndex, gap_tol: typing.SupportsFloat | typing.SupportsIndex, max_steps: typing.SupportsInt | typing.SupportsIndex) -> dict:
    ...
def kernel_attention_context_size(dim: typing.SupportsInt | typing.SupportsIndex, context: typing.SupportsInt | typing.SupportsIndex, layers: typing.SupportsInt | typing.SupportsIndex, heads: typing.SupportsInt | typing.SupportsIndex, float64: bool) -> int:
    """
    Values per prompt of the saved forward context (see kernel_attention.hpp).
    """
def kernel_attention_forward(Z0: typing.Any, V: typing.Any, B: typing.Any, C: typing.Any, activation: typing.Any, *, z_out: bool = True, predictions: bool = False, context: bool = False, y_hat: bool = False, every_layer: bool = True, device: typing.Any = 'auto', predictions_out: typing.Any = None) -> tuple[typing.Any, typing.Any, typing.Any, typing.Any]:
    """
    (Z_L, predictions, context data, context shape (B, d, n, L, H)), None where not asked; predictions [B, L+1] of TF (of ŷ = −TF with y_hat), or [B] of ŷ_L with every_layer=False, written into predictions_out (named 'out' in errors) when given.
    """
def kernel_attention_loss_and_grad(Z0: typing.Any, y_q: typing.Any, V: typing.Any, B: typing.Any, C: typing.Any, activation: typing.Any, *, input_grad: bool = False, return_predictions: bool = False, device: typing.Any = 'auto', out: typing.Any = None, loss: typing.Any = None) -> tuple:
    """
    (loss, dV, dB, dC[, dZ0][, TF_l for every layer]) of kernel_attention_loss_and_grad; out=(d_V, d_B, d_C) written in place; loss= a float64 [1] array on Z0's side receiving the loss (returned in its place: on the GPU nothing waits).
    """
def kernel_attention_predict_vjp(Z0: typing.Any, V: typing.Any, B: typing.Any, C: typing.Any, activation: typing.Any, d_y: typing.Any, *, input_grad: bool = True, device: typing.Any = 'auto') -> tuple[typing.Any, typing.Any, typing.Any, typing.Any]:
    """
    (dV, dB, dC, dZ0 or None) of the predictions ŷ_L = −Z_L[:, d, n] for the upstream d_y [B].
    """
def kernel_attention_vjp(Z0: typing.Any, V: typing.Any, B: typing.Any, C: typing.Any, activation: typing.Any, d_Z_out: typing.Any, *, context: typing.Any = None, input_grad: bool = True, device: typing.Any = 'auto') -> tuple[typing.Any, typing.Any, typing.Any, typing.Any]:
    """
    (dV, dB, dC, dZ0 or None) of kernel_attention_forward's Z_L for the upstream d_Z_out.
    """
@typing.overload
def kernel_gp_sample(seed: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, kernel: typing.SupportsInt | typing.SupportsIndex, bandwidth: typing.SupportsFloat | typing.SupportsIndex, Sigma: numpy.typing.NDArray[numpy.float64] | None, Z0: numpy.typing.NDArray[numpy.float32], y_q: numpy.typing.NDArray[numpy.float32], xi: numpy.typing.NDArray[numpy.float32] | None = None, method: numpy.typing.NDArray[numpy.int32] | None = None, alpha: typing.SupportsFloat | typing.SupportsIndex = 0.0, g1: numpy.typing.NDArray[numpy.float64] | None = None, g2: numpy.typing.NDArray[numpy.float64] | None = None) -> None:
    ...
@typing.overload
def kernel_gp_sample(seed: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, kernel: typing.SupportsInt | typing.SupportsIndex, bandwidth: typing.SupportsFloat | typing.SupportsIndex, Sigma: numpy.typing.NDArray[numpy.float64] | None, Z0: numpy.typing.NDArray[numpy.float64], y_q: numpy.typing.NDArray[numpy.float64], xi: numpy.typing.NDArray[numpy.float64] | None = None, method: numpy.typing.NDArray[numpy.int32] | None = None, alpha: typing.SupportsFloat | typing.SupportsIndex = 0.0, g1: numpy.typing.NDArray[numpy.float64] | None = None, g2: numpy.typing.NDArray[numpy.float64] | None = None) -> None:
    ...
def kernel_gp_sample_cuda(dtype: str, seed: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, kernel: typing.SupportsInt | typing.SupportsIndex, bandwidth: typing.SupportsFloat | typing.SupportsIndex, Sigma: numpy.typing.NDArray[numpy.float64] | None, batch: typing.SupportsInt | typing.SupportsIndex, d: typing.SupportsInt | typing.SupportsIndex, n: typing.SupportsInt | typing.SupportsIndex, Z0: typing.SupportsInt | typing.SupportsIndex, y_q: typing.SupportsInt | typing.SupportsIndex, xi: typing.SupportsInt | typing.SupportsIndex, alpha: typing.SupportsFloat | typing.SupportsIndex = 0.0, g1: numpy.typing.NDArray[numpy.float64] | None = None, g2: numpy.typing.NDArray[numpy.float64] | None = None) -> None:
    """
    K-GP prompts sampled on the GPU into CUDA arrays given by address.
    """
def linear_prompts_lsa_loss_and_grad(spec: dict, batch: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, method: str, W_pv: typing.Any, W_kq: typing.Any, d_W_pv: typing.Any, d_W_kq: typing.Any, device: str = 'cpu', loss: typing.Any = None) -> float:
    """
    The fused sampled LSA step: (loss, d_W_pv, d_W_kq written in place). W_pv, W_kq and the outputs: C-contiguous arrays of one dtype (float32 or float64), host arrays or (device='cuda') CUDA arrays; loss: float64 [1] (written there, NaN returned: on the GPU nothing waits).
    """
def linear_prompts_multihead_loss_and_grad(spec: dict, batch: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, method: str, W_pv: typing.Any, W_kq: typing.Any, d_W_pv: typing.Any, d_W_kq: typing.Any, device: str = 'cpu', loss: typing.Any = None) -> float:
    """
    (L) of multihead.hpp's linear_prompts_multihead_loss_and_grad: the fused H-head step, the gradients written into d_W_pv, d_W_kq [H, d+1, d+1] (C-contiguous arrays of one dtype: host arrays, or with device='cuda' CUDA arrays); loss: float64 [1] (written there, NaN returned: on the GPU nothing waits).
    """
def lsa_forward(E: typing.Any, W_pv: typing.Any, W_kq: typing.Any, out: typing.Any = None, device: typing.Any = 'auto') -> typing.Any:
    """
    F [B, d+1, N+1] (lsa.hpp), written into `out` when given.
    """
def lsa_loss_and_grad(E: typing.Any, y_q: typing.Any, W_pv: typing.Any, W_kq: typing.Any, return_predictions: bool = False, device: typing.Any = 'auto', *, out: typing.Any = None, loss: typing.Any = None) -> tuple:
    """
    (loss, dW_pv, dW_kq[, y_hat]) of lsa.hpp's lsa_loss_and_grad; out=(dW_pv, dW_kq) written in place; loss= a float64 [1] array on E's side receiving the loss (returned in its place: on the GPU nothing waits).
    """
def lsa_predict(E: typing.Any, W_pv: typing.Any, W_kq: typing.Any, out: typing.Any = None, device: typing.Any = 'auto') -> typing.Any:
    """
    ŷ [B] of prompts E [B, d+1, N+1] (lsa.hpp), written into `out` when given.
    """
def lsa_predict_vjp(E: typing.Any, W_pv: typing.Any, W_kq: typing.Any, d_y: typing.Any, with_input_grad: bool = True, device: typing.Any = 'auto') -> tuple[typing.Any, typing.Any, typing.Any]:
    """
    (dW_pv, dW_kq, dE) of lsa_predict for the upstream d_y [B].
    """
def lsa_vjp(E: typing.Any, W_pv: typing.Any, W_kq: typing.Any, d_F: typing.Any, with_input_grad: bool = True, device: typing.Any = 'auto') -> tuple[typing.Any, typing.Any, typing.Any]:
    """
    (dW_pv, dW_kq, dE) of lsa_forward for the upstream d_F [B, d+1, N+1].
    """
def multihead_chain_kq(W_k: typing.Any, W_q: typing.Any, d_W_kq: typing.Any, d_W_k: typing.Any, d_W_q: typing.Any) -> None:
    """
    d_W_k = W^Q_h dW^KQ_hᵀ, d_W_q = W^K_h dW^KQ_h [H, r, d+1] written in place (multihead.hpp's multihead_chain_kq); operands as multihead_merge_kq's.
    """
def multihead_lsa_forward(E: typing.Any, W_pv: typing.Any, W_kq: typing.Any, out: typing.Any = None, device: typing.Any = 'auto') -> typing.Any:
    """
    F [B, d+1, N+1] of the H-head model (multihead.hpp), written into `out` when given.
    """
def multihead_lsa_loss_and_grad(E: typing.Any, y_q: typing.Any, W_pv: typing.Any, W_kq: typing.Any, return_predictions: bool = False, device: typing.Any = 'auto', *, out: typing.Any = None, loss: typing.Any = None) -> tuple:
    """
    (loss, dW_pv, dW_kq[, y_hat]) of multihead.hpp's multihead_lsa_loss_and_grad (gradients [H, d+1, d+1]); out=(dW_pv, dW_kq) written in place, loss= a float64 [1] array on E's side that receives the loss (returned in its place).
    """
def multihead_lsa_predict(E: typing.Any, W_pv: typing.Any, W_kq: typing.Any, out: typing.Any = None, device: typing.Any = 'auto') -> typing.Any:
    """
    ŷ [B] of prompts E [B, d+1, N+1] and H heads W_pv, W_kq [H, d+1, d+1] (multihead.hpp), written into `out` when given.
    """
def multihead_lsa_predict_vjp(E: typing.Any, W_pv: typing.Any, W_kq: typing.Any, d_y: typing.Any, with_input_grad: bool = True, device: typing.Any = 'auto') -> tuple[typing.Any, typing.Any, typing.Any]:
    """
    (dW_pv, dW_kq, dE) of multihead_lsa_predict for the upstream d_y [B].
    """
def multihead_lsa_vjp(E: typing.Any, W_pv: typing.Any, W_kq: typing.Any, d_F: typing.Any, with_input_grad: bool = True, device: typing.Any = 'auto') -> tuple[typing.Any, typing.Any, typing.Any]:
    """
    (dW_pv, dW_kq, dE) of multihead_lsa_forward for the upstream d_F [B, d+1, N+1].
    """
def multihead_merge_kq(W_k: typing.Any, W_q: typing.Any, W_kq: typing.Any) -> None:
    """
    W_kq [H, d+1, d+1] = W^K_hᵀ W^Q_h written in place from W_k, W_q [H, r, d+1] (multihead.hpp's multihead_merge_kq): C-contiguous arrays of one dtype, on the GPU when any is a CUDA array (then only queued).
    """
def multihead_population_loss(law: str, W_pv: numpy.typing.NDArray[numpy.float64], keys: collections.abc.Sequence[typing.Annotated[numpy.typing.ArrayLike, numpy.float64]], data: numpy.typing.NDArray[numpy.float64], N: typing.SupportsInt | typing.SupportsIndex, noise_std: typing.SupportsFloat | typing.SupportsIndex = 0.0, query_noise: bool = False) -> tuple:
    ...
def num_threads() -> int:
    """
    CPU threads used by batched kernels.
    """
def optimizer_step(scalars: typing.SupportsInt | typing.SupportsIndex, n: typing.SupportsInt | typing.SupportsIndex, theta_in: typing.SupportsInt | typing.SupportsIndex, theta_out: typing.SupportsInt | typing.SupportsIndex, grad: typing.SupportsInt | typing.SupportsIndex, exp_avg: typing.SupportsInt | typing.SupportsIndex, exp_avg_sq: typing.SupportsInt | typing.SupportsIndex, max_exp_avg_sq: typing.SupportsInt | typing.SupportsIndex, momentum_buffer: typing.SupportsInt | typing.SupportsIndex, norm: typing.SupportsFloat | typing.SupportsIndex, status: typing.SupportsInt | typing.SupportsIndex, model_copy: typing.SupportsInt | typing.SupportsIndex, grad_dtype: str, device: str, loss: typing.SupportsInt | typing.SupportsIndex = 0, rates: typing.SupportsInt | typing.SupportsIndex = 0) -> None:
    """
    One optimizer step on buffers given by address (private: lsa_native.train.native_optim owns and checks them). scalars: host float64 [len(optimizer_step_fields)]; status: 3 doubles (norm, code, step of the first failure) in the memory of `device`; loss: the step's loss (one double there; a non-finite one records code 3 and leaves θ alone); rates: n doubles there, each entry's rate factor (η·rates[i]; 0 where an entry is not a parameter, its gradient read as 0); 0 = null.
    """
def philox4x32(counters: numpy.typing.NDArray[numpy.uint32], seed: typing.SupportsInt | typing.SupportsIndex) -> numpy.typing.NDArray[numpy.uint32]:
    """
    Philox4x32-10 words of counters [n, 4] under key = (low, high) words of the 64-bit seed.
    """
def population_loss(kind: str, W_pv: numpy.typing.NDArray[numpy.float64], W_kq: numpy.typing.NDArray[numpy.float64], data: numpy.typing.NDArray[numpy.float64], N: typing.SupportsInt | typing.SupportsIndex, noise_std: typing.SupportsFloat | typing.SupportsIndex = 0.0, query_noise: bool = False) -> tuple[float, numpy.typing.NDArray[numpy.float64], numpy.typing.NDArray[numpy.float64]]:
    ...
@typing.overload
def random_gammas(seed: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, prompt: typing.SupportsInt | typing.SupportsIndex, stream: typing.SupportsInt | typing.SupportsIndex, start: typing.SupportsInt | typing.SupportsIndex, shape: typing.SupportsFloat | typing.SupportsIndex, out: numpy.typing.NDArray[numpy.float32]) -> None:
    ...
@typing.overload
def random_gammas(seed: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, prompt: typing.SupportsInt | typing.SupportsIndex, stream: typing.SupportsInt | typing.SupportsIndex, start: typing.SupportsInt | typing.SupportsIndex, shape: typing.SupportsFloat | typing.SupportsIndex, out: numpy.typing.NDArray[numpy.float64]) -> None:
    ...
@typing.overload
def random_normals(seed: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, prompt: typing.SupportsInt | typing.SupportsIndex, stream: typing.SupportsInt | typing.SupportsIndex, start: typing.SupportsInt | typing.SupportsIndex, out: numpy.typing.NDArray[numpy.float32]) -> None:
    ...
@typing.overload
def random_normals(seed: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, prompt: typing.SupportsInt | typing.SupportsIndex, stream: typing.SupportsInt | typing.SupportsIndex, start: typing.SupportsInt | typing.SupportsIndex, out: numpy.typing.NDArray[numpy.float64]) -> None:
    ...
@typing.overload
def random_uniforms(seed: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, prompt: typing.SupportsInt | typing.SupportsIndex, stream: typing.SupportsInt | typing.SupportsIndex, start: typing.SupportsInt | typing.SupportsIndex, out: numpy.typing.NDArray[numpy.float32]) -> None:
    ...
@typing.overload
def random_uniforms(seed: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, prompt: typing.SupportsInt | typing.SupportsIndex, stream: typing.SupportsInt | typing.SupportsIndex, start: typing.SupportsInt | typing.SupportsIndex, out: numpy.typing.NDArray[numpy.float64]) -> None:
    ...
def reduced_loss(U11: numpy.typing.NDArray[numpy.float64], u: typing.SupportsFloat | typing.SupportsIndex, Lambda: numpy.typing.NDArray[numpy.float64], N: typing.SupportsInt | typing.SupportsIndex) -> tuple[float, numpy.typing.NDArray[numpy.float64], float]:
    ...
@typing.overload
def sample_linear_prompts(spec: dict, batch: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, E: numpy.typing.NDArray[numpy.float32] | None = None, y_q: numpy.typing.NDArray[numpy.float32] | None = None, X: numpy.typing.NDArray[numpy.float32] | None = None, y: numpy.typing.NDArray[numpy.float32] | None = None, w: numpy.typing.NDArray[numpy.float32] | None = None, x_q: numpy.typing.NDArray[numpy.float32] | None = None, lam: numpy.typing.NDArray[numpy.float32] | None = None) -> None:
    ...
@typing.overload
def sample_linear_prompts(spec: dict, batch: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, E: numpy.typing.NDArray[numpy.float64] | None = None, y_q: numpy.typing.NDArray[numpy.float64] | None = None, X: numpy.typing.NDArray[numpy.float64] | None = None, y: numpy.typing.NDArray[numpy.float64] | None = None, w: numpy.typing.NDArray[numpy.float64] | None = None, x_q: numpy.typing.NDArray[numpy.float64] | None = None, lam: numpy.typing.NDArray[numpy.float64] | None = None) -> None:
    ...
def sample_linear_prompts_cuda(spec: dict, batch: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, dtype: typing.Any, E: typing.Any = None, y_q: typing.Any = None, X: typing.Any = None, y: typing.Any = None, w: typing.Any = None, x_q: typing.Any = None, lam: typing.Any = None) -> None:
    """
    sample_linear_prompts on the GPU: the prompts of `step` written into the given outputs (writeable C-contiguous CUDA arrays of `dtype`, float32 or float64, checked here; None: not written). Only queues the kernel.
    """
def set_num_threads(n: typing.SupportsInt | typing.SupportsIndex) -> int:
    """
    Set the CPU thread count (n < 1 restores the default) and return the count in use: less than n when the system refused more threads. Results do not depend on it.
    """
@typing.overload
def simd_log(x: numpy.typing.NDArray[numpy.float32], out: numpy.typing.NDArray[numpy.float32]) -> None:
    ...
@typing.overload
def simd_log(x: numpy.typing.NDArray[numpy.float64], out: numpy.typing.NDArray[numpy.float64]) -> None:
    ...
@typing.overload
def simd_sincos_2pi(u: numpy.typing.NDArray[numpy.float32], s: numpy.typing.NDArray[numpy.float32], c: numpy.typing.NDArray[numpy.float32]) -> None:
    ...
@typing.overload
def simd_sincos_2pi(u: numpy.typing.NDArray[numpy.float64], s: numpy.typing.NDArray[numpy.float64], c: numpy.typing.NDArray[numpy.float64]) -> None:
    ...
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
ACTIVATION_NAMES: tuple = ('linear', 'relu', 'exp', 'softmax')
COVARIANCE_LAWS: dict = {'exponential': ('scale'), 'gamma': ('shape', 'scale'), 'uniform': ('lo', 'hi'), 'two_point': ('a', 'b', 'p')}
__version__: str = '0.1.0'
kernel_gp_max_exp_scale: float = 600.0
optimizer_step_fields: tuple = ('rule', 'lr', 'weight_decay', 'decoupled_decay', 'momentum', 'one_minus_dampening', 'nesterov', 'first', 'beta1', 'one_minus_beta1', 'beta2', 'one_minus_beta2', 'eps', 'amsgrad', 'bias1', 'bias2', 'clip_norm', 'step_index')
