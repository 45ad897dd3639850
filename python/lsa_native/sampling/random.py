"""Counter-based random variates (native Philox4x32-10), addressed by (seed, step, prompt, stream,
position): a variate never depends on thread count, chunking or device.

Layout (``cpp/src/common/philox.hpp``): key = the 64-bit ``seed`` (low word first); counter =
(block, prompt, step, stream). Float streams draw uniforms with 24 significant bits and float
Box–Muller normals, double streams 53-bit uniforms and double normals (``cpp/src/common/random.hpp``).
"""
from __future__ import annotations

import numpy as np

from .. import _core
from .._streams import check_seed, check_step, stream_args as _stream_args
from .._validation import float_dtype, positive_float, positive_int

__all__ = ["STREAMS", "philox4x32", "normals", "uniforms", "gammas", "check_seed", "check_step"]

#: Stream tags (counter word 3) of the samplers; ``user`` and above are free for users and tests.
STREAMS = {
    "raw": 0, "x": 1, "query": 2, "task": 3, "noise": 4, "query_noise": 5, "covariance": 6,
    "task_pool": 7, "task_choice": 8, "bartlett_normal": 9, "bartlett_chi2": 10,
    "kernel_gp_first": 0x100, "user": 0x1000,
}


def _dtype(dtype) -> np.dtype:
    return float_dtype(dtype, "dtype")


def _count(n) -> int:
    # 2**40 variates (8 TiB of float64) is far beyond memory; a larger n is a mistake, not a request.
    return positive_int(n, "n", minimum=0, maximum=2**40)


def philox4x32(counters, seed) -> np.ndarray:
    """Philox4x32-10 words of ``counters`` [n, 4] (uint32) under the key of ``seed``: [n, 4] uint32."""
    c = np.asarray(counters)
    if c.dtype.kind not in "iu":
        raise TypeError(f"counters: expected an integer array, got dtype {c.dtype}")
    if c.ndim != 2 or c.shape[1] != 4:
        raise ValueError(f"counters: expected shape (n, 4), got {c.shape}")
    if not np.issubdtype(c.dtype, np.integer) or (c.size and (c.min() < 0 or c.max() >= 2**32)):
        raise ValueError("counters: expected integers in [0, 2**32)")
    return _core.philox4x32(np.ascontiguousarray(c, dtype=np.uint32), check_seed(seed))


def normals(n: int, *, seed=0, step=0, prompt=0, stream=STREAMS["user"], start=0,
            dtype=np.float64) -> np.ndarray:
    """Standard normals at positions start .. start+n−1 of a stream (Box–Muller)."""
    out = np.empty(_count(n), dtype=_dtype(dtype))
    _core.random_normals(*_stream_args(seed, step, prompt, stream, start), out)
    return out


def uniforms(n: int, *, seed=0, step=0, prompt=0, stream=STREAMS["user"], start=0,
             dtype=np.float64) -> np.ndarray:
    """Uniforms on (0, 1) at positions start .. start+n−1 of a stream."""
    out = np.empty(_count(n), dtype=_dtype(dtype))
    _core.random_uniforms(*_stream_args(seed, step, prompt, stream, start), out)
    return out


def gammas(n: int, shape: float, *, seed=0, step=0, prompt=0, stream=STREAMS["user"], start=0,
           dtype=np.float64) -> np.ndarray:
    """Gamma(shape, 1) variates number start .. start+n−1 of a stream (Marsaglia–Tsang; shape < 1
    through the U^(1/a) boost). Chi-square(k) is 2·gammas(n, k/2)."""
    shape = positive_float(shape, "shape")
    out = np.empty(_count(n), dtype=_dtype(dtype))
    _core.random_gammas(*_stream_args(seed, step, prompt, stream, start), shape, out)
    return out
