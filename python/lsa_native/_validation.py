"""Argument checks and conversions shared by the public wrappers: clear TypeError/ValueError naming
the argument. (The operands of the native LSA and kernel-attention entry points are only converted
here, by ``cast_operand``: the native validate() of each entry point checks them.)

Conversions here are the only copies the wrappers make: ``np.ascontiguousarray`` returns its input
unchanged when it already has the fast layout (C-contiguous, the expected dtype).
"""
from __future__ import annotations

import numpy as np

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _asarray(a, name: str) -> np.ndarray:
    try:
        return np.asarray(a)
    except (ValueError, TypeError) as e:  # ragged nested lists and the like
        raise TypeError(f"{name}: expected a real array, got {type(a).__name__} ({e})") from None


def _cast(a: np.ndarray, dtype, name: str, finite: bool) -> np.ndarray:
    """a as C-contiguous `dtype`; with `finite`, NaN/inf and values that overflow `dtype` refused."""
    if finite and a.dtype.kind == "f" and not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: contains non-finite values (NaN or inf)")
    with np.errstate(over="ignore"):
        out = np.ascontiguousarray(a, dtype=dtype)
    if finite and out.dtype.kind == "f" and not np.all(np.isfinite(out)):
        big = float(np.max(np.abs(a.astype(np.float64))))
        raise ValueError(f"{name}: values overflow {np.dtype(dtype)} (max |{name}| = {big:.3g} > "
                         f"{float(np.finfo(dtype).max):.3g}); rescale it or use float64")
    return out


def _real(a, name: str) -> np.ndarray:
    a = _asarray(a, name)
    if a.dtype.kind not in "fiu":  # floating or integer
        raise TypeError(f"{name}: expected a real floating-point array, got dtype {a.dtype}")
    return a


def as_array(a, shape: tuple, dtype, name: str, *, finite: bool = True) -> np.ndarray:
    """a converted to `dtype` (C-contiguous) after checking it is real-valued with `shape`."""
    a = _real(a, name)
    if a.shape != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {a.shape}")
    return _cast(a, dtype, name, finite)


def cast_operand(a, dtype, name: str, *, finite: bool = True) -> np.ndarray:
    """a converted to `dtype` (C-contiguous) when it is real-valued (and, with `finite`, holds no
    NaN/inf and no value `dtype` overflows): the conversion of a native operand. An array already
    in `dtype` and C-contiguous is returned as it is: the native validate() checks its shape and
    (with `finite`) its values."""
    a = _real(a, name)
    if a.dtype == dtype and a.flags.c_contiguous:
        return a
    return _cast(a, dtype, name, finite)


def real_array(a, name: str, shape: tuple | None = None, *, ndim: int | None = None,
               finite: bool = True, nonempty: bool = True, dtype=np.float64) -> np.ndarray:
    """a as a C-contiguous real `dtype` array: complex, object, string and None refused (TypeError);
    `shape` entries None match any size, `ndim` checks the rank only; empty arrays and (with
    `finite`) NaN/inf refused (ValueError). Every message names the argument."""
    a = _asarray(a, name)
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{name}: expected a real-valued array, got dtype {a.dtype}")
    if shape is not None:
        shape = tuple(shape)
        if a.ndim != len(shape) or any(s is not None and s != n for s, n in zip(shape, a.shape)):
            want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name}: expected shape {want}, got {a.shape}")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-d array, got shape {a.shape}")
    if nonempty and a.size == 0:
        raise ValueError(f"{name}: expected a non-empty array, got shape {a.shape}")
    return _cast(a, dtype, name, finite)


def finite_output(result, output: str, hint: str = ""):
    """`result` (an array, a number or a tuple of them) when all of it is finite, else
    FloatingPointError naming `output`: finite, validated inputs overflowed."""
    parts = result if isinstance(result, tuple) else (result,)
    if all(np.all(np.isfinite(np.asarray(r, dtype=np.float64))) for r in parts):
        return result
    raise FloatingPointError(f"{output}: overflowed to a non-finite value from finite inputs"
                             + (f" ({hint})" if hint else ""))


def check_sampled(*outputs, dtype=None) -> None:
    """The output check of every sampler, run once per call: each ``(name, array, cause)`` of
    `outputs` (array None: skipped) finite — and within `dtype`'s range when given (draws made in
    float64 for a `dtype` batch) —, else FloatingPointError naming the output and `cause` (the
    argument whose scale made the draws overflow, and the fix)."""
    for name, a, cause in outputs:
        if a is None:
            continue
        a = np.asarray(a)
        dt = a.dtype if dtype is None else np.dtype(dtype)
        if dt == a.dtype:
            ok = np.isfinite(a).all()
        else:  # NaN fails the comparison too
            ok = bool(np.abs(a).max(initial=0.0) <= float(np.finfo(dt).max))
        if not ok:
            raise FloatingPointError(f"{name}: overflowed {dt} to non-finite values while sampling "
                                     f"({cause})")


