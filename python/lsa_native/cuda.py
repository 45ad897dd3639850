"""CUDA arrays for lsa_native: which arrays live on a GPU, reading them without copies, and an
owning device array for results.

No CuPy or PyTorch import is needed. Arrays are read through ``__cuda_array_interface__`` (CuPy,
PyTorch CUDA tensors, Numba) or, failing that, ``__dlpack__`` with a CUDA device (JAX, ...); they
must be C-contiguous float32/float64 (no implicit copies on the device). Results of calls on CUDA
arrays are CUDA arrays: of the caller's library when E came from PyTorch or CuPy (allocated by it),
else a :class:`DeviceArray`.

The kernels run on the legacy default stream (PyTorch's and CuPy's default stream), so results are
ordered before later work on those streams.
"""
from __future__ import annotations

import sys
from typing import Any, NamedTuple

import numpy as np

from . import _core
from ._streams import check_seed, stream_args
from ._validation import _asarray, cast_operand

__all__ = [
    "compiled",
    "available",
    "check_device",
    "DeviceArray",
    "Piece",
    "is_cuda_array",
    "to_device",
    "to_host",
    "synchronize",
    "release_memory",
    "philox4x32",
    "random_normals",
    "random_uniforms",
]

DeviceArray = _core.DeviceArray

_DEVICES = ("auto", "cpu", "cuda")
_KDL_CUDA, _KDL_CUDA_MANAGED = 2, 13
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def compiled() -> bool:
    """True when this build has CUDA kernels."""
    return bool(_core.cuda_compiled())


def available() -> bool:
    """True when CUDA kernels were compiled and a GPU is visible."""
    return bool(_core.cuda_available())


