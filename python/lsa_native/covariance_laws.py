"""Laws of the per-prompt random diagonal covariance Λ_τ = diag(λ_1..λ_d), λ_k iid [ZFB 4.3]: the
Python side of the one table ``LSA_NATIVE_COVARIANCE_LAWS`` (cpp/include/lsa_native/sampling.hpp).

The names and parameter names come from the native table (:data:`COVARIANCE_LAWS`, exported by
``_core``); what Python adds per law is keyed by those names and written here, once: the moments
(E λ, E λ², E λ³) of the exact random-Λ loss [ZFB (4.9), Appendix C] and an upper bound of the
native draws of λ (for the samplers' overflow checks). A law of the native table without an entry
here raises an error naming it (tests/test_sampling.py checks every law).

    exponential(scale)    λ = scale·Exp(1) (JMLR Fig. 1)
    gamma(shape, scale)   λ = scale·Gamma(shape)
    uniform(lo, hi)       λ ~ U(lo, hi)
    two_point(a, b, p)    λ = a with probability p, else b
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np

from . import _core
from ._validation import real_float

__all__ = ["COVARIANCE_LAWS", "parse_law", "random_law", "law_moments", "lambda_max"]

#: {law name: its parameter names}, in the order of the native table (``_core.COVARIANCE_LAWS``).
COVARIANCE_LAWS = _core.COVARIANCE_LAWS

# Largest |variate| the native streams give (cpp/src/common/random.hpp), rounded up: Box–Muller
# normals |z| <= 8.57 (double; 5.77 float), exponentials −log u <= 53 ln 2 = 36.7.
Z_MAX, _EXP_MAX = 9.0, 37.0


class _Formulas(NamedTuple):
    """What Python knows of a law, as functions of its parameters (a, b, p) in table order."""
    moments: Callable[[float, float, float], tuple[float, float, float]]  # (E λ, E λ², E λ³)
    bound: Callable[[float, float, float], float]                          # >= every native draw


def _gamma_bound(shape: float, scale: float) -> float:
    """Marsaglia–Tsang δ(1 + z/√(9δ))³, δ = α − 1/3, α = shape (+1 if < 1), times the scale."""
    delta = (shape + 1 if shape < 1 else shape) - 1 / 3
    return scale * delta * (1 + Z_MAX / math.sqrt(9 * delta)) ** 3


_FORMULAS = {
    "exponential": _Formulas(lambda c, _b, _p: (c, 2 * c**2, 6 * c**3),  # E λ^n = n! c^n
                             lambda c, _b, _p: c * _EXP_MAX),
    "gamma": _Formulas(lambda k, t, _p: (k * t, k * (k + 1) * t**2, k * (k + 1) * (k + 2) * t**3),
                       lambda k, t, _p: _gamma_bound(k, t)),
    # E λ^n = (hi^{n+1} − lo^{n+1}) / ((n + 1)(hi − lo)) = Σ_j lo^j hi^{n−j} / (n + 1)
    "uniform": _Formulas(lambda lo, hi, _p: ((lo + hi) / 2, (lo**2 + lo * hi + hi**2) / 3,
                                             (lo**3 + lo**2 * hi + lo * hi**2 + hi**3) / 4),
                         lambda lo, hi, _p: max(lo, hi)),
    "two_point": _Formulas(lambda a, b, p: tuple(p * a**n + (1 - p) * b**n for n in (1, 2, 3)),
                           lambda a, b, _p: max(a, b)),
}


def _formulas(name: str) -> _Formulas:
    """The entry of a law of the native table; an error naming the law when it has none."""
    try:
        return _FORMULAS[name]
    except KeyError:
        raise NotImplementedError(f"covariance_law: {name!r} has no moments or bound in "
                                  "lsa_native/covariance_laws.py (add its entry to _FORMULAS)") from None


def parse_law(law) -> tuple[str, float, float, float]:
    """(name, a, b, p) of a covariance law given as None (``"fixed"``), a law name, or a tuple
    (name, *params); each parameter a finite real number, and a law whose λ is 0 with
    probability 1 refused. The native validation checks the parameters' ranges."""
    if law is None:
        return ("fixed", 0.0, 0.0, 0.0)
    if isinstance(law, str):
        law = (law,) if law != "exponential" else (law, 1.0)
    if not isinstance(law, (tuple, list)) or not law or not isinstance(law[0], str):
        raise TypeError("covariance_law: expected None, a law name, or a tuple (name, *params), "
                        f"got {law!r}")
    name = law[0]
    if name not in COVARIANCE_LAWS:
        raise ValueError(f"covariance_law: unknown law {name!r}; expected one of {sorted(COVARIANCE_LAWS)}")
    expected = COVARIANCE_LAWS[name]
    if len(law) - 1 != len(expected):
        raise ValueError(f"covariance_law: {name} takes parameters {expected}, got {tuple(law[1:])}")
    params = tuple(real_float(v, f"covariance_law: {name} parameter {k!r}")
                   for k, v in zip(expected, law[1:]))
    a, b, p = (params + (0.0, 0.0, 0.0))[:3]
    if name == "two_point" and (a == b == 0 or (p == 1 and a == 0) or (p == 0 and b == 0)):
        raise ValueError(f"covariance_law: two_point{params} gives λ = 0 with probability 1 "
                         "(all covariates zero); expected a > 0 or b > 0 with a chance to be drawn")
    return (name, a, b, p)


def random_law(law) -> tuple[str, float, float, float]:
    """:func:`parse_law` of a random law (None refused), its parameters checked by the native
    table (ValueError with its message, e.g. "covariance_law: uniform needs 0 <= lo < hi")."""
    parsed = parse_law(law)
    if parsed[0] == "fixed":
        raise ValueError("covariance_law: expected a random law (a name or a tuple (name, *params)), "
                         "got None")
    name, a, b, p = parsed
    spec = {"dim": 1, "context": 1, "seed": 0, "noise_std": 0.0, "query_noise": False, "tasks": 0,
            "law": name, "law_a": a, "law_b": b, "law_p": p, "covariates": "gaussian"}
    _core.sample_linear_prompts(spec, 1, 0)  # validates the spec: here, the law's parameters
    return parsed


def law_moments(law: tuple[str, float, float, float]) -> tuple[float, float, float]:
    """(E λ, E λ², E λ³) of a parsed random law (:func:`parse_law`) as float64 scalars (a moment
    beyond float64's range is inf: the caller checks)."""
    name, *params = law
    with np.errstate(over="ignore"):
        return _formulas(name).moments(*map(np.float64, params))


def lambda_max(law: tuple[str, float, float, float]) -> float:
    """An upper bound of every native draw of λ under a parsed law (1 when fixed)."""
    name, a, b, p = law
    return 1.0 if name == "fixed" else _formulas(name).bound(a, b, p)
