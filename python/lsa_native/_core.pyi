"""
Compiled core of lsa_native (private; use the lsa_native package).
"""
from __future__ import annotations
import collections.abc
import numpy
import numpy.typing
import typing
import typing_extensions
__all__: list[str] = ['ACTIVATION_NAMES', 'DeviceArray', 'KernelAttentionShape', 'LsaShape', 'batched_cholesky', 'batched_symmetric_eigen', 'cpu_kernel_isa', 'cuda_available', 'cuda_compiled', 'cuda_philox4x32', 'cuda_pointer_device', 'cuda_random_variates', 'cuda_release_memory', 'cuda_synchronize', 'dlpack_info', 'gradient_flow_multihead', 'gradient_flow_population', 'gradient_flow_reduced', 'kernel_attention_context_size', 'kernel_attention_forward', 'kernel_attention_forward_cuda', 'kernel_attention_loss_and_grad', 'kernel_attention_loss_and_grad_cuda', 'kernel_attention_vjp', 'kernel_attention_vjp_cuda', 'kernel_gp_max_exp_scale', 'kernel_gp_sample', 'kernel_gp_sample_cuda', 'linear_prompts_lsa_loss_and_grad', 'lsa_forward', 'lsa_forward_cuda', 'lsa_loss_and_grad', 'lsa_loss_and_grad_cuda', 'lsa_predict', 'lsa_predict_cuda', 'lsa_predict_vjp', 'lsa_predict_vjp_cuda', 'lsa_shape', 'lsa_vjp', 'lsa_vjp_cuda', 'multihead_population_loss', 'num_threads', 'philox4x32', 'population_loss', 'random_gammas', 'random_normals', 'random_uniforms', 'reduced_loss', 'sample_linear_prompts', 'set_num_threads', 'simd_log', 'simd_sincos_2pi', 'stream_sum']
class LsaShape:
    def __init__(self, batch: typing.SupportsInt | typing.SupportsIndex, dim: typing.SupportsInt | typing.SupportsIndex, context: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def batch(self) -> int:
        ...
    @property
    def context(self) -> int:
        ...
    @property
    def dim(self) -> int:
        ...
class KernelAttentionShape:
    def __init__(self, batch: typing.SupportsInt | typing.SupportsIndex, dim: typing.SupportsInt | typing.SupportsIndex, context: typing.SupportsInt | typing.SupportsIndex, layers: typing.SupportsInt | typing.SupportsIndex, heads: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def batch(self) -> int:
        ...
    @property
    def context(self) -> int:
        ...
    @property
    def dim(self) -> int:
        ...
    @property
    def heads(self) -> int:
        ...
    @property
    def layers(self) -> int:
        ...
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
def dlpack_info(capsule: typing_extensions.CapsuleType) -> dict:
    """
    Pointer, shape, strides, dtype and device of a DLPack capsule (not consumed).
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
@typing.overload
def kernel_attention_forward(Z0: numpy.typing.NDArray[numpy.float32], V: numpy.typing.NDArray[numpy.float32], B: numpy.typing.NDArray[numpy.float32], C: numpy.typing.NDArray[numpy.float32], activations: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], Z_out: numpy.typing.NDArray[numpy.float32] | None = None, predictions: numpy.typing.NDArray[numpy.float32] | None = None, context: numpy.typing.NDArray[numpy.float32] | None = None, y_hat: bool = False) -> None:
    ...
@typing.overload
def kernel_attention_forward(Z0: numpy.typing.NDArray[numpy.float64], V: numpy.typing.NDArray[numpy.float64], B: numpy.typing.NDArray[numpy.float64], C: numpy.typing.NDArray[numpy.float64], activations: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], Z_out: numpy.typing.NDArray[numpy.float64] | None = None, predictions: numpy.typing.NDArray[numpy.float64] | None = None, context: numpy.typing.NDArray[numpy.float64] | None = None, y_hat: bool = False) -> None:
    ...
def kernel_attention_forward_cuda(dtype: str, shape: KernelAttentionShape, Z0: typing.SupportsInt | typing.SupportsIndex, V: typing.SupportsInt | typing.SupportsIndex, B: typing.SupportsInt | typing.SupportsIndex, C: typing.SupportsInt | typing.SupportsIndex, activations: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], Z_out: typing.SupportsInt | typing.SupportsIndex, predictions: typing.SupportsInt | typing.SupportsIndex, context: typing.SupportsInt | typing.SupportsIndex, y_hat: bool = False) -> None:
    ...
@typing.overload
def kernel_attention_loss_and_grad(Z0: numpy.typing.NDArray[numpy.float32], y_q: numpy.typing.NDArray[numpy.float32], V: numpy.typing.NDArray[numpy.float32], B: numpy.typing.NDArray[numpy.float32], C: numpy.typing.NDArray[numpy.float32], activations: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], d_V: numpy.typing.NDArray[numpy.float32], d_B: numpy.typing.NDArray[numpy.float32], d_C: numpy.typing.NDArray[numpy.float32], d_Z0: numpy.typing.NDArray[numpy.float32] | None = None, predictions: numpy.typing.NDArray[numpy.float32] | None = None) -> float:
    ...
@typing.overload
def kernel_attention_loss_and_grad(Z0: numpy.typing.NDArray[numpy.float64], y_q: numpy.typing.NDArray[numpy.float64], V: numpy.typing.NDArray[numpy.float64], B: numpy.typing.NDArray[numpy.float64], C: numpy.typing.NDArray[numpy.float64], activations: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], d_V: numpy.typing.NDArray[numpy.float64], d_B: numpy.typing.NDArray[numpy.float64], d_C: numpy.typing.NDArray[numpy.float64], d_Z0: numpy.typing.NDArray[numpy.float64] | None = None, predictions: numpy.typing.NDArray[numpy.float64] | None = None) -> float:
    ...
def kernel_attention_loss_and_grad_cuda(dtype: str, shape: KernelAttentionShape, Z0: typing.SupportsInt | typing.SupportsIndex, y_q: typing.SupportsInt | typing.SupportsIndex, V: typing.SupportsInt | typing.SupportsIndex, B: typing.SupportsInt | typing.SupportsIndex, C: typing.SupportsInt | typing.SupportsIndex, activations: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], d_V: typing.SupportsInt | typing.SupportsIndex, d_B: typing.SupportsInt | typing.SupportsIndex, d_C: typing.SupportsInt | typing.SupportsIndex, d_Z0: typing.SupportsInt | typing.SupportsIndex, predictions: typing.SupportsInt | typing.SupportsIndex) -> float:
    ...
@typing.overload
def kernel_attention_vjp(Z0: numpy.typing.NDArray[numpy.float32], V: numpy.typing.NDArray[numpy.float32], B: numpy.typing.NDArray[numpy.float32], C: numpy.typing.NDArray[numpy.float32], activations: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], d_Z_out: numpy.typing.NDArray[numpy.float32], d_V: numpy.typing.NDArray[numpy.float32], d_B: numpy.typing.NDArray[numpy.float32], d_C: numpy.typing.NDArray[numpy.float32], d_Z0: numpy.typing.NDArray[numpy.float32] | None = None, context: numpy.typing.NDArray[numpy.float32] | None = None) -> None:
    ...
@typing.overload
def kernel_attention_vjp(Z0: numpy.typing.NDArray[numpy.float64], V: numpy.typing.NDArray[numpy.float64], B: numpy.typing.NDArray[numpy.float64], C: numpy.typing.NDArray[numpy.float64], activations: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], d_Z_out: numpy.typing.NDArray[numpy.float64], d_V: numpy.typing.NDArray[numpy.float64], d_B: numpy.typing.NDArray[numpy.float64], d_C: numpy.typing.NDArray[numpy.float64], d_Z0: numpy.typing.NDArray[numpy.float64] | None = None, context: numpy.typing.NDArray[numpy.float64] | None = None) -> None:
    ...
def kernel_attention_vjp_cuda(dtype: str, shape: KernelAttentionShape, Z0: typing.SupportsInt | typing.SupportsIndex, V: typing.SupportsInt | typing.SupportsIndex, B: typing.SupportsInt | typing.SupportsIndex, C: typing.SupportsInt | typing.SupportsIndex, activations: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], d_Z_out: typing.SupportsInt | typing.SupportsIndex, d_V: typing.SupportsInt | typing.SupportsIndex, d_B: typing.SupportsInt | typing.SupportsIndex, d_C: typing.SupportsInt | typing.SupportsIndex, d_Z0: typing.SupportsInt | typing.SupportsIndex, context: typing.SupportsInt | typing.SupportsIndex) -> None:
    ...
@typing.overload
def kernel_gp_sample(seed: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, kernel: typing.SupportsInt | typing.SupportsIndex, bandwidth: typing.SupportsFloat | typing.SupportsIndex, Sigma: numpy.typing.NDArray[numpy.float64] | None, Z0: numpy.typing.NDArray[numpy.float32], y_q: numpy.typing.NDArray[numpy.float32], xi: numpy.typing.NDArray[numpy.float32] | None = None, method: numpy.typing.NDArray[numpy.int32] | None = None) -> None:
    ...
@typing.overload
def kernel_gp_sample(seed: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, kernel: typing.SupportsInt | typing.SupportsIndex, bandwidth: typing.SupportsFloat | typing.SupportsIndex, Sigma: numpy.typing.NDArray[numpy.float64] | None, Z0: numpy.typing.NDArray[numpy.float64], y_q: numpy.typing.NDArray[numpy.float64], xi: numpy.typing.NDArray[numpy.float64] | None = None, method: numpy.typing.NDArray[numpy.int32] | None = None) -> None:
    ...
def kernel_gp_sample_cuda(dtype: str, seed: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, kernel: typing.SupportsInt | typing.SupportsIndex, bandwidth: typing.SupportsFloat | typing.SupportsIndex, Sigma: numpy.typing.NDArray[numpy.float64] | None, batch: typing.SupportsInt | typing.SupportsIndex, d: typing.SupportsInt | typing.SupportsIndex, n: typing.SupportsInt | typing.SupportsIndex, Z0: typing.SupportsInt | typing.SupportsIndex, y_q: typing.SupportsInt | typing.SupportsIndex, xi: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    K-GP prompts sampled on the GPU into CUDA arrays given by address.
    """
@typing.overload
def linear_prompts_lsa_loss_and_grad(spec: dict, batch: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, method: str, W_pv: numpy.typing.NDArray[numpy.float32], W_kq: numpy.typing.NDArray[numpy.float32], d_W_pv: numpy.typing.NDArray[numpy.float32], d_W_kq: numpy.typing.NDArray[numpy.float32], device: str = 'cpu') -> float:
    ...
@typing.overload
def linear_prompts_lsa_loss_and_grad(spec: dict, batch: typing.SupportsInt | typing.SupportsIndex, step: typing.SupportsInt | typing.SupportsIndex, method: str, W_pv: numpy.typing.NDArray[numpy.float64], W_kq: numpy.typing.NDArray[numpy.float64], d_W_pv: numpy.typing.NDArray[numpy.float64], d_W_kq: numpy.typing.NDArray[numpy.float64], device: str = 'cpu') -> float:
    ...
@typing.overload
def lsa_forward(E: numpy.typing.NDArray[numpy.float32], W_pv: numpy.typing.NDArray[numpy.float32], W_kq: numpy.typing.NDArray[numpy.float32], out: numpy.typing.NDArray[numpy.float32]) -> None:
    ...
@typing.overload
def lsa_forward(E: numpy.typing.NDArray[numpy.float64], W_pv: numpy.typing.NDArray[numpy.float64], W_kq: numpy.typing.NDArray[numpy.float64], out: numpy.typing.NDArray[numpy.float64]) -> None:
    ...
def lsa_forward_cuda(dtype: str, shape: LsaShape, E: typing.SupportsInt | typing.SupportsIndex, W_pv: typing.SupportsInt | typing.SupportsIndex, W_kq: typing.SupportsInt | typing.SupportsIndex, F: typing.SupportsInt | typing.SupportsIndex) -> None:
    ...
@typing.overload
def lsa_loss_and_grad(E: numpy.typing.NDArray[numpy.float32], y_q: numpy.typing.NDArray[numpy.float32], W_pv: numpy.typing.NDArray[numpy.float32], W_kq: numpy.typing.NDArray[numpy.float32], d_W_pv: numpy.typing.NDArray[numpy.float32], d_W_kq: numpy.typing.NDArray[numpy.float32], y_hat: numpy.typing.NDArray[numpy.float32] | None = None) -> float:
    ...
@typing.overload
def lsa_loss_and_grad(E: numpy.typing.NDArray[numpy.float64], y_q: numpy.typing.NDArray[numpy.float64], W_pv: numpy.typing.NDArray[numpy.float64], W_kq: numpy.typing.NDArray[numpy.float64], d_W_pv: numpy.typing.NDArray[numpy.float64], d_W_kq: numpy.typing.NDArray[numpy.float64], y_hat: numpy.typing.NDArray[numpy.float64] | None = None) -> float:
    ...
def lsa_loss_and_grad_cuda(dtype: str, shape: LsaShape, E: typing.SupportsInt | typing.SupportsIndex, y_q: typing.SupportsInt | typing.SupportsIndex, W_pv: typing.SupportsInt | typing.SupportsIndex, W_kq: typing.SupportsInt | typing.SupportsIndex, d_W_pv: typing.SupportsInt | typing.SupportsIndex, d_W_kq: typing.SupportsInt | typing.SupportsIndex, y_hat: typing.SupportsInt | typing.SupportsIndex) -> float:
    ...
@typing.overload
def lsa_predict(E: numpy.typing.NDArray[numpy.float32], W_pv: numpy.typing.NDArray[numpy.float32], W_kq: numpy.typing.NDArray[numpy.float32], out: numpy.typing.NDArray[numpy.float32]) -> None:
    ...
@typing.overload
def lsa_predict(E: numpy.typing.NDArray[numpy.float64], W_pv: numpy.typing.NDArray[numpy.float64], W_kq: numpy.typing.NDArray[numpy.float64], out: numpy.typing.NDArray[numpy.float64]) -> None:
    ...
def lsa_predict_cuda(dtype: str, shape: LsaShape, E: typing.SupportsInt | typing.SupportsIndex, W_pv: typing.SupportsInt | typing.SupportsIndex, W_kq: typing.SupportsInt | typing.SupportsIndex, y_hat: typing.SupportsInt | typing.SupportsIndex) -> None:
    ...
@typing.overload
def lsa_predict_vjp(E: numpy.typing.NDArray[numpy.float32], W_pv: numpy.typing.NDArray[numpy.float32], W_kq: numpy.typing.NDArray[numpy.float32], d_y: numpy.typing.NDArray[numpy.float32], d_W_pv: numpy.typing.NDArray[numpy.float32], d_W_kq: numpy.typing.NDArray[numpy.float32], d_E: numpy.typing.NDArray[numpy.float32] | None = None) -> None:
    ...
@typing.overload
def lsa_predict_vjp(E: numpy.typing.NDArray[numpy.float64], W_pv: numpy.typing.NDArray[numpy.float64], W_kq: numpy.typing.NDArray[numpy.float64], d_y: numpy.typing.NDArray[numpy.float64], d_W_pv: numpy.typing.NDArray[numpy.float64], d_W_kq: numpy.typing.NDArray[numpy.float64], d_E: numpy.typing.NDArray[numpy.float64] | None = None) -> None:
    ...
def lsa_predict_vjp_cuda(dtype: str, shape: LsaShape, E: typing.SupportsInt | typing.SupportsIndex, W_pv: typing.SupportsInt | typing.SupportsIndex, W_kq: typing.SupportsInt | typing.SupportsIndex, d_y: typing.SupportsInt | typing.SupportsIndex, d_W_pv: typing.SupportsInt | typing.SupportsIndex, d_W_kq: typing.SupportsInt | typing.SupportsIndex, d_E: typing.SupportsInt | typing.SupportsIndex) -> None:
    ...
def lsa_shape(shape: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> LsaShape:
    """
    (B, d, N) of prompts with shape [B, d+1, N+1], checked (Error naming E).
    """
@typing.overload
def lsa_vjp(E: numpy.typing.NDArray[numpy.float32], W_pv: numpy.typing.NDArray[numpy.float32], W_kq: numpy.typing.NDArray[numpy.float32], d_F: numpy.typing.NDArray[numpy.float32], d_W_pv: numpy.typing.NDArray[numpy.float32], d_W_kq: numpy.typing.NDArray[numpy.float32], d_E: numpy.typing.NDArray[numpy.float32] | None = None) -> None:
    ...
@typing.overload
def lsa_vjp(E: numpy.typing.NDArray[numpy.float64], W_pv: numpy.typing.NDArray[numpy.float64], W_kq: numpy.typing.NDArray[numpy.float64], d_F: numpy.typing.NDArray[numpy.float64], d_W_pv: numpy.typing.NDArray[numpy.float64], d_W_kq: numpy.typing.NDArray[numpy.float64], d_E: numpy.typing.NDArray[numpy.float64] | None = None) -> None:
    ...
def lsa_vjp_cuda(dtype: str, shape: LsaShape, E: typing.SupportsInt | typing.SupportsIndex, W_pv: typing.SupportsInt | typing.SupportsIndex, W_kq: typing.SupportsInt | typing.SupportsIndex, d_F: typing.SupportsInt | typing.SupportsIndex, d_W_pv: typing.SupportsInt | typing.SupportsIndex, d_W_kq: typing.SupportsInt | typing.SupportsIndex, d_E: typing.SupportsInt | typing.SupportsIndex) -> None:
    ...
def multihead_population_loss(law: str, W_pv: numpy.typing.NDArray[numpy.float64], keys: collections.abc.Sequence[typing.Annotated[numpy.typing.ArrayLike, numpy.float64]], data: numpy.typing.NDArray[numpy.float64], N: typing.SupportsInt | typing.SupportsIndex, noise_std: typing.SupportsFloat | typing.SupportsIndex = 0.0, query_noise: bool = False) -> tuple:
    ...
def num_threads() -> int:
    """
    CPU threads used by batched kernels.
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
__version__: str = '0.1.0'
kernel_gp_max_exp_scale: float = 600.0
