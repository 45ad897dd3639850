"""Checks the training package adds to ``lsa_native._validation`` (numbers given as arguments use
its ``real_float`` / ``positive_float`` / ``nonnegative_float``; these cover what they do not)."""
from __future__ import annotations

import numpy as np

from .._validation import check_flag as flag  # noqa: F401  (re-exported for train)

__all__ = ["flag", "real_output", "real_array_output"]


def real_output(value, name: str) -> float:
    """A real number returned by a user's callable (a loss, a metric), as float. NaN/inf pass (the
    caller decides what a non-finite value means); None, bools, strings, complex and arrays are
    refused (TypeError naming ``name``); a 0-d real array is a number."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return float(value)
    what = (f"an array of shape {value.shape}" if isinstance(value, np.ndarray)
            else type(value).__name__)
    raise TypeError(f"{name}: expected a real number, got {what}")


def real_array_output(value, name: str) -> np.ndarray:
    """A real array returned by a user's callable (a gradient, an array-valued metric) as float64;
    complex (whose imaginary part numpy would drop with only a warning), object, string and None
    are refused (TypeError naming ``name``). NaN/inf pass."""
    try:
        a = np.asarray(value)
    except (TypeError, ValueError) as e:  # ragged nested lists
        raise TypeError(f"{name}: expected a real array, got {type(value).__name__} ({e})") from None
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{name}: expected real values, got dtype {a.dtype}"
                        + (" (None)" if value is None else ""))
    return np.asarray(a, dtype=np.float64)
