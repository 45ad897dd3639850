"""Argument checks shared by the public wrappers: clear TypeError/ValueError naming the argument.

Conversions here are the only copies the wrappers make: ``np.ascontiguousarray`` returns its input
unchanged when it already has the fast layout (C-contiguous, the expected dtype).
"""
from __future__ import annotations

import numpy as np

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def as_prompts(E, name: str = "E") -> np.ndarray:
    """E as a C-contiguous float32/float64 array [B, d+1, N+1] with d >= 1 and N >= 1."""
    E = np.asarray(E)
    if E.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name}: expected dtype float32 or float64, got {E.dtype}")
    if E.ndim != 3:
        raise ValueError(f"{name}: expected a 3-d array [B, d+1, N+1], got shape {E.shape}")
    B, rows, cols = E.shape
    if B < 1:
        raise ValueError(f"{name}: expected at least one prompt (B >= 1), got shape {E.shape}")
    if rows < 2:
        raise ValueError(f"{name}: expected d+1 >= 2 rows (d >= 1), got shape {E.shape}")
    if cols < 2:
        raise ValueError(
            f"{name}: expected N+1 >= 2 columns (N >= 1 context tokens plus the query), "
            f"got shape {E.shape}"
        )
    return np.ascontiguousarray(E)


def as_array(a, shape: tuple, dtype, name: str, *, finite: bool = True) -> np.ndarray:
    """a converted to `dtype` (C-contiguous) after checking it is real-valued with `shape`."""
    a = np.asarray(a)
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"{name}: expected a real floating-point array, got dtype {a.dtype}")
    if a.shape != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {a.shape}")
    a = np.ascontiguousarray(a, dtype=dtype)
    if finite and not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: contains non-finite values (NaN or inf)")
    return a


def as_real(a, name: str, dtype=np.float64) -> np.ndarray:
    """a as a C-contiguous real array of `dtype`; complex, object and string input is refused
    (numpy would silently drop an imaginary part with only a warning)."""
    a = np.asarray(a)
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{name}: expected a real-valued array, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=dtype)


def as_out(out, shape: tuple, dtype, name: str = "out") -> np.ndarray:
    """A fresh output array, or `out` checked to be usable without a copy."""
    if out is None:
        return np.empty(shape, dtype=dtype)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{name}: expected a numpy.ndarray, got {type(out).__name__}")
    if out.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {np.dtype(dtype)}, got {out.dtype}")
    if out.shape != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {out.shape}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"{name}: must be C-contiguous and writeable")
    return out


def check_finite_result(result, inputs: dict) -> None:
    """Raise ValueError naming the input that made `result` non-finite (cheap when it is finite)."""
    if np.all(np.isfinite(result)):
        return
    for name, a in inputs.items():
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name}: contains non-finite values (NaN or inf)")
    raise FloatingPointError("result overflowed to a non-finite value from finite inputs")


# Native sizes and counts are 64-bit signed integers.
INDEX_MAX = 2**63 - 1


def positive_int(value, name: str, minimum: int = 1, maximum: int = INDEX_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value}")
    if value > maximum:
        raise ValueError(f"{name}: expected an integer <= {maximum}, got {value}")
    return int(value)


def real_float(value, name: str) -> float:
    """A finite real number (bool, complex, strings and NaN/inf refused)."""
    if isinstance(value, (bool, complex, np.complexfloating, str, bytes)):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__}") from None
    if not np.isfinite(v):
        raise ValueError(f"{name}: expected a finite number, got {value}")
    return v


def positive_float(value, name: str) -> float:
    v = real_float(value, name)
    if v <= 0:
        raise ValueError(f"{name}: expected a finite number > 0, got {value}")
    return v


def nonnegative_float(value, name: str) -> float:
    v = real_float(value, name)
    if v < 0:
        raise ValueError(f"{name}: expected a finite number >= 0, got {value}")
    return v
