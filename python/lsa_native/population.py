"""Exact population losses of the one-layer LSA under Gaussian data, their gradients, and gradient
flow on them [ZFB (3.8)-(3.9), Lemma 5.2, Lemma A.1, Appendix C]. Derivation: docs/population.md.

Training distribution (SPEC 3.1): w ~ N(0, I_d), x_1..x_N, x_q iid N(0, Λ), y = <w, x>.
L(W^PV, W^KQ; Λ, N) = ½ E[(ŷ − <w, x_q>)^2] is computed in closed form (Isserlis/Wick) for ANY
parameters in O(d^3), float64, by the native core. Parameters are [d+1, d+1] arrays; gradients are
full-size with exact zeros where a parameter does not affect ŷ.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _core
from ._validation import (as_real, finite_output, real_array, nonnegative_float, positive_float, positive_int,
                          real_float)
from .covariance_laws import law_moments, random_law
from .data import check_covariance
from .history import History
from .theory import diagonal_moments, gamma  # diagonal_moments: public here too (re-exported)

__all__ = [
    "loss",
    "loss_and_grad",
    "loss_and_grad_random_diagonal",
    "loss_and_grad_samples",
    "reduced_loss_and_grad",
    "diagonal_moments",
    "exponential_moments",
    "covariance_law_moments",
    "minimum_loss",
    "FlowTrajectory",
    "gradient_flow",
    "reduced_gradient_flow",
]


def _params(W_pv, W_kq):
    W_pv = as_real(W_pv, "W_pv")
    W_kq = as_real(W_kq, "W_kq")
    if W_pv.ndim != 2 or W_pv.shape[0] != W_pv.shape[1] or W_pv.shape[0] < 2:
        raise ValueError(f"W_pv: expected shape (d+1, d+1) with d >= 1, got {W_pv.shape}")
    if W_kq.shape != W_pv.shape:
        raise ValueError(f"W_kq: expected shape {W_pv.shape}, got {W_kq.shape}")
    return W_pv, W_kq, W_pv.shape[0] - 1  # finiteness is checked natively


def _covariance(Lambda, d: int) -> np.ndarray:
    """Λ as C-contiguous float64 [d, d]; symmetry and positive definiteness are checked natively."""
    L = as_real(Lambda, "Lambda")
    if L.shape != (d, d):
        raise ValueError(f"Lambda: expected shape {(d, d)}, got {L.shape}")
    return L


def _covariance_samples(Lambdas, d: int) -> np.ndarray:
    """Samples as float64 [S, d, d]; each is checked natively (symmetric, positive definite)."""
    L = as_real(Lambdas, "Lambdas")
    if L.ndim != 3 or L.shape[1:] != (d, d) or L.shape[0] < 1:
        raise ValueError(f"Lambdas: expected shape (S, {d}, {d}) with S >= 1, got {L.shape}")
    return L


def _checked(result, what: str):
    """(loss, *gradients) from the core, or FloatingPointError when finite parameters overflowed
    (the loss is quartic in the parameters: |W| ~ 1e80 already overflows float64)."""
    if all(np.all(np.isfinite(r)) for r in result):
        return result
    raise FloatingPointError(f"{what}: the loss or its gradient overflowed to a non-finite value "
                             "from finite parameters; rescale W_pv/W_kq (or U11, u)")


def exponential_moments(d: int, scale: float = 1.0) -> np.ndarray:
    """Moments of λ_i iid scale·Exponential(1): (c, 2c², 6c³) [ZFB 4.3, the ⅓ example]."""
    d = positive_int(d, "d")
    c = positive_float(scale, "scale")
    return _law_moments(("exponential", c, 0.0, 0.0), d, "scale³ overflows float64")


def covariance_law_moments(d: int, covariance_law) -> np.ndarray:
    """Moments [3, d] = (E λ, E λ², E λ³) of λ_i iid under a random covariance law [ZFB 4.3],
    given as to :class:`lsa_native.sampling.LinearPrompts` (``("gamma", shape, scale)``, …; the
    laws of :data:`lsa_native.covariance_laws.COVARIANCE_LAWS`): the ``moments`` of
    :func:`loss_and_grad_random_diagonal` and :func:`gradient_flow` for prompts of that law."""
    d = positive_int(d, "d")
    return _law_moments(random_law(covariance_law), d, "covariance_law: its third moment overflows float64")


def _law_moments(law, d: int, overflow: str) -> np.ndarray:
    m = tuple(np.full(d, v) for v in law_moments(law))
    return diagonal_moments(*finite_output(m, "moments", overflow))


def _as_moments(moments, d: int) -> np.ndarray:
    m = as_real(moments, "moments")
    if m.shape != (3, d):
        raise ValueError(f"moments: expected shape (3, {d}), got {m.shape}")
    return diagonal_moments(*m)


def _noise(noise_std) -> float:
    return nonnegative_float(noise_std, "noise_std")


def loss(W_pv, W_kq, Lambda, N: int, *, noise_std: float = 0.0, query_noise: bool = False) -> float:
    """Population loss L(W^PV, W^KQ; Λ, N)  [ZFB (3.8)], exact for any parameters."""
    return loss_and_grad(W_pv, W_kq, Lambda, N, noise_std=noise_std, query_noise=query_noise)[0]


def loss_and_grad(W_pv, W_kq, Lambda, N: int, *, noise_std: float = 0.0, query_noise: bool = False):
    """(L, ∂L/∂W^PV, ∂L/∂W^KQ) for fixed Λ (symmetric positive definite [d, d]).

    ``noise_std`` = σ: labels y_i = <w, x_i> + σ ε_i (exact extra terms, docs/population.md "Label
    noise"); ``query_noise``: the target is y_q = <w, x_q> + σ ε_q too (adds σ²/2)."""
    W_pv, W_kq, d = _params(W_pv, W_kq)
    return _checked(_core.population_loss("fixed", W_pv, W_kq, _covariance(Lambda, d), positive_int(N, "N"),
                                          _noise(noise_std), bool(query_noise)), "loss_and_grad")


def loss_and_grad_random_diagonal(W_pv, W_kq, moments, N: int, *, noise_std: float = 0.0,
                                  query_noise: bool = False):
    """E_Λτ L(·; Λτ, N) and its gradient for Λτ = diag(λ) with independent entries given by
    moments [3, d] = (E λ, E λ², E λ³)  [ZFB (4.9), Appendix C]. Exact: L is cubic in the λ_i
    (with label noise too)."""
    W_pv, W_kq, d = _params(W_pv, W_kq)
    return _checked(_core.population_loss("random_diagonal", W_pv, W_kq, _as_moments(moments, d),
                                          positive_int(N, "N"), _noise(noise_std), bool(query_noise)), "loss_and_grad_random_diagonal")


def loss_and_grad_samples(W_pv, W_kq, Lambdas, N: int, *, noise_std: float = 0.0,
                          query_noise: bool = False):
    """(1/S) Σ_s L(·; Λ_s, N) and its gradient: the exact conditional loss averaged over supplied
    covariance samples Lambdas [S, d, d] (quadrature over Λ only)."""
    W_pv, W_kq, d = _params(W_pv, W_kq)
    return _checked(_core.population_loss("samples", W_pv, W_kq, _covariance_samples(Lambdas, d),
                                          positive_int(N, "N"), _noise(noise_std), bool(query_noise)), "loss_and_grad_samples")


def reduced_loss_and_grad(U11, u: float, Lambda, N: int):
    """ℓ̃(U11, u_{-1}) = tr[½ u² ΓΛU11ΛU11^T − u Λ²U11^T] of ZFB Lemma A.1 with its gradient:
    returns (ℓ̃, ∂ℓ̃/∂U11, ∂ℓ̃/∂u). On the manifold p1 = 0, k2 = 0: L = ℓ̃ + ½ tr(Λ)."""
    U11 = _reduced_params(U11, u)
    return _checked(_core.reduced_loss(U11, real_float(u, "u"), _covariance(Lambda, U11.shape[0]),
                                       positive_int(N, "N")), "reduced_loss_and_grad")


def _reduced_params(U11, u) -> np.ndarray:
    U11 = as_real(U11, "U11")
    if U11.ndim != 2 or U11.shape[0] != U11.shape[1] or U11.shape[0] < 1:
        raise ValueError(f"U11: expected a square (d, d) array with d >= 1, got shape {U11.shape}")
    if not np.all(np.isfinite(U11)):
        raise ValueError("U11: contains non-finite values (NaN or inf)")
    real_float(u, "u")
    return U11


def minimum_loss(Lambda, N: int) -> float:
    """min L = ½ tr(Λ) − ½ tr(Λ² Γ^{-1})  [ZFB Lemma A.1, min ℓ̃ = −½ tr(Λ²Γ^{-1})]."""
    Lam = check_covariance(Lambda)
    with np.errstate(over="ignore", invalid="ignore"):
        value = float(0.5 * np.trace(Lam) - 0.5 * np.trace(Lam @ Lam @ np.linalg.inv(gamma(Lam, N))))
    return finite_output(value, "minimum_loss")


@dataclass
class FlowTrajectory:
    """Gradient-flow trajectory recorded at ``times``: parameters, losses and integrator counts.

    For the full model ``W_pv``/``W_kq`` are [T, d+1, d+1]; for the reduced flow ``U11`` [T, d, d]
    and ``u`` [T]. ``final_*`` describe where integration stopped (a tolerance may stop it early:
    then ``times`` is a prefix of the request and ``stopped_by_tolerance`` is True).

    ``method`` is what ran: "dopri5", "rk4", "rosenbrock", or "dopri5+rosenbrock" (``method="auto"``
    switched at ``switch_time``; None when it did not). ``steps`` counts the accepted steps of every
    integrator (``stiff_steps`` of them Rosenbrock steps), ``gradient_evaluations`` include the
    Jacobians' (2n each), ``jacobian_evaluations`` and ``factorizations`` count the Rosenbrock
    method's Jacobians and Cholesky factorisations."""

    times: np.ndarray
    losses: np.ndarray
    final_time: float
    final_loss: float
    steps: int
    rejected_steps: int
    gradient_evaluations: int
    stopped_by_tolerance: bool
    method: str
    jacobian_evaluations: int
    factorizations: int
    stiff_steps: int
    switch_time: float | None
    W_pv: np.ndarray | None = None
    W_kq: np.ndarray | None = None
    final_W_pv: np.ndarray | None = None
    final_W_kq: np.ndarray | None = None
    U11: np.ndarray | None = None
    u: np.ndarray | None = None
    final_U11: np.ndarray | None = None
    final_u: float | None = None

    def history(self):
        """The records as a ``train.History`` (the type ``fit`` returns): ``step`` = index of
        the recorded time, ``loss``, and the column ``time``."""
        h = History()
        for i, (t, L) in enumerate(zip(self.times, self.losses)):
            h.record(i, float(L), time=float(t))
        return h


FLOW_METHODS = ("dopri5", "rk4", "rosenbrock", "auto")


def _flow_options(times, method, rtol, atol, step, grad_tol, gap_tol, loss_target, max_steps):
    times = real_array(times, "times", ndim=1, finite=False, nonempty=False)
    if times.size == 0 or not np.all(np.isfinite(times)) or np.any(times < 0) or np.any(np.diff(times) < 0):
        raise ValueError("times: expected a non-empty, non-decreasing sequence of finite times >= 0")
    if method not in FLOW_METHODS:
        names = ", ".join(map(repr, FLOW_METHODS))
        raise ValueError(f"method: expected one of {names}, got {method!r}")
    return dict(times=times.tolist(), method=method, rtol=positive_float(rtol, "rtol"),
                atol=nonnegative_float(atol, "atol"), step=positive_float(step, "step"),
                grad_tol=nonnegative_float(grad_tol, "grad_tol"),
                loss_target=real_float(loss_target, "loss_target"),
                gap_tol=nonnegative_float(gap_tol, "gap_tol"),
                max_steps=positive_int(max_steps, "max_steps"))


def _flow_counts(r: dict) -> dict:
    """The FlowTrajectory fields shared by the full and the reduced flow, from the native result."""
    keys = ("times", "losses", "final_time", "final_loss", "steps", "rejected_steps",
            "gradient_evaluations", "stopped_by_tolerance", "method", "jacobian_evaluations",
            "factorizations", "stiff_steps", "switch_time")
    return {k: r[k] for k in keys}


def gradient_flow(W_pv, W_kq, N: int, *, Lambda=None, moments=None, samples=None, times,
                  method: str = "auto", rtol: float = 1e-12, atol: float = 1e-14,
                  step: float = 1e-2, grad_tol: float = 0.0, gap_tol: float = 0.0,
                  loss_target: float = 0.0, max_steps: int = 10_000_000, noise_std: float = 0.0,
                  query_noise: bool = False) -> FlowTrajectory:
    """Gradient flow dθ/dt = −∇L(θ) [ZFB (3.9)] on the exact population loss, integrated natively
    (GIL released, Ctrl-C honoured). ``noise_std``, ``query_noise``: label noise, as in
    :func:`loss_and_grad`.

    The objective is fixed Λ (``Lambda``), random diagonal Λτ (``moments`` [3, d]) or covariance
    samples (``samples`` [S, d, d]) — exactly one. θ is recorded at ``times``; integration stops
    early when ‖∇L‖ <= grad_tol or L − loss_target <= gap_tol (each off at 0).

    ``method`` (docs/population.md, "Gradient-flow integrators"):

    - ``"dopri5"``: adaptive Dormand–Prince 5(4) under ``rtol``/``atol``, 6 gradients a
      step. Near a minimum the Hessian's spread holds its step at ≈ 3.3/λ_max(∇²L) by stability,
      so its steps grow linearly with the horizon (d = 5 to t = 1e5: ~6e5 steps).
    - ``"rk4"``: fixed-step RK4 (``step``).
    - ``"rosenbrock"``: the Rosenbrock–W method ROS34PW2 (Rang & Angermann 2005), linearly implicit,
      order 3 with any Jacobian, L-stable, embedded order-2 error estimate under ``rtol``/``atol``.
      Jacobian −∇²L by central differences of the exact gradient (2n gradients for n parameters,
      in parallel), Cholesky of I − hγJ on the parameters with a nonzero Jacobian row, both reused
      across steps (re-evaluated after 20% moves or far-off rejections). Per step: 4 gradients and
      4 pairs of triangular solves. At most 6000 parameters (d <= 53).
    - ``"auto"`` (default): DOPRI5 until it stalls on stability — h·ρ̂ > 3.25 on 15 accepted steps (ρ̂: the
      dominant eigenvalue's size estimated from DOPRI5's last two stages; Hairer's stiffness test)
      — then ROS34PW2 to the end: the explicit method resolves the transient, the implicit one the
      stiff tail (d = 5 to t = 1e5: ~1000 steps, 0.1 s).

    The result's ``method`` says what ran, ``switch_time`` when ``"auto"`` switched, and the
    counts the work (:class:`FlowTrajectory`).
    """
    W_pv, W_kq, d = _params(W_pv, W_kq)
    given = [x is not None for x in (Lambda, moments, samples)]
    if sum(given) != 1:
        raise ValueError("gradient_flow: pass exactly one of Lambda, moments, samples")
    if Lambda is not None:
        kind, data = "fixed", _covariance(Lambda, d)
    elif moments is not None:
        kind, data = "random_diagonal", _as_moments(moments, d)
    else:
        kind, data = "samples", _covariance_samples(samples, d)
    opts = _flow_options(times, method, rtol, atol, step, grad_tol, gap_tol, loss_target, max_steps)
    r = _core.gradient_flow_population(kind, W_pv, W_kq, data, positive_int(N, "N"), **opts,
                                       noise_std=_noise(noise_std), query_noise=bool(query_noise))
    n = d + 1
    thetas = r["thetas"].reshape(-1, 2, n, n)
    final = r["final_theta"].reshape(2, n, n)
    return FlowTrajectory(**_flow_counts(r), W_pv=thetas[:, 0], W_kq=thetas[:, 1],
                          final_W_pv=final[0], final_W_kq=final[1])


def reduced_gradient_flow(U11, u: float, Lambda, N: int, *, times, method: str = "auto",
                          rtol: float = 1e-12, atol: float = 1e-14, step: float = 1e-2,
                          grad_tol: float = 0.0, gap_tol: float = 0.0, loss_target: float = 0.0,
                          max_steps: int = 10_000_000) -> FlowTrajectory:
    """Gradient flow on ℓ̃(U11, u_{-1}) of ZFB Lemma A.1: the dynamics (5.4) of Lemma 5.2.
    ``method``, tolerances and stopping rules as in :func:`gradient_flow`."""
    U11 = _reduced_params(U11, u)
    d = U11.shape[0]
    Lam = _covariance(Lambda, d)
    opts = _flow_options(times, method, rtol, atol, step, grad_tol, gap_tol, loss_target, max_steps)
    r = _core.gradient_flow_reduced(U11, real_float(u, "u"), Lam, positive_int(N, "N"), **opts)
    th = r["thetas"]
    return FlowTrajectory(
        **_flow_counts(r), U11=th[:, : d * d].reshape(-1, d, d),
        u=th[:, d * d], final_U11=r["final_theta"][: d * d].reshape(d, d),
        final_u=float(r["final_theta"][d * d]))
