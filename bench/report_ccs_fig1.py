"""Cost of the full CCS Figure 1 grid (3 label kernels x 4 activations x n in {2, ..., 14} x 3 seeds,
3 layers, 800 Adam steps at CCS's minibatch B = 30000, resampled every 10 steps): per-step times of
the native kernel attention (forward + backward) and of the same model in PyTorch CPU autograd,
measured at the same sizes, and the native K-GP sampler per resample; extrapolated to the grid.

    python bench/report_ccs_fig1.py [--repeats 3] [--batch 30000] [--contexts 2,6,10,14]

Per-step times are medians of repeated runs in one process; contexts not measured are
interpolated linearly in n. Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from report_kernel_attention import torch, torch_loss_and_grad  # noqa: E402
from timing import median_seconds  # noqa: E402

import lsa_native as ln  # noqa: E402
from lsa_native import kernel_attention as ka  # noqa: E402

ACTIVATIONS = tuple(ka.ACTIVATIONS)
KERNELS = ("linear", "relu", "exp")
GRID_N = (2, 4, 6, 8, 10, 12, 14)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=30000)
    ap.add_argument("--contexts", default="2,8,14")
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args(argv)
    d, L, Bsz = 5, 3, args.batch
    ns = [int(x) for x in args.contexts.split(",")]
    rng = np.random.default_rng(0)
    print(f"lsa_native {ln.__version__}, {ln.num_threads()} threads, torch "
          f"{'absent' if torch is None else torch.__version__ + f' ({torch.get_num_threads()} threads)'}; "
          f"d={d} L={L} B={Bsz} float32, medians of {args.repeats}")
    print("| n | activation | native step ms | torch step ms | torch / native | sampler per resample ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    native, torch_t, sampler = {}, {}, {}
    for n in ns:
        spec = ln.sampling.KernelGPPrompts(d, n, "exp", seed=1)
        sampler[n] = median_seconds(lambda: spec.sample(batch=Bsz, step=0), args.repeats)
        b = spec.sample(batch=Bsz, step=0)
        for act in ACTIVATIONS:
            p = ka.KernelAttentionParams.gaussian(rng, d, L, 1, act, sparse=True)
            native[n, act] = median_seconds(lambda: p.loss_and_grad(b.E, b.y_q), args.repeats)
            if torch is not None:
                V = ka.sparse_value(p.A, p.r).astype(np.float32)
                tZ, ty, tV, tB, tC = (torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
                                      for a in (b.E, b.y_q, V, p.B, p.C))
                torch_t[n, act] = median_seconds(lambda: torch_loss_and_grad(tZ, ty, tV, tB, tC, act),
                                                 args.repeats)
            t = torch_t.get((n, act), float("nan"))
            print(f"| {n} | {act} | {1e3 * native[n, act]:.1f} | {1e3 * t:.1f} | {t / native[n, act]:.1f} "
                  f"| {1e3 * sampler[n]:.1f} |", flush=True)

    def interp(table, act, n):
        xs = sorted(ns)
        ys = [table[x, act] if act is not None else table[x] for x in xs]
        return float(np.interp(n, xs, ys))

    steps, resamples = args.steps, -(-args.steps // 10)
    cells = len(KERNELS) * args.seeds
    tot_native = sum(cells * (steps * interp(native, a, n) + resamples * interp(sampler, None, n))
                     for a in ACTIVATIONS for n in GRID_N)
    print(f"\nFull ccs-fig1 grid ({len(KERNELS)} kernels x {len(ACTIVATIONS)} activations x "
          f"{len(GRID_N)} n x {args.seeds} seeds = {cells * len(ACTIVATIONS) * len(GRID_N)} trainings "
          f"of {steps} steps, B={Bsz}):")
    print(f"- native (steps + native sampler): {tot_native / 3600:.2f} h on this machine")
    if torch is not None:
        tot_torch = sum(cells * (steps * interp(torch_t, a, n) + resamples * interp(sampler, None, n))
                        for a in ACTIVATIONS for n in GRID_N)
        print(f"- PyTorch CPU loop (torch steps + the same sampler): {tot_torch / 3600:.2f} h "
              f"({tot_torch / tot_native:.1f}x native)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
