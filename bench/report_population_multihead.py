"""Exact H-head population loss + gradient (issue 21): native vs the numpy reference of the same
formula, and vs a Monte Carlo estimate of equal accuracy.

    python bench/report_population_multihead.py [--d 20] [--heads 8] [--repeats 30]

Cases: d = 20, H = 8, N = 20, random SPD Λ, random parameters of order one; merged heads and
separate heads of rank 1 and 4. Times are medians of ``--repeats`` calls (same run, same machine)
in CPU time of this process (time.process_time: robust on a shared, loaded machine; numpy's BLAS
is held to one thread, and the native call runs on one), with the wall-time medians beside them.
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
from lsa_native.reference import population_multihead as ref

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from test_population_multihead import sampled_loss_and_grad  # noqa: E402  (the MC estimator)


def median_time(f, repeats):
    """(median CPU seconds, median wall seconds) per call, after one warm-up call."""
    f()
    cpu, wall = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        f()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
    return statistics.median(cpu), statistics.median(wall)


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
    for name, r in (("merged", 0), ("separate r=1", 1), ("separate r=4", 4)):
        W_pv = 0.3 * rng.standard_normal((H, d + 1, d + 1))
        if r == 0:
            keys = 0.3 * rng.standard_normal((H, d + 1, d + 1))
            reference = lambda: ref.loss_and_grad(W_pv, keys, Lambda, N)  # noqa: E731
        else:
            keys = tuple(0.3 * rng.standard_normal((H, r, d + 1)) for _ in range(2))
            reference = lambda: ref.separate_loss_and_grad(W_pv, *keys, Lambda, N)  # noqa: E731
        native = lambda: pm.multihead_loss_and_grad(W_pv, keys, Lambda, N)  # noqa: E731
        (tn, wn), (tr, wr) = median_time(native, args.repeats), median_time(reference, args.repeats)
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
