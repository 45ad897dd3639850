"""Gradient-flow integrators on long horizons (issue 19): explicit DOPRI5 against method="auto"
(DOPRI5, then the Rosenbrock–W method ROS34PW2 once DOPRI5 stalls on stability) and
method="rosenbrock" from the start: wall time, steps, rejections, Jacobians, factorisations,
gradient evaluations, and the distance to ZFB Theorem 4.1's limit.

    python bench/report_flow.py [--full] [--random-cov]

Cases (fixed anisotropic Λ, N = 20, the Assumption 3.3 initialisation with σ at half the bound,
default rtol 1e-12, atol 1e-14): d = 3 to times [0, 1e6], d = 5 to t = 1e5, d = 20 to t = 1e5.
DOPRI5 is stability-limited near the minimum, so its steps grow linearly with the horizon: by
default it runs to t_s and to 2 t_s (past its stall) and its wall time, steps and gradients are
projected at the rate over [t_s, 2 t_s] (marked "projected"; a lower bound where the rate still
grows as the flow nears the minimum, as at d = 20); --full runs it to the whole horizon for d = 3
and 5 (minutes each). --random-cov adds
zfb-random-cov's full flow (random diagonal Λτ, Exponential(1) entries, d = 20, N = 40, 201 times
to t = 2e4) with method="auto" only.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

import lsa_native as ln
from lsa_native import population as pop, theory


def spd(rng, d):
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return Q @ np.diag(np.geomspace(0.5, 2.0, d)) @ Q.T


def fixed_case(d, N=20, seed=0):
    rng = np.random.default_rng(seed)
    Lam = spd(rng, d)
    W_pv0, W_kq0 = theory.assumption33_init(d, 0.5 * theory.sigma_bound(Lam, N), rng=rng)
    return dict(W_pv=W_pv0, W_kq=W_kq0, N=N, Lambda=Lam), theory.thm41_limits(Lam, N)


def run(case, times, method):
    args = dict(case)
    W_pv, W_kq, N = args.pop("W_pv"), args.pop("W_kq"), args.pop("N")
    t0 = time.perf_counter()
    traj = pop.gradient_flow(W_pv, W_kq, N, times=times, method=method, max_steps=10**9, **args)
    return traj, time.perf_counter() - t0


def row(label, method, traj, wall, limits):
    dist = theory.relative_distance(traj.final_W_pv, traj.final_W_kq, *limits)
    switch = f"{traj.switch_time:.3g}" if traj.switch_time is not None else "-"
    print(f"| {label} | {method} | {wall:.3g} | {traj.steps} | {traj.rejected_steps} | "
          f"{traj.stiff_steps} | {switch} | {traj.jacobian_evaluations} | {traj.factorizations} | "
          f"{traj.gradient_evaluations} | {dist:.1e} | {traj.method} |")


def projected_dopri5_row(label, case, horizon, t_s):
    """DOPRI5 to t_s and 2 t_s, extrapolated to `horizon` at the rate over [t_s, 2 t_s]."""
    (a, wall_a), (b, wall_b) = run(case, [0.0, t_s], "dopri5"), run(case, [0.0, 2 * t_s], "dopri5")
    k = (horizon - 2 * t_s) / t_s

    def extrapolate(x_a, x_b):
        return x_b + k * (x_b - x_a)

    print(f"| {label} | dopri5 | {extrapolate(wall_a, wall_b):.3g} | "
          f"{extrapolate(a.steps, b.steps):.3g} | {b.rejected_steps} (to 2 t_s) | 0 | - | 0 | 0 | "
          f"{extrapolate(a.gradient_evaluations, b.gradient_evaluations):.3g} | - | "
          f"projected from t_s = {t_s:g}, 2 t_s: {b.steps} steps, {wall_b:.3g} s |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true",
                        help="DOPRI5 over the whole horizon (d = 3, 5)")
    parser.add_argument("--random-cov", action="store_true",
                        help="zfb-random-cov's full flow (minutes)")
    args = parser.parse_args(argv)
    print(f"lsa_native {ln.__version__}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, {ln.num_threads()} threads")
    print("| case | method | wall s | steps | rejected | stiff steps | switch t | Jacobians | "
          "factorisations | gradients | rel. dist to the limit (Thm 4.1; 4.5) | note |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    # (d, requested times, DOPRI5's t_s for the projection, rosenbrock from t = 0?)
    cases = [(3, [0.0, 1e6], 5e3, True), (5, [0.0, 1e5], 5e3, True), (20, [0.0, 1e5], 30.0, False)]
    for d, times, short, with_rosenbrock in cases:
        case, limits = fixed_case(d)
        label = f"d={d}, t={times[-1]:g}"
        for method in ["auto"] + (["rosenbrock"] if with_rosenbrock else []):
            traj, wall = run(case, times, method)
            row(label, method, traj, wall, limits)
        if args.full and d <= 5:
            traj, wall = run(case, times, "dopri5")
            row(label, "dopri5", traj, wall, limits)
        else:
            projected_dopri5_row(label, case, times[-1], short)
        sys.stdout.flush()
    if args.random_cov:
        from lsa_native.experiments.zfb import _random_cov_sigma

        d, N = 20, 40
        rng = np.random.default_rng(0)
        mom = pop.exponential_moments(d)
        M0 = rng.standard_normal((d, d))
        TT = M0 @ M0.T / np.linalg.norm(M0 @ M0.T)
        sigma = _random_cov_sigma(np.random.default_rng(5), mom, TT, N)
        W_pv0, W_kq0 = theory.assumption33_init(d, sigma, Theta=np.linalg.cholesky(TT))
        times = np.concatenate([[0.0], np.geomspace(1e-2, 2e4, 200)])
        traj, wall = run(dict(W_pv=W_pv0, W_kq=W_kq0, N=N, moments=mom), times, "auto")
        row("random cov d=20, N=40, t=2e4", "auto", traj, wall, theory.thm45_limits(mom, N))
    return 0


if __name__ == "__main__":
    sys.exit(main())
