"""The stiff integrator of the population gradient flow (method="rosenbrock": ROS34PW2 with a
central-difference Jacobian) and method="auto" (DOPRI5, switching to it when DOPRI5 stalls on
stability) against scipy's implicit solvers (Radau, BDF) on the same right-hand side (the native
exact gradient), against DOPRI5 where DOPRI5 is cheap, and at ZFB's limits on long horizons."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from lsa_native import population as pop, theory
from test_population import random_spd

RTOL, ATOL = 1e-10, 1e-12
# Error-per-step control gives a global error of a small multiple of the tolerance (|θ| ~ 1 here).
# The Rosenbrock error is heavy-tailed at d = 3. max |Δθ| / 1e-8 over fresh seeds (2026-11-28,
# rng [s, 777]): median ~0.015, max 0.130 (t = 1000 vs DOPRI5 at rtol 1e-13, 430 seeds), 0.106
# (short horizons, 367), 0.090 (vs BDF, 109), 0.058 (noise_std = 0.3, 130). An exponential fit to
# the top 20% of log(error) put P(error > 1e-8) at ~2e-4 per d = 3 test, ~8e-4 per run in all.
# At 1e-7 the fit gives ~2e-5 per run. Power: a flow run at rtol 1e-7 (1000x looser) errs by
# > 1e-7 in 51/52 seeds at d = 3. A lower-order or wrong stage shows as 1e-6 or worse (not
# re-measured).
AGREE = 1000 * RTOL


def _problem(rng, d):
    N = int(rng.integers(3, 20))
    Lam = random_spd(rng, d)
    W_pv, W_kq = theory.assumption33_init(d, 0.5 * theory.sigma_bound(Lam, N), rng=rng)
    return Lam, N, W_pv, W_kq


def _stack(W_pv, W_kq):
    """θ = (W_pv.flat, W_kq.flat) per recorded time: [T, 2(d+1)²]."""
    T = W_pv.shape[0]
    return np.concatenate([W_pv.reshape(T, -1), W_kq.reshape(T, -1)], axis=1)


def _scipy_flow(Lam, N, W_pv, W_kq, times, method):
    n = W_pv.shape[0]

    def rhs(_, y):
        _, g_pv, g_kq = pop.loss_and_grad(y[: n * n].reshape(n, n), y[n * n:].reshape(n, n), Lam, N)
        return -np.concatenate([g_pv.ravel(), g_kq.ravel()])

    y0 = np.concatenate([W_pv.ravel(), W_kq.ravel()])
    # scipy's own floating-point warnings are not ours to fail on: once in ~30 full-suite runs
    # BDF warned "invalid value encountered in subtract" in its difference table (not reproduced
    # with the same seed; the native gradient is single-threaded and bitwise reproducible). The
    # solution is still held to success, finiteness and agreement with both native methods.
    with np.errstate(all="ignore"):
        sol = solve_ivp(rhs, (0.0, times[-1]), y0, method=method, t_eval=times, rtol=RTOL / 10,
                        atol=ATOL / 10)
    assert sol.success, sol.message
    assert np.isfinite(sol.y).all(), f"{method}: non-finite reference solution"
    return sol.y.T


@pytest.mark.parametrize("solver, d", [
    ("BDF", 2), ("BDF", 3), ("BDF", 5),
    ("Radau", 2), ("Radau", 3),
    pytest.param("Radau", 5, marks=pytest.mark.slow),  # ~10 s of scipy in Python
])
def test_stiff_flows_agree_with_scipy_implicit_solvers(rng, solver, d):
    Lam, N, W_pv, W_kq = _problem(rng, d)
    times = np.array([0.0, 1.0, 10.0, 100.0, 1000.0])  # the transient and the stiff tail
    want = _scipy_flow(Lam, N, W_pv, W_kq, times, solver)
    for method in ("rosenbrock", "auto"):
        traj = pop.gradient_flow(W_pv, W_kq, N, Lambda=Lam, times=times, method=method, rtol=RTOL,
                                 atol=ATOL)
        np.testing.assert_array_equal(traj.times, times)
        err = np.abs(_stack(traj.W_pv, traj.W_kq) - want).max()
        assert err < AGREE, (method, err)


@pytest.mark.parametrize("d", [2, 3, 5])
def test_stiff_flows_agree_with_dopri5_on_short_horizons(rng, d):
    Lam, N, W_pv, W_kq = _problem(rng, d)
    times = [0.5, 2.0, 10.0]
    runs = {m: pop.gradient_flow(W_pv, W_kq, N, Lambda=Lam, times=times, method=m, rtol=RTOL,
                                 atol=ATOL) for m in ("dopri5", "rosenbrock", "auto")}
    want = _stack(runs["dopri5"].W_pv, runs["dopri5"].W_kq)
    for m in ("rosenbrock", "auto"):
        err = np.abs(_stack(runs[m].W_pv, runs[m].W_kq) - want).max()
        assert err < AGREE, (m, err)
        np.testing.assert_allclose(runs[m].losses, runs["dopri5"].losses, rtol=0, atol=AGREE)


@pytest.mark.parametrize("d", [2, 3, 5])
def test_auto_reaches_theorem41_limits_at_long_horizons(rng, d):
    """t = 1e5: explicit DOPRI5 needs ~1e6 steps here (stability-limited); auto switches."""
    Lam, N, W_pv, W_kq = _problem(rng, d)
    traj = pop.gradient_flow(W_pv, W_kq, N, Lambda=Lam, times=[0.0, 1e3, 1e5], method="auto")
    assert traj.method == "dopri5+rosenbrock"
    assert 0 < traj.switch_time < 1e5
    assert 0 < traj.stiff_steps < traj.steps < 10**5
    assert traj.jacobian_evaluations >= 1 and traj.factorizations >= 1
    W_pv_star, W_kq_star = theory.thm41_limits(Lam, N)
    assert theory.relative_distance(traj.final_W_pv, traj.final_W_kq, W_pv_star, W_kq_star) < 1e-8
    assert abs(traj.final_loss - pop.minimum_loss(Lam, N)) < 1e-12 * (1 + abs(traj.final_loss))


def test_auto_saves_most_of_dopri5s_gradients(rng):
    """Over a horizon DOPRI5 can still do (t = 2000, ~4e4 steps), auto ends in the same state with
    a fraction of the gradient evaluations (Jacobians included)."""
    Lam, N, W_pv, W_kq = _problem(rng, 3)
    a = pop.gradient_flow(W_pv, W_kq, N, Lambda=Lam, times=[2000.0], method="dopri5")
    b = pop.gradient_flow(W_pv, W_kq, N, Lambda=Lam, times=[2000.0], method="auto")
    assert a.method == "dopri5" and a.switch_time is None and a.jacobian_evaluations == 0
    assert b.method == "dopri5+rosenbrock"
    assert 5 * b.gradient_evaluations < a.gradient_evaluations
    np.testing.assert_allclose(_stack(b.W_pv, b.W_kq), _stack(a.W_pv, a.W_kq), rtol=0, atol=1e-9)


def test_auto_on_the_other_objectives(rng):
    """Random diagonal covariance (Theorem 4.5's limit), label noise, covariance samples and the
    reduced flow."""
    d, N = 3, 10
    moments = pop.exponential_moments(d)
    W_pv0, W_kq0 = theory.assumption33_init(d, 0.1, rng=rng)
    traj = pop.gradient_flow(W_pv0, W_kq0, N, moments=moments, times=[0, 1e5], method="auto")
    assert traj.method == "dopri5+rosenbrock"
    W_pv_star, W_kq_star = theory.thm45_limits(moments, N)
    assert theory.relative_distance(traj.final_W_pv, traj.final_W_kq, W_pv_star, W_kq_star) < 1e-8

    Lam = random_spd(rng, d)
    noisy = {m: pop.gradient_flow(W_pv0, W_kq0, N, Lambda=Lam, times=[5.0], method=m, noise_std=0.3,
                                  rtol=RTOL, atol=ATOL) for m in ("dopri5", "rosenbrock")}
    np.testing.assert_allclose(noisy["rosenbrock"].final_W_kq, noisy["dopri5"].final_W_kq,
                               atol=AGREE)

    # Covariance samples: the objective runs its own parallel loop inside the parallel Jacobian.
    samples = np.stack([random_spd(rng, d) for _ in range(20)])
    sampled = {m: pop.gradient_flow(W_pv0, W_kq0, N, samples=samples, times=[5.0], method=m,
                                    rtol=RTOL, atol=ATOL) for m in ("dopri5", "rosenbrock")}
    np.testing.assert_allclose(sampled["rosenbrock"].final_W_kq, sampled["dopri5"].final_W_kq,
                               atol=AGREE)

    U11 = 0.1 * rng.standard_normal((d, d))
    red = {m: pop.reduced_gradient_flow(U11, 0.1, Lam, N, times=[1e4], method=m)
           for m in ("auto", "rosenbrock")}
    for r in red.values():
        assert r.method in ("rosenbrock", "dopri5+rosenbrock")
    np.testing.assert_allclose(red["auto"].final_U11, red["rosenbrock"].final_U11, atol=1e-9)


def test_stopping_tolerance_and_max_steps_hold_for_the_stiff_method(rng):
    Lam, N, W_pv, W_kq = _problem(rng, 2)
    traj = pop.gradient_flow(W_pv, W_kq, N, Lambda=Lam, times=[1.0, 1e6], method="rosenbrock",
                             grad_tol=1e-9, rtol=RTOL, atol=ATOL)
    assert traj.stopped_by_tolerance and traj.final_time < 1e6
    _, g_pv, g_kq = pop.loss_and_grad(traj.final_W_pv, traj.final_W_kq, Lam, N)
    assert np.sqrt(np.sum(g_pv**2) + np.sum(g_kq**2)) <= 1e-9
    with pytest.raises(ValueError, match="max_steps = 5 exceeded"):
        pop.gradient_flow(W_pv, W_kq, N, Lambda=Lam, times=[0, 1e3], method="rosenbrock",
                          max_steps=5)


def test_method_names_and_size_limit_are_checked():
    W_pv, W_kq = theory.assumption33_init(2, 0.1, rng=np.random.default_rng(0))
    with pytest.raises(ValueError,
                       match="method: expected one of 'dopri5', 'rk4', 'rosenbrock', 'auto'"):
        pop.gradient_flow(W_pv, W_kq, 5, Lambda=np.eye(2), times=[1.0], method="radau")
    d = 54  # 2(d+1)² = 6050 parameters: a dense Jacobian of 290 MB
    W = np.zeros((d + 1, d + 1))
    with pytest.raises(ValueError, match="method rosenbrock: 6050 parameters > 6000"):
        pop.gradient_flow(W, W, 5, Lambda=np.eye(d), times=[1.0], method="rosenbrock")
