"""The address of a variate in the counter-based streams: (seed, step, prompt, stream, position),
the counter layout of ``cpp/src/common/philox.hpp``. Its checks, shared by the CPU samplers
(:mod:`lsa_native.sampling.random`, which re-exports :func:`check_seed`, :func:`check_step`) and
the GPU variates of :mod:`lsa_native.cuda`; a leaf, so the device layer needs no sampler."""
from __future__ import annotations

import numbers

import numpy as np

__all__ = ["check_seed", "check_step", "stream_args"]


def _uint(value, bits: int, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__}")
    value = int(value)
    if not 0 <= value < 2**bits:
        raise ValueError(f"{name}: expected 0 <= {name} < 2**{bits}, got {value}")
    return value


def check_seed(seed) -> int:
    """The seed as a Python int in [0, 2^64), or a TypeError/ValueError."""
    return _uint(seed, 64, "seed")


def check_step(step) -> int:
    """The step as a Python int in [0, 2^32) (counter word 2), or a TypeError/ValueError."""
    return _uint(step, 32, "step")


def stream_args(seed, step, prompt, stream, start) -> tuple:
    """(seed, step, prompt, stream, start) checked: the leading arguments of the native variates."""
    return (check_seed(seed), check_step(step), _uint(prompt, 32, "prompt"), _uint(stream, 32, "stream"),
            _uint(start, 64, "start"))
