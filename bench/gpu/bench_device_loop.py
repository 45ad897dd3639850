"""GPU benchmark of fit's device loop (issue 18): θ, gradients, optimizer state, losses and the
held-out loss on the device; the host reads back one buffer per record step.

1. The CCS H.1 step (d = 5, n = 30, L = 3, softmax, sparse V with A held at 0, K-GP exp labels,
   B = 30000, Adam with clipping, resample every 10): steps/s of the device loop against the loop
   that keeps θ on the host for the model calls (one θ upload, one loss/gradient download per
   step), in the same run, and the number of device → host copies of each (counted).
2. A timed paper-size cell: ccs-fig1 at B = 30000, 800 steps, one (kernel, activation, n) cell,
   through the experiment's own ``train_cell`` (cell and evaluation), with the extrapolation to
   the grid (3 label kernels x 4 activations x n in 2..14 x 3 seeds = 252 cells): the measured
   cell's steps/s scaled by n (the step's cost grows with n + 1 tokens; measured at the cell's n
   and at n = 14 when --both-ends).
3. Several trainings per launch (a leading model axis), the question of issue 18: is one training
   filling the GPU? Measured here by the GPU's own answer — the step time of B = 30000 against
   B = 3 x 30000 (three seeds' prompts in one launch cost what a model axis would batch): when
   3B costs ≈ 3x B the GPU is full at B and a model axis cannot pay; when it costs much less than
   3x, it can (then worth building). Printed with the ratio and the verdict.

    python bench/gpu/bench_device_loop.py [--out results.json] [--quick]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import lsa_native
from lsa_native import cuda, kernel_attention as ka, sampling, train
from lsa_native.experiments import ccs
from lsa_native.train import native_optim

fit_module = sys.modules["lsa_native.train.fit"]
D, L, RESAMPLE, LR, CLIP = 5, 3, 10, 0.02, 1.0
GRID = dict(kernels=3, activations=4, ns=(2, 4, 6, 8, 10, 12, 14), seeds=3)


class Counting:
    """native_optim.CUDA with device → host copies counted."""

    def __init__(self):
        self.reads, self.device = 0, "cuda"

    def __getattr__(self, name):
        return getattr(native_optim.CUDA, name)

    def to_host(self, a):
        self.reads += 1
        return native_optim.CUDA.to_host(a)


def ccs_step_problem(n, batch):
    spec = sampling.KernelGPPrompts(D, n, "exp", Sigma=ccs.ccs_sigma(0, D), seed=1)
    p0 = ka.KernelAttentionParams.gaussian(np.random.default_rng(0), D, L, 1, "softmax",
                                           sparse=True, scale=0.1)
    p0.A[...] = 0
    objective = train.KernelAttentionObjective(p0, hold_A_zero=True, device="cuda",
                                               dtype=np.float32)
    return objective, train.Prompts(spec, batch=batch, resample_every=RESAMPLE)


def steps_per_second(n, batch, steps, groups, device_loop, record_every):
    objective, data = ccs_step_problem(n, batch)
    counting = Counting()
    saved = fit_module._native_arrays, fit_module._device_step
    fit_module._native_arrays = lambda plan: counting
    if not device_loop:
        fit_module._device_step = lambda plan, arrays: None
    try:
        run = lambda: train.fit(objective, train.Adam(lr=LR, clip_norm=CLIP), steps=steps,  # noqa: E731
                                data=data, progress=False, record_every=record_every)
        run()  # warm-up
        cuda.synchronize()
        times = []
        counting.reads = 0
        for _ in range(groups):
            t0 = time.perf_counter()
            run()
            cuda.synchronize()
            times.append((time.perf_counter() - t0) / steps)
        return 1.0 / statistics.median(times), counting.reads / groups
    finally:
        fit_module._native_arrays, fit_module._device_step = saved


def cell_seconds(kernel, activation, n, steps, batch):
    cfg = dict(ccs._base(dict(ccs.TRAINING, steps=steps, decay_steps=steps, batch=batch,
                              eval_batch=5000)),
               kernel=kernel, activations=[activation], layers=L, context=n, seed=0,
               _device="cuda")
    t0 = time.perf_counter()
    out = ccs.train_cell(cfg)
    return time.perf_counter() - t0, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--both-ends", action="store_true", help="also time a cell at n = 2")
    args = ap.parse_args(argv)
    batch = 2000 if args.quick else 30000
    steps, groups = (40, 2) if args.quick else (200, 3)
    cell_steps = 50 if args.quick else 800
    print(f"lsa_native {lsa_native.__version__}", flush=True)
    res = {"batch": batch, "steps": steps}

    print("| loop | record_every | steps/s | device->host copies per run |\n| --- | --- | --- | --- |")
    rows = []
    for device_loop in (True, False):
        for record_every in (1, 50):
            sps, reads = steps_per_second(30, batch, steps, groups, device_loop, record_every)
            rows.append(dict(device_loop=device_loop, record_every=record_every, steps_s=sps,
                             reads=reads))
            print(f"| {'device' if device_loop else 'host θ'} | {record_every} | {sps:.1f} | "
                  f"{reads:.0f} |", flush=True)
    res["step"] = rows

    # 3: one launch of 3B against three of B (what a leading model axis of 3 seeds would batch).
    one = steps_per_second(14, batch, steps, groups, True, steps)[0]
    three = steps_per_second(14, 3 * batch, steps, groups, True, steps)[0]
    ratio = one / three  # time(3B) / time(B)
    verdict = ("the GPU is full at one training: a model axis cannot pay" if ratio > 2.5 else
               "3 trainings cost less than 3x one: a model axis would pay; worth building"
               if ratio < 2.0 else "marginal (2-2.5x): a model axis gains little")
    res["model_axis"] = dict(n=14, steps_s_B=one, steps_s_3B=three, time_ratio_3B_over_B=ratio,
                             verdict=verdict)
    print(f"model axis (n=14): B {one:.1f} steps/s, 3B {three:.1f} steps/s; time(3B)/time(B) = "
          f"{ratio:.2f} -> {verdict}", flush=True)

    # 2: the paper-size cell(s) and the grid.
    cells = {}
    for n in ((2, 14) if args.both_ends else (14,)):
        t, out = cell_seconds("exp", "softmax", n, cell_steps, batch)
        cells[n] = t
        loss, bayes = np.ravel(out["loss"])[-1], np.ravel(out["bayes_loss"])[-1]
        print(f"cell exp softmax n={n}: {t:.1f} s ({cell_steps} steps, B={batch}); test loss "
              f"{loss:.4f}, Bayes {bayes:.4f}", flush=True)
    per_n = (lambda n: cells[2] + (cells[14] - cells[2]) * (n - 2) / 12) if len(cells) == 2 else (
        lambda n: cells[14] * (n + 1) / 15)  # one end measured: cost ∝ n + 1 tokens (an upper bound)
    total = sum(per_n(n) for n in GRID["ns"]) * GRID["kernels"] * GRID["activations"] * GRID["seeds"]
    res["cells_s"], res["grid_s_extrapolated"] = cells, total
    print(f"ccs-fig1 grid (252 cells of {cell_steps} steps, B={batch}) extrapolated: "
          f"{total / 60:.1f} min on one GPU (target <= 10 min)")
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