def fits_dtype(value, name: str, dtype, *, nonzero: bool = False) -> None:
    """ValueError naming `name` when a value (a number or an array) overflows `dtype`, or, with
    `nonzero`, when a nonzero value rounds to 0 in it (a scale that would silently vanish)."""
    dt = np.dtype(dtype)
    a = np.abs(np.asarray(value, dtype=np.float64))
    big = float(a.max(initial=0.0))
    if big > float(np.finfo(dt).max):
        raise ValueError(f"{name}: {big:.3g} overflows {dt}, the sampling dtype; "
                         + rescale_hint(name, dt))
    if nonzero:
        with np.errstate(under="ignore"):
            vanished = (a > 0) & (a.astype(dt) == 0)
        if np.any(vanished):
            raise ValueError(f"{name}: {float(a[vanished].min()):.3g} underflows {dt} to 0, the "
                             f"sampling dtype (degenerate draws); " + rescale_hint(name, dt))


def rescale_hint(name: str, dtype) -> str:
    """What to do about `name` overflowing `dtype`: rescale it, or (float32) sample float64."""
    return f"rescale {name}" + (" or use dtype=float64" if np.dtype(dtype) != np.float64 else "")


def float_dtype(dtype, name: str = "dtype") -> np.dtype:
    """float32 or float64, else TypeError naming the argument."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{name}: expected float32 or float64, got {dtype!r}") from None
    if dt not in FLOAT_DTYPES:
        raise TypeError(f"{name}: expected float32 or float64, got {dt}")
    return dt


def check_flag(value, name: str) -> bool:
    """True or False (numpy bools too); anything else a TypeError naming the argument."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected True or False, got {type(value).__name__}")
    return bool(value)


def check_rng(rng, name: str = "rng") -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"{name}: expected a numpy.random.Generator (np.random.default_rng(seed)), "
                        f"got {type(rng).__name__}")
    return rng


def as_real(a, name: str, dtype=np.float64) -> np.ndarray:
    """a as a C-contiguous real array of `dtype`; complex, object and string input is refused
    (numpy would silently drop an imaginary part with only a warning)."""
    a = _asarray(a, name)
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{name}: expected a real-valued array, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=dtype)


def check_no_overlap(name: str, out: np.ndarray, others: dict) -> None:
    """ValueError naming `name` and the first of `others` ({name: array}) whose memory `out`
    overlaps: a kernel writing `out` while reading (or writing) it would give wrong numbers."""
    for other_name, a in others.items():
        if isinstance(a, np.ndarray) and np.may_share_memory(out, a) and np.shares_memory(out, a):
            raise ValueError(f"{name}: overlaps the memory of {other_name}; pass a separate output "
                             f"array (or out=None)")


def as_out(out, shape: tuple, dtype, name: str = "out", inputs: dict | None = None) -> np.ndarray:
    """A fresh output array, or `out` checked to be usable without a copy and to overlap none of
    `inputs` ({name: array}, the arrays the call reads or also writes)."""
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
    check_no_overlap(name, out, inputs or {})
    return out


def check_finite_result(result, inputs: dict, output: str = "result") -> None:
    """Raise ValueError naming the input that made `result` non-finite (cheap when it is finite),
    or FloatingPointError naming `output` when the inputs were finite (overflow)."""
    if np.all(np.isfinite(result)):
        return
    for name, a in inputs.items():
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name}: contains non-finite values (NaN or inf)")
    raise FloatingPointError(f"{output}: overflowed to non-finite values from finite inputs "
                             "(rescale the inputs or parameters, or use float64)")


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


def _short(value) -> str:
    """`value` for a message: its type and a repr cut to 40 characters."""
    r = repr(value)
    return f"{type(value).__name__} {r if len(r) <= 40 else r[:37] + '...'}"


def real_float(value, name: str) -> float:
    """A finite real number (bool, complex, strings and NaN/inf refused)."""
    if isinstance(value, (bool, np.bool_, complex, np.complexfloating, str, bytes)):
        raise TypeError(f"{name}: expected a real number, got {_short(value)}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a real number, got {_short(value)}") from None
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