def check_device(device, name: str = "device") -> str:
    """``device`` as given when it is "cpu", or "cuda" with CUDA kernels and a GPU to run them;
    a ValueError naming ``name`` otherwise (the one check of every ``device=`` that picks where
    training or sampling runs)."""
    if not isinstance(device, str) or device not in ("cpu", "cuda"):
        raise ValueError(f"{name}: expected 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not available():
        raise ValueError(f"{name}: 'cuda' needs a build with CUDA kernels and a visible GPU "
                         f"(cuda.compiled() = {compiled()}, cuda.available() = False)")
    return device


def synchronize() -> None:
    """Wait for all work queued on the current CUDA device."""
    _core.cuda_synchronize()


def release_memory() -> None:
    """Return the device scratch memory lsa_native keeps between calls (partial sums, workspaces,
    host-array staging: a per-device stream-ordered pool that keeps up to 256 MiB across
    synchronisations, where the default pool would give it all back each time) to the driver.
    Like ``torch.cuda.empty_cache()``: needed only to hand that memory to another library."""
    _core.cuda_release_memory()


def is_cuda_array(a) -> bool:
    """Whether `a` is an array in CUDA device (or managed) memory."""
    if a is None or isinstance(a, (np.ndarray, np.generic, int, float, list, tuple)):
        return False
    flag = getattr(a, "is_cuda", None)  # PyTorch: a C property, ~40x cheaper than the protocols
    if type(flag) is bool:
        return flag
    if hasattr(type(a), "__dlpack_device__"):  # asks no export (works for tensors needing grad)
        try:
            return int(a.__dlpack_device__()[0]) in (_KDL_CUDA, _KDL_CUDA_MANAGED)
        except Exception:
            pass
    try:
        return hasattr(a, "__cuda_array_interface__")  # False for PyTorch CPU tensors
    except Exception:
        return False


def native_prompts(a, name: str):
    """(prompts, dtype) as the native entry points read them: a CUDA array as it is, anything else
    as a C-contiguous numpy array (copied only when it is not one); dtype is theirs when float32 or
    float64 (the native validate() refuses other prompts), else float64."""
    if isinstance(a, np.ndarray):
        a = a if a.flags.c_contiguous else np.ascontiguousarray(a)
        dtype = a.dtype
    elif is_cuda_array(a):
        dtype = _core.array_info(a, name)["dtype"]
    else:
        a = _host_array(a, name)
        dtype = a.dtype
    return a, np.dtype(dtype if dtype in _FLOATS else np.float64)


def native_operand(a, dtype, name: str, *, finite: bool = True):
    """Another operand as the native entry points read it: a CUDA array as it is (its dtype must be
    the prompts': the native validate() checks it), anything else converted to `dtype` (the
    prompts' dtype) by ``cast_operand`` (real-valued; NaN/inf and overflow refused with `finite`)."""
    if isinstance(a, np.ndarray):
        return cast_operand(a, dtype, name, finite=finite)
    if is_cuda_array(a):
        return a
    return cast_operand(_host_array(a, name), dtype, name, finite=finite)


def _host_array(a, name: str) -> np.ndarray:
    """A host array-like as a C-contiguous numpy array (a DLPack-only array read without a copy)."""
    if hasattr(a, "__dlpack__") and not hasattr(a, "__array__"):
        a = np.from_dlpack(a)
    a = _asarray(a, name)
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def resolve_device(device, **arrays) -> str:
    """'cpu' or 'cuda' for a call on `arrays` (None entries ignored): 'auto' follows the arrays
    (any CUDA array → 'cuda'); 'cpu' refuses CUDA arrays. (For the Python-side samplers: the LSA
    and kernel-attention entry points choose natively, from their operands' array views.)"""
    if not isinstance(device, str) or device not in _DEVICES:
        raise ValueError(f"device: expected one of {_DEVICES}, got {device!r}")
    on_gpu = [name for name, a in arrays.items() if is_cuda_array(a)]
    if device == "auto":
        return "cuda" if on_gpu else "cpu"
    if device == "cpu" and on_gpu:
        raise ValueError(
            f"device='cpu' but {on_gpu[0]} is a CUDA array; copy it to the host first "
            "(e.g. tensor.cpu().numpy(), cupy.asnumpy) or use device='cuda'"
        )
    return device


class View(NamedTuple):
    """A C-contiguous float array in device memory, as the native entry points take it."""

    ptr: int
    shape: tuple
    dtype: np.dtype
    readonly: bool
    owner: Any  # keeps the memory (and a DLPack capsule) alive while the view is used


def view(a, name: str) -> View:
    """The device view of CUDA array `a` (read by the native array adapter, as the entry points
    read their operands); TypeError/ValueError naming `name` unless it is a C-contiguous
    float32/float64 array."""
    info = _core.array_info(a, name)
    if info["dtype"] not in ("float32", "float64"):
        raise TypeError(f"{name}: expected dtype float32 or float64, got {info['dtype']}")
    dtype, shape, strides = np.dtype(info["dtype"]), info["shape"], info["strides"]
    expected, step = [], dtype.itemsize
    for extent in reversed(shape):
        expected.append(step)
        step *= extent
    expected = tuple(reversed(expected))
    if any(n > 1 and s != e for n, s, e in zip(shape, strides, expected)):
        raise ValueError(
            f"{name}: CUDA arrays must be C-contiguous (byte strides {expected}), got "
            f"{strides}; pass a contiguous copy (tensor.contiguous(), cupy.ascontiguousarray)"
        )
    return View(int(info["ptr"]), shape, dtype, bool(info["readonly"]), a)


def pointer_device(ptr: int) -> int:
    """The CUDA device owning address `ptr`, or -1 for host memory."""
    return int(_core.cuda_pointer_device(int(ptr)))


def empty(template, shape: tuple, dtype, device: int):
    """An uninitialised C-contiguous CUDA array for a result: from `template`'s library when it is
    PyTorch or CuPy (their caching allocators, their array type), else a :class:`DeviceArray`."""
    library = type(template).__module__.split(".")[0]
    dtype = np.dtype(dtype)
    if library == "torch" and "torch" in sys.modules:
        torch = sys.modules["torch"]
        return torch.empty(tuple(shape), dtype=getattr(torch, dtype.name), device=template.device)
    if library == "cupy" and "cupy" in sys.modules:
        cp = sys.modules["cupy"]
        with cp.cuda.Device(device if device >= 0 else cp.cuda.Device().id):
            return cp.empty(tuple(shape), dtype)
    return DeviceArray(list(shape), dtype, device)


class Piece:
    """Elements ``offset .. offset + prod(shape) − 1`` of a C-contiguous CUDA array, shaped
    ``shape``, presented through ``__cuda_array_interface__`` without a copy (the native entry
    points read and write it in place); ``ptr`` is its address. Keeps the array alive."""

    __slots__ = ("__cuda_array_interface__", "ptr", "owner")

    def __init__(self, a, offset: int, shape: tuple):
        info = _core.array_info(a, "a")
        dtype = np.dtype(info["dtype"])
        size = int(np.prod(info["shape"], dtype=np.int64))
        count = int(np.prod(shape, dtype=np.int64))
        if info["device"] < 0:
            raise TypeError("a: expected a CUDA array, got a host array")
        if dtype not in _FLOATS or not 0 <= offset <= offset + count <= size:
            raise ValueError(f"a: elements [{offset}, {offset + count}) of a {dtype} array of "
                             f"{size} elements")
        self.ptr = int(info["ptr"]) + offset * dtype.itemsize
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": dtype.str,
                                         "data": (self.ptr, bool(info["readonly"])),
                                         "strides": None, "version": 3}
        self.owner = a


