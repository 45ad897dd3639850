"""Exact H-head population loss + gradient (issue 21): native vs the numpy reference of the same
formula, and vs a Monte Carlo estimate of equal accuracy.

    python bench/report_population_multihead.py [--d 20] [--heads 8] [--repeats 30]

Cases: d = 20, H = 8, N = 20, random SPD Λ, random parameters of order one; merged heads and
separate heads of rank 1 and 4; label noise (σ = 0.5, on the target too); a random diagonal Λτ
given by its moments (the exact expansion around E λ: 1 + 4d fixed-Λ evaluations, natively and, as
its numpy reference, the same expansion over the reference's fixed-Λ loss, see
``reference_random_diagonal``). Times are medians of ``--repeats`` calls (same run, same machine)
in CPU time of this process (time.process_time: robust on a shared, loaded machine; numpy's BLAS
is held to one thread, and the native call runs on one), with the wall-time medians beside them;
native and reference take turns within each repeat (so a change of load reaches both alike), each
timed call after an untimed one of the same function (its own steady state, as in a loop).
Monte Carlo: the per-prompt standard deviation of the sampled loss and gradient (the vectorised
numpy estimator of tests/test_population_multihead.py on prompts from data.linear_regression_prompts)
gives the number of prompts B(ε) for a standard error of ε·|L| on the loss and ε·max|∇L| on every
gradient entry; its time is B(ε) times the measured time per prompt (sampling included).
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: single-threaded BLAS
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
import platform
import statistics
import sys
import time

import numpy as np

from lsa_native import _core, data, population_multihead as pm
from lsa_native.population import exponential_moments
from lsa_native.reference import population_multihead as ref

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from test_population_multihead import sampled_loss_and_grad  # noqa: E402  (the MC estimator)


def median_times(fs, repeats):
    """[(median CPU seconds, median wall seconds)] per call of each function of fs. The functions
    take turns within every repeat, so that a change of the machine's load reaches all of them
    alike (same-run ratios); each timed call follows an untimed call of the same function, so that
    each is measured in its own steady state (caches warm for it, as in a loop of calls), not in the
    cache the other left behind."""
    cpu, wall = [[] for _ in fs], [[] for _ in fs]
    for _ in range(repeats):
        for k, f in enumerate(fs):
            f()
            c0, t0 = time.process_time(), time.perf_counter()
            f()
            cpu[k].append(time.process_time() - c0)
            wall[k].append(time.perf_counter() - t0)
    return [(statistics.median(c), statistics.median(w)) for c, w in zip(cpu, wall)]


def reference_random_diagonal(loss_and_grad, moments):
    """E over Λτ = diag(λ) of loss_and_grad(Λ) (a tuple of loss and gradient arrays), by the
    expansion of cpu/random_diagonal_expansion.hpp in numpy: f(μ) + Σ_i ½Var(λ_i) ∂²f/∂λ_i² +
    κ3(λ_i)/6 ∂³f/∂λ_i³, the derivatives from f at μ ± h e_i, μ ± 2h e_i (exact: f is cubic in λ_i)."""
    m1, m2, m3 = moments
    f = lambda lam: [np.asarray(x) for x in loss_and_grad(np.diag(lam))]  # noqa: E731
    at_mean = f(m1)
    total = [x.copy() for x in at_mean]
    for i in range(len(m1)):
        var = m2[i] - m1[i] ** 2
        kappa = m3[i] - 3 * m1[i] * m2[i] + 2 * m1[i] ** 3
        h = max(abs(m1[i]), np.sqrt(max(var, 0.0)), 1e-6)
        shifted = {}
        for k in (1, -1, 2, -2):
            lam = m1.copy()
            lam[i] += k * h
            shifted[k] = f(lam)
        for j, x in enumerate(total):
            second = (shifted[1][j] - 2 * at_mean[j] + shifted[-1][j]) / h**2
            third = (shifted[2][j] - 2 * shifted[1][j] + 2 * shifted[-1][j] - shifted[-2][j]) / (2 * h**3)
            total[j] = x + 0.5 * max(var, 0.0) * second + kappa / 6 * third
    return total


def per_prompt_sd(rng, W_pv, W_kq, Lambda, N, batches=40, batch=500):
    """Per-prompt standard deviations of the loss and of each gradient entry (from batch means),
    and the time per prompt of sampling + estimating."""
    d = Lambda.shape[0]
    outs, t0 = [], time.process_time()
    for _ in range(batches):
        b = data.linear_regression_prompts(rng, batch, d, N, Lambda)
        outs.append(sampled_loss_and_grad(b, W_pv, W_kq, N))
    per_prompt = (time.process_time() - t0) / (batches * batch)
    cols = [np.array(x) for x in zip(*outs)]
    sds = [c.std(axis=0, ddof=1) * np.sqrt(batch) for c in cols]
    return sds, per_prompt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=20)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--N", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    d, H, N = args.d, args.heads, args.N
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    Lambda = Q @ np.diag(np.geomspace(0.5, 2.0, d)) @ Q.T
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
          f"native threads {_core.num_threads()}; d = {d}, H = {H}, N = {N}")
    print("\n| case | native ms CPU (wall) | numpy reference ms CPU (wall) | ratio (CPU) |")
    print("|---|---|---|---|")
    cases = []
    moments = exponential_moments(d, 1.0)  # λ_i ~ Exp(1)
    specs = (("merged", 0, "fixed", 0.0), ("merged, label noise σ = 0.5", 0, "fixed", 0.5),
             ("separate r=1", 1, "fixed", 0.0), ("separate r=4", 4, "fixed", 0.0),
             ("merged, random diagonal Λ", 0, "random", 0.0),
             ("separate r=1, random diagonal Λ", 1, "random", 0.0))
    for name, r, law, sigma in specs:
        W_pv = 0.3 * rng.standard_normal((H, d + 1, d + 1))
        noise = dict(noise_std=sigma, query_noise=sigma > 0)
        if r == 0:
            keys = 0.3 * rng.standard_normal((H, d + 1, d + 1))
            ref_at = lambda L, W_pv=W_pv, keys=keys: ref.loss_and_grad(  # noqa: E731
                W_pv, keys, L, N, sigma, sigma > 0)
        else:
            keys = tuple(0.3 * rng.standard_normal((H, r, d + 1)) for _ in range(2))
            ref_at = lambda L, W_pv=W_pv, keys=keys: ref.separate_loss_and_grad(  # noqa: E731
                W_pv, *keys, L, N, sigma, sigma > 0)
        if law == "fixed":
            native = lambda W_pv=W_pv, keys=keys: pm.multihead_loss_and_grad(  # noqa: E731
                W_pv, keys, Lambda, N, **noise)
            reference = lambda ref_at=ref_at: ref_at(Lambda)  # noqa: E731
            repeats = args.repeats
        else:
            native = lambda W_pv=W_pv, keys=keys: pm.multihead_loss_and_grad_random_diagonal(  # noqa: E731
                W_pv, keys, moments, N, **noise)
            reference = lambda ref_at=ref_at: reference_random_diagonal(ref_at, moments)  # noqa: E731
            repeats = max(3, args.repeats // 10)
        (tn, wn), (tr, wr) = median_times((native, reference), repeats)
        print(f"| {name} | {tn * 1e3:.3f} ({wn * 1e3:.3f}) | {tr * 1e3:.2f} ({wr * 1e3:.2f}) | "
              f"{tr / tn:.1f}x |")
        cases.append((name, W_pv, keys, tn))

    print("\nMonte Carlo of equal accuracy (merged case): prompts B(ε) for standard error ε·|L| "
          "(loss) and ε·max|∇L| (every gradient entry), time = B · time per prompt")
    name, W_pv, keys, tn = cases[0]
    L, g_pv, g_kq = pm.multihead_loss_and_grad(W_pv, keys, Lambda, N)
    sds, per_prompt = per_prompt_sd(rng, W_pv, keys, Lambda, N)
    gmax = max(np.abs(g_pv).max(), np.abs(g_kq).max())
    sd_grad = max(sds[1].max(), sds[2].max())
    print(f"per prompt: {per_prompt * 1e6:.1f} µs CPU (numpy, sampling included); sd(loss) = "
          f"{sds[0]:.3g} (L = {L:.4g}), max sd(grad entry) = {sd_grad:.3g} (max|∇L| = {gmax:.3g})")
    print("\n| ε | B (loss) | B (gradient) | MC time | exact native | speedup |")
    print("|---|---|---|---|---|---|")
    for eps in (1e-2, 1e-3, 1e-4, 1e-6):
        B_loss = (sds[0] / (eps * abs(L))) ** 2
        B_grad = (sd_grad / (eps * gmax)) ** 2
        B = max(B_loss, B_grad)
        t_mc = B * per_prompt
        print(f"| {eps:g} | {B_loss:.2e} | {B_grad:.2e} | {t_mc:.3g} s | {tn * 1e3:.3f} ms | "
              f"{t_mc / tn:.2e}x |")


if __name__ == "__main__":
    main()