def to_device(a, dtype=None, *, device: int = -1) -> DeviceArray:
    """A :class:`DeviceArray` copy of host array `a` (converted to `dtype`, default `a`'s float
    dtype) on CUDA device `device` (-1: the current one)."""
    a = np.ascontiguousarray(a, dtype=dtype)
    if a.dtype not in _FLOATS:
        raise TypeError(f"a: expected dtype float32 or float64, got {a.dtype}")
    out = DeviceArray(list(a.shape), a.dtype, device)
    out.copy_from_host(a)
    return out


def to_host(a) -> np.ndarray:
    """A numpy copy of a :class:`DeviceArray`, a CuPy array or a PyTorch tensor (or any array
    numpy can read)."""
    if isinstance(a, DeviceArray):
        return a.copy_to_host()
    library = type(a).__module__.split(".")[0]
    if library == "cupy":
        return a.get()
    if library == "torch":
        return a.detach().cpu().numpy()
    return np.asarray(a)


# ---- counter-based variates on the GPU (the streams of lsa_native.sampling.random) -------------

def philox4x32(counters, seed) -> np.ndarray:
    """Philox4x32-10 words of ``counters`` [n, 4] computed on the GPU: equal to
    :func:`lsa_native.sampling.random.philox4x32` bit for bit. Host arrays in and out."""
    c = np.asarray(counters)
    if c.ndim != 2 or c.shape[1] != 4:
        raise ValueError(f"counters: expected shape (n, 4), got {c.shape}")
    if not np.issubdtype(c.dtype, np.integer) or (c.size and (c.min() < 0 or c.max() >= 2**32)):
        raise ValueError("counters: expected integers in [0, 2**32)")
    c = np.ascontiguousarray(c, dtype=np.uint32)
    out = np.empty_like(c)
    _core.cuda_philox4x32(c, check_seed(seed), out)
    return out


def _variates(normal: bool, n, seed, step, prompt, stream, start, dtype, device) -> DeviceArray:
    dt = np.dtype(dtype)
    if dt not in _FLOATS:
        raise TypeError(f"dtype: expected float32 or float64, got {dt}")
    n = int(n)
    if n < 0:
        raise ValueError(f"n: expected >= 0, got {n}")
    args = stream_args(seed, step, prompt, stream, start)
    out = DeviceArray([n], dt, device)
    _core.cuda_random_variates(dt.name, normal, *args, n, out.ptr)
    return out


def random_normals(n: int, *, seed=0, step=0, prompt=0, stream=0x1000, start=0, dtype=np.float64,
                   device: int = -1) -> DeviceArray:
    """Standard normals at positions start .. start+n−1 of a stream, computed on the GPU: the
    variates of :func:`lsa_native.sampling.random.normals` up to the rounding of the GPU's
    log/sin/cos (same Philox words, same Box–Muller pairing)."""
    return _variates(True, n, seed, step, prompt, stream, start, dtype, device)


def random_uniforms(n: int, *, seed=0, step=0, prompt=0, stream=0x1000, start=0, dtype=np.float64,
                    device: int = -1) -> DeviceArray:
    """Uniforms on (0, 1) of a stream computed on the GPU (as :func:`lsa_native.sampling.random.uniforms`)."""
    return _variates(False, n, seed, step, prompt, stream, start, dtype, device)
